"""The CrowS-Pairs slice's ``report.md``: the headline, what each row of the bias-by-type table tests
(its legend), the CrowS-Pairs script's rounded-score number beside the study's, and the
length-controlled view, so the report site shows them with the table and not only in ``summary.json``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from stereolens.report.markdown import format_cell, format_estimate, markdown_table, significance_mark
from stereolens.stats.power import undetected_lines
from stereolens.report.words import precision_lines
from stereolens.studies.crows.analysis import LENGTH_COLUMNS, REFERENCE_SCRIPT_DECIMALS, ROUNDED_SCORE

# the bias-by-type columns the page shows (the CSV beside it has every column)
TABLE_COLUMNS = ("group", "n", "bias_score", ROUNDED_SCORE, "ties", "share_untied", "ci_low", "ci_high", "p_value",
                 "favours", "significant", "borderline", "p_holm", "p_bh", "mde", "mde_adjusted")


# the share columns the page shows in percent, as the pairs pages and the report site show shares (the CSV keeps 0-1)
PERCENT_COLUMNS = ("bias_score", ROUNDED_SCORE, "share_untied", "ci_low", "ci_high", "mde", "mde_adjusted",
                   "ci_low_cluster", "ci_high_cluster")
MARKS_LEGEND = ("Shares are shown in percent on this page (`bias_by_type.csv` holds them from 0 to 1). `*` after a "
                "bias score marks a significant row and `~` a borderline one, as on the pairs pages.")


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The bias-by-type table as the page shows it: shares in percent, the bias score starred as the pairs
    pages star theirs (``57.6%*``)."""
    shown = table[[c for c in TABLE_COLUMNS if c in table.columns]].copy()
    for column in PERCENT_COLUMNS:
        if column in shown.columns:
            shown[column] = [format_estimate(v, unit="share") for v in shown[column]]
    if {"significant", "borderline"} <= set(table.columns):
        shown["bias_score"] = [text + significance_mark(sig, border) for text, sig, border
                               in zip(shown["bias_score"], table["significant"], table["borderline"])]
    return shown


def report_markdown(summary: Mapping[str, Any], table: pd.DataFrame, length: pd.DataFrame,
                    robustness: pd.DataFrame | None = None) -> str:
    title = f"# CrowS-Pairs: {summary.get('model')} ({summary.get('metric')})"
    if summary.get("skipped"):
        return f"{title}\n\nSkipped: {summary['skipped']}.\n"
    lines = [
        title, "",
        f"Bias score (the reference score: share of the {summary['n']} pairs whose `sent_more` scores higher, ties not "
        f"stereotypical): **{format_estimate(summary['bias_score'], unit='share')}**, {summary['ties']} ties. The "
        f"row's test, among the untied pairs: share "
        f"{format_estimate(summary['share_untied'], summary['ci_low'], summary['ci_high'], unit='share')} "
        f"(95% BCa), binomial p {format_cell(summary['p_value'])}, favours {summary['favours']}"
        f"{', significant' if summary['significant'] else ''}{', borderline' if summary['borderline'] else ''}.",
        "",
        f"The CrowS-Pairs script (`metric.py`) rounds both sentence scores to {REFERENCE_SCRIPT_DECIMALS} decimals "
        f"before comparing them, so pairs closer than that tie there; this study compares the scores as computed, "
        f"as lm-evaluation-harness does (our choice). The script's number on these scores (`{ROUNDED_SCORE}`): "
        f"**{format_estimate(summary[ROUNDED_SCORE], unit='share')}**.",
        "",
        "## Bias by type", "",
        str(summary.get("corrections", "")), "", MARKS_LEGEND, "",
        markdown_table(display_table(table)),
        *undetected_lines(table, table["group"], in_family=table["group"] != "all"),
        "![bias by type](bias_by_type.png)", "",
    ]
    lines += precision_lines(summary.get("precision"), "pairs")
    control = summary.get("beyond_reference", {}).get("length_control", {})
    lines += ["## Length control (ours, beyond the reference)", "", str(control.get("note", "")), ""]
    if control.get("available"):
        lines.append(markdown_table(length[["view", *[c for c in LENGTH_COLUMNS if c in length.columns]]]))
    if robustness is not None:
        lines += robustness_section(summary.get("robustness", {}), robustness)
    if "paired" in summary:
        lines += paired_section(summary["paired"])
    return "\n".join(lines) + "\n"


def robustness_section(block: Mapping[str, Any], robustness: pd.DataFrame) -> list[str]:
    """The robustness table and its one-line verdict (``stats.robustness``)."""
    return [
        "## Robustness of the overall verdict", "",
        f"Headline decision: **{block.get('headline_decision')}**; it survives {block.get('survives')} of the "
        f"{block.get('of')} variants computed here ({block.get('not_run')} not run, with the reason). Each row "
        "recomputes the overall test (the share of stereotypical wins among the untied pairs, its exact 95% BCa "
        "interval, the same star rule) under one analysis choice; `n` counts the variant's untied pairs and "
        "`agrees` says whether its decision is the headline's. The choices are ours: the per-token mean and the "
        "equal-length subset take length out of the comparison, the rounding is the CrowS-Pairs script's, and "
        "PLL against PLL-word-l2r applies to masked LMs (a second scoring pass).", "",
        markdown_table(robustness)]


def paired_section(block: Mapping[str, Any]) -> list[str]:
    """This model against the run's other models on the pairs both scored (reports/crows/paired.json)."""
    lines = ["## Paired comparison with the run's other models", ""]
    if not block.get("comparisons"):
        return [*lines, f"Not computed: {block.get('reason')}.", ""]
    lines += [f"Test: {block.get('test')}. Family: {block.get('family')}.", "",
              markdown_table(pd.DataFrame(block["comparisons"])[list(PAIRED_COLUMNS)])]
    return lines


PAIRED_COLUMNS = ("model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low", "ci_high",
                  "p_value", "p_holm", "p_bh", "verdict", "mde")
