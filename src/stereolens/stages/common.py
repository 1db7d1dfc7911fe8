"""What every stage needs: its declared params, and the shared model cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from stereolens.errors import ConfigError


def load_params(*keys: str, path: str | os.PathLike = "params.yaml") -> dict[str, Any]:
    """Return ``{key: value}`` for dotted ``keys`` of the composed params file.

    Stages ask only for the keys they declare in ``dvc.yaml``, so a change to
    any other key never invalidates them.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"params file not found: {path} (run `stereolens config compose`)")
    with open(path, encoding="utf-8") as fh:
        params = yaml.safe_load(fh) or {}
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = params
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"params key {key!r} not found in {path}")
            node = node[part]
        out[key] = node
    return out


def executor_config(path: str | os.PathLike = "params.yaml") -> dict[str, Any] | None:
    """The ``executor`` section (``conf/executor/``) for stages that run model work.

    None (run locally) when the params file predates the section, so params files
    written by hand for one stage keep working; stages that read it declare
    ``executor`` in dvc.yaml like any other key.
    """
    try:
        return load_params("executor", path=path)["executor"]
    except ConfigError as exc:
        if "not found in" in str(exc) and Path(path).exists():
            return None
        raise


def languages_to_run(study_languages: list[str], language_cfg: dict[str, Any]) -> list[str]:
    """A study's languages, restricted by the ``language`` config group's ``include``."""
    include = language_cfg.get("include")
    if include is None:
        return list(study_languages)
    return [lang for lang in study_languages if lang in set(include)]


def model_cache_dir() -> Path:
    """Where the content-addressed model cache lives (outside DVC: it survives every rerun)."""
    from stereolens.models.cache import CACHE_ENV, DEFAULT_CACHE_DIR

    from stereolens.io import project_path

    return project_path(os.environ.get(CACHE_ENV, DEFAULT_CACHE_DIR))
