"""Compose ``conf/`` with Hydra's compose API.

``dvc exp run -S group=option`` does the same through DVC's own Hydra
integration; this module is for the CLI (``stereolens config compose``) and
for tests, which compose every option of every group.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError
from stereolens.io import write_text

DEFAULT_CONFIG_DIR = "conf"
DEFAULT_CONFIG_NAME = "config"


def compose_config(
    overrides: Sequence[str] = (),
    *,
    config_dir: str | os.PathLike = DEFAULT_CONFIG_DIR,
    config_name: str = DEFAULT_CONFIG_NAME,
) -> dict[str, Any]:
    """Return the composed config as plain containers, or raise one-line ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config_dir = Path(config_dir).resolve()
    if not (config_dir / f"{config_name}.yaml").exists():
        raise ConfigError(f"no {config_name}.yaml in config directory {config_dir}")
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot compose config with overrides {list(overrides)}: {first}") from exc


def to_yaml(config: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(config))


def write_params(
    overrides: Sequence[str] = (),
    *,
    output: str | os.PathLike = "params.yaml",
    config_dir: str | os.PathLike = DEFAULT_CONFIG_DIR,
) -> Path:
    config = compose_config(overrides, config_dir=config_dir)
    header = "# Composed from conf/ by `stereolens config compose"
    header += (" " + " ".join(overrides)) if overrides else ""
    header += "`; edit conf/, not this file.\n"
    return write_text(output, header + to_yaml(config))
