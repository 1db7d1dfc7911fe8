"""``stereolens stage NAME``: the commands ``dvc.yaml`` runs."""

from __future__ import annotations

import argparse
import importlib
import os

from stereolens.stages.registry import STAGES
from stereolens.studies import study_modules

# Modules whose import registers stages (see stereolens.stages.registry): the shared
# foundation, then every study's ``stages.py``.
STAGE_MODULES: list[str] = ["stereolens.stages.foundation", *study_modules("stages"), "stereolens.report.stages"]


def register(subparsers: argparse._SubParsersAction) -> None:
    for name in STAGE_MODULES:
        importlib.import_module(name)
    parser = subparsers.add_parser("stage", help="run one DVC pipeline stage (dvc.yaml calls these)")
    sub = parser.add_subparsers(dest="stage_name", metavar="STAGE")
    sub.required = True
    for name in sorted(STAGES):
        definition = STAGES[name]
        stage_parser = sub.add_parser(name, help=definition.help)
        stage_parser.add_argument("--params", default="params.yaml", help="composed parameters (default: params.yaml)")
        if definition.per_model:
            stage_parser.add_argument(
                "--model", default=None, metavar="ID",
                help="the model to measure: a key of `models` in the params (default: the primary `model`)")
        if definition.configure:
            definition.configure(stage_parser)
        stage_parser.set_defaults(func=lambda args, f=definition.func, n=name: _run_stage(n, f, args))


def _run_stage(name: str, func, args: argparse.Namespace) -> int:
    """Run one stage with its name and options known to tracking, so that its MLflow runs log the data deps
    dvc.yaml declares for it as their inputs."""
    from stereolens.tracking.mlflow_run import invoked_stage

    def run() -> int:
        from stereolens.tracking.store import check_stage_server

        # a tracking server that does not answer is refused before the stage writes anything (under DVC, the
        # guard then puts back the outputs DVC removed), not after it replaced its outputs
        check_stage_server(args.params)
        with invoked_stage(name, vars(args)):
            return func(args) or 0

    from stereolens.stages.signals import stop_on_signals

    under_dvc = bool(os.environ.get("DVC_STAGE") and os.environ.get("DVC_ROOT"))
    # SIGINT and SIGTERM stop the stage within seconds, and under DVC so does DVC's death (stages.signals)
    with stop_on_signals(with_parent=under_dvc):
        # under `dvc repro`, a stage that refuses, fails or is stopped leaves the earlier run's outputs in place
        # (stages.guard)
        if under_dvc:
            from stereolens.stages.guard import run_guarded

            return run_guarded(os.environ["DVC_STAGE"], os.environ["DVC_ROOT"], run)
        return run()
