"""The CrowS-Pairs slice end to end under `dvc repro`, with a tiny local model.

Runs the real pipeline file in a scratch repository: ingest (from the data
mirror), prepare_model, crows_score, crows_report; then checks the outputs,
the MLflow run, and that a second `dvc repro` does nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def scratch_pipeline(tmp_path_factory, tiny_causal_lm_dir, data_mirror):
    root = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "conf", "data/seed", "src", "hydra_plugins"):
        src = REPO / name
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "STEREOLENS_DATA_MIRROR": str(data_mirror),
           "STEREOLENS_CACHE_DIR": str(root / "cache"), "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    _run(["git", "init", "-q"], root, env)
    _run([sys.executable, "-m", "dvc", "init", "-q"], root, env)
    _run([sys.executable, "-m", "stereolens", "config", "compose", f"model.name={tiny_causal_lm_dir}",
          "model.id=tiny-causal", "model.source=null", "compare_with=[]", "study/crows=default", "study.crows.limit=40",
          "study.crows.bootstrap_resamples=200"], root, env)
    return root, env


def test_slice_runs_and_second_repro_is_a_no_op(scratch_pipeline):
    root, env = scratch_pipeline
    _run([sys.executable, "-m", "dvc", "repro", "crows_report"], root, env)

    summary = json.loads((root / "reports/crows/tiny-causal/summary.json").read_text())
    assert summary["n"] == 40 and summary["model"] == "tiny-causal" and summary["metric"] == "causal"
    # the interval is of the share the row tests, stereotypical wins among the untied pairs
    assert 0.0 <= summary["ci_low"] <= summary["share_untied"] <= summary["ci_high"] <= 1.0
    assert summary["bias_score"] == pytest.approx(summary["share_untied"] * (40 - summary["ties"]) / 40)
    assert "bias_score_rounded_3" in summary and "AmchiBias" in summary["corrections"]
    assert summary["corrections"] in (root / "reports/crows/tiny-causal/report.md").read_text()
    for ext in ("png", "svg"):
        assert (root / f"reports/crows/tiny-causal/bias_by_type.{ext}").stat().st_size > 0
    scoring = json.loads((root / "data/processed/crows/tiny-causal/scoring.json").read_text())
    assert scoring["pairs"] == 40

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["stereolens"], output_format="list")
    names = {r.info.run_name for r in runs}
    assert {"crows/score/tiny-causal/en", "crows/report/tiny-causal/en"} <= names
    report_run = next(r for r in runs if r.info.run_name == "crows/report/tiny-causal/en")
    assert report_run.data.metrics["bias_score"] == pytest.approx(summary["bias_score"])
    assert report_run.inputs.dataset_inputs, "the report run must record its input dataset"

    start = time.perf_counter()
    second = _run([sys.executable, "-m", "dvc", "repro", "crows_report"], root, env)
    elapsed = time.perf_counter() - start
    assert "didn't change, skipping" in second.stdout
    assert "Running stage" not in second.stdout
    assert elapsed < 15, f"up-to-date repro took {elapsed:.1f}s"

    # a forced rerun of the scoring stage is served entirely by the model cache and, the cache use being
    # a run fact (printed, logged to MLflow) rather than an output, writes the cold run's bytes
    outputs = [root / "data/processed/crows/tiny-causal" / name for name in ("scores.csv", "scoring.json")]
    cold = [p.read_bytes() for p in outputs]
    rerun = _run([sys.executable, "-m", "dvc", "repro", "-f", "-s", "crows_score@tiny-causal"], root, env)
    assert re.search(r"cache hits [1-9]\d*, misses 0\)", rerun.stdout), rerun.stdout
    assert [p.read_bytes() for p in outputs] == cold
    score_runs = mlflow.search_runs(experiment_names=["stereolens"], output_format="list",
                                    filter_string="attributes.run_name = 'crows/score/tiny-causal/en'")
    misses = sorted(r.data.metrics["cache_misses"] for r in score_runs)
    assert len(misses) == 2 and misses[0] == 0 < misses[1]


def test_failed_run_loses_nothing_dvc_checkout_cannot_restore(scratch_pipeline):
    """With params.yaml gone, `dvc repro` fails in one line; DVC has removed the stage's outputs
    by then, and `dvc checkout` (after params.yaml is back, as `git checkout params.yaml` does)
    restores every one of them byte-identical: no output is `cache: false` and uncommitted."""
    import hashlib

    root, env = scratch_pipeline
    _run([sys.executable, "-m", "dvc", "repro", "crows_report"], root, env)
    outputs = [p for folder in ("reports/crows", "data/processed/crows") for p in sorted((root / folder).rglob("*"))
               if p.is_file() and p.name != ".gitignore"]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in outputs}
    assert root / "reports/crows/tiny-causal/summary.json" in before
    params = (root / "params.yaml").read_bytes()
    (root / "params.yaml").unlink()
    failed = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", "crows_report"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0
    errors = [line for line in failed.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, failed.stderr
    (root / "params.yaml").write_bytes(params)
    _run([sys.executable, "-m", "dvc", "checkout", "--force", "crows_score@tiny-causal", "crows_report@tiny-causal"], root, env)
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in outputs}
    assert after == before


def test_lineage_and_report_of_the_slice(scratch_pipeline):
    """`stereolens lineage` of a report table names the real chain with dvc.lock's md5s, the params, the model,
    the ingested dataset's licence and commit, and the MLflow runs; the report stage builds the site from it."""
    from stereolens.io import md5_file
    from stereolens.lineage.trace import trace

    root, env = scratch_pipeline
    _run([sys.executable, "-m", "dvc", "repro", "crows_report"], root, env)
    info = trace(root / "reports/crows/tiny-causal/bias_by_type.csv", root=root)
    assert info["produced_by"] == "crows_report@tiny-causal" and info["up_to_date"] is True
    assert info["md5_recorded"] == md5_file(root / "reports/crows/tiny-causal/bias_by_type.csv")
    names = [s["name"] for s in info["stages"]]
    assert names[:2] == ["crows_report@tiny-causal", "crows_score@tiny-causal"] and "ingest@crows_pairs" in names
    score = info["stages"][1]
    assert score["params"]["study.crows.limit"] == 40
    scores_out = next(o for o in score["outs"] if o["path"] == "data/processed/crows/tiny-causal/scores.csv")
    assert scores_out["md5"] == md5_file(root / "data/processed/crows/tiny-causal/scores.csv")
    (ingested,) = info["ingested"]
    assert ingested["dataset"] == "crows_pairs" and ingested["license"] == "CC BY-SA 4.0" and ingested["upstream_commit"]
    model = next(m for m in info["models"] if m["stage"] == "crows_score@tiny-causal")
    assert model["id"] == "tiny-causal" and model["identities"], model
    runs = {r["run_name"] for r in info["mlflow_runs"]}
    assert {"crows/score/tiny-causal/en", "crows/report/tiny-causal/en"} <= runs

    _run([sys.executable, "-m", "stereolens", "stage", "report"], root, env)
    page = (root / "reports/site/crows@tiny-causal.html").read_text(encoding="utf-8")
    assert "bias_by_type.png" in page and "tiny-causal" in page
    assert "No report yet" in (root / "reports/site/pcs.html").read_text(encoding="utf-8")


def test_dvc_exp_run_composes_overrides_through_hydra(scratch_pipeline, tiny_causal_lm_dir):
    """`dvc exp run -S ...` rewrites params.yaml from conf/ with the overrides, then reruns what changed."""
    root, env = scratch_pipeline
    _run(["git", "add", "-A"], root, env)
    _run(["git", "commit", "-qm", "baseline"], root, env)
    _run([sys.executable, "-m", "dvc", "config", "hydra.enabled", "True"], root, env)
    overrides = [f"model.name={tiny_causal_lm_dir}", "model.id=tiny-causal", "model.source=null", "compare_with=[]",
                 "study.crows.limit=20", "study.crows.bootstrap_resamples=200"]
    cmd = [sys.executable, "-m", "dvc", "exp", "run", "crows_report"]
    for override in overrides:
        cmd += ["-S", override]
    _run(cmd, root, env)

    import yaml

    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["study"]["crows"]["limit"] == 20 and params["model"]["id"] == "tiny-causal"
    summary = json.loads((root / "reports/crows/tiny-causal/summary.json").read_text())
    assert summary["n"] == 20

    # a group choice (not just a key) goes through the same composition: tracking=disabled
    # reruns the stages that declare `tracking`, and they record no MLflow run
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    before = len(mlflow.search_runs(experiment_names=["stereolens"], output_format="list"))
    _run(cmd + ["-S", "tracking=disabled"], root, env)
    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["tracking"]["enabled"] is False and params["study"]["crows"]["limit"] == 20
    assert len(mlflow.search_runs(experiment_names=["stereolens"], output_format="list")) == before
