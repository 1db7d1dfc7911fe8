"""What a stage does first when DVC runs it: refuse bad params before any output is lost.

DVC removes a stage's outputs before its command runs, and ``dvc repro -s STAGE`` runs no upstream stage, so
neither a check inside the stage nor a checking stage upstream can save an earlier run's outputs from a
hand-edited ``params.yaml`` with a bad value.  A stage whose outputs are declared ``persist: true`` keeps
them through DVC's start; :func:`check_then_clear` then checks the params the stage declares against their
typed schemas and, only when they pass, removes those outputs itself, as DVC would have, so that nothing stale
survives a good run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from stereolens.errors import ConfigError


def check_then_clear(stage_address: str, root: str | os.PathLike) -> None:
    """Check the params ``stage_address`` (DVC's ``$DVC_STAGE``) declares, then remove its persisted outputs."""
    if not _declares_persisted_outputs(Path(root) / "dvc.yaml", stage_address):
        return  # nothing DVC kept for us to clear; the stage's load_params checks its keys (and opening the
        #         repository costs about a second per stage)
    from dvc.dependency.param import ParamsDependency
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    from stereolens.config.schema import check_config
    from stereolens.stages.common import read_params_file

    repo = None
    try:
        repo = Repo(str(root))
        (stage,) = repo.stage.collect(stage_address)
    except DvcException:
        if repo is not None:
            repo.close()
        # a workspace DVC will not read back from inside (a queued experiment's temporary copy): the stage's
        # own load_params still checks its keys, but outputs marked persist are then not cleared first
        return
    with repo:
        wdir = Path(stage.wdir)  # dvc.yaml paths are relative to the stage's working directory
        for dep in stage.deps:
            if isinstance(dep, ParamsDependency):
                path = wdir / dep.def_path
                if not path.exists():
                    raise ConfigError(f"params file not found: {path} (run `stereolens config compose`)")
                check_config(read_params_file(path), keys=list(dep.params), where=f" in {path}")
        persisted = [wdir / out.def_path for out in stage.outs if out.persist]
    for path in persisted:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _declares_persisted_outputs(dvc_yaml: Path, stage_address: str) -> bool:
    """Whether the stage (a foreach/matrix member by its base name) marks any output ``persist``; unreadable
    pipelines answer yes, so that DVC's own reading decides."""
    import yaml

    try:
        stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return True
    block = stages.get(stage_address.split("@", 1)[0])
    if not isinstance(block, dict):
        return True
    outs = block.get("do", block).get("outs") or []
    return any(isinstance(out, dict) and any(isinstance(v, dict) and v.get("persist") for v in out.values())
               for out in outs)
