"""Two MLflow writers on one SQLite store (issue #17 item 5): both complete, every run recorded."""

from __future__ import annotations

import multiprocessing
import os

import pytest


def _write_runs(root: str, worker: int, n: int) -> None:
    os.chdir(root)
    from stereolens.tracking import declare_run, stage_run

    schema = declare_run("crows", "test_concurrent", params=("worker", "i", "nested"),
                         metrics=("value", *(f"m{k}" for k in range(20))))
    tracking = {"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db",
                "artifact_location": "mlruns/artifacts", "experiment": "concurrent"}
    for i in range(n):
        with stage_run(tracking, schema, model=f"w{worker}", language=f"l{i}",
                       params={"worker": worker, "i": i, "nested": {"a": list(range(20))}}) as run:
            run.log_metrics({"value": worker * 100 + i, **{f"m{k}": k for k in range(20)}})


@pytest.mark.slow
def test_two_writers_on_one_sqlite_store_both_complete(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_write_runs, args=(str(tmp_path), w, 8)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    assert [w.exitcode for w in workers] == [0, 0]

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["concurrent"], output_format="list")
    assert sorted(r.data.metrics["value"] for r in runs) == sorted(w * 100 + i for w in range(2) for i in range(8))


def test_sqlite_uri_gets_a_busy_timeout():
    from stereolens.tracking.mlflow_run import sqlite_with_busy_timeout

    assert sqlite_with_busy_timeout("sqlite:///mlruns/mlflow.db") == "sqlite:///mlruns/mlflow.db?timeout=120"
    assert sqlite_with_busy_timeout("sqlite:///x.db?timeout=5") == "sqlite:///x.db?timeout=5"
    assert sqlite_with_busy_timeout("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
