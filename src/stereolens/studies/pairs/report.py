"""Tables, figures, ``summary.json`` and ``report.md`` of a pairs analysis."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from stereolens.figures import save_figure
from stereolens.io import write_csv, write_text
from stereolens.report.markdown import format_cell, format_estimate, markdown_table
from stereolens.stats.power import undetected_lines
from stereolens.stages.kit import write_study_summary
from stereolens.studies.pairs.analysis import (ALL, COUPLE, EVALUATION_SETS, PairsAnalysis, analyze_scores, cell_mark,
                                               fragmentation_correlations, mirrored_couple, pairs_headline)


def write_outputs(
    analysis: PairsAnalysis,
    output: str | os.PathLike,
    *,
    title: str = "pairs",
    provenance: Mapping[str, Any] | None = None,
    fragmentation: pd.DataFrame | None = None,
    fragmentation_stats: Mapping[str, Any] | None = None,
) -> list[Path]:
    """``summary.json``, ``tables/*.csv``, ``figures/*.png|svg`` and ``report.md`` under ``output``."""
    out = Path(output)
    summary = dict(analysis.summary)
    if provenance:
        summary["provenance"] = dict(provenance)
    has_fragmentation = fragmentation is not None and not fragmentation.empty
    if has_fragmentation:
        summary["fragmentation"] = fragmentation.to_dict("records")
        summary["fragmentation_correlations"] = dict(fragmentation_stats or {})
    files = [write_study_summary(out / "summary.json", summary)]
    for name, table in analysis.tables.items():
        files.append(write_csv(out / "tables" / f"{name}.csv", table))
    if has_fragmentation:
        files.append(write_csv(out / "tables" / "fragmentation.csv", fragmentation))
    files += _dimension_figures(analysis.cells, out / "figures", title)
    classes = analysis.tables.get("hyperlocal_vs_pan_regional")
    if classes is not None and not classes.empty:
        files += _class_figure(classes, out / "figures", title)
    if has_fragmentation:
        files += _fragmentation_figure(fragmentation, analysis.cells, out / "figures", title)
    files.append(write_text(out / "report.md", report_markdown(analysis, title=title, provenance=provenance,
                                                               fragmentation=fragmentation)))
    return files


def _dimension_figures(cells: pd.DataFrame, folder: Path, title: str) -> list[Path]:
    """Per model and language, every dimension's tested share (``share_untied``: stereotypical wins among the
    untied pairs, what the star and the p test) with its interval; without ties it is Tables 5/6's bias score."""
    import matplotlib.pyplot as plt

    files: list[Path] = []
    for (model, language), part in cells.groupby(["model", "language"], sort=True):
        data = part.sort_values("share_untied")
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(data) + 1.5))
        y = np.arange(len(data))
        err = np.vstack([data["share_untied"] - data["ci_low"], data["ci_high"] - data["share_untied"]]) * 100
        colors = ["#444444" if d == ALL else ("#dd8452" if deg else "#4c72b0")
                  for d, deg in zip(data["dimension"], data["degenerate"])]
        ax.barh(y, data["share_untied"] * 100, xerr=np.clip(err, 0, None), color=colors, capsize=3)
        ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1, label="chance (50%)")
        labels = [f"{r['dimension']}{cell_mark(r)} (n={r['n']}, ties={r['ties']}"
                  f"{', degenerate' if r['degenerate'] else ''}{', borderline' if r['borderline'] else ''})"
                  for r in data.to_dict("records")]
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of untied pairs with the stereotypical sentence more likely (95% BCa)")
        ax.set_title(f"{title}: {model}, {language}")
        ax.legend(loc="lower right", fontsize=8)
        files += save_figure(fig, folder / f"bias_by_dimension_{_slug(model)}_{_slug(language)}")
    return files


def _class_figure(classes: pd.DataFrame, folder: Path, title: str) -> list[Path]:
    """Hyperlocal against pan-regional groups per model and language (AmchiBias Figure 2)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(classes) + 1.5))
    labels = [f"{m} / {lang}" for m, lang in zip(classes["model"], classes["language"])]
    y = np.arange(len(classes))
    ax.barh(y - 0.2, classes["bias_hyperlocal"] * 100, height=0.4, label="hyperlocal", color="#55a868")
    ax.barh(y + 0.2, classes["bias_pan_regional"] * 100, height=0.4, label="pan-regional", color="#8172b2")
    ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, 100)
    ax.set_xlabel("bias score (%)")
    ax.set_title(f"{title}: hyperlocal vs pan-regional groups (AmchiBias Figure 2)")
    ax.legend(fontsize=8)
    return save_figure(fig, folder / "hyperlocal_vs_pan_regional")


def _fragmentation_figure(fragmentation: pd.DataFrame, cells: pd.DataFrame, folder: Path, title: str) -> list[Path]:
    """Tokens per identity term against the overall bias score, one point per model (AmchiBias Figure 3)."""
    import matplotlib.pyplot as plt

    merged = fragmentation.merge(cells[cells["dimension"] == ALL][["model", "language", "bias_score"]],
                                 on=["model", "language"], how="inner")
    if merged.empty:
        return []
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for language, part in merged.groupby("language", sort=True):
        ax.scatter(part["mean_tokens_per_term"], part["bias_score"] * 100, label=language)
        for _, r in part.iterrows():
            ax.annotate(str(r["model"]) + (" (lossy)" if r["lossy"] else ""),
                        (r["mean_tokens_per_term"], r["bias_score"] * 100), fontsize=7)
    ax.axhline(50, color="#c44e52", linestyle="--", linewidth=1)
    ax.set_xlabel("mean sub-word tokens per identity term")
    ax.set_ylabel("bias score (%)")
    ax.set_title(f"{title}: fragmentation vs bias (AmchiBias Figure 3)")
    ax.legend(fontsize=8)
    return save_figure(fig, folder / "fragmentation_vs_bias")


def _slug(text: Any) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))


def report_markdown(analysis: PairsAnalysis, *, title: str, provenance: Mapping[str, Any] | None = None,
                    fragmentation: pd.DataFrame | None = None) -> str:
    lines = [f"# {title}", ""]
    for key, value in (provenance or {}).items():
        lines.append(f"- **{key}**: {value}")
    if provenance:
        lines.append("")
    lines += ["Bias score: % pairs whose stereotypical sentence scores strictly higher (ties counted as not "
              "stereotypical). " + analysis.summary.get("star", ""), ""]
    if "corrections" in analysis.summary:
        lines += [analysis.summary["corrections"] + " Tables 5/6 list each model's `ties`, `p_holm`, `p_bh`, `mde` "
                  "and `mde_adjusted` beside its score; the star stays the paper's rule, uncorrected; "
                  "`tables/bias_cells.csv` has every cell's `share_untied`, interval, p and `favours`.", ""]
    if "mde" in analysis.summary:
        lines += [analysis.summary["mde"], "", "Intervals: " + analysis.summary["clustered_interval"] + ".", ""]
    for name, table in analysis.tables.items():
        if name == "bias_cells" or table.empty:
            continue
        lines += [f"## {name}", "", markdown_table(table)]  # the table ends with its own newline
        if name.startswith("table5_6_dimensions_"):
            cells = analysis.cells[(analysis.cells["language"] == name.rsplit("_", 1)[1])
                                   & (analysis.cells["dimension"] != ALL)]
            lines += undetected_lines(cells, cells["model"] + ", " + cells["dimension"],
                                      alpha=analysis.summary.get("alpha", 0.05))
    if fragmentation is not None and not fragmentation.empty:
        lines += ["## tokenisation fragmentation", "",
                  markdown_table(fragmentation.drop(columns=["lossy_examples"], errors="ignore"))]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the study report (the pairs-report stage)


def set_provenance(annotation_source: str) -> dict[str, str]:
    """Where each evaluation set's pairs come from, in the words the report shows."""
    return {
        "starter": "authored, not native-reviewed (English and Devanagari Konkani, data/seed/pairs)",
        "constructed": f"generator output, tuple validation by {annotation_source} annotators, sentences "
                       "unreviewed unless a review file was imported, Konkani by machine translation; a "
                       "translated pair is scored only when it is minimal: its two sentences differ only in "
                       "the groups' forms, a Konkani form followed by a case suffix of "
                       "data/seed/pairs/case_suffixes.csv counting as the form (ours; authored, not native-reviewed)",
        "crows": "CrowS-Pairs (Nangia et al. 2020), English",
    }


# how the stage pairs items with controls (the paper does not say): shown on the starter and constructed pages
CONTROL_PAIRING = ("ours (the paper states no rule): the k-th pair id gets control k mod C, each language its own "
                   "translation of that control, so a translation is compared with its English pair's control; "
                   "assigned before any pair is left out, so leaving one out moves no other pair's control")


def set_annotation_source(name: str, annotation_source: str) -> str | None:
    """Who judged an evaluation set's pairs: CrowS-Pairs' crowd workers, the configured annotators for
    the constructed set's tuples; None for the starter set, which the project authored unjudged."""
    return {"crows": "human", "constructed": annotation_source}.get(name)


class SetReport(NamedTuple):
    """One evaluation set's analysis and where its pairs come from."""

    analysis: PairsAnalysis
    provenance: dict[str, str]


def report_sets(scores: pd.DataFrame, fragmentation: pd.DataFrame, *, model: str, metric: str,
                annotation_source: str, n_resamples: int, seed: int, alpha: float,
                output: str | os.PathLike) -> dict[str, SetReport]:
    """Analyse and write (:func:`write_outputs`) every evaluation set of ``scores`` under
    ``output/<set>``; the starter set carries the fragmentation table and its correlations."""
    sources = set_provenance(annotation_source)
    reports = {}
    for name, part in scores.groupby("set", sort=False):
        cluster_col = None
        if name == "starter" and {"group_stereo", "group_anti"} <= set(part.columns):
            # the starter pairs come in mirrored couples: pairs contrasting the same two groups share a source
            part, cluster_col = part.assign(**{COUPLE: mirrored_couple(part)}), COUPLE
        analysis = analyze_scores(part, n_resamples=n_resamples, seed=seed, alpha=alpha, what=f"pairs scores ({name})",
                                  cluster_col=cluster_col)
        status = sorted(set(part.get("translation_status", pd.Series(dtype=str)).dropna().astype(str)))
        provenance = {"set": name, "model": model, "metric": metric, "source": sources.get(name, name),
                      "translation_status": ", ".join(status)}
        if set_annotation_source(name, annotation_source):
            provenance["annotation_source"] = set_annotation_source(name, annotation_source)
        if name in ("starter", "constructed"):
            provenance["controls"] = CONTROL_PAIRING
        frag_set = fragmentation if name == "starter" else None
        frag_stats = fragmentation_correlations(fragmentation, analysis.cells) \
            if frag_set is not None and not fragmentation.empty else None
        write_outputs(analysis, Path(output) / name, title=f"pairs / {name}", provenance=provenance,
                      fragmentation=frag_set, fragmentation_stats=frag_stats)
        reports[name] = SetReport(analysis, provenance)
    return reports


def empty_sets(reports: Mapping[str, SetReport], annotation_source: str) -> dict[str, dict[str, Any]]:
    """The summary of every evaluation set with nothing scored (no pairs survived construction, or
    crows not scored): it says so rather than going missing."""
    sources = set_provenance(annotation_source)
    return {name: {"n": 0, "note": f"no {name} pairs were scored",
                   "provenance": {"source": sources[name], **({"annotation_source": judged} if (
                       judged := set_annotation_source(name, annotation_source)) else {})}}
            for name in EVALUATION_SETS if name not in reports}


def study_summary(reports: Mapping[str, SetReport], scores: pd.DataFrame, *, model: str,
                  scoring: Mapping[str, Any], annotation_source: str) -> dict[str, Any]:
    """The study's ``summary.json``: every set's summary, the headline and the provenance the report
    banner reads."""
    sources = set_provenance(annotation_source)
    sets: dict[str, Any] = {name: {**r.analysis.summary, "provenance": r.provenance} for name, r in reports.items()}
    sets.update(empty_sets(reports, annotation_source))
    statuses = scores["translation_status"].dropna().astype(str).value_counts() if "translation_status" in scores else []
    present = set(scores["set"])
    # model.verify: how many pairs carry float32 scores (each set calibrated and verified on its own)
    verified = ({"precision": {"pairs": int(len(scores)), "pairs_fp32": int((scores["precision"] == "fp32").sum()),
                               "pairs_half_precision": int((scores["precision"] != "fp32").sum())}}
                if "precision" in scores.columns else {})
    return {**verified, "model": model, "metric": scoring["metric"], "bias_score_uses": scoring["bias_score_uses"], "sets": sets,
            "headline": pairs_headline({name: sets[name] for name in EVALUATION_SETS}),
            "provenance": {
                "annotation_source": annotation_source, "machine_generated": "constructed" in present,
                "translation_status": {str(k): int(v) for k, v in dict(statuses).items()},
                "notes": [sources[n] for n in ("starter", "constructed") if n in present]}}


def write_study_report(summary: Mapping[str, Any], empty: Mapping[str, Mapping[str, Any]],
                       output: str | os.PathLike, *, robustness: pd.DataFrame | None = None) -> None:
    """The study's ``summary.json``, the empty sets' own ``summary.json``, the index ``README.md`` and the
    model's ``report.md`` (the sets, the robustness table and the paired comparisons)."""
    out = Path(output)
    for name, s in empty.items():
        write_study_summary(out / name / "summary.json", s)
    write_study_summary(out / "summary.json", summary)
    index = ["# pairs (AmchiBias)", ""]
    index += [f"- [{name}]({name}/report.md): {s['provenance']['source']}" for name, s in summary["sets"].items()]
    write_text(out / "README.md", "\n".join(index) + "\n")
    write_text(out / "report.md", model_report_markdown(summary, robustness))


def model_report_markdown(summary: Mapping[str, Any], robustness: pd.DataFrame | None) -> str:
    """One model's page: each set's overall bias score with a link to its report, whether the verdicts survive
    each defensible choice, and the paired comparisons with the run's other models."""
    lines = [f"# pairs (AmchiBias): {summary['model']} ({summary['metric']})", "",
             f"The bias score uses {summary.get('bias_score_uses')}. Each evaluation set has its own page: the "
             "Tables 3-6, the minimum detectable effect of every cell and, for the starter set, the interval "
             "resampled by mirrored couple beside the item-level one.", ""]
    for name, s in summary["sets"].items():
        runs = s.get("runs") or ([s] if s.get("n") else [])
        scores = ", ".join(f"{r['language']} {format_cell(r['bias_score'])} (n = {r['n']}, ties {r['ties']})"
                           for r in runs) or "no pairs"
        lines.append(f"- [{name}]({name}/report.md): {scores}")
    lines.append("")
    if summary.get("precision"):
        p = summary["precision"]
        lines += [f"Precision (our choice: `model.verify`): scored in half precision; {p['pairs_fp32']} of {p['pairs']} "
                  "pairs (with their controls) were rescored in float32, where the measured half-precision error "
                  "could have changed a comparison; the `precision` column of the scores says which "
                  "(docs/methods.md, \"Decision-exact reduced precision\").", ""]
    block = summary.get("robustness") or {}
    if robustness is not None:
        lines += ["## Robustness of the overall verdicts", "",
                  f"Each set and language's overall test (the share of stereotypical wins among the untied pairs, its "
                  f"exact 95% BCa interval, the paper's star rule) recomputed under one analysis choice at a time; the "
                  f"verdicts survive {block.get('survives')} of the {block.get('of')} variants computed here "
                  f"({block.get('not_run')} not run, with the reason). Headline decisions: "
                  f"{block.get('headline_decision')}. The choices are ours: ties counted as not stereotypical (the "
                  "share of all pairs, which the paper's bias score is) against set aside (the test's), the per-token "
                  "mean against the sum for causal LMs, PLL against the paper's PLL-word-l2r for masked LMs (a second "
                  "scoring pass), and for the starter set the interval resampled by mirrored couple (decision: the "
                  "interval excludes 50%). `n` counts the variant's untied pairs.", "",
                  markdown_table(robustness)]
    paired = summary.get("paired") or {}
    lines += ["## Paired comparison with the run's other models", ""]
    if not paired.get("comparisons"):
        lines += [f"Not computed: {paired.get('reason')}.", ""]
    else:
        lines += [f"Test: {paired.get('test')}. Family: {paired.get('family')}.", "",
                  markdown_table(pd.DataFrame(paired["comparisons"])[list(PAIRED_COLUMNS)])]
    return "\n".join(lines) + "\n"


PAIRED_COLUMNS = ("model_a", "model_b", "set", "language", "dimension", "n", "estimate_a", "estimate_b", "difference",
                  "ci_low", "ci_high", "p_value", "p_holm", "p_bh", "verdict", "mde")


def report_line(summary: Mapping[str, Any]) -> str:
    """One line per set: its bias score per language, or that it has no pairs."""
    lines = []
    for name, s in summary["sets"].items():
        if not s.get("n") and "runs" not in s:
            lines.append(f"{name}: no pairs")
            continue
        runs = s.get("runs") or [s]
        lines.append(f"{name}: " + ", ".join(f"{r['language']} {format_estimate(r['bias_score'], unit='share')} "
                                             f"(n={r['n']})" for r in runs))
    return "; ".join(lines)
