"""Issue 32's conclusions as the report reads them: a study's paired comparisons (reports/<study>/paired.json),
a model's robustness block, and ``stereolens compare --paired`` in the terminal.  The files are written here
as the contract (docs/report.md) says a study writes them; the expected texts are written by hand."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.cli import main
from stereolens.errors import DataError
from stereolens.report.comparisons import paired_text, read_paired, read_robustness
from stereolens.stats import paired as paired_stats

A, B = "gemma3-270m", "smollm2-135m"


def _comparison(cell: str, verdict: str, **numbers) -> dict:
    base = {"model_a": A, "model_b": B, "cell": cell, "n": 100, "estimate_a": 0.6, "estimate_b": 0.5,
            "difference": 0.1, "ci_low": 0.02, "ci_high": 0.18, "p_value": 0.01, "p_holm": 0.03, "p_bh": 0.02,
            "significant_holm": True, "significant_bh": True, "verdict": verdict, "mde": 0.08}
    return {**base, **numbers}


def _write(reports: Path, study: str, document) -> Path:
    path = reports / study / "paired.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    return path


@pytest.fixture()
def reports(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    _write(root, "crows", {
        "study": "crows", "models": [A, B], "test": "McNemar's exact test on the pairs both models scored",
        "family": "the nine bias types (overall outside it)",
        "comparisons": [
            _comparison("age", "no difference detected", difference=0.011, ci_low=-0.05, ci_high=0.071, p_value=0.7,
                        p_holm=1.0, p_bh=0.85, significant_holm=False, significant_bh=False),
            # the words stats/paired.py writes for the same verdict are read as the contract's
            _comparison("gender", paired_stats.B_MORE, estimate_a=0.52, estimate_b=0.61, difference=-0.09,
                        ci_low=-0.14, ci_high=-0.04, p_value=0.0004, p_holm=0.0036, p_bh=0.0036, mde=0.05),
            _comparison("disability", "cannot be decided at this n", n=4, difference=0.0, ci_low=-0.4, ci_high=0.4,
                        p_value=None, p_holm=None, p_bh=None, significant_holm=None, significant_bh=None, mde=None),
        ]})
    # leakage compares coefficients: plain numbers, not shares
    _write(root, "leakage", {"study": "leakage", "models": [A, B], "test": "difference of coefficients",
                             "family": "the edges", "comparisons": [
                                 _comparison("EN->HI", "model_a more", estimate_a=0.0218, estimate_b=0.004,
                                             difference=0.0178, ci_low=0.0012, ci_high=0.0344, mde=0.016)]})
    _write(root, "heads", {"study": "heads", "models": [A], "comparisons": [],
                           "reason": "heads measures the primary model only"})
    return root


def test_a_studys_comparisons_are_grouped_by_verdict(reports):
    paired = read_paired(reports, "crows")
    assert paired.models == [A, B] and paired.test.startswith("McNemar")
    grouped = paired.grouped()
    assert [c.cell for c in grouped["differ"]] == ["gender"]
    assert [c.cell for c in grouped["no difference"]] == ["age"]
    assert [c.cell for c in grouped["undecidable"]] == ["disability"]
    gender = grouped["differ"][0]
    assert gender.verdict == "model_b more" and gender.verdict_words() == f"{B} higher"
    # bias scores are shares: 52.0% and 61.0%, their difference in percentage points with its interval
    assert gender.unit == "share" and gender.estimates() == ("52.0%", "61.0%")
    assert gender.difference_text() == "-9.0 pp [-14.0, -4.0]" and gender.mde_text() == "5.0 pp"
    assert paired.counts_text() == ("significant differences: 1; no difference detected: 1; "
                                    "cannot be decided at this n: 1")


def test_units_plain_numbers_and_a_declared_unit(reports):
    edge = read_paired(reports, "leakage").comparisons[0]
    assert edge.unit == "" and edge.estimates() == ("0.0218", "0.004")
    assert edge.difference_text() == "0.0178 [0.0012, 0.0344]"
    doc = json.loads((reports / "leakage" / "paired.json").read_text())
    _write(reports, "stereo", {**doc, "study": "stereo", "unit": "percent",
                               "comparisons": [_comparison("Spain", "model_a more", estimate_a=61.0, estimate_b=55.5,
                                                           difference=5.5, ci_low=1.0, ci_high=10.0)]})
    spain = read_paired(reports, "stereo").comparisons[0]
    assert spain.estimates() == ("61.0%", "55.5%") and spain.difference_text() == "5.5 pp [1.0, 10.0]"


def test_absent_and_empty_comparisons(reports):
    assert read_paired(reports, "pairs") is None
    assert paired_text(None, "pairs") == "pairs: paired comparisons not computed (no reports/pairs/paired.json)"
    heads = read_paired(reports, "heads")
    assert heads.comparisons == [] and paired_text(heads, "heads") == (
        f"heads: paired comparisons between {A}\n  no comparison: heads measures the primary model only")


def test_compare_paired_prints_the_comparisons_in_the_terminal(reports, capsys):
    assert main(["compare", "--paired", "--study", "crows", "--reports", str(reports)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"crows: paired comparisons between {A}, {B}"
    assert lines[3] == "  significant differences: 1; no difference detected: 1; cannot be decided at this n: 1"
    header, *rows = [line.split("  ") for line in lines[4:]]
    cells = [[v.strip() for v in row if v.strip()] for row in rows]
    # differences first, then no difference, then undecidable; numbers as the report writes them
    assert cells[0] == ["gender", f"{A} vs {B}", "100", "52.0%", "61.0%", "-9.0 pp [-14.0, -4.0]", "0.0004",
                        "0.0036", "0.0036", f"{B} higher", "5.0 pp"]
    assert cells[1][0] == "age" and cells[2] == ["disability", f"{A} vs {B}", "4", "60.0%", "50.0%",
                                                 "0.0 pp [-40.0, 40.0]", "n/a", "n/a", "n/a",
                                                 "cannot be decided at this n", "n/a"]
    assert main(["compare", "--paired", "--study", "pairs", "--reports", str(reports)]) == 0
    assert "not computed" in capsys.readouterr().out


def test_compare_paired_csv_keeps_numbers_as_numbers(reports, capsys):
    assert main(["compare", "--paired", "--csv", "--study", "crows", "--reports", str(reports)]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table["cell"]) == ["gender", "age", "disability"]
    assert table.loc[0, "difference"] == -0.09 and table.loc[0, "p_holm"] == 0.0036
    assert list(table["group"]) == ["significant differences", "no difference detected", "cannot be decided at this n"]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[]", "must be a JSON object with 'comparisons'"),
    (json.dumps({"comparisons": {"age": 1}}), "'comparisons' must be a list of objects"),
    (json.dumps({"comparisons": [_comparison("age", "A wins")]}), "comparison 0: verdict 'A wins' is not one of"),
    (json.dumps({"comparisons": [_comparison("age", "model_a more", p_value="0.01")]}),
     "comparison 0: 'p_value' must be a number or null"),
    (json.dumps({"comparisons": [{**_comparison("age", "model_a more"), "model_b": ""}]}),
     "comparison 0: 'model_b' must be a non-empty string"),
    (json.dumps({"unit": "permille", "comparisons": [_comparison("age", "model_a more")]}), "'unit' must be one of"),
])
def test_a_broken_paired_file_is_one_line_naming_it(reports, capsys, content, message):
    path = _write(reports, "crows", content)
    with pytest.raises(DataError, match="comparison|JSON|unit"):
        read_paired(reports, "crows")
    assert main(["compare", "--paired", "--study", "crows", "--reports", str(reports)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and str(path) in err and message in err and captured.out == ""


def test_compare_paired_refuses_mlflow_options_and_a_missing_folder(reports, tmp_path, capsys):
    assert main(["compare", "--paired", "--study", "crows", "--reports", str(reports), "--by-model"]) == 2
    assert "do not apply" in capsys.readouterr().err
    assert main(["compare", "--paired", "--study", "crows", "--reports", str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_robustness_block(tmp_path):
    reports = tmp_path / "reports"
    folder = reports / "crows" / A
    found = read_robustness({"robustness": {"headline_decision": "stereotypical sentence preferred", "survives": 3,
                                            "of": 4, "not_run": 1, "table": "robustness.csv"}}, folder, reports)
    assert found.words() == "survives 3 of 4 (1 not run)" and found.table == f"crows/{A}/robustness.csv"
    assert "headline decision: stereotypical sentence preferred" in found.detail()
    assert read_robustness({}, folder, reports) is None
    for block, message in (({"survives": 5, "of": 4}, "exceeds"), ({"survives": "3", "of": 4}, "must be a count"),
                           ([1], "must be an object")):
        with pytest.raises(DataError, match=message):
            read_robustness({"robustness": block}, folder, reports)
