"""The contents of the leakage report, assembled from the collected fits: the corrected coefficient and
edge tables, the beta, qualitative and non-matching tables, the markdown page and the study summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.report.markdown import format_cell, format_mapping
from stereolens.studies.leakage.lexicon import Lexicon
from stereolens.studies.leakage.report_inputs import CollectedFits

QUALITATIVE_COLUMNS = ["panel", "source", "target", "trait", "group", "model_z", "source_human_z", "target_human_z",
                       "leak_score"]


@dataclass
class LeakageReport:
    coefficients: pd.DataFrame
    edges: list[dict[str, Any]]  # every edge of every fit, with its Holm / BH p-values
    reported: list[dict[str, Any]]  # the configured treatment's edges from converged fits
    beta: pd.DataFrame
    qualitative: pd.DataFrame
    nonmatching: pd.DataFrame
    panels: list[str]
    label: str  # what the edges are: leakage, or cross-language associations without a baseline
    markdown: str
    summary: dict[str, Any]
    robustness: pd.DataFrame  # robustness.ROBUSTNESS_COLUMNS, the headline first

    @property
    def n_unconverged_edges(self) -> int:
        return sum(1 for e in self.edges if e["configured"] and not e["converged"])


def build_report(
    fits: CollectedFits, human: Mapping[str, pd.DataFrame], lex: Lexicon, languages: Sequence[str], *,
    model_id: str, scores_dir: Path, human_provenance: Mapping[str, Any], annotation_source: str,
    alpha: float = 0.05, top_k: int = 20, paired: Mapping[str, Any] | None = None, power: float = 0.8,
) -> LeakageReport:
    """Every table, the page and the summary of the report (the flow figure is drawn from ``reported``).

    ``paired`` is the run's ``paired.json`` (the leakage-paired stage); its comparisons with ``model_id`` go into
    the page and the summary's ``paired`` block."""
    from stereolens.stats.multiple import family_description
    from stereolens.studies.leakage.fit import beta_table, family_size, with_edge_corrections, with_minimum_detectable
    from stereolens.studies.leakage.paired import paired_block
    from stereolens.studies.leakage.report import edges_label, position_bias_by_panel, report_markdown
    from stereolens.studies.leakage.robustness import robustness_summary, robustness_table

    stacked = with_minimum_detectable(pd.concat(fits.coefficients, ignore_index=True), alpha=alpha, power=power)
    coefficients, edges = with_edge_corrections(stacked, fits.edges, alpha=alpha)
    reported = [e for e in edges if e["configured"] and e["converged"]]
    beta = beta_table(fits.beta_inputs, languages)
    qualitative = qualitative_for_edges(reported, human, lex, scores_dir, top_k=top_k)
    nonmatching = fits.nonmatching_table()
    # the edges are leakage in Equation 1's sense only where every fit had its monolingual baseline
    label = edges_label(all(s["baseline_available"] for s in fits.fit_summaries))
    configured_missing = fits.fit_summaries[0]["missing"]
    n_family = family_size(coefficients, configured_missing)
    n_converged = sum(bool(f.get("converged")) for f in fits.fit_summaries)
    correction_legend = (family_description(n_family, alpha) + f" The family: the non-target human terms of the "
                         f"{n_converged} converged fit(s) of {len(fits.fit_summaries)} (missing human cells "
                         f"{configured_missing}); a fit that did not converge reports no edge and is left out of it.")
    power_legend = mde_legend(n_family, alpha=alpha, power=power)
    cluster_legend = cluster_interval_legend(fits.fit_summaries, alpha=alpha)
    robustness = robustness_table(fit_variants(coefficients, fits), alpha=alpha)
    paired_comparisons = paired_block(paired or {}, model_id)
    bias = position_bias_by_panel(fits.coverage)
    status = {lang: lex.translation_status(lang) for lang in languages}
    note = ("English templates and prompt are authored around the survey's own wording; Russian, Chinese and Hindi "
            f"words, templates and prompts are authored, unreviewed translations ({format_mapping(status)}).")
    md = report_markdown(model_id=model_id, coefficients=coefficients, edges=edges, beta=beta,
                         qualitative=qualitative, fit_summaries=fits.fit_summaries, nonmatching=nonmatching,
                         provenance={"translation_note": note, "human": dict(human_provenance)}, coverage=fits.coverage,
                         alpha=alpha, correction_legend=correction_legend, position_bias=bias,
                         power_legend=power_legend, cluster_legend=cluster_legend, robustness=robustness,
                         paired=paired_comparisons, power=power)
    summary = report_summary(
        edges, reported, fits.fit_summaries, label=label, alpha=alpha, n_family=n_family,
        correction_legend=correction_legend, position_bias=bias, coverage=fits.coverage,
        human_provenance=human_provenance, translation_status=status, annotation_source=annotation_source, note=note)
    summary["minimum_detectable"] = {"power": power, "alpha": alpha,
                                     "alpha_adjusted": alpha / n_family if n_family else None,
                                     "columns": ["mde", "mde_adjusted"], "legend": power_legend}
    summary["clustered_intervals"] = {"unit": "group", "columns": ["se_cluster", "ci_low_cluster", "ci_high_cluster",
                                                                   "p_cluster"],
                                      "star_uses": "MixedLM's model-based interval and p (the paper's rule)",
                                      "legend": cluster_legend}
    summary["robustness"] = robustness_summary(robustness)
    summary["paired"] = paired_comparisons
    return LeakageReport(coefficients, edges, reported, beta, qualitative, nonmatching, list(fits.panels), label, md,
                         summary, robustness)


def fit_variants(coefficients: pd.DataFrame, fits: CollectedFits) -> Any:
    """The robustness inputs: the configured fits (corrected), the other missing-cell treatment's and every
    variant's coefficient tables (:class:`~stereolens.studies.leakage.robustness.FitVariants`)."""
    from stereolens.studies.leakage.fit import MISSING_TREATMENTS
    from stereolens.studies.leakage.robustness import FitVariants

    configured = coefficients[coefficients["configured"].astype(bool)]
    alternative = coefficients[~coefficients["configured"].astype(bool)]
    missing = fits.fit_summaries[0]["missing"]
    variants = FitVariants(configured=configured, alternative=alternative if len(alternative) else None,
                           alternative_name=next(t for t in MISSING_TREATMENTS if t != missing),
                           choice_panels=any(panel.endswith("/choice") for panel in fits.panels))
    for v in fits.variants:
        key = (v["choice"], v["variant"])
        variants.changed.setdefault(key, [])
        if v["ran"]:
            variants.changed[key].append(v["coefficients"])
        else:
            variants.not_run.setdefault(key, []).append(f"{v['panel']} -> {v['target']}: {v['reason']}")
    return variants


def mde_legend(n_family: int, *, alpha: float, power: float) -> str:
    """What the MDE columns are, in words."""
    from scipy import stats

    from stereolens.report.markdown import format_cell

    factor = stats.norm.isf(alpha / 2) + stats.norm.ppf(power)
    adjusted = (f"mde_adjusted: the same at Bonferroni's alpha / m = {format_cell(alpha)} / {n_family} = "
                f"{format_cell(alpha / n_family)}, the level of Holm's first step (Benjamini-Hochberg has no single "
                "per-test level, so no MDE is given for it)") if n_family else "mde_adjusted: no family, none"
    return (f"mde: the smallest leakage coefficient (alpha_l, in the model's score units per unit of human rating) "
            f"the edge's Wald test finds with {format_cell(power * 100)}% power at alpha {format_cell(alpha)}, "
            f"(z_(1-alpha/2) + z_power) x se = {format_cell(factor)} x se, from MixedLM's model-based standard error, "
            "the one the edge rule uses (the closed form drops the far tail's share of the power, below 1e-5, and "
            f"treats se as known, as the z-test does); {adjusted}. Given for the leakage tests only (non-target human "
            "terms of converged fits).")


def cluster_interval_legend(fit_summaries: Sequence[Mapping[str, Any]], *, alpha: float) -> str:
    """What the clustered columns are and which interval the edges use."""
    from stereolens.report.markdown import format_cell

    info = next((s.get("cluster") for s in fit_summaries if s.get("cluster")), None) or {}
    groups = sorted({int(s["cluster"]["n_clusters"]) for s in fit_summaries if s.get("cluster")})
    resamples = info.get("resamples", "?")
    return (f"ci_low_cluster, ci_high_cluster: estimate +- z x se_cluster at {format_cell(100 * (1 - alpha))}%, "
            f"se_cluster the standard deviation of the coefficient over {resamples} resamples of the groups "
            f"(cluster unit: the group, {', '.join(map(str, groups)) or '?'} per fit; the fixed effects refitted by "
            "GLS at the fit's REML variance components; ours), p_cluster its Wald p. The 32 rows of one group share "
            "the group's words in every template, so MixedLM's interval (ci_low, ci_high), which treats them as "
            "independent given the trait, can be too narrow. The edges (the paper's rule) use MixedLM's model-based "
            "interval and p; the robustness table says whether they survive the clustered one.")


def qualitative_for_edges(
    reported: Sequence[Mapping[str, Any]], human: Mapping[str, pd.DataFrame], lex: Lexicon, scores_dir: Path, *,
    top_k: int,
) -> pd.DataFrame:
    """The qualitative table (section 4.2) of every reported edge, read against its model's score matrix."""
    from stereolens.studies.leakage.fit import qualitative_table
    from stereolens.studies.leakage.matrices import read_score_matrix

    frames = []
    for e in reported:
        language = e["target"].lower()
        model_id, method = e["panel"].rsplit("/", 1)
        target = read_score_matrix(scores_dir / language / model_id / f"{method}.csv", "model score matrix")
        q = qualitative_table(target, human, e["source"], e["target"], top_k=top_k, traits=lex.traits)
        q.insert(0, "panel", e["panel"])
        frames.append(q)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=QUALITATIVE_COLUMNS)


def _edge_line(e: Mapping[str, Any], *, corrected: bool) -> str:
    if corrected:
        return (f"{e['panel']}: {e['source']}->{e['target']} ({format_cell(e['estimate'])}, p={format_cell(e['p'])}, "
                f"p_holm={format_cell(e['p_holm'])}, p_bh={format_cell(e['p_bh'])})")
    return f"{e['panel']}: {e['source']}->{e['target']} ({format_cell(e['estimate'])}, p={format_cell(e['p'])})"


def report_summary(
    edges: Sequence[Mapping[str, Any]], reported: Sequence[Mapping[str, Any]], fit_summaries: Sequence[Mapping[str, Any]],
    *, label: str, alpha: float, n_family: int, correction_legend: str, position_bias: Mapping[str, Any],
    coverage: Mapping[str, Any], human_provenance: Mapping[str, Any], translation_status: Mapping[str, Mapping[str, int]],
    annotation_source: str, note: str,
) -> dict[str, Any]:
    """The study's ``summary.json``: edges under both missing-cell treatments, corrections, fits, coverage, and
    the report site's ``headline`` and ``provenance`` blocks."""
    from stereolens.studies.leakage.fit import MISSING_TREATMENTS

    configured_missing = fit_summaries[0]["missing"]
    other = [e for e in edges if not e["configured"] and e["converged"]]
    status = translation_status
    return {"n_edges": len(reported), "n_fits": len(fit_summaries),
            "edges_are": label,
            "edges": [_edge_line(e, corrected=True) for e in reported],
            "missing_human_cells": {
                "configured": configured_missing, "n_edges": len(reported),
                "alternative": next((t for t in MISSING_TREATMENTS if t != configured_missing), None),
                "n_edges_alternative": len(other),
                "edges_alternative": [_edge_line(e, corrected=False) for e in other]},
            "n_edges_not_converged": sum(1 for e in edges if e["configured"] and not e["converged"]),
            # groups rated by too few annotators: kept with their values or dropped (never zero-filled)
            "thin_groups": {"rule": fit_summaries[0].get("thin_rule", "keep"),
                            "groups": {lang: h["groups_below_min"] for lang, h in human_provenance.items()
                                       if h.get("groups_below_min")}},
            "multiple_comparisons": {
                "rule": f"paper's rule: alpha > 0 and p < {alpha:g}, per coefficient",
                "family": f"every non-target human term of every converged fit with missing human cells {configured_missing}",
                "n_tests": n_family, "legend": correction_legend,
                "n_edges_holm": sum(bool(e["p_holm"] < alpha) for e in reported),
                "n_edges_bh": sum(bool(e["p_bh"] < alpha) for e in reported)},
            "position_bias": dict(position_bias),
            "terms": {f"{s['panel']}->{s['target_language']}": s["terms"] for s in fit_summaries},
            "baseline_available": any(s["baseline_available"] for s in fit_summaries),
            "baseline_available_all_fits": all(s["baseline_available"] for s in fit_summaries),
            "fits": [{"panel": s["panel"], "target": s["target_language"], "n_obs": s["n_obs"],
                      "missing_human": s["missing"],
                      "n_dropped_missing_human": s.get("n_dropped_missing_human"),
                      "n_zero_filled_missing_human": s.get("n_zero_filled_missing_human"),
                      "thin_rule": s.get("thin_rule"), "n_thin_kept": s.get("n_thin_kept"),
                      "n_thin_dropped": s.get("n_thin_dropped"),
                      "converged": s.get("converged"), "optimiser": s.get("optimiser")}
                     for s in fit_summaries],
            "coverage": dict(coverage),
            "human": dict(human_provenance),
            "translation_status": dict(status),
            # the report site's contract (docs/report.md)
            "headline": {label: len(reported), "fits": len(fit_summaries),
                         "converged fits": sum(bool(s.get("converged")) for s in fit_summaries)},
            "provenance": {"annotation_source": annotation_source,
                           "translation_status": {k: sum(by.get(k, 0) for by in status.values())
                                                  for k in sorted({k for by in status.values() for k in by})},
                           "machine_generated": False,
                           "notes": [note]}}
