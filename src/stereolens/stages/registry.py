"""Registry of DVC stage entry points.

A stage module decorates plain functions::

    @stage("leakage-fit", help="fit the leakage regression", configure=lambda p: p.add_argument("--language"))
    def fit(args: argparse.Namespace) -> None:
        params = load_params("study.leakage", path=args.params)
        ...

and DVC runs it as ``stereolens stage leakage-fit --language hi``.  Every stage
gets ``--params`` (default ``params.yaml``); a stage registered with ``per_model=True`` (one that
measures a model) also gets ``--model ID``, a key of the composed ``models`` mapping, which
:func:`stereolens.stages.kit.stage_model` resolves.  Modules holding stages are listed
in :data:`stereolens.stages.cli.STAGE_MODULES`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StageDef:
    name: str
    func: Callable[[argparse.Namespace], object]
    help: str
    configure: Callable[[argparse.ArgumentParser], None] | None
    per_model: bool = False


STAGES: dict[str, StageDef] = {}


def stage(
    name: str, *, help: str = "", configure: Callable[[argparse.ArgumentParser], None] | None = None,
    per_model: bool = False,
) -> Callable[[Callable[[argparse.Namespace], object]], Callable[[argparse.Namespace], object]]:
    def register(func: Callable[[argparse.Namespace], object]) -> Callable[[argparse.Namespace], object]:
        if name in STAGES and STAGES[name].func is not func:
            raise RuntimeError(f"stage {name!r} registered twice")
        summary = (func.__doc__ or "").strip().split("\n", 1)[0]
        STAGES[name] = StageDef(name, func, help or summary, configure, per_model)
        return func

    return register
