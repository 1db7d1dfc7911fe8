"""The backend table: which class serves a ``(backend, kind)``, and the typed model config.

``spec_from_config`` turns the ``model`` section of params.yaml into a typed
:class:`ModelSpec` (refusing unknown keys so a typo never silently falls back to a
default); ``backend_class`` picks the backend class for ``(backend, kind)`` and
``load_local`` loads it in this process (:func:`stereolens.models.loading.load_model`
is the front door, which may send it to an executor instead).
Backends are imported lazily: the OpenAI backend must not pay for importing torch,
and the HF backends must not need the openai package.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, get_args

from stereolens.errors import ConfigError
from stereolens.models.base import (DTYPES, REDUCED_PRECISION_POLICIES, VERIFY_PRECISIONS, LanguageModel, ModelKind,
                                    ModelSpec)
from stereolens.models.cache import ResponseCache

# (backend, kind) -> "module:Class"; strings so that importing the registry imports no backend
BACKENDS: dict[tuple[str, str], str] = {
    ("hf", "masked"): "stereolens.models.hf:HFMaskedLM",
    ("hf", "causal"): "stereolens.models.hf:HFCausalLM",
    ("hf", "seq2seq"): "stereolens.models.hf:HFSeq2SeqLM",
    ("openai", "chat"): "stereolens.models.openai_backend:OpenAIChatModel",
    ("openai", "completion"): "stereolens.models.openai_backend:OpenAICompletionModel",
}

_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec)}
_INT_FIELDS = {"max_concurrency", "max_retries", "batch_size"}
_FLOAT_FIELDS = {"timeout_s", "retry_base_s"}


def register_backend(backend: str, kind: str, target: str) -> None:
    """Add or replace a backend class, given as ``"module:Class"``."""
    BACKENDS[(backend, kind)] = target


def spec_from_config(cfg: dict[str, Any]) -> ModelSpec:
    """A :class:`ModelSpec` from the ``model`` section of params.yaml (conf/model/*.yaml)."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config must be a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in _SPEC_FIELDS:
            raise ConfigError(
                f"unknown key model.{key} in model config (known: {', '.join(sorted(_SPEC_FIELDS))})"
            )
    for required in ("name", "kind"):
        if cfg.get(required) in (None, ""):
            raise ConfigError(f"model config needs model.{required}")
    kinds = get_args(ModelKind)
    if cfg["kind"] not in kinds:
        raise ConfigError(f"model.kind={cfg['kind']!r} is not one of {', '.join(kinds)}")
    backend = cfg.get("backend") or "hf"
    if (backend, cfg["kind"]) not in BACKENDS:
        known = ", ".join(f"{b}/{k}" for b, k in sorted(BACKENDS))
        raise ConfigError(f"model.backend={backend!r} with model.kind={cfg['kind']!r} is not supported ({known})")
    values: dict[str, Any] = {}
    for key, value in cfg.items():
        if value is None and _SPEC_FIELDS[key].default is not dataclasses.MISSING:
            continue  # null in YAML means "use the default"
        if key in _INT_FIELDS or key in _FLOAT_FIELDS:
            try:
                value = int(value) if key in _INT_FIELDS else float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"model.{key} must be a number, got {value!r}") from None
            if value <= 0 and key != "max_retries" or value < 0:
                raise ConfigError(f"model.{key} must be positive, got {value!r}")
        elif key in ("extra", "source") and value is not None and not isinstance(value, dict):
            raise ConfigError(f"model.{key} must be a mapping, got {value!r}")
        elif key in ("name", "revision", "dtype", "device", "base_url", "id", "reduced_precision", "verify") and value is not None:
            value = str(value)
        values[key] = value
    values["backend"] = backend
    if values.get("dtype") not in (None, *DTYPES):
        raise ConfigError(f"model.dtype={values['dtype']!r} is not one of {', '.join(DTYPES)}")
    if values.get("reduced_precision", "fall_back") not in REDUCED_PRECISION_POLICIES:
        raise ConfigError(f"model.reduced_precision={values['reduced_precision']!r} is not one of "
                          f"{', '.join(REDUCED_PRECISION_POLICIES)}")
    if values.get("verify") not in (None, *VERIFY_PRECISIONS):
        raise ConfigError(f"model.verify={values['verify']!r} is not one of {', '.join(VERIFY_PRECISIONS)} (or null)")
    return ModelSpec(**values)


def backend_class(spec: ModelSpec) -> type[LanguageModel]:
    try:
        target = BACKENDS[(spec.backend, spec.kind)]
    except KeyError:
        known = ", ".join(f"{b}/{k}" for b, k in sorted(BACKENDS))
        raise ConfigError(f"no backend for backend={spec.backend!r} kind={spec.kind!r} (known: {known})") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def load_local(spec: ModelSpec, cache: ResponseCache) -> LanguageModel:
    """The backend ``spec`` names, loaded in this process; every request it serves goes through ``cache``."""
    return backend_class(spec)(spec, cache=cache)
