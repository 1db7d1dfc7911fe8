"""MLflow runs: name, params, metrics, artifacts, dataset input with the file's md5; the run schema."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from stereolens.io import md5_file
from stereolens.tracking import RunSchemaError, declare_run, stage_run
from stereolens.tracking.mlflow_run import param_value

REPORT_RUN = declare_run("test_tracking", "report", params=("model",),
                         metrics=("bias_score", "skipped", "bias_score.{bias_type}"))
SCORE_RUN = declare_run("test_tracking", "score", metrics=("x",))
QUEUED_RUN = declare_run("test_tracking", "queued", metrics=("bias_score",))


def test_a_config_mapping_is_one_param_whatever_its_inner_keys():
    assert param_value({"id": "x", "dims": [1, 2], "source": None}) == '{"dims":[1,2],"id":"x","source":null}'
    assert param_value("gemma") == "gemma" and param_value(0.5) == "0.5"


def test_templates_expand_over_the_axes_given():
    assert REPORT_RUN.metric_names({"bias_type": ["age", "gender"]}) == {
        "bias_score", "skipped", "bias_score.age", "bias_score.gender"}
    with pytest.raises(RunSchemaError, match="axes"):
        REPORT_RUN.metric_names({})


def test_an_undeclared_metric_or_param_is_refused():
    with pytest.raises(RunSchemaError, match=r"metric\(s\) \['y'\] not declared"):
        with stage_run({"enabled": False}, SCORE_RUN) as run:
            run.log_metrics({"x": 1.0, "y": 2.0})
    with pytest.raises(RunSchemaError, match="params keys"):
        with stage_run({"enabled": False}, SCORE_RUN, params={"seed": 0}):
            pass


def test_a_declared_metric_left_out_is_refused_and_none_keeps_the_key():
    with pytest.raises(RunSchemaError, match=r"\['x'\] were not logged"):
        with stage_run({"enabled": False}, SCORE_RUN):
            pass
    with stage_run({"enabled": False}, SCORE_RUN) as run:
        run.log_metrics({"x": None})
    assert run.logged_metrics == {"x"}


def test_a_schema_may_not_declare_the_params_every_run_carries():
    with pytest.raises(RunSchemaError, match=r"params \['language'\] are logged for every run"):
        declare_run("test_tracking", "reserved", params=("language", "study"))


def test_a_schema_not_declared_is_refused():
    from stereolens.tracking import RunSchema

    with pytest.raises(RunSchemaError, match="not the one declared"):
        with stage_run({"enabled": False}, RunSchema("test_tracking", "other", metrics=("x",))):
            pass
    with pytest.raises(RunSchemaError, match="declared twice"):
        declare_run("test_tracking", "score", metrics=("x", "z"))


def test_stage_run_records_everything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "scores.csv"
    pd.DataFrame({"id": ["a", "b"], "score": [0.1, 0.2]}).to_csv(table, index=False)
    cfg = {"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
           "experiment": "stereolens-test"}
    with stage_run(cfg, REPORT_RUN, model="tiny", language="en", axes={"bias_type": ["age"]},
                   params={"model": {"id": "tiny"}}, annotation_source="simulated",
                   scoring_model={"id": "tiny", "dtype": "bfloat16", "reduced_precision": "emulate"}) as run:
        run.log_metrics({"bias_score": 0.6, "skipped": None, "bias_score.age": 0.5})
        run.log_artifact(table)
        run.log_dataset(table, name="crows_scores")
        run_id = run.run_id

    import mlflow

    mlflow.set_tracking_uri("sqlite:///mlruns/mlflow.db")
    got = mlflow.get_run(run_id)
    assert got.info.run_name == "test_tracking/report/tiny/en"
    # model, language and the scoring precision as params too: the UI's compare view plots params, not tags
    assert got.data.params == {"model": '{"id":"tiny"}', "model_id": "tiny", "language": "en", "precision": "bfloat16"}
    assert got.data.tags["model"] == "tiny" and got.data.tags["language"] == "en"
    assert got.data.metrics["bias_score"] == 0.6
    # a value that does not exist is NaN in the store: the key is there, so runs line up
    assert math.isnan(got.data.metrics["skipped"])
    assert got.data.tags["annotation_source"] == "simulated"
    (dataset_input,) = got.inputs.dataset_inputs
    assert dataset_input.dataset.name == "crows_scores"
    assert dataset_input.dataset.digest == md5_file(table)[:36]
    artifacts = mlflow.artifacts.list_artifacts(run_id=run_id)
    assert [a.path for a in artifacts] == ["scores.csv"]


def test_disabled_tracking_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with stage_run({"enabled": False}, SCORE_RUN) as run:
        run.log_metrics({"x": 1.0})
        assert run.run_id is None
    assert not (tmp_path / "mlruns").exists()


def test_dataset_digest_follows_the_file_not_a_stale_lock(tmp_path, monkeypatch):
    """A stage run by hand after its input changed must not log the md5 an old dvc.lock recorded."""
    from stereolens.tracking.mlflow_run import dvc_md5

    monkeypatch.chdir(tmp_path)
    table = tmp_path / "scores.csv"
    table.write_text("id,score\na,1\n", encoding="utf-8")
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  s:\n    outs:\n    - path: scores.csv\n      md5: 00000000000000000000000000000000\n"
        "    - path: tables\n      md5: 11111111111111111111111111111111.dir\n",
        encoding="utf-8",
    )
    (tmp_path / "tables").mkdir()
    assert dvc_md5("scores.csv") == md5_file(table)
    # directories carry DVC's own ``.dir`` digest, which only the lock knows
    assert dvc_md5("tables") == "11111111111111111111111111111111.dir"
    assert dvc_md5("missing.csv") == ""


def test_queued_experiment_logs_into_the_project_store_not_its_temporary_copy(tmp_path, monkeypatch):
    """`dvc queue start` runs a stage in `.dvc/tmp/exps/<run>/` with DVC_ROOT = the project:
    the relative default store and artifact location must resolve in the project."""
    import mlflow

    project = tmp_path / "project"
    copy = project / ".dvc" / "tmp" / "exps" / "run" / "tmpabc"
    copy.mkdir(parents=True)
    monkeypatch.chdir(copy)
    monkeypatch.setenv("DVC_ROOT", str(project))
    table = copy / "scores.csv"
    table.write_text("id,score\na,1\n", encoding="utf-8")
    cfg = {"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
           "experiment": "stereolens-queue"}
    with stage_run(cfg, QUEUED_RUN, model="tiny", language="en") as run:
        run.log_metrics({"bias_score": 0.5})
        run.log_artifact(table)
        run_id = run.run_id

    assert (project / "mlruns" / "mlflow.db").is_file()
    assert not (copy / "mlruns").exists()
    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    assert mlflow.get_run(run_id).data.metrics["bias_score"] == 0.5
    assert (project / "mlruns" / "artifacts").is_dir()


def test_response_cache_of_a_queued_experiment_is_the_projects(tmp_path, monkeypatch):
    from stereolens.models.cache import ResponseCache
    from stereolens.stages.common import model_cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STEREOLENS_CACHE_DIR", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert ResponseCache().root == model_cache_dir() == Path("cache/models")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "project"))
    assert ResponseCache().root == model_cache_dir() == tmp_path / "project" / "cache" / "models"
    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "shared"))
    assert ResponseCache().root == tmp_path / "shared"
