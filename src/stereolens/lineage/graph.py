"""The pipeline as DVC records it: every stage with its command, deps, outs and params.

Read through DVC's own Python API (``dvc.repo.Repo``), so ``foreach`` stages are
expanded exactly as ``dvc repro`` expands them and the md5s and params values
are the ones ``dvc.lock`` holds for the last run, not recomputed here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError


@dataclass(frozen=True)
class FileRecord:
    path: str  # relative to the repository root, as dvc.yaml spells it
    md5: str | None  # what dvc.lock recorded (".dir" suffix for directories); None before the first run


@dataclass
class StageRecord:
    name: str  # DVC's address, e.g. "leakage_fit@hi"
    cmd: str
    deps: list[FileRecord] = field(default_factory=list)
    outs: list[FileRecord] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)  # key -> value the lock recorded

    @property
    def study(self) -> str | None:
        """The study a stage belongs to by the layout's naming rule (``<study>_*``), or None."""
        base = self.name.split("@", 1)[0]
        return base.split("_", 1)[0] if "_" in base else None


def _norm(path: str) -> str:
    return os.path.normpath(path).replace(os.sep, "/")


def contains(parent: str, child: str) -> bool:
    """Whether ``child`` is ``parent`` or lies under it (paths as the repo spells them)."""
    parent, child = _norm(parent), _norm(child)
    return child == parent or child.startswith(parent.rstrip("/") + "/")


@contextlib.contextmanager
def _open_repo(root: str | os.PathLike) -> Iterator[tuple[Path, Any]]:
    """(the resolved root, DVC's ``Repo`` of it), closed afterwards; a missing dvc.yaml or a folder DVC cannot
    open is a :class:`ConfigError`."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    root = Path(root).resolve()
    if not (root / "dvc.yaml").exists():
        raise ConfigError(f"{root / 'dvc.yaml'} not found: run lineage from the repository root")
    try:
        repo = Repo(str(root))
    except DvcException as exc:
        raise ConfigError(f"{root}: not a DVC repository ({exc})") from exc
    try:
        yield root, repo
    finally:
        repo.close()


def load_stages(root: str | os.PathLike = ".") -> list[StageRecord]:
    """Every stage of ``root``'s ``dvc.yaml`` with the lock's md5s and params values."""
    records = []
    with _open_repo(root) as (_, repo):
        for dvc_stage in repo.index.stages:
            if not getattr(dvc_stage, "cmd", None):
                continue  # a `.dvc` file tracking data, not a pipeline stage
            record = StageRecord(name=dvc_stage.name, cmd=dvc_stage.cmd)
            for dep in dvc_stage.deps:
                if type(dep).__name__ == "ParamsDependency":
                    recorded = dep.hash_info.value if dep.hash_info else None
                    for key in dep.params:
                        record.params[key] = recorded.get(key) if isinstance(recorded, dict) else None
                    continue
                record.deps.append(FileRecord(_norm(str(dep.def_path)), _md5(dep)))
            for out in dvc_stage.outs:
                record.outs.append(FileRecord(_norm(str(out.def_path)), _md5(out)))
            records.append(record)
    return records


def declared_stages(root: str | os.PathLike = ".") -> list[tuple[str, str, list[str]]]:
    """Every stage of ``root``'s ``dvc.yaml`` as declared: name, command and dep paths, ``foreach`` expanded by
    DVC's own resolver.  Without the lock: parsing a 300 kB ``dvc.lock`` took 2 s of every stage's start, and a
    stage that only asks what it reads needs no md5 (:func:`load_stages` gives those)."""
    from dvc.dvcfile import ProjectFile

    with _open_repo(root) as (root, repo):
        resolved = ProjectFile(repo, str(root / "dvc.yaml")).resolver.resolve().get("stages", {})
    # a dep is a path, or a one-key mapping of the path to its options
    return [(name, stage["cmd"], [_norm(next(iter(dep)) if isinstance(dep, dict) else dep)
                                  for dep in stage.get("deps") or []])
            for name, stage in resolved.items() if stage.get("cmd")]


def _md5(entry) -> str | None:
    info = getattr(entry, "hash_info", None)
    return str(info.value) if info and info.value else None


def producer(stages: list[StageRecord], path: str) -> tuple[StageRecord, FileRecord] | None:
    """The stage whose output is ``path`` or a directory holding it."""
    for record in stages:
        for out in record.outs:
            if contains(out.path, path):
                return record, out
    return None


def producers_within(stages: list[StageRecord], path: str) -> list[tuple[StageRecord, FileRecord]]:
    """Stages whose outputs lie inside the directory ``path`` (a dep on a folder of several stages' outputs)."""
    return [(r, o) for r in stages for o in r.outs if contains(path, o.path) and _norm(path) != o.path]
