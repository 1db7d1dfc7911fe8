"""The one interface every model backend implements.

Studies talk to models only through :class:`LanguageModel`: generation (chat or
plain completion) and log-likelihood of a continuation given a context.  Masked
LM methods (PLL, SeT) need the network itself and reach it through
:attr:`HFModel.model` / :attr:`HFModel.tokenizer` of the Hugging Face backends.

Requests are frozen dataclasses so that their full content (prompt, decoding
parameters, seed) can be hashed into the response cache key.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from stereolens.errors import StereolensError

ModelKind = Literal["masked", "causal", "seq2seq", "chat", "completion"]
# what ``model.dtype`` may say (``auto``: the checkpoint's own); the config schema and the registry check it
DTYPES = ("float32", "bfloat16", "float16", "auto")
# ``model.reduced_precision``: what to do when the device has no native kernels for a half-precision dtype
REDUCED_PRECISION_POLICIES = ("fall_back", "refuse", "emulate")
# ``model.verify``: the precision that rescores the near-boundary decisions of a half-precision model
# (scoring/verified.py); null scores everything in ``model.dtype``
VERIFY_PRECISIONS = ("fp32",)
# set (True) on a half-precision model whose vocabulary normaliser stays in its own dtype: the fast pass of
# model.verify (stereolens.scoring.verified), where speed matters and every close decision is rescored in float32;
# here, not in scoring/, so that loading a model does not import the scoring engine
HALF_NORMALISER_ATTR = "_stereolens_half_normaliser"
# set on that fast model to ``(positions, load)``: in causal scoring, every target predicted from at most
# ``positions`` tokens (the first ones after BOS) is scored by the float32 model ``load()`` returns, the rest in
# half precision.  Half precision is ill-conditioned there: a small model's first positions can turn into
# attention sinks, and a rounding decides whether they do (SmolLM2-135M: log P(" people" | BOS "Hispanic") is
# -6.58 in float32, -18.27 in bfloat16); docs/methods.md, "Decision-exact reduced precision"
FLOAT32_PREFIX_ATTR = "_stereolens_float32_prefix"
# how many: measured on all 1,508 CrowS-Pairs pairs with both embedded models (benchmarks/precision.py)
VERIFY_FLOAT32_PREFIX = 4


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class GenerationRequest:
    """One generation.  Either ``prompt`` (completion) or ``messages`` (chat)."""

    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    # number of alternatives per position to return with log-probabilities (0 = none)
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("GenerationRequest needs exactly one of prompt or messages")

    def as_key(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Generation:
    text: str
    finish_reason: str | None = None
    # per generated position: {token_text: logprob} for the top alternatives
    top_logprobs: tuple[dict[str, float], ...] | None = None
    cached: bool = False


@dataclass(frozen=True)
class LoglikelihoodRequest:
    """log P(continuation | context); for chat models ``context`` is a chat transcript."""

    context: str
    continuation: str
    messages: tuple[ChatMessage, ...] | None = None

    def as_key(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Loglikelihood:
    logprob: float  # summed over the continuation's tokens
    n_tokens: int
    is_greedy: bool | None = None
    cached: bool = False


@dataclass
class ModelSpec:
    """What a config names: enough to load a model and to identify it in a cache key."""

    name: str  # HF name, local path, or remote model id
    kind: ModelKind
    backend: Literal["hf", "openai"] = "hf"
    revision: str | None = None
    dtype: str | None = None  # "float32" | "bfloat16" | "float16"
    # bfloat16 / float16 without native kernels run emulated, up to hundreds of times slower than float32:
    # "fall_back" scores in float32 and says so, "refuse" stops, "emulate" runs it anyway (models/hardware.py)
    reduced_precision: str = "fall_back"
    # "fp32": score in ``dtype``, then rescore in float32 every decision the half-precision error could flip
    # (stereolens.scoring.verified); None: no rescoring
    verify: str | None = None
    device: str = "cpu"
    base_url: str | None = None  # OpenAI-compatible endpoint; else OPENAI_BASE_URL
    max_concurrency: int = 4
    max_retries: int = 5
    timeout_s: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # short label used in run names and reports (config ``id``)
    source: dict[str, Any] | None = None  # where a prepared model comes from (config ``source``)
    batch_size: int = 8  # HF backends: requests per forward pass
    retry_base_s: float = 1.0  # remote backends: first backoff delay, doubled per retry

    @property
    def label(self) -> str:
        return self.id or self.name


class UnsupportedRequest(StereolensError):
    """A request this model kind cannot serve (e.g. generation from a masked LM)."""


class LanguageModel(abc.ABC):
    """A model that can generate text and/or score continuations."""

    spec: ModelSpec

    @property
    @abc.abstractmethod
    def identity(self) -> str:
        """Backend, name and revision or content hash: changes whenever outputs could."""

    @property
    def supports_loglikelihood(self) -> bool:
        return True

    @property
    def takes_chat_messages(self) -> bool:
        """Whether chat messages reach this model in its own chat format (a chat endpoint, or a
        tokenizer's chat template).  False: they would be flattened into a plain ``Role: text``
        transcript, so a study talks to it with completion prompts instead."""
        return self.spec.kind == "chat"

    @abc.abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Generate for every request (cached; batched or concurrent as the backend allows)."""

    @abc.abstractmethod
    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[Loglikelihood]:
        """Score every continuation (cached)."""
