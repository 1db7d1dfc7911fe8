"""Figures of the pcs study (Fifteen Percent Fluency Figures 2-5) and its markdown report page."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.figures import save_figure
from stereolens.report.markdown import format_cell, format_estimate, markdown_table

DIMENSION_COLOURS = {"PDI": "#1f77b4", "IDV": "#2ca02c", "UAI": "#d62728"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _caption(fig, note: str | None) -> None:
    if note:
        fig.text(0.01, -0.02, note, fontsize=7, color="#555555", ha="left", va="top")


def pick_waterfall_cell(cells: pd.DataFrame, *, scenario_id: str | None = None, feature: str | None = None,
                        language: str | None = None) -> pd.Series | None:
    """The configured cell, else the included cell with the widest positive B - A gap (the clearest picture)."""
    pool = cells.loc[~cells["excluded"]] if "excluded" in cells.columns else cells
    for col, value in (("scenario_id", scenario_id), ("feature", feature), ("language", language)):
        if value is not None:
            pool = pool.loc[pool[col] == value]
    if pool.empty:
        pool = cells
    if pool.empty:
        return None
    if "gap" not in pool.columns:
        return pool.iloc[0]
    # a cell where explicit instruction moved the score upward reads as the paper's Figure 2
    upward = pool.loc[pool["gap"] > 0]
    pool = upward if len(upward) else pool
    return pool.loc[pool["gap"].abs().idxmax()]


def waterfall(cell: pd.Series, note: str | None = None):
    """A, the A->C increment and the unused C->B gap for one scenario-feature (Figure 2)."""
    plt = _plt()
    a, b, c = float(cell["A"]), float(cell["B"]), float(cell["C"])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(0, a, color="#999999", label="A (neutral)")
    ax.bar(1, c - a, bottom=a, color="#1f77b4" if c >= a else "#a0522d", label="A→C (implicit)")
    ax.bar(2, b - c, bottom=c, color="#dddddd", edgecolor="#555555", hatch="//", label="C→B (unused capability)")
    ax.bar(3, b, color="#333333", label="B (explicit)")
    ax.set_xticks(range(4), ["A", "A→C", "C→B", "B"])
    lo = max(0.0, min(a, b, c) - 1.0)
    ax.set_ylim(lo, max(a, b, c) + 0.8)
    ax.set_ylabel("score (1-7)")
    gap = b - a
    pcs = (c - a) / gap if gap else math.nan
    ax.set_title(
        f"{cell['model']} · {cell['language']} · {cell['scenario_id']} · {cell['feature']}\n"
        f"PCS = {pcs:.2f}" if not math.isnan(pcs) else f"{cell['scenario_id']} · {cell['feature']}",
        fontsize=9,
    )
    for x, v in ((0, a), (3, b)):
        ax.text(x, v + 0.05, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.text(1, max(a, c) + 0.05, f"{c - a:+.2f}", ha="center", va="bottom", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    _caption(fig, note)
    return fig


def pcs_heatmap(table: pd.DataFrame, note: str | None = None):
    """Mean PCS, language x dimension (Figure 3); diverging colours centred on 0."""
    plt = _plt()
    wide = table.pivot_table(index="language", columns="dimension", values="mean_pcs")
    fig, ax = plt.subplots(figsize=(1.4 * max(len(wide.columns), 2) + 1.5, 0.55 * max(len(wide), 2) + 1.5))
    values = wide.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    lim = max(0.5, float(np.abs(finite).max())) if finite.size else 1.0
    im = ax.imshow(values, cmap="BrBG", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(len(wide.columns)), list(wide.columns))
    ax.set_yticks(range(len(wide.index)), list(wide.index))
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            ax.text(j, i, "–" if not np.isfinite(v) else f"{v:.2f}", ha="center", va="center", fontsize=9)
    fig.colorbar(im, ax=ax, label="mean PCS")
    ax.set_title("Implicit adaptation (PCS) by language and dimension", fontsize=9)
    _caption(fig, note)
    return fig


def feature_ranking_bars(ranking: pd.DataFrame, note: str | None = None):
    """Features ranked by median PCS, coloured by dimension (Figure 4)."""
    plt = _plt()
    data = ranking.dropna(subset=["median_pcs"]).sort_values("median_pcs")
    fig, ax = plt.subplots(figsize=(6, 0.35 * max(len(data), 3) + 1.2))
    colours = [DIMENSION_COLOURS.get(d, "#7f7f7f") for d in data["dimension"]]
    ax.barh(range(len(data)), data["median_pcs"], color=colours)
    ax.set_yticks(range(len(data)), [f"{f} ({d})" for f, d in zip(data["feature"], data["dimension"])], fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("median PCS")
    ax.set_title("Feature-level implicit sensitivity", fontsize=9)
    _caption(fig, note)
    return fig


def hindi_urdu_dumbbell(hud: pd.DataFrame, note: str | None = None):
    """Hindi vs Urdu LDI per feature (Figure 5)."""
    plt = _plt()
    data = hud.loc[hud["feature"] != "overall"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(6, 0.35 * max(len(data), 3) + 1.2))
    y = np.arange(len(data))
    for i, row in data.iterrows():
        ax.plot([row["hindi"], row["urdu"]], [i, i], color="#bbbbbb", lw=2, zorder=1)
    ax.scatter(data["hindi"], y, color="#ff7f0e", marker="o", label="Hindi", zorder=2)
    ax.scatter(data["urdu"], y, color="#9467bd", marker="s", label="Urdu", zorder=2)
    ax.set_yticks(y, [f"{f} ({d})" for f, d in zip(data["feature"], data["dimension"])], fontsize=8)
    ax.set_xlabel("LDI (mean Prompt A score)")
    ax.legend(fontsize=8)
    ax.set_title("Hindi-Urdu pragmatic defaults", fontsize=9)
    _caption(fig, note)
    return fig


def write_figures(tables: Mapping[str, pd.DataFrame], cells: pd.DataFrame, out_dir: str | os.PathLike, *,
                  note: str | None = None, waterfall_cell: Mapping[str, Any] | None = None) -> list[Path]:
    """Every figure the data allow, as PNG + SVG under ``out_dir``."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    cell = pick_waterfall_cell(cells, **(waterfall_cell or {})) if cells is not None and len(cells) else None
    if cell is not None:
        written += save_figure(waterfall(cell, note), out_dir / "waterfall")
    heat = tables.get("pcs_dimension_language")
    if heat is not None and heat["mean_pcs"].notna().any():
        written += save_figure(pcs_heatmap(heat, note), out_dir / "pcs_heatmap")
    rank = tables.get("table14_feature_ranking")
    if rank is not None and rank["median_pcs"].notna().any():
        written += save_figure(feature_ranking_bars(rank, note), out_dir / "feature_ranking")
    hud = tables.get("table13_hud_by_feature")
    if hud is not None and (hud["feature"] != "overall").any():
        written += save_figure(hindi_urdu_dumbbell(hud, note), out_dir / "hindi_urdu_dumbbell")
    return written


def gates_table(gates: Mapping[str, Any]) -> pd.DataFrame:
    """One row per judge gate: its observed figure, its threshold and whether it passed (``None``: the figure
    cannot be computed here, such as alpha with one judge)."""
    rows = [{"gate": name, "observed": g.get("observed"), "threshold": g.get("threshold"),
             "passed": "yes" if g.get("passed") else ("not applicable" if g.get("passed") is None else "**NO**")}
            for name, g in gates.get("gates", {}).items()]
    return pd.DataFrame(rows, columns=["gate", "observed", "threshold", "passed"])


def hindi_urdu_lines(both: Mapping[str, Any], statistics: Mapping[str, Any]) -> list[str]:
    """The Hindi-Urdu headline lines: the test the headline rests on, the other test beside it, and whether they
    agree (in bold when they do not)."""
    hu = statistics.get("hindi_urdu") or {}
    sc = statistics.get("hindi_urdu_scenarios") or {}
    if not (hu or sc):
        return []
    lines = [f"- Hindi vs Urdu baseline: the headline rests on {both.get('headline_test_text', 'the paper’s test')} "
             "(our choice: it is the paper's, so its p compares with the paper's p = .262)"]
    lines.append("  - responses as units (the paper's): " + (hu["note"] if hu.get("note") else
                 f"t = {format_cell(hu.get('t'))}, p = {format_cell(hu.get('p'))}, d = {format_cell(hu.get('d'))} "
                 f"(n = {hu.get('n_hindi')} and {hu.get('n_urdu')} rows)"))
    if sc:
        lines.append("  - matched scenarios as units (ours, beyond the paper): " + (sc["note"] if sc.get("note") else
                     f"paired t = {format_cell(sc.get('t'))}, p = {format_cell(sc.get('p_t'))}; Wilcoxon W = "
                     f"{format_cell(sc.get('wilcoxon_w'))}, p = {format_cell(sc.get('p_wilcoxon'))} "
                     f"({sc.get('n_pairs')} pairs)"))
    if both.get("note"):
        note = both["note"][0].upper() + both["note"][1:]
        lines.append(f"  - **{note}.**" if both.get("agree") is False else f"  - {note}.")
    return lines


def pcs_headline_line(summary: Mapping[str, Any]) -> str:
    """PCS as a ratio with the interval its decision uses (whole scenarios resampled) and the cell-level one beside
    it, or why it is undefined."""
    if summary.get("pcs") is None:
        return f"- PCS: {summary.get('pcs_note') or format_cell(None)}"
    scenario = format_estimate(summary["pcs"], summary.get("pcs_ci_low_cluster"), summary.get("pcs_ci_high_cluster"))
    cells = format_estimate(summary["pcs"], summary.get("pcs_ci_low"), summary.get("pcs_ci_high"))
    return (f"- PCS (mean ratio over {summary.get('pcs_n_cells')} included scenario-features of "
            f"{summary.get('pcs_n_scenarios')} scenarios): {scenario} (95% interval resampling whole scenarios, "
            f"which the decision uses; resampling scenario-features as if independent: {cells}); decision: "
            f"**{summary.get('pcs_decision')}**")


def robustness_lines(summary: Mapping[str, Any], robustness: pd.DataFrame | None) -> list[str]:
    """The robustness section: each headline decision, how many analysis choices it survives, and the table."""
    block = summary.get("robustness") or {}
    if robustness is None or not block:
        return []
    lines = ["", "## Robustness", "",
             "Each headline verdict recomputed under the analysis choices the paper leaves open or the project adds, "
             "from the stored judged scores (no model pass); `agrees`: the variant reaches its measure's headline "
             "decision; `ran` false: the variant needs another model pass (the reason says which). Also in "
             f"`{block.get('table')}`.", ""]
    for measure, counts in (block.get("by_measure") or {}).items():
        tested = (f"survives {counts['survives']} of the {counts['of']} variants that ran" if counts["of"]
                  else "no decision for a variant to agree with")
        lines.append(f"- {measure}: **{counts['headline_decision']}**, {tested} ({counts['not_run']} not run)")
    return lines + ["", markdown_table(robustness.drop(columns="measure"))]


def paired_lines(paired: Mapping[str, Any] | None) -> list[str]:
    """The comparisons with the run's other models that involve this model (pcs_paired), or why there are none."""
    if paired is None:
        return []
    lines = ["", "## Paired comparisons with the run's other models", ""]
    if paired.get("test"):
        lines += [f"Test: {paired['test']}. Family: {paired.get('family')}.", ""]
    comparisons = paired.get("comparisons") or []
    if not comparisons:
        return lines + [f"No comparison: {paired.get('reason') or 'none computed'}."]
    table = pd.DataFrame(comparisons)
    table["difference"] = [format_estimate(d, lo, hi) for d, lo, hi in
                           zip(table["difference"], table["ci_low"], table["ci_high"])]
    columns = ["model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "p_value", "p_holm",
               "p_bh", "verdict", "mde"]
    return lines + ["`difference` = model_a - model_b with its 95% interval; `mde`: the smallest |difference| the "
                    "test finds with 80% power at its level (null: too few scenarios, or no spread).", "",
                    markdown_table(table[columns])]


def report_markdown(*, configuration: Mapping[str, Any], summary: Mapping[str, Any], statistics: Mapping[str, Any],
                    gates: Mapping[str, Any] | None, tables: Mapping[str, pd.DataFrame], validity: pd.DataFrame | None,
                    figures: list[str], human_source: str | None = None,
                    robustness: pd.DataFrame | None = None) -> str:
    """The study's report page: configuration, gates, headline numbers, tables, figures."""
    lines = ["# pcs: pragmatic context sensitivity (Fifteen Percent Fluency)", ""]
    if human_source and "simulated" in human_source:
        lines += ["**Human-validation preferences in this report are SIMULATED (annotation.source=simulated): "
                  "seeded simulated annotators around the judges' own scores, not human judgements. "
                  "Table 17 and its binomial tests show the pipeline works, not that humans agree with the judges.**", ""]
    elif human_source and human_source != "human":
        lines += [f"**Human-validation preferences come from `{human_source}`, not from human annotators.**", ""]
    lines += ["## Configuration", ""]
    for key, value in configuration.items():
        lines.append(f"- **{key}**: {value}")
    lines += ["", "## Judge validation gates", ""]
    if gates:
        enforce = gates.get("enforced")
        lines.append(f"Gates {'are enforced (a failing gate stops the analysis)' if enforce else 'are reported, not enforced, in this configuration'}.")
        lines.append("")
        lines += markdown_table(gates_table(gates)).splitlines()
        if not gates.get("all_passed", False):
            lines += ["", "**At least one gate did not pass: the numbers below are not validated measurements.**"]
    lines += ["", "## Headline", ""]
    gain = (f"{format_cell(statistics.get('min_gain_steps'))} scale steps = "
            f"{format_cell(statistics.get('min_gain_points'))} points")
    lines.append(pcs_headline_line(summary))
    cap = summary.get("cap_util")
    lines.append(f"- capability utilisation: "
                 f"{format_cell(cap) if cap is not None else summary.get('cap_util_note') or format_cell(None)}")
    lines.append(f"- scenario-features excluded (B - A not above the minimum gain, {gain}; our rule, not the "
                 f"paper's): {summary.get('n_excluded')} of {statistics.get('n_cells')}")
    lines.append(f"- PCS by dimension (mean over the included cells): "
                 f"{', '.join(f'{k} {format_cell(v)}' for k, v in (summary.get('by_dimension') or {}).items())}")
    lines.append(f"- responses left out of every analysis as invalid (empty, refusal, wrong language): "
                 f"{statistics.get('n_responses_excluded_invalid', 0)} (table excluded_responses)")
    hud = (summary.get("hud") or {}).get("overall")
    lines.append(f"- HUD (overall |mean LDI Hindi - mean LDI Urdu|): "
                 f"{format_cell(hud) if hud is not None else statistics.get('hud_note') or format_cell(None)}")
    for language, note in (summary.get("ldi_notes") or {}).items():
        lines.append(f"- LDI {language}: {note}")
    lines += hindi_urdu_lines(summary.get("hindi_urdu") or {}, statistics)
    lines += robustness_lines(summary, robustness)
    lines += paired_lines(summary.get("paired"))
    if validity is not None and len(validity):
        lines += ["", "## Response validity", "", markdown_table(validity)]
    if human_source:
        lines.append(f"- human-validation preferences: {human_source}")
    notes = {
        "pcs_min_gain_sensitivity": "Our minimum-gain rule (not the paper's) against the same scores: PCS and "
                                    "capability utilisation at each minimum gain; `configured` marks the one used above.",
        "excluded_responses": "Responses left out of every analysis, by model, language, condition and reason.",
        "scenario_rm_anova_language": "Beyond the paper: Table 15's ANOVA treats each (response, feature) row as "
                                      "independent; here each scenario's mean Prompt A score is the unit, language "
                                      "within scenario (repeated-measures ANOVA, statsmodels AnovaRM).",
        "table17_human_validation": "Counts of the majority-vote preferences per language; the binomial tests run "
                                    "on the decisive ones. `A_C_excluded_invalid` / `B_C_excluded_invalid` (where "
                                    "present): pairs never shown to annotators because a response of the pair is "
                                    "invalid (empty, refusal, wrong language; ours: the paper does not say), listed "
                                    "in human_validation/excluded_pairs.csv.",
    }
    notes["table10_model_summary"] = (f"PCS is undefined where mean B - mean A is not above the minimum gain "
                                      f"(`pcs_note`; ours). {statistics.get('pcs_interval', '')}")
    for name in ("table10_model_summary", "pcs_min_gain_sensitivity", "table01_model_dimension", "pcs_by_language",
                 "pcs_dimension_language", "excluded_responses", "table02_ldi_by_language", "table15_anova_language",
                 "scenario_rm_anova_language", "table16_paired_a_vs_c", "table13_hud_by_feature",
                 "table14_feature_ranking", "table17_human_validation", "table17_binomial_tests"):
        if name in tables:
            # a starred table carries the corrections' legend (family and its size) and what its MDE is; the rows its
            # test did not find significant say what that test could not have detected
            mde = (statistics.get("mde") or {}).get(name) or {}
            legend = [text for text in (notes.get(name), (statistics.get("corrections") or {}).get(name),
                                        mde.get("legend")) if text]
            words = [f"- {text}" for text in mde.get("undetected") or []]
            lines += (["", f"## {name}", ""] + [line for text in legend for line in (text, "")]
                      + [markdown_table(tables[name])] + ([""] + words if words else []))
    if figures:
        lines += ["", "## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures]
    return "\n".join(lines) + "\n"
