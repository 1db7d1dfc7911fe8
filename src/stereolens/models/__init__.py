"""Model layer: one interface (:class:`LanguageModel`), HF and OpenAI-compatible backends, a response cache.

    from stereolens.models import ResponseCache, load_model, spec_from_config
    model = load_model(spec_from_config(params["model"]), cache=ResponseCache())
    model.loglikelihood([LoglikelihoodRequest(context="", continuation="The cat sat.")])

Backends are imported on first use, so ``import stereolens.models`` is cheap.
"""

from stereolens.models.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    LanguageModel,
    Loglikelihood,
    LoglikelihoodRequest,
    ModelKind,
    ModelSpec,
    UnsupportedRequest,
)
from stereolens.models.cache import ResponseCache
from stereolens.models.loading import load_model
from stereolens.models.registry import BACKENDS, register_backend, spec_from_config

__all__ = [
    "BACKENDS",
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "LanguageModel",
    "Loglikelihood",
    "LoglikelihoodRequest",
    "ModelKind",
    "ModelSpec",
    "ResponseCache",
    "UnsupportedRequest",
    "load_model",
    "register_backend",
    "spec_from_config",
]
