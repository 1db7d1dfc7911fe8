"""The ``models`` mapping a run measures: the primary ``model`` first, then ``compare_with``.

``conf/config.yaml`` writes ``models: ${stereolens_models:${model},${compare_with}}``; this resolver
turns the primary model's config and the names of further ``conf/model/*.yaml`` files into an ordered
mapping model id -> full model config. It is registered by :func:`stereolens.config.compose_config`
and, for ``dvc exp run -S`` (DVC composes with Hydra itself), by ``hydra_plugins/stereolens_models.py``,
which Hydra's plugin scan imports from the repository root.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from stereolens.errors import ConfigError

RESOLVER = "stereolens_models"
# DVC composes from the repository root with config_dir "conf"; compose_config points this elsewhere
CONFIG_DIR_ENV = "STEREOLENS_CONFIG_DIR"


def model_group_file(name: str, config_dir: str | os.PathLike) -> Path:
    return Path(config_dir) / "model" / f"{name}.yaml"


def models_mapping(primary: Mapping[str, Any], compare_with: Sequence[str] | None,
                   config_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Model id -> model config, primary first; a compared model whose id is the primary's is dropped."""
    if compare_with is not None and (isinstance(compare_with, str) or not isinstance(compare_with, Sequence)):
        raise ConfigError(f"compare_with must be a list of conf/model names, got {compare_with!r}")
    models = {str(primary["id"]): dict(primary)}
    for name in compare_with or []:
        path = model_group_file(str(name), config_dir)
        if not path.is_file():
            known = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise ConfigError(f"compare_with: no model config {path} (known: {', '.join(known)})")
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not cfg.get("id"):
            raise ConfigError(f"compare_with: {path} has no id")
        models.setdefault(str(cfg["id"]), cfg)
    return models


def _resolve(primary: Any, compare_with: Any) -> Any:
    from omegaconf import OmegaConf

    primary = OmegaConf.to_container(primary, resolve=True) if OmegaConf.is_config(primary) else primary
    names = OmegaConf.to_container(compare_with, resolve=True) if OmegaConf.is_config(compare_with) else compare_with
    # a config node, not a dict, so that `${oc.dict.keys:models}` can list its ids
    return OmegaConf.create(models_mapping(primary, names, os.environ.get(CONFIG_DIR_ENV, "conf")))


def register_models_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve)


def run_models(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every model a composed config's run measures, primary first: ``models`` in ``model_ids`` order (the
    ids dvc.yaml's per-model stages run over), else the one ``model``.  What ``stereolens plan`` counts."""
    models = config.get("models") or {}
    ids = list(config.get("model_ids") or models)
    if not ids:
        return [dict(config["model"])]
    missing = [i for i in ids if i not in models]
    if missing:
        raise ConfigError(f"model_ids {missing} have no entry in models (known: {', '.join(models) or 'none'})")
    return [dict(models[i]) for i in ids]
