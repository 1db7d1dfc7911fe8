"""``stereolens stage NAME``: the commands ``dvc.yaml`` runs."""

from __future__ import annotations

import argparse
import importlib

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
        if definition.configure:
            definition.configure(stage_parser)
        stage_parser.set_defaults(func=lambda args, f=definition.func: f(args) or 0)
