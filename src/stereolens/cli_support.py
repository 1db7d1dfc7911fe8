"""What the command modules share when they register their subcommands.

The top-level :mod:`stereolens.cli` imports every package's ``cli`` module to build
the parser; those modules import their shared argparse plumbing from here, never
from :mod:`stereolens.cli`, so the command line has no import cycle.
"""

from __future__ import annotations

import argparse


def get_or_create_subparser(
    subparsers: argparse._SubParsersAction, name: str, help: str | None = None
) -> argparse._SubParsersAction:
    """The action-level subparsers of command ``name``, creating the command on first use.

    Several modules may attach actions to one command (a study's own actions and,
    say, an engine's), so whichever module registers first creates ``name`` and the
    others reuse it.
    """
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, help=help)
    actions = getattr(parser, "_stereolens_actions", None)
    if actions is None:
        actions = parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")
        actions.required = True
        parser._stereolens_actions = actions  # type: ignore[attr-defined]
    return actions


def check_count(value: int, option: str, *, minimum: int) -> int:
    """Refuse, in one line naming the option, a count (resamples, samples) below ``minimum``."""
    if value < minimum:
        from stereolens.errors import ConfigError

        raise ConfigError(f"{option} must be an integer >= {minimum}, got {value}")
    return value
