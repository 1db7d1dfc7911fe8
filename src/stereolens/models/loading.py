"""The front door to a model: a config or spec in, a model that answers through a cache out.

It composes the two layers below it: the backend table (:mod:`stereolens.models.registry`)
says which class serves the spec, the executor (:mod:`stereolens.models.executor`) says
where it runs.  Neither of those imports this module, so the executor's actors load
their replica straight from the backend table.
"""

from __future__ import annotations

from typing import Any

from stereolens.models.base import LanguageModel, ModelSpec
from stereolens.models.cache import ResponseCache
from stereolens.models.executor import ExecutorSpec, RayModel, executor_from_config
from stereolens.models.registry import load_local, spec_from_config


def load_model(spec: ModelSpec, cache: ResponseCache | None = None, executor: Any = None) -> LanguageModel:
    """Load the model ``spec`` names; every request it serves goes through ``cache``.

    ``cache=None`` uses a :class:`ResponseCache` at its default location
    (``$STEREOLENS_CACHE_DIR`` or ``cache/models``): caching is never silently off.
    Pass ``ResponseCache(enabled=False)`` to switch it off explicitly.

    ``executor`` (an :class:`~stereolens.models.executor.ExecutorSpec` or the
    ``executor`` config section; None = local) decides where an HF model runs:
    with ``kind: ray`` the result is a :class:`~stereolens.models.executor.RayModel`
    whose requests and sentence scores are sharded over Ray actors.
    """
    if isinstance(spec, dict):
        spec = spec_from_config(spec)
    cache = cache if cache is not None else ResponseCache()
    if executor is not None and spec.backend == "hf":
        if not isinstance(executor, ExecutorSpec):
            executor = executor_from_config(executor)
        if not executor.is_local:
            return RayModel(spec, cache, executor)
    return load_local(spec, cache)
