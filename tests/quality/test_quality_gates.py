from __future__ import annotations

import json

import pandas as pd
import pytest

from stereolens.errors import GateFailed
from stereolens.quality.gates import Expectation, run_gate


def test_gate_passes_and_writes_report(tmp_path):
    df = pd.DataFrame({"alpha": [0.71], "n_items": [120]})
    result = run_gate(
        df, [Expectation("expect_column_min_to_be_between", column="alpha", min_value=0.67)],
        study="stereo", artefact="validated.csv", suite="agreement", report_dir=tmp_path,
    )
    assert result.success
    report = json.loads(result.report_path.read_text())
    assert report["success"] and report["results"][0]["observed_value"] == pytest.approx(0.71)


def test_gate_failure_names_study_artefact_expectation_value_threshold(tmp_path):
    df = pd.DataFrame({"alpha": [0.41]})
    with pytest.raises(GateFailed) as err:
        run_gate(
            df, [Expectation("expect_column_min_to_be_between", column="alpha", min_value=0.67)],
            study="stereo", artefact="data/interim/stereo/validated.csv", suite="agreement", report_dir=tmp_path,
        )
    message = str(err.value)
    for fragment in ("[stereo]", "data/interim/stereo/validated.csv", "expect_column_min_to_be_between", "0.41", "min_value=0.67"):
        assert fragment in message
    assert json.loads((tmp_path / "stereo__agreement.json").read_text())["success"] is False


def test_gate_report_carries_metadata_without_replacing_its_own_keys(tmp_path):
    df = pd.DataFrame({"alpha": [0.71]})
    expectations = [Expectation("expect_column_min_to_be_between", column="alpha", min_value=0.67)]
    result = run_gate(df, expectations, study="stereo", artefact="v.csv", suite="agreement", report_dir=tmp_path,
                      metadata={"source": "human", "round": 2})
    report = json.loads(result.report_path.read_text())
    assert report["source"] == "human" and report["round"] == 2 and report["study"] == "stereo"
    with pytest.raises(ValueError, match=r"cannot replace report key\(s\) \['success'\]"):
        run_gate(df, expectations, study="stereo", artefact="v.csv", suite="agreement", report_dir=tmp_path,
                 metadata={"success": True})


@pytest.mark.parametrize("name, bound", [("expect_column_min_to_be_between", {"min_value": 0.67}),
                                         ("expect_column_max_to_be_between", {"max_value": 0.95})])
def test_undefined_statistic_fails_as_undefined(tmp_path, name, bound):
    df = pd.DataFrame({"alpha": [float("nan")], "n_items": [12]})
    with pytest.raises(GateFailed) as err:
        run_gate(df, [Expectation(name, column="alpha", **bound),
                      Expectation("expect_column_min_to_be_between", column="n_items", min_value=10)],
                 study="stereo", artefact="v.csv", suite="agreement", report_dir=tmp_path)
    assert f"{name} on column 'alpha' observed undefined (NaN" in str(err.value)
    report = json.loads((tmp_path / "stereo__agreement.json").read_text())
    assert [r["success"] for r in report["results"]] == [False, True]
    assert report["results"][0]["observed_value"] == "undefined"


def test_unknown_expectation_is_a_one_line_config_error(tmp_path):
    from stereolens.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stereo/v.csv: unknown Great Expectations expectation 'expect_alpha_to_be_nice'"):
        run_gate(pd.DataFrame({"alpha": [0.7]}), [Expectation("expect_alpha_to_be_nice", column="alpha")],
                 study="stereo", artefact="v.csv", suite="agreement", report_dir=tmp_path)
