"""Pieces every backend shares: cache payloads, (de)serialising answers, stop strings.

Keeping the payload shape in one place guarantees that two backends can never
collide in the cache and that every key holds backend, model identity, the full
request (decoding parameters and seed included) and backend parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stereolens.models.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
)
from stereolens.models.cache import ResponseCache, cache_key

# bump when the meaning of a cached answer changes (e.g. a different token-boundary rule)
CACHE_SCHEMA = 1


def cache_payload(
    backend: str, identity: str, op: str, request: GenerationRequest | LoglikelihoodRequest, params: dict[str, Any]
) -> dict[str, Any]:
    return {
        "schema": CACHE_SCHEMA,
        "backend": backend,
        "identity": identity,
        "op": op,
        "request": request.as_key(),
        "params": params,
    }


def generation_to_json(gen: Generation) -> dict[str, Any]:
    return {
        "text": gen.text,
        "finish_reason": gen.finish_reason,
        "top_logprobs": None if gen.top_logprobs is None else [dict(d) for d in gen.top_logprobs],
    }


def generation_from_json(obj: dict[str, Any], *, cached: bool) -> Generation:
    top = obj.get("top_logprobs")
    return Generation(
        text=obj["text"],
        finish_reason=obj.get("finish_reason"),
        top_logprobs=None if top is None else tuple(dict(d) for d in top),
        cached=cached,
    )


def loglikelihood_to_json(ll: Loglikelihood) -> dict[str, Any]:
    return {"logprob": ll.logprob, "n_tokens": ll.n_tokens, "is_greedy": ll.is_greedy}


def loglikelihood_from_json(obj: dict[str, Any], *, cached: bool) -> Loglikelihood:
    return Loglikelihood(
        logprob=float(obj["logprob"]), n_tokens=int(obj["n_tokens"]), is_greedy=obj.get("is_greedy"), cached=cached
    )


class CachedBatch:
    """One call's requests split into cache hits and work still to do.

    Identical requests in one call are computed once.  The backend computes the
    indices in :attr:`todo` and calls :meth:`store` as each answer arrives, which
    writes its cache entry at once: a run killed halfway keeps everything it finished.
    """

    def __init__(
        self,
        cache: ResponseCache,
        requests: Sequence[Any],
        payload_of: Callable[[Any], dict[str, Any]],
        from_json: Callable[..., Any],
    ) -> None:
        self.cache = cache
        self.requests = list(requests)
        self._payload_of = payload_of
        self._from_json = from_json
        self.results: list[Any] = [None] * len(self.requests)
        self.todo: list[int] = []
        self._duplicates: dict[int, list[int]] = {}
        first_of: dict[str, int] = {}
        for i, req in enumerate(self.requests):
            payload = payload_of(req)
            hit = cache.get(payload)
            if hit is not None:
                self.results[i] = from_json(hit, cached=True)
                continue
            key = cache_key(payload)
            if key in first_of:
                self._duplicates.setdefault(first_of[key], []).append(i)
                continue
            first_of[key] = i
            self.todo.append(i)
        # every backend answers through store(): one progress bar here covers generation and scoring of every
        # model (done, rate, time left); tqdm stays quiet when stderr is not a terminal (disable=None)
        from tqdm import tqdm

        kind = str(payload_of(self.requests[self.todo[0]]).get("op", "")) if self.todo else ""
        self._bar = tqdm(total=len(self.todo), unit="req", desc=f"model {kind}".strip(), disable=None,
                         leave=False) if len(self.todo) > 1 else None

    def store(self, i: int, answer: dict[str, Any]) -> None:
        self.cache.put(self._payload_of(self.requests[i]), answer)
        self.results[i] = self._from_json(answer, cached=False)
        if self._bar is not None:
            self._bar.update(1)

    def finish(self) -> list[Any]:
        if self._bar is not None:
            self._bar.close()
        for first, dups in self._duplicates.items():
            for i in dups:
                self.results[i] = self.results[first]
        missing = [i for i, r in enumerate(self.results) if r is None]
        if missing:  # a backend bug, not a user error
            raise RuntimeError(f"backend left {len(missing)} request(s) unanswered, first index {missing[0]}")
        return self.results


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text up to (not including) the earliest stop string, as OpenAI's ``stop`` behaves."""
    cut = len(text)
    for s in stop:
        if s:
            pos = text.find(s)
            if pos != -1 and pos < cut:
                cut = pos
    return text[:cut], cut < len(text)


def render_plain_chat(messages: Sequence[ChatMessage]) -> str:
    """Fallback chat rendering for models without a chat template.

    One ``Role: content`` line per message and a trailing ``Assistant:`` so a base LM
    continues as the assistant; documented in the README so prompts are reproducible.
    """
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    lines.append("Assistant:")
    return "\n".join(lines)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def short_request(req: GenerationRequest | LoglikelihoodRequest, limit: int = 60) -> str:
    """A short, one-line description of a request for error messages."""
    if isinstance(req, GenerationRequest):
        if req.prompt is not None:
            text = req.prompt
        else:
            text = " | ".join(f"{m.role}: {m.content}" for m in req.messages or ())
        what = "generate"
    else:
        text = req.context + req.continuation
        what = "loglikelihood"
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{what} {text!r}"
