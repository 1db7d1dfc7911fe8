"""One PCS whichever way it is computed (issue #18): the CLI and the stage agree on the same file."""

from __future__ import annotations

import json

import pandas as pd
import yaml

from stereolens.cli import main
from stereolens.io import fixed_precision, write_csv
from stereolens.studies.pcs.analysis import DEFAULT_MIN_GAIN_STEPS

# cell (language, scenario, feature) -> A, B, C; the 0.04 gap is below the default minimum gain, the 0.5 gap above it
CELLS = {("hi", "s1", "deference"): (2.0, 2.04, 3.0), ("hi", "s2", "directness"): (3.0, 5.0, 4.0),
         ("ur", "s1", "deference"): (2.0, 4.0, 3.5), ("ur", "s2", "directness"): (4.0, 4.5, 4.25)}


def scores() -> pd.DataFrame:
    rows = []
    for (lang, sid, feat), abc in CELLS.items():
        for cond, value in zip("ABC", abc):
            for judge in ("j1", "j2"):
                rows.append(dict(model="m", language=lang, scenario_id=sid, dimension="PDI", feature=feat,
                                 condition=cond, judge=judge, sample=0, score=value))
    return pd.DataFrame(rows)


def test_default_min_gain_is_the_configured_one(repo_root):
    for name in ("default", "paper"):
        conf = yaml.safe_load((repo_root / f"conf/study/pcs/{name}.yaml").read_text(encoding="utf-8"))
        assert conf["analysis"]["min_gain_steps"] == DEFAULT_MIN_GAIN_STEPS, name
    params = yaml.safe_load((repo_root / "params.yaml").read_text(encoding="utf-8"))
    assert params["study"]["pcs"]["analysis"]["min_gain_steps"] == DEFAULT_MIN_GAIN_STEPS


def test_cli_and_stage_give_the_same_summary_on_the_same_file(tmp_path, analyze_stage):
    write_csv(tmp_path / "data/interim/pcs/m/scores.csv", scores())
    assert main(["stage", "pcs-analyze"]) == 0
    assert main(["pcs", "analyze", "--scores", "data/interim/pcs/m/scores.csv", "--output", "cli",
                 "--rubrics", "/nonexistent-but-not-default.yaml"]) == 2  # a named rubrics file must exist
    assert main(["pcs", "analyze", "--scores", "data/interim/pcs/m/scores.csv", "--output", "cli"]) == 0
    stage = json.loads((tmp_path / "reports/pcs/m/summary.json").read_text())
    cli = json.loads((tmp_path / "cli/summary.json").read_text())
    # the stage also knows the judge gates' outcome (gates.json); the CLI has no gates to report
    assert stage["headline"].pop("judge gates") == "passed" and cli["headline"].pop("judge gates") == "not run"
    # the stage also reads the run's paired comparisons (absent here: its one model is never compared)
    assert stage.pop("paired")["reason"].startswith("no paired comparison file") and "paired" not in cli
    assert cli == stage
    # known answer: the hi/s1 cell (gap 0.04) is excluded; PCS = mean(0.5, 0.75, 0.5)
    assert stage["n_excluded"] == 1
    assert stage["pcs"] == fixed_precision((0.5 + 0.75 + 0.5) / 3)  # as written: seven significant digits
