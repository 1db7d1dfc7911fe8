"""The heads study's config: the types of keys whose default is null (for ``stereolens config compose``)
and the value checks a stage runs on ``study.heads`` before any model loads.

Kept free of torch and transformers so that a config schema can import it cheaply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stereolens.config.schema import boolean, integer, list_of, number, one_of, section, text
from stereolens.errors import ConfigError

# keys relative to study.heads; a non-null default already fixes its key's type
PARAM_TYPES = {"countries": list, "max_instances_per_country": int, "threads": int, "shapley.layers": list,
               "shapley.step": int, "pruning.stereoset_items_per_country": int}

POOLINGS = ("first", "last", "mean")          # where the probe reads its vector; "auto" picks first or last
VALUE_METRICS = ("accuracy", "loss")          # the Shapley value function: probe accuracy or minus its cross-entropy
# StereoSet candidate scores under a head gate: the reference generative score needs the context sentence scored
# alone, which the gated candidate scorer does not do
GATED_SCORES = ("mean", "sum")


# the typed schema of study.heads (stereolens.config.schema), checked at compose time and when a stage loads it
SCHEMA = section(
    instances=text(), countries=list_of(text(), min_items=1, unique=True, null=True), max_instances_per_country=integer(2, null=True),
    threads=integer(1, null=True),
    split=section(shapley_fraction=number(above=0, below=1), pruning_fraction=number(above=0, below=1),
                  seed=integer(0)),
    probe=section(pooling=one_of(("auto", *POOLINGS)), learning_rate=number(above=0), epochs=integer(1),
                  batch_size=integer(1), weight_decay=number(0), finetune=boolean(), max_length=integer(1)),
    shapley=section(layers=list_of(integer(), min_items=1, null=True, unique=True), permutations=integer(1),
                    antithetic=boolean(), step=integer(1, null=True), max_rows=integer(1),
                    value=one_of(VALUE_METRICS), seed=integer(0), reuse_prefix=boolean(),
                    stability_seeds=integer(0)),
    pruning=section(step=integer(1), stereoset_items_per_country=integer(1, null=True),
                    candidate_score=one_of(GATED_SCORES)),
)


def check(cfg: dict[str, Any], config: dict[str, Any], *, where: str = "") -> None:
    """Names that must exist elsewhere: the player layers in the model (when its config.json is at hand) and
    the cross-key rules of :func:`check_heads_config`."""
    if isinstance(cfg.get("split"), dict) and isinstance(cfg.get("shapley"), dict) and "pruning" in cfg:
        try:
            check_heads_config(cfg, n_layers=_local_layer_count(config.get("model") or {}))
        except ConfigError as exc:
            raise ConfigError(f"{exc}{where}") from None


def _local_layer_count(model_cfg: dict[str, Any]) -> int | None:
    """The model's layer count from a config.json on disk (``models/<id>/`` once prepared), without
    importing transformers; None when no such file is here."""
    import json
    from pathlib import Path

    name = model_cfg.get("name")
    config_file = Path(str(name)) / "config.json" if name else None
    if config_file is None or not config_file.is_file():
        return None
    try:
        data = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data = data.get("text_config") or data
    layers = data.get("num_hidden_layers") or data.get("n_layer") or data.get("num_layers")
    return int(layers) if isinstance(layers, int) and layers > 0 else None


def check_layers(layers: Sequence[int] | None, n_layers: int | None = None) -> None:
    """``study.heads.shapley.layers``: null or a non-empty list of layer indices (negative counts from the
    top), each within the model's ``n_layers`` when that is known."""
    key = "study.heads.shapley.layers"
    if layers is None:
        return
    if not isinstance(layers, (list, tuple)) or not layers or any(isinstance(x, bool) or not isinstance(x, int)
                                                                  for x in layers):
        raise ConfigError(f"{key} must be null or a non-empty list of layer indices, got {layers!r}")
    if n_layers is not None:
        bad = [x for x in layers if not -n_layers <= x < n_layers]
        if bad:
            raise ConfigError(f"{key} {list(layers)}: {bad} out of range for a model with {n_layers} layers "
                              f"(use 0..{n_layers - 1}, or -{n_layers}..-1 from the top)")


def _fraction(cfg: dict[str, Any], key: str) -> float:
    value = cfg["split"][key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ConfigError(f"study.heads.split.{key} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def _positive_int(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")


def check_heads_config(cfg: dict[str, Any], *, n_layers: int | None = None) -> None:
    """Refuse, in one line naming the key, a ``study.heads`` value the study would otherwise clamp
    silently or fail on late; ``n_layers`` (the model's, read from its config) checks the player layers."""
    shapley_share, pruning_share = _fraction(cfg, "shapley_fraction"), _fraction(cfg, "pruning_fraction")
    if shapley_share + pruning_share >= 1:
        raise ConfigError(f"study.heads.split.shapley_fraction + study.heads.split.pruning_fraction must leave "
                          f"instances to train the probe, got {shapley_share} + {pruning_share}")
    pooling = cfg["probe"]["pooling"]
    if pooling not in ("auto", *POOLINGS):
        raise ConfigError(f"study.heads.probe.pooling must be one of {['auto', *POOLINGS]}, got {pooling!r}")
    shapley = cfg["shapley"]
    if shapley["value"] not in VALUE_METRICS:
        raise ConfigError(f"study.heads.shapley.value must be one of {list(VALUE_METRICS)}, got {shapley['value']!r}")
    check_layers(shapley["layers"], n_layers)
    _positive_int(shapley["permutations"], "study.heads.shapley.permutations")
    if shapley["antithetic"] and shapley["permutations"] % 2:
        raise ConfigError(f"study.heads.shapley.permutations must be even with study.heads.shapley.antithetic true "
                          f"(a permutation and its reverse are one sample), got {shapley['permutations']}")
    seeds = shapley.get("stability_seeds", 0)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise ConfigError(f"study.heads.shapley.stability_seeds must be a whole number >= 0 (0: no robustness "
                          f"estimates), got {seeds!r}")
    _positive_int(cfg["pruning"]["step"], "study.heads.pruning.step")
    if cfg["pruning"]["candidate_score"] not in GATED_SCORES:
        raise ConfigError(f"study.heads.pruning.candidate_score must be one of {list(GATED_SCORES)}, "
                          f"got {cfg['pruning']['candidate_score']!r}")
    if cfg["pruning"]["stereoset_items_per_country"] is not None:
        _positive_int(cfg["pruning"]["stereoset_items_per_country"], "study.heads.pruning.stereoset_items_per_country")
