"""Two experiments through DVC's queue, run two at a time, both recorded in MLflow (issue #17 item 5).

A temporary git + DVC repository holds one real stereolens stage, ``crows_score``
on a tiny local masked LM (committed to the repository, as a prepared model is
tracked by the pipeline), with MLflow tracking into one SQLite store outside the
repository.  Two experiments that differ in ``study.crows.limit`` are queued with
``dvc exp run --queue -S`` and run by ``dvc queue start --jobs 2``: DVC copies the
repository into two temporary workspaces and runs the stage in both at once, so
both stage processes write the same SQLite store at the same time.  Both must
succeed, each with the scores its limit asks for, and each must be one finished
MLflow run (no "database is locked").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LIMITS = (20, 30)


def dvc(root: Path, *args: str, env: dict[str, str], timeout: float = 120) -> str:
    # output to a file, not a pipe: `dvc queue start` leaves daemon workers holding its stdout,
    # and reading a pipe to its end would wait for them
    log = root.parent / "dvc.out"
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=env, stdin=subprocess.DEVNULL,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert done.returncode == 0, f"dvc {' '.join(args)}: {text}"
    return text


def git(root: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def make_repo(root: Path, model_dir: Path, store: Path) -> None:
    import tiny_models

    shutil.copytree(model_dir, root / "models/tiny")
    subjects, traits = tiny_models.SUBJECTS, tiny_models.TRAITS
    combos = [(s, t, u) for s in subjects for t in traits for u in traits if t != u][:max(LIMITS)]
    raw = root / "data/raw/crows_pairs"
    raw.mkdir(parents=True)
    pd.DataFrame({
        "sent_more": [f"The {s} were {t} and {u}." for s, t, u in combos],
        "sent_less": [f"The {subjects[(subjects.index(s) + 1) % len(subjects)]} were {t} and {u}." for s, t, u in combos],
        "stereo_antistereo": ["stereo"] * len(combos), "bias_type": ["socioeconomic"] * len(combos),
    }).to_csv(raw / "crows_pairs_anonymized.csv")
    params = {
        "model": {"id": "tiny", "name": "models/tiny", "kind": "masked"},
        "metric": {"name": "pll", "batch_tokens": 256, "truncate": False},
        "language": {"include": None}, "seed": 0,
        # one store for every experiment workspace: an absolute path outside the repository
        "tracking": {"enabled": True, "tracking_uri": f"sqlite:///{store}/mlflow.db",
                     "artifact_location": str(store / "artifacts"), "experiment": "queue"},
        "study": {"crows": {"dataset": "crows_pairs", "limit": 10, "bootstrap_resamples": 10}},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    stage = {
        # the interpreter running the tests, so the queue's workers use this environment's stereolens
        "cmd": f"{sys.executable} -m stereolens stage crows-score",
        "deps": ["data/raw/crows_pairs", "models/tiny"],
        "params": ["model", "metric", "study.crows.dataset", "study.crows.limit", "tracking", "language"],
        "outs": ["data/processed/crows/tiny/scores.csv", "data/processed/crows/tiny/scoring.json"],
    }
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"crows_score": stage}}), encoding="utf-8")


@pytest.mark.slow
def test_two_queued_experiments_run_two_at_a_time_and_both_reach_mlflow(tmp_path, tiny_masked_lm_dir):
    root, store = tmp_path / "repo", tmp_path / "store"
    root.mkdir()
    store.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "STEREOLENS_CACHE_DIR": str(tmp_path / "cache"),
           "DVC_NO_ANALYTICS": "1", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
           "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.org",
           "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.org"}
    git(root, "init", "-q", env=env)
    dvc(root, "init", "-q", env=env)
    make_repo(root, tiny_masked_lm_dir, store)
    git(root, "add", "-A", env=env)
    git(root, "commit", "-q", "-m", "one stage", env=env)

    for limit in LIMITS:
        dvc(root, "exp", "run", "--queue", "-S", f"study.crows.limit={limit}", "--name", f"limit-{limit}", env=env)
    dvc(root, "queue", "start", "--jobs", "2", env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            status = dvc(root, "queue", "status", env=env)
            # rows read "TASK NAME CREATED STATUS", CREATED being a time like "11:25 AM"
            states = [line.split()[-1] for line in status.splitlines()
                      if line.split()[1:2] in ([f"limit-{n}"] for n in LIMITS)]
            if len(states) == 2 and all(s in ("Success", "Failed") for s in states):
                break
            time.sleep(5)  # each `dvc queue status` costs a second of CPU the two runs need
    finally:
        # the queue's workers are daemons: never leave them behind a failed or timed-out test
        subprocess.run([sys.executable, "-m", "dvc", "queue", "stop", "--kill"], cwd=root, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    assert states == ["Success", "Success"], status + _worker_logs(root)

    # each experiment's own result: its git ref's dvc.lock names its limit and its scores in the DVC cache
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], cwd=root, env=env,
                          capture_output=True, text=True, check=True).stdout.split()
    assert sorted(ref.rsplit("/", 1)[-1] for ref in refs) == [f"limit-{n}" for n in LIMITS]
    for ref in refs:
        lock = yaml.safe_load(subprocess.run(["git", "show", f"{ref}:dvc.lock"], cwd=root, env=env,
                                             capture_output=True, text=True, check=True).stdout)
        stage = lock["stages"]["crows_score"]
        limit = stage["params"]["params.yaml"]["study.crows.limit"]
        md5 = next(o["md5"] for o in stage["outs"] if o["path"].endswith("scores.csv"))
        scores = pd.read_csv(root / ".dvc/cache/files/md5" / md5[:2] / md5[2:])
        assert ref.endswith(f"limit-{limit}") and len(scores) == limit
        assert scores[["score_stereo", "score_anti"]].notna().all().all()

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{store}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["queue"], output_format="list")
    # a config mapping is one param, its compact JSON (the run schemas' rule)
    assert sorted(json.loads(r.data.params["study"])["limit"] for r in runs) == list(LIMITS)
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.metrics["pairs"] for r in runs) == list(LIMITS)
    # inside DVC's temporary workspaces too, each run's inputs are its stage's data deps from dvc.yaml
    # (beside the table the stage logs itself, by its dataset name)
    assert [sorted(d.dataset.name for d in r.inputs.dataset_inputs) for r in runs] == [
        ["crows_pairs", "data/raw/crows_pairs"]] * 2
    # the two stage runs overlapped in time: the store really had two writers at once
    (first, second) = sorted(runs, key=lambda r: r.info.start_time)
    assert second.info.start_time < first.info.end_time, "the queue ran the experiments one after the other"


def _worker_logs(root: Path) -> str:
    logs = sorted((root / ".dvc/tmp/exps").rglob("*.out")) if (root / ".dvc/tmp/exps").exists() else []
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in logs)
