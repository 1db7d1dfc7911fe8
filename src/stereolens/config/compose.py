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
from stereolens.io import check_writable, write_text

DEFAULT_CONFIG_DIR = "conf"
DEFAULT_CONFIG_NAME = "config"


def compose_config(
    overrides: Sequence[str] = (),
    *,
    config_dir: str | os.PathLike = DEFAULT_CONFIG_DIR,
    config_name: str = DEFAULT_CONFIG_NAME,
) -> dict[str, Any]:
    """Return the composed config as plain containers, or raise one-line ConfigError.

    With overrides, every value is also checked against the type the default
    composition gives it (and, for keys whose default is null, the types declared
    with :func:`declare_param_types`, which the CLI fills from each study's
    ``config.PARAM_TYPES``), so that
    ``study.crows.limit=abc`` is refused here, not three stages later.
    """
    config = _compose(overrides, config_dir=config_dir, config_name=config_name)
    if overrides:
        defaults = _compose((), config_dir=config_dir, config_name=config_name)
        check_types(config, expected_types(defaults), overrides)
    check_schema(config, overrides)
    return config


def check_schema(config: dict[str, Any], overrides: Sequence[str]) -> None:
    """The groups' typed schemas (:mod:`stereolens.config.schema`), naming the override that set the key."""
    from stereolens.config.schema import check_config

    try:
        check_config(config)
    except ConfigError as exc:
        key = str(exc).split(" ", 1)[0].rstrip(":")
        culprit = next((o for o in reversed(overrides) if key.startswith(override_key(o).replace("/", "."))), None)
        if culprit is None:
            raise
        raise ConfigError(f"{exc} (from override {culprit!r})") from None


def _compose(
    overrides: Sequence[str], *, config_dir: str | os.PathLike, config_name: str
) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from stereolens.config.models import CONFIG_DIR_ENV, register_models_resolver

    config_dir = Path(config_dir).resolve()
    if not (config_dir / f"{config_name}.yaml").exists():
        raise ConfigError(f"no {config_name}.yaml in config directory {config_dir}")
    register_models_resolver()
    previous = os.environ.get(CONFIG_DIR_ENV)
    os.environ[CONFIG_DIR_ENV] = str(config_dir)  # where the `models` resolver finds conf/model/<name>.yaml
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ConfigError):  # from the `models` resolver: already one line naming the key
            raise ConfigError(str(cause)) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot compose config with overrides {list(overrides)}: {first}") from exc
    finally:
        if previous is None:
            os.environ.pop(CONFIG_DIR_ENV, None)
        else:
            os.environ[CONFIG_DIR_ENV] = previous


_NUMERIC = (int, float)


def expected_types(defaults: dict[str, Any]) -> dict[str, tuple[type, ...]]:
    """Dotted key -> accepted types: from non-null numeric/boolean defaults, then the studies' declarations."""
    types: dict[str, tuple[type, ...]] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
            return
        key = prefix[:-1]
        if isinstance(node, bool):
            types[key] = (bool,)
        elif isinstance(node, int):
            types[key] = (int,)
        elif isinstance(node, float):
            types[key] = _NUMERIC

    walk(defaults, "")
    types.update(DECLARED_TYPES)
    return types


# dotted key -> accepted types for keys whose default is null; filled by declare_param_types
DECLARED_TYPES: dict[str, tuple[type, ...]] = {}


def declare_param_types(prefix: str, types: dict[str, type | tuple[type, ...]]) -> None:
    """Declare the types of config keys under ``prefix`` (the CLI does this for each study's
    ``config.PARAM_TYPES``; engines never import a study)."""
    for key, declared in types.items():
        DECLARED_TYPES[f"{prefix}.{key}"] = declared if isinstance(declared, tuple) else (declared,)


def check_types(config: dict[str, Any], types: dict[str, tuple[type, ...]], overrides: Sequence[str]) -> None:
    """Refuse a composed value whose type is not the one its key takes (null always allowed)."""
    for key, accepted in sorted(types.items()):
        node: Any = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is None:
            continue
        ok = isinstance(node, accepted) and not (isinstance(node, bool) and bool not in accepted)
        if accepted == _NUMERIC and isinstance(node, bool):
            ok = False
        if not ok:
            names = " or ".join("number" if t is float else t.__name__ for t in accepted)
            culprit = next((o for o in overrides if override_key(o) == key), None)
            where = f"override {culprit!r}" if culprit else "the composed config"
            raise ConfigError(f"{key} must be {names} (or null), got {node!r} from {where}")


def override_key(override: str) -> str:
    """The dotted key a Hydra override sets (``+a.b=1`` -> ``a.b``)."""
    return override.split("=", 1)[0].lstrip("+~")


def sets_the_model(overrides: Sequence[str]) -> bool:
    """Whether an override replaces the primary model or one of its fields (``model=mbert``, ``model.dtype=...``)."""
    return any(override_key(o) == "model" or override_key(o).startswith("model.") for o in overrides)


def dvc_exp_run_note(argv: Sequence[str]) -> str | None:
    """The one-line note for a ``dvc exp run`` command line (``argv`` without the program, read by DVC's own
    parser) that sets the model with ``-S`` and names no stage: the model is a param of every measuring stage,
    so every study reruns. None for any other command line, a target named, or ``--no-hydra``.

    ``hydra_plugins/`` prints it: DVC imports that folder once, while composing the experiment's params."""
    if "exp" not in argv or "run" not in argv:  # not a DVC experiment: nothing to parse
        return None
    import contextlib
    import io
    import shlex

    from dvc.cli.parser import get_main_parser
    from dvc.commands.experiments.run import CmdExperimentsRun
    from dvc.utils.cli_parse import to_path_overrides

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # a command line that is not DVC's prints no usage
            args = get_main_parser().parse_args(list(argv))
    except SystemExit:
        return None
    if getattr(args, "func", None) is not CmdExperimentsRun or args.targets or args.no_hydra:
        return None
    # DVC composes conf/ into params.yaml only: overrides aimed at another params file do not compose
    if not sets_the_model(to_path_overrides(args.set_param or []).get("params.yaml", [])):
        return None
    example = shlex.join(["dvc", "exp", "run", *(w for o in args.set_param for w in ("-S", o)), "crows_report"])
    return ("note: the model is a param of every measuring stage, so `dvc exp run` without a target reruns all the "
            f"studies; to run one, name its last stage (e.g. `{example}`)")


def to_yaml(config: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(config))


def write_params(
    overrides: Sequence[str] = (),
    *,
    output: str | os.PathLike = "params.yaml",
    config_dir: str | os.PathLike = DEFAULT_CONFIG_DIR,
) -> Path:
    check_writable(output)  # an output under a file is refused before any composing
    config = compose_config(overrides, config_dir=config_dir)
    header = "# Composed from conf/ by `stereolens config compose"
    header += (" " + " ".join(overrides)) if overrides else ""
    header += "`; edit conf/, not this file.\n"
    return write_text(output, header + to_yaml(config))
