"""The pcs report page's judge-gate table, drawn by the one markdown renderer (report/markdown.py)."""

from __future__ import annotations

from stereolens.studies.pcs.report import report_markdown

GATES = {"enforced": False, "all_passed": False, "gates": {
    "construct_validity": {"observed": 0.4583333, "threshold": 0.8, "passed": False},
    "inter_judge_alpha": {"observed": None, "threshold": 0.667, "passed": None},  # one judge: no alpha
    "calibration_accuracy": {"observed": 1.0, "threshold": 0.9, "passed": True},
}}


def _page(gates):
    return report_markdown(configuration={}, summary={}, statistics={}, gates=gates, tables={}, validity=None,
                           figures=[]).splitlines()


def test_gate_table_rows_verdicts_and_missing_figure():
    lines = _page(GATES)
    start = lines.index("| gate | observed | threshold | passed |")
    assert lines[start:start + 8] == [
        "| gate | observed | threshold | passed |",
        "|---|---|---|---|",
        "| construct_validity | 0.458 | 0.8 | **NO** |",
        "| inter_judge_alpha | n/a | 0.667 | not applicable |",
        "| calibration_accuracy | 1 | 0.9 | yes |",
        "",
        "**At least one gate did not pass: the numbers below are not validated measurements.**",
        "",
    ]
    assert lines[start - 2].startswith("Gates are reported, not enforced")


def test_passing_gates_table_is_followed_by_one_blank_line_and_the_headline():
    passing = {"enforced": True, "all_passed": True,
               "gates": {"construct_validity": {"observed": 0.91, "threshold": 0.8, "passed": True}}}
    lines = _page(passing)
    row = lines.index("| construct_validity | 0.91 | 0.8 | yes |")
    assert lines[row + 1:row + 3] == ["", "## Headline"]
