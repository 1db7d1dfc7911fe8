"""Names a person understands for the identifiers the pipeline writes: quality gates (Great Expectations
suites and expectations, the pcs judge panel's gates) and the measures they check.

A gate report names its suite (``annotation_quality``), its expectations
(``expect_column_min_to_be_between``) and the column each one checks (``fleiss_kappa``); the report
site and the profile show them as ``annotation quality: Fleiss' kappa at least 0.4 (observed 0.31)``.
An identifier this module does not know is shown with its underscores as spaces, never as the raw id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stereolens.report.markdown import format_cell

# the gate suites the stages write (quality/gates.py run_gate's ``suite``), and pcs' gates.json
GATE_SUITES = {
    "annotation_quality": "annotation quality (agreement and coverage of the judgements)",
    "leakage_human_reproduces_published": "human matrices reproduce the published ones",
    "leakage_human_judgements_qc": "human judgements pass quality control",
    "pcs_judge_panel": "judge panel (Great Expectations check)",
    # a study's own gates.json (pcs: the judge panel's construct validity, agreement and calibration)
    "gates": "quality gates (gates.json)",
}

# what each checked column measures
MEASURES = {
    "fleiss_kappa": "Fleiss' kappa",
    "krippendorff_alpha": "Krippendorff's alpha",
    "cohen_kappa": "Cohen's kappa",
    "raw_agreement": "raw agreement",
    "min_annotations_per_item": "fewest annotations on an item",
    "min_annotations_per_group": "fewest annotators on a group",
    "failing_annotator_share": "share of annotators failing quality control",
    "top_label_share": "share of the most frequent label",
    "max_abs_diff": "largest difference from the published matrix",
    "missing_mismatch": "cells missing in one matrix only",
    "n_groups_kept": "groups kept",
    "construct_validity": "construct validity",
    "inter_judge_alpha": "inter-judge agreement (Krippendorff's alpha)",
    "calibration_accuracy": "calibration accuracy",
}

# Great Expectations expectation ids: how the check reads before its column's words
_STATISTIC = {"min": "smallest", "max": "largest", "mean": "mean", "median": "median", "sum": "sum",
              "stdev": "standard deviation"}


def _words(identifier: Any) -> str:
    return str(identifier).replace("_", " ").strip()


def gate_name(suite: Any) -> str:
    """A gate suite in words (``annotation_quality`` -> ``annotation quality (...)``)."""
    return GATE_SUITES.get(str(suite), _words(suite))


def measure_name(column: Any) -> str:
    """A checked column in words (``fleiss_kappa`` -> ``Fleiss' kappa``)."""
    return MEASURES.get(str(column), _words(column))


def _bounds(low: Any, high: Any) -> str:
    if low is not None and high is not None:
        return f"between {format_cell(low)} and {format_cell(high)}" if low != high else f"exactly {format_cell(low)}"
    if low is not None:
        return f"at least {format_cell(low)}"
    if high is not None:
        return f"at most {format_cell(high)}"
    return "checked"


def _observed(value: Any) -> str:
    if isinstance(value, Mapping):
        count = value.get("unexpected_count")
        return f"{format_cell(count)} value(s) outside" if count is not None else "see the gate report"
    if value == "undefined":
        return "undefined (could not be computed)"
    return format_cell(value)


def expectation_words(result: Mapping[str, Any]) -> str:
    """One row of a Great Expectations gate report (``expectation``, ``kwargs``, ``observed_value``) in words:
    ``Fleiss' kappa at least 0.4 (observed 0.31)``."""
    name = str(result.get("expectation", ""))
    kwargs = result.get("kwargs") or {}
    column = kwargs.get("column")
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    statistic = name.removeprefix("expect_column_").removesuffix("_to_be_between")
    if column is not None and statistic in _STATISTIC:
        subject = measure_name(column)
        # a one-row summary's min and max are its value: "the smallest" of one number reads oddly
        subject = subject if statistic in ("min", "max") else f"{_STATISTIC[statistic]} of {subject}"
        check = f"{subject} {_bounds(low, high)}"
    elif column is not None and name == "expect_column_values_to_be_between":
        check = f"every {measure_name(column)} {_bounds(low, high)}"
    elif column is not None and name == "expect_column_values_to_not_be_null":
        check = f"no {measure_name(column)} missing"
    elif column is not None:
        check = f"{measure_name(column)}: {_words(name.removeprefix('expect_column_'))}"
    else:
        check = _words(name.removeprefix("expect_"))
    observed = result.get("observed_value")
    return check + (f" (observed {_observed(observed)})" if "observed_value" in result else "")


def panel_gate_words(name: Any, gate: Mapping[str, Any]) -> str:
    """One gate of pcs' ``gates.json`` (``observed``, ``threshold``) in words:
    ``construct validity at least 0.8 (observed 0.458)``."""
    threshold = gate.get("threshold")
    check = measure_name(name) + (f" at least {format_cell(threshold)}" if threshold is not None else "")
    observed = gate.get("observed")
    return check + (f" (observed {format_cell(observed)})" if "observed" in gate else "")


def _float32_prefix(block: dict[str, Any]) -> str:
    k = block.get("float32_prefix_targets")  # absent from summaries written before it existed
    return f" (by a causal model, its first {k} tokens in float32)" if k else ""


# the report paragraph of a study scored under model.verify (scoring/verified.py writes the block): here, so a
# report stage does not import the scoring engine to word it
def precision_lines(block: dict[str, Any] | None, what: str) -> list[str]:
    """The report paragraph of a study scored under ``model.verify`` (``block``: :meth:`Verified.summary`),
    ``what`` naming its groups ("pairs", "instances"); nothing for a run in one precision."""
    if not block:
        return []
    return [
        f"Precision ({block['mode']}, our choice: `model.verify`): every {what[:-1]} was scored in "
        f"{block['mode'].split(',')[0]}{_float32_prefix(block)}; {block['groups_fp32']} of {block['groups']} {what} "
        "carry float32 scores "
        f"({block['calibration_groups']} measured the {block['mode'].split(',')[0]} error, "
        f"{block['groups_rescored_near_boundary']} were within its bound of a decision: "
        f"{block['safety_factor']:g} x {block['error_rate_per_token']:.3g} nats per token), the rest are labelled "
        f"{block['mode'].split(',')[0]} in the `precision` column. Every decision is float32's wherever no margin "
        "errs by more than the safety factor times the sample's largest error "
        "(docs/methods.md, \"Decision-exact reduced precision\").", ""]
