"""``dvc repro -s STAGE`` with a bad value in params.yaml refuses before any earlier output is lost (issue 22).

DVC removes a stage's outputs before its command runs and ``-s`` runs no upstream stage; the stages whose
outputs are ``persist: true`` keep them until :mod:`stereolens.stages.guard` has checked the params."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from config_edit import with_value

from stereolens.stages.guard import check_then_clear

REPO = Path(__file__).resolve().parents[2]


def _repo(tmp: Path, key: str, value) -> None:
    """A DVC repository with this dvc.yaml, params.yaml with ``key`` set to ``value``."""
    shutil.copy(REPO / "dvc.yaml", tmp / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params = with_value(params, key, value)
    (tmp / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    shutil.copytree(REPO / "data/seed/stereo", tmp / "data/seed/stereo")
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp, check=True)


def _outs(tmp: Path, stage: str) -> list[Path]:
    """The stage's outputs; its file deps are written as placeholders (DVC hashes deps before it runs a stage)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(tmp)) as repo:
        (collected,) = repo.stage.collect(stage)
        deps = [tmp / d.def_path for d in collected.deps if not isinstance(d, ParamsDependency)]
        outs = [tmp / out.def_path for out in collected.outs]
    for dep in deps:
        if not dep.exists():
            target = dep if dep.suffix else dep / "placeholder.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("a placeholder input\n", encoding="utf-8")
    return outs


def _write_earlier(paths: list[Path]) -> dict[str, str]:
    for path in paths:
        target = path / "earlier.txt" if not path.suffix else path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"an earlier run's {target.name}\n", encoding="utf-8")
    return _digest(paths)


def _digest(paths) -> dict[str, str]:
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*")))]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.is_file()}


CASES = [
    ("heads_probe", "study.heads.probe.pooling", "middle", "study.heads.probe.pooling must be one of"),
    ("pairs_pairs", "study.pairs.contrast.caste.Bamon", "Nobody", "study.pairs.contrast.caste.Bamon: contrast"),
    ("stereo_overlap", "study.stereo.overlap.similarity.threshold", 7,
     "study.stereo.overlap.similarity.threshold must be a number in [0, 1]"),
]


@pytest.mark.parametrize("stage, key, value, message", CASES, ids=[c[0] for c in CASES])
def test_repro_single_stage_with_a_bad_value_keeps_earlier_outputs(tmp_path, stage, key, value, message):
    _repo(tmp_path, key, value)
    outs = _outs(tmp_path, stage)
    before = _write_earlier(outs)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("DVC_STAGE", None)
    done = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", stage], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode != 0, done
    errors = [line for line in done.stderr.splitlines() if line.startswith("stereolens: error: ")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert _digest(outs) == before


def test_good_params_clear_the_persisted_outputs_as_dvc_would(tmp_path, monkeypatch):
    _repo(tmp_path, "study.heads.probe.pooling", "mean")
    outs = _outs(tmp_path, "heads_probe")
    _write_earlier(outs)
    monkeypatch.chdir(tmp_path)
    check_then_clear("heads_probe", tmp_path)
    assert not any(p.exists() for p in outs)
