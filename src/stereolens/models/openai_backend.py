"""Chat and completion models behind any OpenAI-compatible endpoint.

OpenAI, OpenRouter, vLLM, Ollama and llama.cpp's server all speak this wire format.
The endpoint comes from ``spec.base_url`` or ``OPENAI_BASE_URL``; the key only from
``OPENAI_API_KEY`` (a key in a config file ends up in git and in MLflow params).

We disable the client's own retries and retry ourselves so that the policy (which
errors, how many times, how long to wait) is the one in the config and so the final
error can name the model and the request.  Every answer is written to the response
cache as soon as it arrives, so a killed run resumes and a rerun makes no calls.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import urlparse

from stereolens.errors import ModelLoadError, RemoteCallError
from stereolens.models.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    LanguageModel,
    Loglikelihood,
    LoglikelihoodRequest,
    ModelSpec,
    UnsupportedRequest,
)
from stereolens.models.cache import ResponseCache
from stereolens.models.common import (
    CachedBatch,
    cache_payload,
    first_line,
    generation_from_json,
    loglikelihood_from_json,
    render_plain_chat,
    short_request,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
# Local servers (vLLM, Ollama, llama.cpp) accept any key but the client insists on one.
LOCAL_PLACEHOLDER_KEY = "sk-local-no-key"
MAX_BACKOFF_S = 60.0
RETRY_STATUS = {408, 409, 429}  # plus every 5xx


def resolve_base_url(spec: ModelSpec) -> str:
    return (spec.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def is_local_url(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOCAL_HOSTS


class MalformedResponse(Exception):
    """A 200 whose body is not a usable answer (no choices, no message or text); retried."""


def _first_choice(resp: Any) -> Any:
    choices = getattr(resp, "choices", None)
    if not choices:
        raise MalformedResponse("no choices in the response")
    return choices[0]


class OpenAIModel(LanguageModel):
    """Shared machinery; :class:`OpenAIChatModel` and :class:`OpenAICompletionModel` add the calls."""

    backend = "openai"

    def __init__(self, spec: ModelSpec, cache: ResponseCache | None = None) -> None:
        import openai

        self.spec = spec
        self.cache = cache if cache is not None else ResponseCache()
        self.base_url = resolve_base_url(spec)
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            if not is_local_url(self.base_url):
                raise ModelLoadError(
                    f"OPENAI_API_KEY is not set; model {spec.name!r} at {self.base_url} needs it "
                    "(export it in the environment; keys never go in config)"
                )
            key = LOCAL_PLACEHOLDER_KEY
        self._openai = openai
        self.client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=spec.timeout_s)
        self.calls = 0  # HTTP attempts made (retries included); tests and logs read it
        self._calls_lock = threading.Lock()

    @property
    def identity(self) -> str:
        # the endpoint is part of the identity: the same name on two servers is two models
        rev = f"@{self.spec.revision}" if self.spec.revision else ""
        return f"openai:{self.base_url}:{self.spec.name}{rev}"

    def _params(self) -> dict[str, Any]:
        return {"kind": self.spec.kind}

    # --- the retry loop ---------------------------------------------------------------

    def _call_with_retries(
        self,
        fn: Callable[[], Any],
        request: GenerationRequest | LoglikelihoodRequest,
        parse: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Call ``fn`` until it gives a usable answer; ``parse`` turns the response into one.

        A 200 is not yet an answer: a body that does not decode, fails the client's
        validation, or lacks its choice/message/text (``parse`` raises
        :class:`MalformedResponse`) is retried like a 5xx, since proxies and overloaded
        servers send such bodies and a second attempt usually succeeds.
        """
        attempts = self.spec.max_retries + 1
        last = ""
        for attempt in range(attempts):
            with self._calls_lock:
                self.calls += 1
            delay: float | None = None
            try:
                response = fn()
                return response if parse is None else parse(response)
            except self._openai.APIStatusError as exc:
                status = exc.status_code
                if status in RETRY_STATUS or status >= 500:
                    last = f"HTTP {status}"
                    delay = self._retry_after(exc)
                else:
                    raise RemoteCallError(
                        f"model {self.spec.name!r} at {self.base_url} refused {short_request(request)}: "
                        f"HTTP {status} {first_line(exc)}"
                    ) from exc
            except self._openai.APITimeoutError:
                last = f"timeout after {self.spec.timeout_s:g}s"
            except self._openai.APIConnectionError as exc:
                last = f"connection error ({first_line(exc)})"
            except (MalformedResponse, self._openai.APIResponseValidationError) as exc:
                last = f"malformed response ({first_line(exc)})"
            except ValueError as exc:
                # a truncated body (json.JSONDecodeError) and pydantic's ValidationError are ValueErrors
                last = f"malformed response ({type(exc).__name__}: {first_line(exc)})"
            if attempt + 1 < attempts:
                time.sleep(self._backoff(attempt, delay))
        raise RemoteCallError(
            f"model {self.spec.name!r} at {self.base_url} failed {short_request(request)} "
            f"after {attempts} attempt(s): {last}"
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        # exponential with "equal jitter": never less than half the step (so a burst of
        # 429s really backs off) and never synchronised across threads
        step = min(MAX_BACKOFF_S, self.spec.retry_base_s * (2**attempt))
        delay = step / 2 + random.uniform(0, step / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_BACKOFF_S))
        return delay

    @staticmethod
    def _retry_after(exc: Any) -> float | None:
        try:
            value = exc.response.headers.get("retry-after")
            return float(value) if value is not None else None
        except (AttributeError, TypeError, ValueError):
            return None

    # --- concurrency + cache ----------------------------------------------------------

    def _run(self, op: str, requests: Sequence[Any], from_json, call_one) -> list[Any]:
        params = self._params()
        batch = CachedBatch(
            self.cache,
            requests,
            lambda r: cache_payload(self.backend, self.identity, op, r, params),
            from_json,
        )
        if batch.todo:
            pool = ThreadPoolExecutor(max_workers=max(1, self.spec.max_concurrency), thread_name_prefix="openai")
            try:
                # each worker stores its answer itself, so entries land on disk as they arrive
                futures = [
                    pool.submit(lambda i: batch.store(i, call_one(batch.requests[i])), i) for i in batch.todo
                ]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    # stop queued requests; those already running finish and are cached
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise failed[0].exception()
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        return batch.finish()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self._run("generate", requests, generation_from_json, self._generate_one)

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        if not self.supports_loglikelihood:
            raise UnsupportedRequest(
                f"model {self.spec.name!r} ({self.spec.kind}) cannot score continuations: "
                "use an OpenAI-compatible *completions* endpoint that supports echo+logprobs"
            )
        return self._run("loglikelihood", requests, loglikelihood_from_json, self._loglikelihood_one)

    def _decoding(self, req: GenerationRequest) -> dict[str, Any]:
        """Request fields both endpoints take; the seed is sent so sampled answers can repeat."""
        kwargs: dict[str, Any] = {
            "model": self.spec.name,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "seed": req.seed,
        }
        if req.stop:
            kwargs["stop"] = list(req.stop)
        return kwargs

    def _generate_one(self, req: GenerationRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _loglikelihood_one(self, req: LoglikelihoodRequest) -> dict[str, Any]:
        raise NotImplementedError


def _as_chat_messages(req: GenerationRequest) -> list[dict[str, str]]:
    if req.messages is not None:
        return [{"role": m.role, "content": m.content} for m in req.messages]
    return [{"role": "user", "content": req.prompt or ""}]


class OpenAIChatModel(OpenAIModel):
    """``/chat/completions``: generation, with per-token top log-probabilities when asked."""

    @property
    def supports_loglikelihood(self) -> bool:
        # a chat endpoint only scores what it generates itself, not a given continuation
        return False

    def _generate_one(self, req: GenerationRequest) -> dict[str, Any]:
        kwargs = {"messages": _as_chat_messages(req), **self._decoding(req)}
        if req.top_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = req.top_logprobs
        return self._call_with_retries(
            lambda: self.client.chat.completions.create(**kwargs), req, lambda resp: self._parse_chat(resp, req)
        )

    def _parse_chat(self, resp: Any, req: GenerationRequest) -> dict[str, Any]:
        choice = _first_choice(resp)
        if getattr(choice, "message", None) is None:
            raise MalformedResponse("the choice has no message")
        top = None
        if req.top_logprobs:
            content = getattr(choice.logprobs, "content", None) if choice.logprobs is not None else None
            if content is None:
                raise RemoteCallError(
                    f"model {self.spec.name!r} at {self.base_url} returned no logprobs for {short_request(req)} "
                    "(the endpoint does not support logprobs)"
                )
            top = [{alt.token: float(alt.logprob) for alt in (pos.top_logprobs or [])} for pos in content]
        return {"text": choice.message.content or "", "finish_reason": choice.finish_reason, "top_logprobs": top}


class OpenAICompletionModel(OpenAIModel):
    """``/completions``: generation, and log-likelihood through ``echo`` + ``logprobs``.

    Set ``extra: {supports_loglikelihood: false}`` for endpoints without echo (current
    OpenAI models); then :meth:`loglikelihood` raises instead of sending doomed calls.
    """

    @property
    def supports_loglikelihood(self) -> bool:
        return bool(self.spec.extra.get("supports_loglikelihood", True))

    def _generate_one(self, req: GenerationRequest) -> dict[str, Any]:
        prompt = req.prompt if req.prompt is not None else render_plain_chat(req.messages or ())
        kwargs = {"prompt": prompt, **self._decoding(req)}
        if req.top_logprobs:
            kwargs["logprobs"] = req.top_logprobs
        return self._call_with_retries(
            lambda: self.client.completions.create(**kwargs), req, lambda resp: self._parse_completion(resp, req)
        )

    def _parse_completion(self, resp: Any, req: GenerationRequest) -> dict[str, Any]:
        choice = _first_choice(resp)
        if getattr(choice, "text", None) is None:
            raise MalformedResponse("the choice has no text")
        top = None
        if req.top_logprobs:
            if choice.logprobs is None or choice.logprobs.top_logprobs is None:
                raise RemoteCallError(
                    f"model {self.spec.name!r} at {self.base_url} returned no logprobs for {short_request(req)}"
                )
            top = [{k: float(v) for k, v in (pos or {}).items()} for pos in choice.logprobs.top_logprobs]
        return {"text": choice.text, "finish_reason": choice.finish_reason, "top_logprobs": top}

    def _loglikelihood_one(self, req: LoglikelihoodRequest) -> dict[str, Any]:
        context = req.context if req.messages is None else render_plain_chat(req.messages) + req.context
        prompt = context + req.continuation
        # max_tokens=1 rather than 0: several servers (vLLM among them) reject 0; the one
        # generated token lies past the prompt and is dropped below, as lm-eval does
        kwargs = {"model": self.spec.name, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                  "echo": True, "logprobs": 1, "seed": 0}
        return self._call_with_retries(
            lambda: self.client.completions.create(**kwargs),
            req,
            lambda resp: self._parse_loglikelihood(resp, req, context, prompt),
        )

    def _parse_loglikelihood(self, resp: Any, req: LoglikelihoodRequest, context: str, prompt: str) -> dict[str, Any]:
        choice = _first_choice(resp)
        if getattr(choice, "text", None) is None:
            raise MalformedResponse("the choice has no text")
        lp = choice.logprobs
        if lp is None or not lp.tokens or lp.token_logprobs is None:
            raise UnsupportedRequest(
                f"model {self.spec.name!r} at {self.base_url} gave no echoed logprobs for {short_request(req)}; "
                "set extra.supports_loglikelihood: false for this endpoint"
            )
        offsets = lp.text_offset
        if not offsets or len(offsets) != len(lp.tokens):
            # servers that omit text_offset: rebuild it from the token strings
            offsets, pos = [], 0
            for tok in lp.tokens:
                offsets.append(pos)
                pos += len(tok)
        first = lp.tokens[0]
        if (len(offsets) > 1 and lp.token_logprobs[0] is None and first and offsets[1] - offsets[0] == len(first)
                and not prompt.startswith(first)):
            # vLLM echoes the BOS it prepends as a token of its own ("<s>", "<bos>") whose text
            # offsets count although the echoed text lacks it: shift the rest back onto the prompt
            offsets = [offsets[0]] + [off - len(first) for off in offsets[1:]]
        total, n, greedy = 0.0, 0, True
        for k, (tok, off) in enumerate(zip(lp.tokens, offsets)):
            if off < len(context) or off >= len(prompt):
                continue  # context tokens, and the generated token past the prompt
            value = lp.token_logprobs[k]
            if value is None:
                continue
            total += float(value)
            n += 1
            if lp.top_logprobs is not None and k < len(lp.top_logprobs) and lp.top_logprobs[k]:
                best = max(lp.top_logprobs[k].items(), key=lambda kv: kv[1])[0]
                greedy = greedy and best == tok
        if n == 0 and req.continuation:
            raise UnsupportedRequest(
                f"model {self.spec.name!r} at {self.base_url}: no echoed token starts inside the continuation "
                f"of {short_request(req)}"
            )
        return {"logprob": total, "n_tokens": n, "is_greedy": greedy}


__all__ = ["OpenAIModel", "OpenAIChatModel", "OpenAICompletionModel", "ChatMessage"]
