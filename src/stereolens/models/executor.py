"""Where model work runs: in the stage's own process (``local``) or on a pool of Ray actors (``ray``).

The ``executor`` section of params.yaml (``conf/executor/``) picks one.  Studies do
not change: they call :func:`stereolens.models.load_model` and the scoring functions
of :mod:`stereolens.scoring` as before, and ``load_model(spec, cache, executor=...)``
(:mod:`stereolens.models.loading`) returns either the backend itself or a
:class:`RayModel` that behaves like it.

A :class:`RayModel` cuts every batch of requests into shards of ``shard_size`` and
hands them to a ``ray.util.ActorPool`` of :class:`ModelWorker` actors, each of
which loads the model once and answers a shard with the ordinary backend or
scoring engine.  Ray does the scheduling; nothing here queues or retries on its
own.  Each actor reads and writes the same content-addressed response cache as a
local run (its root is passed as an absolute path, so on a cluster it must be on
storage every node mounts), so a killed job resumes where it stopped and a
complete rerun computes nothing.  Work that is not a batch of requests (SeT's
closed form, pruning heads, tokenizer look-ups) runs on a local replica loaded
on first use.

Only Hugging Face backends go to Ray: an OpenAI-compatible endpoint already
serves requests concurrently (``max_concurrency``), so ``load_model`` returns it
unchanged under either executor.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from stereolens.errors import ConfigError
from stereolens.models.base import (
    Generation,
    GenerationRequest,
    LanguageModel,
    Loglikelihood,
    LoglikelihoodRequest,
    ModelSpec,
)
from stereolens.models.cache import ResponseCache
from stereolens.models.registry import load_local

ExecutorKind = Literal["local", "ray"]


@dataclasses.dataclass(frozen=True)
class ExecutorSpec:
    """The ``executor`` config: how many model actors, how big a shard, where the cluster is."""

    kind: ExecutorKind = "local"
    # Ray cluster address; None: $RAY_ADDRESS when set, else a local instance started here
    address: str | None = None
    actors: int = 2  # model actors per model (each holds one copy of the weights)
    num_cpus_per_actor: float = 1.0
    num_gpus_per_actor: float = 0.0
    shard_size: int = 64  # requests (sentences, pairs, prompts) per shard
    # a local instance only: CPUs it may use (None: all) and its object store (small: shards are text)
    local_num_cpus: int | None = None
    object_store_memory_mb: int = 256
    # passed to ray.init, e.g. {"working_dir": ".", "env_vars": {...}} for a remote cluster
    runtime_env: dict[str, Any] | None = None

    @property
    def is_local(self) -> bool:
        return self.kind == "local"


_POSITIVE_INT = ("actors", "shard_size", "object_store_memory_mb")
_NON_NEGATIVE_FLOAT = ("num_cpus_per_actor", "num_gpus_per_actor")


def executor_from_config(cfg: dict[str, Any] | None) -> ExecutorSpec:
    """An :class:`ExecutorSpec` from the ``executor`` section (None or missing: local)."""
    if cfg is None:
        return ExecutorSpec()
    if not isinstance(cfg, dict):
        raise ConfigError(f"executor config must be a mapping, got {type(cfg).__name__}")
    fields = {f.name for f in dataclasses.fields(ExecutorSpec)}
    unknown = sorted(set(cfg) - fields)
    if unknown:
        raise ConfigError(f"unknown key executor.{unknown[0]} (known: {', '.join(sorted(fields))})")
    values: dict[str, Any] = {k: v for k, v in cfg.items() if v is not None}
    kind = values.get("kind", "local")
    if kind not in ("local", "ray"):
        raise ConfigError(f"executor.kind={kind!r} is not one of local, ray")
    for key in _POSITIVE_INT + ("local_num_cpus",):
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"executor.{key} must be a positive integer, got {value!r}")
    for key in _NON_NEGATIVE_FLOAT:
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"executor.{key} must be a number >= 0, got {value!r}")
            values[key] = float(value)
    if "runtime_env" in values and not isinstance(values["runtime_env"], dict):
        raise ConfigError(f"executor.runtime_env must be a mapping, got {values['runtime_env']!r}")
    if "address" in values:
        values["address"] = str(values["address"])
    return ExecutorSpec(**values)


# --- the actor ------------------------------------------------------------------------


class ModelWorker:
    """One model replica inside a Ray actor: loads the model once, answers shard after shard.

    Plain class so that it pickles by reference; :class:`RayModel` wraps it with
    ``ray.remote``.  Every answer goes through the actor's own :class:`ResponseCache`
    on the shared cache root; each call returns the cache hits and misses it caused,
    so the driver's counters add up as in a local run.
    """

    def __init__(self, spec: ModelSpec, cache_root: str | None, num_threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, num_threads))
        self.cache = ResponseCache(cache_root, enabled=cache_root is not None)
        self.model = load_local(spec, self.cache)

    def _counted(self, call: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
        hits, misses = self.cache.hits, self.cache.misses
        result = call()
        return result, {"hits": self.cache.hits - hits, "misses": self.cache.misses - misses}

    def identity(self) -> str:
        return self.model.identity

    def takes_chat_messages(self) -> bool:
        return self.model.takes_chat_messages

    def loglikelihood(self, requests: list[LoglikelihoodRequest]):
        return self._counted(lambda: self.model.loglikelihood(requests))

    def generate(self, requests: list[GenerationRequest]):
        return self._counted(lambda: self.model.generate(requests))

    def run(self, function: Callable[..., Any], aligned: dict[str, list[Any] | None], fixed: dict[str, Any],
            use_cache: bool):
        kwargs = {**fixed, **{k: v for k, v in aligned.items() if v is not None}}
        kwargs["cache"] = self.cache if use_cache else None
        return self._counted(lambda: function(self.model, **kwargs))


# --- the driver side ------------------------------------------------------------------


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("executor=ray needs Ray: pip install -e '.[ray]'") from None
    return ray


def ensure_ray(executor: ExecutorSpec) -> None:
    """Connect to the cluster the config names (or $RAY_ADDRESS), else start a small local instance.

    A session already open in this process (e.g. a test's) is used as it is.
    """
    ray = _ray()
    if ray.is_initialized():
        return
    address = executor.address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"runtime_env": executor.runtime_env} if executor.runtime_env else {}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(
            num_cpus=executor.local_num_cpus,
            object_store_memory=executor.object_store_memory_mb * 1024 * 1024,
            include_dashboard=False,
            **kwargs,
        )


def shards(n: int, size: int) -> list[slice]:
    """Contiguous slices of at most ``size`` items covering ``range(n)`` in order."""
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


class RayModel(LanguageModel):
    """A Hugging Face model served by a pool of Ray actors, used like the backend itself.

    ``generate`` and ``loglikelihood`` shard their requests over the pool; the
    scoring functions of :mod:`stereolens.scoring` recognise it and shard their
    sentences the same way (:meth:`map_shards`), and so can any function of a study
    that takes the model and per-item lists.  Any other attribute
    (``tokenizer``, ``model``, ``encode_pair``...) comes from a local replica loaded
    on first use, for the work that is not a batch of requests.

    Its actors hold their CPUs/GPUs until :meth:`close` or until the model is dropped
    (Ray ends an actor when its last handle goes), so a stage that loads models one
    after another frees each pool before the next one needs the resources.
    """

    backend = "hf"  # only HF models are sent to Ray; endpoints stay where they are

    def __init__(self, spec: ModelSpec, cache: ResponseCache | None, executor: ExecutorSpec) -> None:
        ray = _ray()
        from ray.util import ActorPool

        ensure_ray(executor)
        self.spec = spec
        self.cache = cache if cache is not None else ResponseCache()
        self.executor = executor
        worker_spec = spec
        if executor.num_gpus_per_actor > 0 and spec.device == "cpu":
            # Ray gives each actor its GPU through CUDA_VISIBLE_DEVICES: "cuda" is that GPU
            worker_spec = dataclasses.replace(spec, device="cuda")
        root = str(Path(self.cache.root).resolve()) if self.cache.enabled else None
        remote = ray.remote(ModelWorker).options(
            num_cpus=executor.num_cpus_per_actor, num_gpus=executor.num_gpus_per_actor
        )
        threads = max(1, int(executor.num_cpus_per_actor))
        _warn_if_pool_cannot_fit(ray, executor)
        self._actors = [remote.remote(worker_spec, root, threads) for _ in range(executor.actors)]
        self._pool = ActorPool(self._actors)
        self._identity: str | None = None
        self._replica: LanguageModel | None = None
        self.shards_run = 0

    # the interface ------------------------------------------------------------------

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = _ray().get(self._actors[0].identity.remote())
        return self._identity

    @property
    def supports_loglikelihood(self) -> bool:
        return self.spec.kind in ("causal", "seq2seq")

    @property
    def takes_chat_messages(self) -> bool:
        return _ray().get(self._actors[0].takes_chat_messages.remote())

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        return self._scatter_requests("loglikelihood", list(requests))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self._scatter_requests("generate", list(requests))

    def map_shards(
        self, function: Callable[..., Any], aligned: dict[str, Sequence[Any] | None], fixed: dict[str, Any]
    ) -> list[Any]:
        """``function(model, **shard, **fixed)`` on each actor's model, for every shard of ``aligned``.

        ``function`` must be importable by name (a module-level function: Ray pickles it
        by reference).  ``aligned`` holds the per-item arguments (sentences, ids...), all
        of one length or None; ``fixed`` the rest.  A ``cache`` in ``fixed`` is replaced
        by each actor's cache on the same root; ``progress`` is switched off (the driver
        shows one bar).  Returns the per-shard results in order.
        """
        fixed = dict(fixed)
        cache = fixed.pop("cache", None)
        if "progress" in fixed:
            fixed["progress"] = False  # the driver shows progress per shard
        lists = {k: (None if v is None else list(v)) for k, v in aligned.items()}
        n = len(next(v for v in lists.values() if v is not None))
        use_cache = cache is not None and getattr(cache, "enabled", True)
        if use_cache and Path(cache.root).resolve() != Path(self.cache.root).resolve():
            raise ConfigError(
                f"scoring cache {cache.root} differs from the model's cache {self.cache.root}: "
                "with executor=ray both must be the same directory"
            )
        jobs = [({k: (None if v is None else v[s]) for k, v in lists.items()}) for s in shards(n, self.executor.shard_size)]
        what = getattr(function, "__name__", "work")
        return list(self._map(lambda actor, job: actor.run.remote(function, job, fixed, use_cache), jobs, n, what))

    # internals ------------------------------------------------------------------------

    def _scatter_requests(self, op: str, requests: list[Any]) -> list[Any]:
        if not requests:
            return []
        jobs = [requests[s] for s in shards(len(requests), self.executor.shard_size)]
        results: list[Any] = []
        for part in self._map(lambda actor, job: getattr(actor, op).remote(job), jobs, len(requests), op):
            results.extend(part)
        return results

    def _map(self, submit: Callable[[Any, Any], Any], jobs: list[Any], n_items: int, what: str) -> Iterator[Any]:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_items, desc=f"{what} on {len(self._actors)} Ray actor(s)", unit="item",
                   disable=None, leave=False)
        try:
            for result, stats in self._pool.map(submit, jobs):
                # the actors counted their own cache traffic: add it to the caller's counters
                self.cache.hits += stats["hits"]
                self.cache.misses += stats["misses"]
                self.shards_run += 1
                bar.update(_length(result))
                yield result
        finally:
            bar.close()

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes RayModel lacks: the local replica has them
        if name.startswith("_"):
            raise AttributeError(name)
        if self.__dict__.get("_replica") is None:
            self._replica = load_local(self.spec, self.cache)
        return getattr(self._replica, name)

    def close(self) -> None:
        """Stop the actors (the Ray session, if this process started it, ends with the process)."""
        ray = _ray()
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []


def _warn_if_pool_cannot_fit(ray: Any, executor: ExecutorSpec) -> None:
    """Say so when the cluster, as it is now, cannot hold every actor of the pool.

    Ray then keeps the surplus actors pending and the shards queued on them wait;
    an autoscaling cluster may still add nodes, so this warns instead of refusing.
    """
    import sys

    total = ray.cluster_resources()
    for resource, per_actor in (("CPU", executor.num_cpus_per_actor), ("GPU", executor.num_gpus_per_actor)):
        need = per_actor * executor.actors
        if need > total.get(resource, 0.0) + 1e-9:
            print(f"executor=ray: {executor.actors} actors x {per_actor:g} {resource} need {need:g} {resource}, "
                  f"the cluster has {total.get(resource, 0.0):g}; shards wait until it grows "
                  f"(lower executor.actors or executor.num_{resource.lower()}s_per_actor)", file=sys.stderr)


def _length(result: Any) -> int:
    if isinstance(result, tuple):  # (first scores, second scores) of score_pair_lists
        return len(result[0])
    return len(result)


def is_sharded(model: Any) -> bool:
    """True for a model whose request work runs on an executor's workers (a :class:`RayModel`)."""
    return callable(getattr(type(model), "map_shards", None))


def flat_map_shards(
    model: Any, function: Callable[..., list[Any]], aligned: dict[str, Sequence[Any] | None], fixed: dict[str, Any]
) -> list[Any] | None:
    """The concatenated per-item results of ``function`` over ``model``'s shards, or None for a local model.

    For a study's own request-level function (one that takes the model and per-item
    lists and returns one result per item):
    ``if (out := flat_map_shards(model, f, {...}, {...})) is not None: return out``.
    """
    if not is_sharded(model):
        return None
    return [item for part in model.map_shards(function, aligned, fixed) for item in part]
