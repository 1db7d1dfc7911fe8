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
