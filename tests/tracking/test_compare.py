"""`stereolens compare`: the table equals what the MLflow store holds; run names of one pipeline run are unique."""

from __future__ import annotations

import io
import subprocess
import sys

import pandas as pd
import pytest

from stereolens.tracking import declare_run, stage_run
from stereolens.tracking.compare import compare_runs
from stereolens.tracking.mlflow_run import run_name

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes several seconds

# the study names are the real ones (compare filters on them); the stages are this test's own
FIT_RUN = declare_run("leakage", "test_fit", params=("method",), metrics=("alpha_H_EN", "n_obs"))
REPORT_RUN = declare_run("crows", "test_report", metrics=("bias_score",))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # an absolute URI: MLflow caches one engine per URI string, so a relative one would follow the first test's cwd
    root = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{root}/mlruns/mlflow.db"
    (root / "mlruns").mkdir()
    cfg = {"enabled": True, "tracking_uri": uri, "artifact_location": str(root / "mlruns/artifacts"),
           "experiment": "stereolens"}
    ids = {}
    for model, lang, method, alpha in (("m1", "hi", "ilps", 0.1), ("m1", "hi", "choice", 0.2), ("m2", "hi", "ilps", 0.3)):
        with stage_run(cfg, FIT_RUN, model=model, language=lang, variant=method,
                       params={"method": method}) as run:
            run.log_metrics({"alpha_H_EN": alpha, "n_obs": 100})
            ids[(model, method)] = run.run_id
    # a rerun of one name: the newer run replaces the older in the table
    with stage_run(cfg, FIT_RUN, model="m2", language="hi", variant="ilps", params={"method": "ilps"}) as run:
        run.log_metrics({"alpha_H_EN": 0.35, "n_obs": 100})
        ids[("m2", "ilps")] = run.run_id
    with stage_run(cfg, REPORT_RUN, model="m1", language="en") as run:
        run.log_metrics({"bias_score": 0.6})
    return uri, ids


def test_the_compare_table_is_what_mlflow_holds(store):
    import mlflow

    uri, ids = store
    table = compare_runs("leakage", metric="alpha_H_EN", tracking_uri=uri)
    assert list(table["run_name"]) == ["leakage/test_fit/m1/hi/choice", "leakage/test_fit/m1/hi/ilps",
                                     "leakage/test_fit/m2/hi/ilps"]
    client = mlflow.tracking.MlflowClient(uri)
    for row in table.itertuples():
        assert row.run_id == ids[(row.model, row.variant)]
        assert row.alpha_H_EN == client.get_run(row.run_id).data.metrics["alpha_H_EN"]
    assert table.loc[table["run_name"] == "leakage/test_fit/m2/hi/ilps", "alpha_H_EN"].item() == 0.35
    assert len(compare_runs("leakage", all_runs=True, tracking_uri=uri)) == 4
    assert set(compare_runs("leakage", tracking_uri=uri).columns) >= {"alpha_H_EN", "n_obs"}


def test_compare_command_line_csv_equals_the_table(store):
    uri, _ = store
    proc = subprocess.run([sys.executable, "-m", "stereolens", "compare", "--study", "leakage", "--csv",
                           "--tracking-uri", uri], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = pd.read_csv(io.StringIO(proc.stdout), keep_default_na=False)
    expected = compare_runs("leakage", tracking_uri=uri)
    assert list(printed["run_id"]) == list(expected["run_id"])
    assert printed["alpha_H_EN"].tolist() == expected["alpha_H_EN"].tolist()


def test_queued_experiments_of_a_sweep_keep_a_row_each(tmp_path, monkeypatch):
    """`dvc queue start` runs every grid point under its DVC_EXP_NAME: equal run names, one row per experiment."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = {"enabled": True, "tracking_uri": uri, "artifact_location": str(tmp_path / "artifacts"), "experiment": "s"}
    for experiment, score in (("manky-luke", 0.64), ("cauld-ions", 0.5), ("cauld-ions", 0.55)):
        monkeypatch.setenv("DVC_EXP_NAME", experiment)
        with stage_run(cfg, REPORT_RUN, model="m1", language="en") as run:
            run.log_metrics({"bias_score": score})
    table = compare_runs("crows", tracking_uri=uri, experiment="s")
    assert table[["dvc_experiment", "bias_score"]].values.tolist() == [["cauld-ions", 0.55], ["manky-luke", 0.64]]


def test_an_unknown_study_is_one_clear_line(store):
    from stereolens.errors import ConfigError

    with pytest.raises(ConfigError, match="no MLflow runs with study 'nope'"):
        compare_runs("nope", tracking_uri=store[0])


def test_run_names_of_one_stage_differ_by_what_distinguishes_the_runs():
    # the ILPS and choice fits of one model and language were both "leakage/fit/<model>/<lang>"
    names = {run_name("leakage", "fit", "gemma3-270m", "hi", method) for method in ("ilps", "choice")}
    assert names == {"leakage/fit/gemma3-270m/hi/ilps", "leakage/fit/gemma3-270m/hi/choice"}
    assert run_name("crows", "report", "m", "en") == "crows/report/m/en"


def test_the_leakage_fit_stage_names_its_runs_by_method():
    import ast
    from pathlib import Path

    import stereolens.studies.leakage.stages as stages

    tree = ast.parse(Path(stages.__file__).read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "stage_run"
             and len(n.args) > 1 and getattr(n.args[1], "id", None) == "FIT_RUN"]
    assert calls and all(any(k.arg == "variant" for k in c.keywords) for c in calls)
