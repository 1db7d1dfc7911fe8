"""Leakage study report: flow figure (seed 001 Figure 2), tables and a markdown page."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.figures import save_figure

LANGUAGE_ORDER = ["EN", "RU", "ZH", "HI"]


def _ordered(langs: Sequence[str]) -> list[str]:
    langs = [lang.upper() for lang in langs]
    return [lang for lang in LANGUAGE_ORDER if lang in langs] + sorted(set(langs) - set(LANGUAGE_ORDER))


def flow_figure(
    edges: Sequence[Mapping[str, Any]],
    panels: Sequence[str],
    languages: Sequence[str],
    stem: str | os.PathLike,
    *,
    title: str = "Stereotype leakage (human source language -> target language in the model)",
) -> list[Path]:
    """One panel per model (or model/method): human source languages on the left, the model's target
    languages on the right, an arrow per significant non-target effect labelled with alpha.

    ``edges`` carry keys panel, source, target, estimate, p.  A panel without edges says so.
    """
    import matplotlib.pyplot as plt

    langs = _ordered(languages)
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 0.9 * len(langs) + 1.6), squeeze=False)
    max_est = max([abs(float(e["estimate"])) for e in edges] or [1.0]) or 1.0
    ys = {lang: len(langs) - 1 - i for i, lang in enumerate(langs)}
    for ax, panel in zip(axes[0], panels or [""]):
        ax.set_xlim(-0.35, 1.35)
        ax.set_ylim(-0.8, len(langs) - 0.2)
        ax.axis("off")
        ax.set_title(panel, fontsize=10)
        ax.text(0, len(langs) - 0.35, "human (source)", ha="center", fontsize=8, color="dimgray")
        ax.text(1, len(langs) - 0.35, "model (target)", ha="center", fontsize=8, color="dimgray")
        for lang, y in ys.items():
            for x in (0, 1):
                ax.text(x, y, lang, ha="center", va="center", fontsize=11,
                        bbox={"boxstyle": "round,pad=0.35", "fc": "#e8eef7" if x == 0 else "#f7ece8", "ec": "gray"})
        mine = [e for e in edges if e.get("panel") == panel]
        for e in mine:
            y0, y1 = ys[e["source"].upper()], ys[e["target"].upper()]
            width = 0.8 + 4.0 * abs(float(e["estimate"])) / max_est
            ax.annotate("", xy=(0.86, y1), xytext=(0.14, y0),
                        arrowprops={"arrowstyle": "-|>", "lw": width, "color": "#b5523b", "alpha": 0.75,
                                    "shrinkA": 0, "shrinkB": 0})
            ax.text(0.5, (y0 + y1) / 2 + 0.12, f"{float(e['estimate']):.3g}", ha="center", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        if not mine:
            ax.text(0.5, -0.55, "no significant leakage", ha="center", fontsize=8, color="dimgray")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, stem)


def _md_table(df: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    if df.empty:
        return "_(empty)_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append("" if pd.isna(v) else floatfmt.format(v))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _human_lines(human: Mapping[str, Any]) -> list[str]:
    published = [lang for lang, h in human.items() if h.get("source") == "published survey"]
    other = {lang: h for lang, h in human.items() if h.get("source") != "published survey"}
    lines = []
    if published or not human:
        lines.append("Human stereotypes" + (f" ({', '.join(published)})" if published else "") + ": the public survey "
                     "of Cao, Sotnikova et al. (151 annotators, MIT licence), annotation source `human`.")
    for lang, h in other.items():
        lines.append(
            f"Human stereotypes ({lang}): judgements {h.get('path')} (annotation source `{h.get('annotation_source')}`), "
            f"after quality control {h.get('n_annotators_passed')} of {h.get('n_annotators')} annotators kept; "
            f"{h.get('n_groups_rated')} groups rated, {h.get('n_groups_kept')} with at least "
            f"{h.get('min_annotators_per_group')} annotators (the rest are missing cells)."
        )
    return lines


def _coverage_lines(coverage: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = []
    for lang, per in coverage.items():
        if "skipped" in per:
            lines.append(f"- {lang}: not scored ({per['skipped']})")
            continue
        for panel, c in per.items():
            if panel == "baseline":
                lines.append(f"- {lang} baseline: {c['model']} (SeT)")
                continue
            parts = []
            if c.get("templates"):
                parts.append(f"{len(c['templates'])} template(s) ({', '.join(map(str, c['templates']))})")
            if "design" in c:
                mode = c.get("mode")
                if c.get("mode_requested") and c.get("mode_requested") != mode:
                    mode = f"{mode} (requested {c['mode_requested']})"
                parts.append(
                    f"mode {mode}, design {c['design']}{' in both orders' if c.get('both_orders') else ''} "
                    f"({c.get('pairs_per_group')} pairs per group), {c.get('n_groups')} of the groups "
                    f"({', '.join(map(str, c.get('groups') or []))}), {c.get('queries')} queries"
                    + (f" x {c['n_samples']} samples, {c.get('nonmatching', 0)} non-matching" if c.get("n_samples") else "")
                )
            lines.append(f"- {lang} {panel}: " + "; ".join(parts))
    return lines


def report_markdown(
    *,
    model_id: str,
    coefficients: pd.DataFrame,
    edges: Sequence[Mapping[str, Any]],
    beta: pd.DataFrame,
    qualitative: pd.DataFrame,
    fit_summaries: Sequence[Mapping[str, Any]],
    nonmatching: pd.DataFrame | None,
    provenance: Mapping[str, Any],
    coverage: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The report page: what was measured, with which terms, and where the data came from.

    ``provenance["human"]`` maps a language to where its H matrix came from (the published survey or
    judgements through QC); ``coverage`` maps a language to :func:`stereolens.studies.leakage.stages.scores_coverage`.
    """
    lines = [f"# Stereotype leakage (seed 001): {model_id}", ""]
    lines += _human_lines(provenance.get("human") or {})
    lines += [
        f"Model prompts and templates: {provenance.get('translation_note', '')}",
        "",
    ]
    if coverage:
        lines += ["## Coverage of the model scores", ""] + _coverage_lines(coverage) + [""]
    lines += ["## Terms available per fit", ""]
    for s in fit_summaries:
        dropped = (f"{s.get('n_dropped_missing_human', 0)} (group, trait) rows dropped for a missing human cell"
                   if s["missing"] == "drop" else
                   f"{s.get('n_zero_filled_missing_human', 0)} (group, trait) rows with a missing human cell zero-filled")
        conv = "converged" if s.get("converged") else "NOT converged"
        lines.append(
            f"- {s['panel']} -> {s['target_language']}: terms {', '.join(s['terms'])} + intercept; "
            f"n = {s['n_obs']} cells, {s['n_traits']} traits; {dropped}; scale {s['scale']}; "
            f"MixedLM {conv} ({s.get('optimiser') or 'optimiser not recorded'}). "
            + " ".join(f"_{n}_" for n in s.get("notes", []))
        )
    lines += ["", "## Leakage edges (non-target alpha > 0, p < 0.05)", ""]
    if edges:
        lines.append(_md_table(pd.DataFrame(edges)[["panel", "source", "target", "estimate", "p"]]))
    else:
        lines.append("No significant leakage edge.\n")
    lines += ["![flow](flow.png)", "", "## Coefficients", "", _md_table(coefficients)]
    lines += ["## Monolingual baseline coefficients (Table 3 shape)", ""]
    if beta.empty or beta.drop(columns=["model"]).isna().all().all():
        lines.append("No monolingual baseline was configured, so beta is not estimated (the term is omitted).\n")
    else:
        lines.append(_md_table(beta))
    lines += ["## Qualitative leakage (section 4.2)", "",
              "Cells the model associates more strongly than target-language humans do, in agreement with "
              "source-language humans (z-scores within group).", "", _md_table(qualitative.head(40))]
    if nonmatching is not None and not nonmatching.empty:
        lines += ["## Generative choice: non-matching outputs (appendix B.1)", "", _md_table(nonmatching)]
    return "\n".join(lines) + "\n"
