"""The stage kit: what every study's DVC stages share.

A stage function reads its declared params, then calls these instead of building
its own model loader, label or summary writer, so that every study loads models
the same way (the shared response cache, the configured executor), refuses a model
that cannot do the job in the same words, and writes a ``summary.json`` the report
reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError
from stereolens.stages.common import executor_config, model_cache_dir

# Kinds of model that produce text; a masked LM only scores.
GENERATIVE_KINDS = ("causal", "chat", "completion", "seq2seq")


def model_label(model_cfg: Mapping[str, Any]) -> str:
    """The short name a model goes by in tables, runs and file names."""
    return str(model_cfg.get("id") or model_cfg["name"])


def require_generator(model_cfg: Mapping[str, Any], *, key: str) -> None:
    """Refuse, in one line naming the config key, a model that cannot generate text."""
    kind = model_cfg.get("kind")
    if kind not in GENERATIVE_KINDS:
        raise ConfigError(
            f"{key}: {model_label(model_cfg)!r} is a {kind!r} model and cannot generate text; "
            f"set {key} to a model of kind {', '.join(GENERATIVE_KINDS)}"
        )


def load_stage_model(
    model_cfg: Mapping[str, Any],
    *,
    params_path: str | os.PathLike | None = None,
    key: str = "model",
    generator: bool = False,
    executor: bool = True,
):
    """Load ``model_cfg`` the one way stages do: through the shared response cache, on the
    executor configured in ``params_path`` (local when it has none).

    ``generator=True`` refuses a model that cannot generate before anything loads.
    ``executor=False`` is for stages that need the model's modules in this process
    (head masking reaches into the attention layers, which a remote actor cannot offer).
    """
    from stereolens.models import ResponseCache, load_model, spec_from_config

    if generator:
        require_generator(model_cfg, key=key)
    where = executor_config(params_path) if (executor and params_path is not None) else None
    return load_model(spec_from_config(dict(model_cfg)), cache=ResponseCache(model_cache_dir()), executor=where)


def write_study_summary(path: str | os.PathLike, summary: Mapping[str, Any]) -> Path:
    """Write a study's ``summary.json`` after checking it against the report contract, and beside it the
    compact ``headline.json`` DVC compares across experiments (a study's top-level summary only)."""
    from stereolens.io import write_json
    from stereolens.report.contract import check_summary
    from stereolens.tracking.headline import write_headline

    check_summary(summary, where=str(path))
    written = write_json(path, dict(summary))
    write_headline(path, summary)
    return written


def model_dir(root: str | os.PathLike, model_cfg_or_id: Mapping[str, Any] | str) -> Path:
    """Where a per-model stage writes: ``<root>/<model id>`` (``data/processed/<study>/<model_id>``,
    ``reports/<study>/<model_id>``), the layout the report site and the profile read."""
    model_id = model_cfg_or_id if isinstance(model_cfg_or_id, str) else model_label(model_cfg_or_id)
    return Path(root) / model_id
