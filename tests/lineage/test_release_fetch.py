"""Releases of a per-model layout, and releases an auditor elsewhere can fetch byte for byte (issue #33, part 5).

* Every study's release declaration (conf/study/*/release/default.yaml) names paths the pipeline writes:
  each pattern matches an output dvc.yaml declares (``foreach`` expanded over params.yaml's models) or a
  git-tracked file.  ``release.pcs`` named ``data/interim/pcs/scores.csv`` after the outputs had moved to
  ``data/interim/pcs/<model_id>/``, so `stereolens release pcs` failed after every complete run.
* On a real git + DVC repository with a per-model pipeline (tests/dvc_sandbox.py) and a directory remote:
  glob patterns take every model and a pattern matching nothing is refused naming it; FETCH.json records
  the revision, the remote and per path whether that revision holds the released bytes; the ``dvc get``
  commands it lists, run from another folder with the repository's cache deleted (so the bytes come from
  the remote), give files whose sha256 are the release's SHA256SUMS.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import dvc_sandbox as sandbox
from stereolens.errors import ConfigError
from stereolens.io import sha256_file
from stereolens.lineage.graph import load_stages
from stereolens.lineage.release import release

REPO = Path(__file__).resolve().parents[2]
DECLARATIONS = sorted(REPO.glob("conf/study/*/release/default.yaml"))


def _declared_patterns(path: Path) -> list[tuple[str, str]]:
    block = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = [("dataset", p) for p in block.get("dataset") or []]
    found += [("items", i["path"]) for i in block.get("items") or []]
    found += [(key, p) for key in ("gates", "agreement") for p in block.get(key) or []]
    return found


def _matches_an_output(pattern: str, outs: list[str]) -> bool:
    """``pattern`` names a declared output, or a file inside a declared output folder."""
    parts = pattern.split("/")
    for out in outs:
        depth = len(out.split("/"))
        if fnmatch.fnmatchcase(out, pattern) or (
                len(parts) > depth and fnmatch.fnmatchcase(out, "/".join(parts[:depth]))):
            return True
    return False


# a declared gate that no stage writes counts as a gate that did not run: the release is refused naming it (stereo
# has no gate suite yet, docs/lineage-and-release.md says so); every other pattern must name a written path
GATES_NOT_WRITTEN_YET = {"stereo": {"reports/quality/stereo__*.json"}}


@pytest.fixture(scope="module")
def declared_outs() -> list[str]:
    return [out.path for stage in load_stages(REPO) for out in stage.outs]


@pytest.mark.parametrize("declaration", DECLARATIONS, ids=[p.parts[-3] for p in DECLARATIONS])
def test_every_release_declaration_names_paths_the_pipeline_writes(declaration, declared_outs):
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "data/seed"], capture_output=True, text=True,
                             check=True).stdout.split()
    study = declaration.parts[-3]
    stale = [f"{key}: {pattern}" for key, pattern in _declared_patterns(declaration)
             if not (key == "gates" and pattern in GATES_NOT_WRITTEN_YET.get(study, ()))
             and not _matches_an_output(pattern, declared_outs)
             and not any(fnmatch.fnmatchcase(t, pattern) for t in tracked)]
    assert not stale, f"{declaration.relative_to(REPO)} names paths no stage writes: {stale}"


def test_the_pcs_release_takes_every_model_of_the_run(declared_outs):
    block = yaml.safe_load((REPO / "conf/study/pcs/release/default.yaml").read_text(encoding="utf-8"))
    model_ids = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))["model_ids"]
    scores = [p for p in block["dataset"] if p.endswith("scores.csv")]
    assert scores and all(any(fnmatch.fnmatchcase(f"data/interim/pcs/{m}/scores.csv", p) for p in scores)
                          for m in model_ids)


PER_MODEL = {"title": "Toy scores", "dataset": ["data/interim/toy/*/scores.csv"],
             "items": [{"path": "data/interim/toy/*/scores.csv", "id": ["item_id"]}], "gates": [], "agreement": [],
             "datasheet": {"motivation": "A test of fetchable releases."}}


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> tuple[Path, Path]:
    """A repository whose run is committed and pushed to a directory remote."""
    base = tmp_path_factory.mktemp("release_fetch")
    root = sandbox.make_repo(base / "repo")
    sandbox.run(root, "dvc", "repro", "-q")
    remote = base / "remote"
    sandbox.run(root, "dvc", "remote", "add", "-d", "store", str(remote))
    sandbox.run(root, "git", "add", "dvc.lock", ".dvc/config")
    sandbox.run(root, "git", "commit", "-q", "-m", "run")
    sandbox.run(root, "dvc", "push", "-q")
    return root, remote


def test_a_glob_takes_every_model_and_fetch_json_gets_the_exact_bytes(pushed, tmp_path):
    root, remote = pushed
    out = tmp_path / "release"
    result = release("toy", PER_MODEL, out, root=root)
    assert result["files"] == len(sandbox.MODELS) == 2
    fetch = json.loads((out / "FETCH.json").read_text(encoding="utf-8"))
    head = sandbox.run(root, "git", "rev-parse", "HEAD").stdout.strip()
    assert fetch["revision"] == head
    assert fetch["dvc_remote"] == {"name": "store", "url": str(remote)}
    assert [e["path"] for e in fetch["paths"]] == [f"data/interim/toy/{m}/scores.csv" for m in sorted(sandbox.MODELS)]
    assert all(e["at_revision"] and e["tracked_by"] == "dvc" for e in fetch["paths"])
    assert f"git revision `{head}`" in (out / "DATASHEET.md").read_text(encoding="utf-8")

    # the auditor: another folder, and no local cache to lean on
    shutil.rmtree(root / ".dvc" / "cache")
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    for command in fetch["get"]:
        done = sandbox.shell(auditor, command)
        assert done.returncode == 0, f"`{command}`:\n{done.stdout}\n{done.stderr}"
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    for entry in fetch["paths"]:
        assert sha256_file(auditor / entry["path"]) == sums[f"data/{entry['path']}"]
    sandbox.run(root, "dvc", "pull", "-q")  # the other tests of this module read the outputs through the cache


def test_an_uncommitted_rerun_is_marked_not_fetchable(pushed, tmp_path, capsys):
    root, _ = pushed
    params = root / "params.yaml"
    committed = params.read_text()
    try:
        params.write_text(committed.replace('"limit": 4', '"limit": 3'))
        sandbox.run(root, "dvc", "repro", "-q")
        release("toy", PER_MODEL, tmp_path / "release", root=root)
        fetch = json.loads((tmp_path / "release" / "FETCH.json").read_text(encoding="utf-8"))
        assert not any(e["at_revision"] for e in fetch["paths"])
        assert "the released bytes are not what revision" in capsys.readouterr().err
    finally:
        params.write_text(committed)
        sandbox.run(root, "git", "checkout", "-q", "dvc.lock")
        sandbox.run(root, "dvc", "checkout", "-q")


def test_a_pattern_that_matches_nothing_is_refused_naming_it(pushed, tmp_path):
    root, _ = pushed
    stale = {**PER_MODEL, "dataset": ["data/interim/toy/scores.csv"]}
    with pytest.raises(ConfigError, match=r"dataset: data/interim/toy/scores\.csv not found: run the study"):
        release("toy", stale, tmp_path / "release", root=root)
    stale_items = {**PER_MODEL, "items": [{"path": "data/interim/toy/scores.csv", "id": ["item_id"]}]}
    with pytest.raises(ConfigError, match=r"items: data/interim/toy/scores\.csv not found: run the study"):
        release("toy", stale_items, tmp_path / "release2", root=root)
    assert not (tmp_path / "release").exists() or not any((tmp_path / "release").iterdir())
