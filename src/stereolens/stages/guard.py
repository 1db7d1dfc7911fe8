"""A stage run by DVC that refuses or fails leaves the workspace as the last good run left it.

DVC removes a stage's outputs before its command runs, and ``dvc repro -s STAGE`` runs no upstream stage, so no
check, inside the stage or in a checking stage upstream, can come before that removal: a hand-edited
``params.yaml`` with a bad value, or a broken input, would cost the earlier run's outputs. Two mechanisms close
that gap, one per kind of output:

* cached outputs (all but the converted models): what DVC removed is still in its cache under the hashes
  ``dvc.lock`` records for the stage, so when the stage refuses or fails, :func:`restore_earlier_outputs`
  checks exactly those outputs out again. Nothing runs on the success path, and DVC's run-cache keeps working
  (``persist: true`` would turn it off for the stage).
* uncached outputs (``models/<id>``, derived from a pinned package and not worth a second copy) cannot be
  restored, so ``dvc.yaml`` marks them ``persist: true`` and :func:`check_then_clear` checks the params the
  stage declares and only then removes them, as DVC would have.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from stereolens.errors import ConfigError


def restore_earlier_outputs(stage_address: str, root: str | os.PathLike) -> list[str]:
    """Check the cached outputs ``dvc.lock`` records for ``stage_address`` out of DVC's cache; return them.

    Called after the stage failed, while ``dvc repro`` still holds its lock: reading the pipeline and checking
    outputs out of the cache takes no lock. An output the lock does not record (the stage never ran) or whose
    cache entry is gone is left as it is.
    """
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    restored: list[str] = []
    try:
        with Repo(str(root)) as repo:
            (stage,) = repo.stage.collect(stage_address)
            for out in stage.outs:
                if not out.use_cache or not out.hash_info:
                    continue
                try:
                    out.checkout(force=True)
                except DvcException:
                    continue  # not in the cache (gc'd, or never committed): nothing to put back
                restored.append(out.def_path)
    except DvcException:
        # a workspace DVC will not read from inside (a queued experiment's temporary copy): `dvc checkout`
        # there restores by hand
        return restored
    return restored


def check_then_clear(stage_address: str, root: str | os.PathLike) -> None:
    """Check the params ``stage_address`` (DVC's ``$DVC_STAGE``) declares, then remove its persisted outputs."""
    if not _declares_persisted_outputs(Path(root) / "dvc.yaml", stage_address):
        return  # nothing DVC kept for us to clear (and opening the repository costs about a second per stage)
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


def run_guarded(stage_address: str, root: str | os.PathLike, run):
    """``run()`` as DVC's stage ``stage_address``: persisted outputs cleared only after the params pass, and
    the earlier outputs put back when the stage refuses, fails or is interrupted."""
    try:
        check_then_clear(stage_address, root)
        return run()
    except BaseException:
        from stereolens.stages.signals import signals_held

        try:
            with signals_held():
                restore_earlier_outputs(stage_address, root)
        except Exception as exc:  # the stage's own error is the one to report; say what could not be undone
            print(f"stereolens: warning: could not restore {stage_address}'s earlier outputs ({exc}); "
                  "`dvc checkout` restores them", file=sys.stderr)
        raise


def _declares_persisted_outputs(dvc_yaml: Path, stage_address: str) -> bool:
    """Whether the stage marks any output ``persist``; unreadable pipelines answer yes, so that DVC's own
    reading decides."""
    from stereolens.stages.common import stage_block

    block = stage_block(dvc_yaml, stage_address)
    if block is None:
        return True
    return any(isinstance(out, dict) and any(isinstance(v, dict) and v.get("persist") for v in out.values())
               for out in block.get("outs") or [])
