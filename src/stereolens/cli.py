"""The ``stereolens`` command.

Each package contributes its subcommands through a ``register(subparsers)``
function in its own ``cli`` module, listed in :data:`COMMAND_MODULES`; this
module only builds the parser and turns user errors into one line.  It imports
every command module, so none of them imports it back: what they share is in
:mod:`stereolens.cli_support`.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from stereolens.errors import StereolensError
from stereolens.studies import study_modules

# Each module exposes ``register(subparsers)``; a subcommand sets ``func`` via
# ``parser.set_defaults(func=...)`` taking the parsed ``argparse.Namespace``.
# The shared engines' commands first, then every study's ``cli.py`` (discovered).
COMMAND_MODULES: list[str] = [
    "stereolens.config.cli",
    "stereolens.annotation.cli",
    "stereolens.scoring.cli",
    "stereolens.models.cli",
    "stereolens.tracking.cli",
    "stereolens.lineage.cli",
    "stereolens.report.cli",
    "stereolens.stats.cli",
    *study_modules("cli"),
    "stereolens.stages.cli",
]


# `stereolens stage NAME` is what DVC runs, about 70 times a default run: its parser alone spares each stage's
# start the other commands' imports (scipy.stats among them, 1.2 s of a 1.6 s start)
STAGE_COMMAND = "stage"
STAGE_MODULE = "stereolens.stages.cli"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or, for ``command == "stage"``, only what parsing a stage's arguments needs."""
    parser = argparse.ArgumentParser(prog="stereolens", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # the studies' answer scales, named by `annotation import --scale`
    for name in study_modules("scales"):
        importlib.import_module(name)
    for name in [STAGE_MODULE] if command == STAGE_COMMAND else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _register_plan(sub)
    declare_study_param_types()
    return parser


def plan_requests(studies: list[str], overrides: list[str], config_dir: str = "conf") -> list[dict]:
    """Model requests each study's stages would issue for the config composed from ``overrides``.

    Each study that can be planned has ``plan.py`` with ``plan(config) -> rows``, built on the
    study's own enumeration code (the same item, query and prompt builders its stages call).
    """
    from stereolens.config.compose import compose_config
    from stereolens.errors import ConfigError

    declare_study_param_types()
    config = compose_config(overrides, config_dir=config_dir)
    plannable = {module.split(".")[-2]: module for module in study_modules("plan")}
    rows = []
    for study in studies:
        if study not in plannable:
            raise ConfigError(f"study {study!r} has no plan module (plannable: {', '.join(sorted(plannable))})")
        rows.extend(importlib.import_module(plannable[study]).plan(config))
    return rows


def _register_plan(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="count the model requests a study's stages would issue for a config")
    plan.add_argument("--study", action="append", required=True, help="study to plan (repeatable)")
    plan.add_argument("--json", action="store_true", help="print the rows as JSON")
    plan.add_argument("--config-dir", default="conf")
    plan.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. study/leakage=paper language=en")
    plan.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    import json

    rows = plan_requests(args.study, args.overrides, args.config_dir)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False) if rows else "no requests")
    return 0


def declare_study_param_types() -> None:
    """Each study's ``config.PARAM_TYPES`` (types of keys whose default is null) for `config compose`."""
    from stereolens.config.compose import declare_param_types

    for module in study_modules("config"):
        study = module.split(".")[-2]
        declare_param_types(f"study.{study}", getattr(importlib.import_module(module), "PARAM_TYPES", {}))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except StereolensError as exc:
        print(f"stereolens: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C, or a stage's SIGTERM (stages.signals): the shell's status for death by that signal
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"stereolens: interrupted ({signal.Signals(signum).name}); finished work is cached and the next run "
              "resumes", file=sys.stderr)
        return 128 + signum
    return int(result or 0)


def main_entry() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_entry()
