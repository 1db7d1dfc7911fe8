"""The metrics a CrowS-Pairs run scores with, and the second masked-LM metric of the robustness pass (kept
apart from the scoring code, so the report and paired stages that read these names do not depend on it)."""

from __future__ import annotations

MASKED_METRICS = ("pll", "pll_word_l2r", "crows")
# the masked-LM metrics a robustness pass compares (AmchiBias' PLL-word-l2r against plain PLL)
ROBUSTNESS_METRICS = {"pll": "PLL", "pll_word_l2r": "PLL-word-l2r"}


def alternative_metrics(metric: str) -> list[str]:
    """The masked-LM metrics a robustness pass scores besides ``metric`` (none for a causal model)."""
    return [m for m in ROBUSTNESS_METRICS if m != metric] if metric in MASKED_METRICS else []


def alternative_columns(metric: str) -> tuple[str, str]:
    """Where a robustness pass stores the scores of ``metric`` beside the headline's (in scores.csv)."""
    return f"score_stereo_{metric}", f"score_anti_{metric}"
