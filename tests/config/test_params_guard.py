"""``dvc repro -s STAGE`` with a bad value in params.yaml refuses and loses no earlier output (issue 22).

DVC removes a stage's outputs before its command runs and ``-s`` runs no upstream stage. A stage that refuses
puts its earlier outputs back from DVC's cache (:func:`stereolens.stages.guard.restore_earlier_outputs`); the
converted models, which are not cached, are ``persist: true`` and cleared only after the params pass."""

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

from stereolens.stages.guard import check_then_clear, restore_earlier_outputs

REPO = Path(__file__).resolve().parents[2]


def _repo(tmp: Path, key: str, value) -> None:
    """A DVC repository with this dvc.yaml, params.yaml with ``key`` set to ``value``."""
    shutil.copy(REPO / "dvc.yaml", tmp / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    _write_params(tmp, with_value(params, key, value))
    shutil.copytree(REPO / "data/seed/stereo", tmp / "data/seed/stereo")
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp, check=True)


def _write_params(tmp: Path, params: dict) -> None:
    (tmp / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


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
    # one stage of every study, single stages and foreach / matrix members
    ("heads_probe", "study.heads.probe.pooling", "middle", "study.heads.probe.pooling must be one of"),
    ("pairs_pairs", "study.pairs.contrast.caste.Bamon", "Nobody", "study.pairs.contrast.caste.Bamon: contrast"),
    ("stereo_overlap", "study.stereo.overlap.similarity.threshold", 7,
     "study.stereo.overlap.similarity.threshold must be a number in [0, 1]"),
    ("crows_score@gemma3-270m", "study.crows.limit", -5, "study.crows.limit must be an integer >= 1"),
    ("pcs_collect@smollm2-135m", "study.pcs.collection.samples", 0,
     "study.pcs.collection.samples must be an integer >= 1"),
    ("leakage_fit@gemma3-270m-hi", "study.leakage.fit.missing", "cubed", "study.leakage.fit.missing must be one of"),
]


def _commit_earlier(tmp: Path, stage: str, env: dict[str, str]) -> dict[str, str]:
    """Outputs of an earlier good run of ``stage``, recorded in dvc.lock and DVC's cache as `dvc repro` would."""
    before = _write_earlier(_outs(tmp, stage))
    subprocess.run([sys.executable, "-m", "dvc", "commit", "-f", "-q", stage], cwd=tmp, env=env, check=True)
    return before


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("DVC_STAGE", None)
    return env


@pytest.mark.parametrize("stage, key, value, message", CASES, ids=[c[0] for c in CASES])
def test_repro_single_stage_with_a_bad_value_keeps_earlier_outputs(tmp_path, stage, key, value, message):
    committed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    _repo(tmp_path, key, _value(committed, key))
    env = _env()
    before = _commit_earlier(tmp_path, stage, env)
    _write_params(tmp_path, with_value(committed, key, value))
    done = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", stage], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode != 0, done
    errors = [line for line in done.stderr.splitlines() if line.startswith("stereolens: error: ")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr and "warning" not in done.stderr, done.stderr
    assert _digest(_outs(tmp_path, stage)) == before


def test_a_model_refused_before_its_uncached_conversion_is_cleared(tmp_path):
    """models/<id> is not in DVC's cache: a bad model value is refused while the earlier conversion is kept."""
    committed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    _repo(tmp_path, "models.gemma3-270m.kind", "causal")
    outs = _outs(tmp_path, "prepare_model@gemma3-270m")
    before = _write_earlier(outs)
    _write_params(tmp_path, with_value(committed, "models.gemma3-270m.kind", "oracle"))
    done = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", "prepare_model@gemma3-270m"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode != 0, done
    errors = [line for line in done.stderr.splitlines() if line.startswith("stereolens: error: ")]
    assert len(errors) == 1 and "models.gemma3-270m.kind must be one of" in errors[0], done.stderr
    assert _digest(outs) == before


def test_restore_puts_back_only_what_the_lock_records(tmp_path, monkeypatch):
    """The restore checks out the committed outputs, byte for byte, and nothing the lock does not name."""
    _repo(tmp_path, "study.heads.probe.pooling", "mean")
    before = _commit_earlier(tmp_path, "heads_probe", _env())
    outs = _outs(tmp_path, "heads_probe")
    for path in outs:
        path.unlink()
    stray = tmp_path / "data/processed/heads/stray.txt"
    stray.write_text("not an output\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    restored = restore_earlier_outputs("heads_probe", tmp_path)
    assert sorted(restored) == sorted(str(p.relative_to(tmp_path)) for p in outs)
    assert _digest(outs) == before and stray.exists()


def test_good_params_clear_the_persisted_outputs_as_dvc_would(tmp_path, monkeypatch):
    _repo(tmp_path, "models.gemma3-270m.kind", "causal")
    outs = _outs(tmp_path, "prepare_model@gemma3-270m")
    _write_earlier(outs)
    monkeypatch.chdir(tmp_path)
    check_then_clear("prepare_model@gemma3-270m", tmp_path)
    assert not any(p.exists() for p in outs)


def _value(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node
