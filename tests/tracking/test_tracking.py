"""MLflow runs: name, flattened params, metrics, artifacts, dataset input with the file's md5."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from stereolens.io import md5_file
from stereolens.tracking import flatten_params, stage_run


def test_flatten_params():
    assert flatten_params({"model": {"id": "x", "dims": [1, 2]}, "seed": 0}) == {
        "model.id": "x", "model.dims": "[1, 2]", "seed": "0",
    }


def test_stage_run_records_everything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "scores.csv"
    pd.DataFrame({"id": ["a", "b"], "score": [0.1, 0.2]}).to_csv(table, index=False)
    cfg = {"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
           "experiment": "stereolens-test"}
    with stage_run(cfg, study="crows", stage="report", model="tiny", language="en",
                   params={"model": {"id": "tiny"}}, annotation_source="simulated") as run:
        run.log_metrics({"bias_score": 0.6, "skipped": None})
        run.log_artifact(table)
        run.log_dataset(table, name="crows_scores")
        run_id = run.run_id

    import mlflow

    mlflow.set_tracking_uri("sqlite:///mlruns/mlflow.db")
    got = mlflow.get_run(run_id)
    assert got.info.run_name == "crows/report/tiny/en"
    assert got.data.params["model.id"] == "tiny"
    assert got.data.metrics["bias_score"] == 0.6
    assert got.data.tags["annotation_source"] == "simulated"
    (dataset_input,) = got.inputs.dataset_inputs
    assert dataset_input.dataset.name == "crows_scores"
    assert dataset_input.dataset.digest == md5_file(table)[:36]
    artifacts = mlflow.artifacts.list_artifacts(run_id=run_id)
    assert [a.path for a in artifacts] == ["scores.csv"]


def test_disabled_tracking_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with stage_run({"enabled": False}, study="crows", stage="score") as run:
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
    with stage_run(cfg, study="crows", stage="report", model="tiny", language="en") as run:
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
