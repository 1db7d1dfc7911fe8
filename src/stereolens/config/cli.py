"""``stereolens config compose [overrides...]``."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser("config", help="compose conf/ into params.yaml")
    sub = config.add_subparsers(dest="config_command", metavar="ACTION")
    sub.required = True
    compose = sub.add_parser("compose", help="write params.yaml from conf/ and Hydra overrides")
    compose.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=mbert study.crows.limit=100")
    compose.add_argument("--config-dir", default="conf")
    compose.add_argument("--output", default="params.yaml")
    compose.add_argument("--print", action="store_true", help="print the composed YAML instead of writing it")
    compose.set_defaults(func=_compose)


def _compose(args: argparse.Namespace) -> int:
    from stereolens.config.compose import compose_config, sets_the_model, to_yaml, write_params

    if args.print:
        print(to_yaml(compose_config(args.overrides, config_dir=args.config_dir)), end="")
        return 0
    path = write_params(args.overrides, output=args.output, config_dir=args.config_dir)
    print(f"wrote {path}")
    if sets_the_model(args.overrides):
        import sys

        print("note: the model is a param of every measuring stage, so `dvc repro` now reruns all the studies; "
              "to run one, name its last stage (e.g. `dvc repro crows_report`)", file=sys.stderr)
    return 0
