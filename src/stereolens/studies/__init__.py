"""The studies: one package per published method, each built on the shared engines.

A study is a folder here holding everything specific to it (construction,
its own scoring, analysis, report, the DVC stage functions in ``stages.py``
and, optionally, command-line actions in ``cli.py`` exposing
``register(subparsers)``) and a ``README.md``.  Folders are discovered, so
adding a study needs no edit here; the README's layout section has the recipe.
"""

from __future__ import annotations

import importlib.util
import pkgutil
from pathlib import Path

_HERE = Path(__file__).parent


def study_names() -> list[str]:
    """Every study package, sorted: the folders here that hold a ``stages.py``."""
    return sorted(
        info.name for info in pkgutil.iter_modules([str(_HERE)])
        if info.ispkg and (_HERE / info.name / "stages.py").is_file()
    )


def study_modules(kind: str) -> list[str]:
    """The importable ``stereolens.studies.<study>.<kind>`` modules (``stages`` or ``cli``)."""
    return [
        f"{__name__}.{name}.{kind}" for name in study_names()
        if importlib.util.find_spec(f"{__name__}.{name}.{kind}") is not None
    ]
