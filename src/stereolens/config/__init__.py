"""Config composition: Hydra groups in ``conf/`` -> ``params.yaml``."""

from stereolens.config.compose import compose_config, write_params

__all__ = ["compose_config", "write_params"]
