"""log P(continuation | context) on any backend: HF models through the causal scorer
(:func:`stereolens.scoring.score_continuations`), every other backend through its ``loglikelihood``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def is_hf_model(model: Any) -> bool:
    # the class attribute first: an executor-backed HF model (RayModel) would load a local
    # replica to answer hasattr(model, "model")
    return getattr(type(model), "backend", None) == "hf" or hasattr(model, "model") and hasattr(model, "tokenizer")


def split_context(prefix: str, word: str) -> tuple[str, str]:
    """Trailing spaces of the context belong to the continuation (lm-eval convention)."""
    ctx = prefix.rstrip()
    return ctx, prefix[len(ctx) :] + word


def causal_continuation_logprobs(
    model: Any, contexts: Sequence[str], continuations: Sequence[str], *, cache: Any | None = None,
    batch_tokens: int | None = None, truncate: bool = False,
) -> list[tuple[float, int]]:
    """(sum log P(continuation | context), n_tokens) for every pair, BOS-conditioned.

    HF backends go through :func:`stereolens.scoring.score_continuations`, which projects
    only the scored positions through the 262k-word head; other backends through
    ``LanguageModel.loglikelihood``.  Both are cached.
    """
    if is_hf_model(model):
        from stereolens.scoring import DEFAULT_BATCH_TOKENS, score_continuations

        cache = cache if cache is not None else getattr(model, "cache", None)
        scores = score_continuations(
            model, None, list(contexts), list(continuations), cache=cache,
            batch_tokens=batch_tokens or DEFAULT_BATCH_TOKENS, truncate=truncate,
        )
        return [(s.logprob, s.n_tokens) for s in scores]
    from stereolens.models.base import LoglikelihoodRequest

    out = model.loglikelihood([LoglikelihoodRequest(c, t) for c, t in zip(contexts, continuations)])
    return [(r.logprob, r.n_tokens) for r in out]
