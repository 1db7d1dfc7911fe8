"""Every command README.md and docs/ show runs as shown after a small pipeline run (issue #33 part 5).

The small run is the repository itself, cloned, with both models of the default run pointed at a tiny local
model and `dvc repro` of the ingest stages and the CrowS-Pairs slice (scores, reports, the paired comparison),
committed as a team would commit a run.  Then each documented command is run in the clone, or set aside for a
stated reason (tests/documented_runs.py); `make docs-check` does the same on the default run after `make run`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from documented_runs import REASONS, run_documented, table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("STEREOLENS_DATA_MIRROR") or REPO.parent / "shared" / "data")
# the studies whose stages the small run runs
STUDIES = {"crows", "ingest", "prepare"}


def _run(root: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), cwd=root, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(argv)}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, tiny_causal_lm_dir) -> tuple[Path, dict[str, str]]:
    if not (MIRROR / "crows_pairs").is_dir():
        pytest.skip(f"needs the public data mirror ({MIRROR}): the ingest stages read it")
    root = tmp_path_factory.mktemp("small-run") / "stereolens"
    subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True)
    env = {**{k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "DVC_ROOT")},
           "STEREOLENS_DATA_MIRROR": str(MIRROR), "STEREOLENS_CACHE_DIR": str(root / "cache"),
           "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org",
           # the stages' `stereolens` command is this interpreter's
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(root / "src"), *sys.path])}
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    tiny = {"kind": "causal", "backend": "hf", "revision": None, "dtype": "float32", "device": "cpu",
            "name": str(tiny_causal_lm_dir)}
    # the default run's model ids, so that the documented per-model paths are the ones written
    params["models"] = {model_id: {"id": model_id, **tiny} for model_id in params["model_ids"]}
    params["model"] = params["models"][params["model_ids"][0]]
    params["study"]["crows"]["sample"] = 60
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True, sort_keys=False), encoding="utf-8")
    # a run of this slice alone: the committed lock's entries for the other stages name outputs this clone lacks
    (root / "dvc.lock").unlink()
    _run(root, env, sys.executable, "-m", "dvc", "repro", "-q", "ingest", "crows_report", "crows_paired")
    _run(root, env, "git", "add", "-A", "params.yaml", "dvc.lock")
    _run(root, env, "git", "commit", "-q", "-m", "the small run")
    _run(root, env, "git", "checkout", "-q", "-B", "main")  # docs/running.md compares with main
    return root, env


def test_every_documented_command_runs_as_shown_or_is_set_aside_for_a_stated_reason(small_run):
    root, env = small_run
    outcomes = run_documented(root, env, studies=STUDIES)
    report = table(outcomes)
    print(report)
    assert not [o.command for o in outcomes if o.failed], report
    assert all(o.ran or o.reason.startswith(REASONS) for o in outcomes)
    ran = {o.command for o in outcomes if o.ran}
    # what the small run must let through: the reading commands on the crows outputs and MLflow runs, the
    # reproduction check of a stage (`reproduce --against HEAD` checks every stage: `make docs-check` runs it
    # after `make run`), DVC's comparison views, planning and composing
    for expected in ("stereolens compare --paired --study crows", "stereolens profile --csv profile.csv",
                     "stereolens lineage reports/crows/gemma3-270m/summary.json", "stereolens power --dataset crows [--json]",
                     "stereolens reproduce --against main --stage crows_score --json",
                     "dvc status", "dvc metrics diff HEAD", "dvc exp show --only-changed", "stereolens config compose",
                     "stereolens plan --study leakage language=hi --json"):
        assert expected in ran, f"{expected!r} was not run:\n{report}"
    assert len(ran) >= 30, report
