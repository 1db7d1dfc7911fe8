"""Leakage study report: flow figure (Cao et al. 2024 Figure 2), tables and a markdown page."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.figures import save_figure
from stereolens.report.markdown import markdown_table

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


def edges_label(baseline_available: bool) -> str:
    """What the significant non-target coefficients are.  Equation 1 reads alpha_l as leakage net of what a
    monolingual model of the target language already holds (beta LM_tgt); without that term an alpha_l is
    only an association of the model's scores with another language's human ratings."""
    if baseline_available:
        return "leakage edges"
    return "cross-language association edges (no monolingual baseline: not leakage net of LM_tgt)"


def position_bias_by_panel(coverage: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """The choice task's first-listed-wins share per model/method and language, from the scores coverage."""
    out: dict[str, dict[str, float | None]] = {}
    for lang, per in coverage.items():
        for panel, c in per.items():
            if isinstance(c, Mapping) and "first_listed_wins" in c:
                out.setdefault(panel, {})[lang] = c["first_listed_wins"]
    return out


def edge_sets_side_by_side(coefficients: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Every non-target coefficient that is an edge under either missing-cell treatment, with its estimate,
    p and edge status under each (columns suffixed with the treatment)."""
    from stereolens.studies.leakage.fit import non_target_family

    family = non_target_family(coefficients).copy()
    family["edge"] = (family["estimate"] > 0) & (family["p"] < alpha) & family["converged"].astype(bool)
    keys = ["panel", "source", "target"]
    family["source"] = family["term"].str[2:]
    wide = family.pivot_table(index=keys, columns="missing", values=["estimate", "p", "edge"], aggfunc="first")
    wide.columns = [f"{value}_{treatment}" for value, treatment in wide.columns]
    edge_cols = [c for c in wide.columns if c.startswith("edge_")]
    wide = wide[wide[edge_cols].fillna(False).astype(bool).any(axis=1)]
    order = [f"{v}_{t}" for t in ("zero", "drop") for v in ("estimate", "p", "edge") if f"{v}_{t}" in wide.columns]
    return wide[order].reset_index()


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
            f"{h.get('min_annotators_per_group')} annotators (a rated group with fewer is thin; an unrated one is missing)."
        )
    thin = {lang: h["groups_below_min"] for lang, h in human.items() if h.get("groups_below_min")}
    if thin:
        minimum = next(h.get("min_annotators_per_group") for h in human.values() if h.get("groups_below_min"))
        lines.append(
            f"Thin groups (rated by fewer than {minimum} annotators, the paper's stated minimum): "
            + "; ".join(f"{lang} {', '.join(groups)}" for lang, groups in thin.items())
            + ". The published files keep their values and so does the H matrix: they are not missing cells and are "
            "never set to 0; each fit keeps or drops their rows by its thin rule (below).")
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


def _position_bias_lines(position_bias: Mapping[str, Mapping[str, float | None]]) -> list[str]:
    rows = [{"panel": panel, **{lang: v for lang, v in by.items()}} for panel, by in position_bias.items()]
    return ["## Position bias of the choice task", "",
            "Share of queries in which the first-listed trait beats the second (0.5 = no preference). "
            "Where each pair is asked in both orders the scores average the two, which cancels a constant "
            "preference for either position.", "", markdown_table(pd.DataFrame(rows))]


def _thin_phrase(s: Mapping[str, Any]) -> str:
    """How a fit treated the rows of groups rated by too few annotators."""
    if s.get("thin_rule", "keep") == "drop":
        return f"{s.get('n_thin_dropped', 0)} rows of thin groups dropped"
    return f"{s.get('n_thin_kept', 0)} rows of thin groups kept with their values (flagged)"


def _fit_line(s: Mapping[str, Any]) -> str:
    """One fit's terms, cells, missing-cell and thin-group treatment and convergence."""
    dropped = (f"{s.get('n_dropped_missing_human', 0)} (group, trait) rows dropped for a missing human cell"
               if s["missing"] == "drop" else
               f"{s.get('n_zero_filled_missing_human', 0)} (group, trait) rows with a missing human cell zero-filled")
    conv = "converged" if s.get("converged") else "NOT converged (its edges are not reported)"
    return (f"- {s['panel']} -> {s['target_language']}: terms {', '.join(s['terms'])} + intercept; "
            f"n = {s['n_obs']} cells, {s['n_traits']} traits; {dropped}; {_thin_phrase(s)}; scale {s['scale']}; "
            f"MixedLM {conv} ({s.get('optimiser') or 'optimiser not recorded'}). "
            + " ".join(f"_{n}_" for n in s.get("notes", [])))


def _edge_lines(
    reported: Sequence[Mapping[str, Any]], unconverged: Sequence[Mapping[str, Any]], *, label: str, alpha: float,
    correction_legend: str,
) -> list[str]:
    """The reported edges with their corrected p-values, and the edges of fits that did not converge."""
    lines = ["", f"## {label[0].upper()}{label[1:]} (non-target alpha > 0, p < {alpha:g}; the paper's rule)", ""]
    if reported:
        cols = [c for c in ["panel", "source", "target", "estimate", "ci_low", "ci_high", "ci_low_cluster",
                            "ci_high_cluster", "p", "p_holm", "p_bh", "p_cluster", "mde", "mde_adjusted"]
                if c in reported[0]]
        lines.append(markdown_table(pd.DataFrame(reported)[cols]))
    else:
        lines.append("No significant edge.\n")
    if correction_legend:
        lines += [correction_legend + " The paper's rule is uncorrected; an edge with p_holm or p_bh at or above "
                  f"{alpha:g} does not survive that correction.", ""]
    if unconverged:
        lines += [f"Not reported: {len(unconverged)} edge(s) from fits whose MixedLM did not converge: "
                  + ", ".join(f"{e['panel']} {e['source']}->{e['target']}" for e in unconverged) + ".", ""]
    return lines


def _undetected_lines(coefficients: pd.DataFrame, *, alpha: float, power: float, power_legend: str) -> list[str]:
    """The leakage tests of the configured fits that found no edge, with the smallest coefficient each could have
    found (:func:`stereolens.stats.power.undetected_coefficient`)."""
    from stereolens.stats.power import undetected_coefficient
    from stereolens.studies.leakage.fit import correction_family

    if "mde" not in coefficients.columns:
        return []
    family = correction_family(coefficients)
    if "configured" in family.columns:
        family = family[family["configured"].astype(bool)]
    quiet = family[~((family["estimate"] > 0) & (family["p"] < alpha))]
    lines = ["### What the tests without an edge could have found", "", power_legend, ""]
    if quiet.empty:
        return lines + ["Every leakage test found an edge.", ""]
    table = pd.DataFrame({
        "panel": quiet["panel"], "source": quiet["term"].str[2:], "target": quiet["target"],
        "estimate": quiet["estimate"], "se": quiet["se"], "p": quiet["p"], "mde": quiet["mde"],
        "mde_adjusted": quiet["mde_adjusted"],
        "reading": [undetected_coefficient(m, alpha=alpha, power=power) for m in quiet["mde"]]})
    return lines + [markdown_table(table)]


def _robustness_lines(robustness: pd.DataFrame | None) -> list[str]:
    if robustness is None or robustness.empty:
        return []
    from stereolens.studies.leakage.robustness import robustness_summary

    block = robustness_summary(robustness)
    return ["## Robustness: does the edge set survive each analysis choice?", "",
            f"The headline ({block['headline_decision']}) survives {block['survives']} of {block['of']} variants run"
            + (f"; {block['not_run']} not run (the reason is in the table)" if block["not_run"] else "") + ". "
            "Each row changes one choice and recomputes the edges from the same stored scores; a variant agrees when "
            "its edge set is the headline's, edge for edge. estimate: the number of edges; n: the leakage tests "
            "behind them (a set-valued verdict has no interval, so the interval columns are empty; ours). "
            "[robustness.csv](robustness.csv)", "",
            markdown_table(robustness)]


def _paired_lines(paired: Mapping[str, Any] | None, model_id: str) -> list[str]:
    if not paired:
        return []
    lines = ["## Paired comparisons with the run's other models", ""]
    comparisons = paired.get("comparisons") or []
    if not comparisons:
        return lines + [f"No comparison: {paired.get('reason', 'nothing to compare')}.", ""]
    rows = []
    for c in comparisons:
        mine = c["model_a"] == model_id
        rows.append({"other model": c["model_b"] if mine else c["model_a"], "cell": c["cell"],
                     "this model": c["estimate_a"] if mine else c["estimate_b"],
                     "other": c["estimate_b"] if mine else c["estimate_a"],
                     "model_a - model_b": c["difference"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                     "se": c["se_difference"], "se if independent": c["se_independent"], "p": c["p_value"],
                     "p_holm": c["p_holm"], "p_bh": c["p_bh"], "mde": c["mde"],
                     "verdict": f"{c['verdict']} ({c['model_a']} - {c['model_b']})"})
    return lines + [f"Test: {paired.get('test', '')}. Family: {paired.get('family', '')}. mde: the smallest difference "
                    "the test finds with 80% power. 'se if independent' is sqrt(se_a^2 + se_b^2), what comparing the "
                    "two models' own intervals assumes. [paired.json](../paired.json)", "",
                    markdown_table(pd.DataFrame(rows))]


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
    alpha: float = 0.05,
    correction_legend: str = "",
    position_bias: Mapping[str, Mapping[str, float | None]] | None = None,
    power_legend: str = "",
    cluster_legend: str = "",
    robustness: pd.DataFrame | None = None,
    paired: Mapping[str, Any] | None = None,
    power: float = 0.8,
) -> str:
    """The report page: what was measured, with which terms, and where the data came from.

    ``edges`` are every fit's edges (keys ``configured``, ``converged``, ``missing``, ``p_holm``, ``p_bh``):
    the reported ones are those of the configured missing-cell treatment from fits that converged.
    ``provenance["human"]`` maps a language to where its H matrix came from (the published survey or
    judgements through QC); ``coverage`` maps a language to :func:`stereolens.studies.leakage.report_inputs.scores_coverage`.
    """
    without = [f"{s['panel']} -> {s['target_language']}" for s in fit_summaries if not s["baseline_available"]]
    label = edges_label(not without)
    reported = [e for e in edges if e.get("configured", True) and e.get("converged", True)]
    unconverged = [e for e in edges if e.get("configured", True) and not e.get("converged", True)]
    configured = fit_summaries[0]["missing"] if fit_summaries else "zero"
    thin_rule = fit_summaries[0].get("thin_rule", "keep") if fit_summaries else "keep"
    lines = [f"# Stereotype leakage (Cao et al. 2024): {model_id}", "",
             f"**{len(reported)} {label}** (missing human cells, the published 999 code: "
             f"{'filled with 0, as the reference code does' if configured == 'zero' else 'dropped'}; groups rated by "
             f"too few annotators: {'kept with their values, as the reference code does' if thin_rule == 'keep' else 'dropped'}"
             f"{'; ' + str(len(unconverged)) + ' more from fits that did not converge, not reported' if unconverged else ''}).", ""]
    if without:
        lines += [f"No monolingual baseline LM_tgt in {len(without)} of {len(fit_summaries)} fits "
                  f"({', '.join(without)}), so the beta term of Equation 1 is omitted there: a "
                  "significant alpha_l says the model's target-language scores go with language l's human ratings, "
                  "not that they go with them beyond what a monolingual model of the target language holds. "
                  "Read the edges as cross-language associations, not as leakage in the paper's sense.", ""]
    lines += _human_lines(provenance.get("human") or {})
    lines += [
        f"Model prompts and templates: {provenance.get('translation_note', '')}",
        "",
    ]
    if coverage:
        lines += ["## Coverage of the model scores", ""] + _coverage_lines(coverage) + [""]
    if position_bias:
        lines += _position_bias_lines(position_bias)
    lines += ["## Terms available per fit", ""] + [_fit_line(s) for s in fit_summaries]
    lines += _edge_lines(reported, unconverged, label=label, alpha=alpha, correction_legend=correction_legend)
    if cluster_legend:
        lines += [cluster_legend, ""]
    if power_legend:
        lines += _undetected_lines(coefficients, alpha=alpha, power=power, power_legend=power_legend)
    lines += _robustness_lines(robustness)
    lines += _paired_lines(paired, model_id)
    if "missing" in coefficients.columns and coefficients["missing"].nunique() > 1:
        lines += ["### Edges under both treatments of missing human cells", "",
                  "zero: missing cells (the published files' 999) filled with 0 (the reference code `mixed_effect.py` "
                  "replaces 999 by 0; a culture that did not rate a group holds no stereotype of it, so leakage through "
                  "the non-shared groups of section 4.2.4 can show); drop: those rows left out (the non-shared groups "
                  "leave the fit). Neither touches a group rated by too few annotators: it is not a missing cell and "
                  f"follows the thin rule ({thin_rule}) under both. Configured: {configured}.", "",
                  markdown_table(edge_sets_side_by_side(coefficients, alpha))]
    lines += ["![flow](flow.png)", "", "## Coefficients", "", markdown_table(coefficients)]
    lines += ["## Monolingual baseline coefficients (Table 3 shape)", ""]
    if beta.empty or beta.drop(columns=["model"]).isna().all().all():
        lines.append("No monolingual baseline was configured, so beta is not estimated (the term is omitted).\n")
    else:
        lines.append(markdown_table(beta))
    lines += ["## Qualitative leakage (section 4.2)", "",
              "Cells the model associates more strongly than target-language humans do, in agreement with "
              "source-language humans (z-scores within group).", "", markdown_table(qualitative.head(40))]
    if nonmatching is not None and not nonmatching.empty:
        lines += ["## Generative choice: non-matching outputs (appendix B.1)", "", markdown_table(nonmatching)]
    return "\n".join(lines) + "\n"
