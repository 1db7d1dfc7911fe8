"""Result types and metric names shared by every scorer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

Metric = Literal["pll", "pll_word_l2r", "crows", "causal"]
MASKED_METRICS: tuple[str, ...] = ("pll", "pll_word_l2r", "crows")
METRICS: tuple[str, ...] = (*MASKED_METRICS, "causal")
# the masked-LM metrics a robustness pass compares (AmchiBias' PLL-word-l2r against plain PLL): a masked LM is
# scored a second time with the other one where a study's config asks, and its scores kept beside the headline's
ROBUSTNESS_METRICS = {"pll": "PLL", "pll_word_l2r": "PLL-word-l2r"}


def alternative_metrics(metric: str) -> list[str]:
    """The masked-LM metrics a robustness pass scores besides ``metric`` (none for a causal model)."""
    return [m for m in ROBUSTNESS_METRICS if m != metric] if metric in MASKED_METRICS else []


def alternative_columns(metric: str) -> tuple[str, str]:
    """Where a robustness pass stores the scores of ``metric`` beside the headline's (in a scored-pairs table)."""
    return f"score_stereo_{metric}", f"score_anti_{metric}"


@dataclass(frozen=True)
class SentenceScore:
    """Log-likelihood (natural log) of one sentence or continuation under one metric.

    ``logprob`` is the sum over the ``n_tokens`` scored tokens; ``tokens`` and
    ``token_logprobs`` are filled only when per-token output was asked for.
    ``truncated`` is true when the text was cut to the model's maximum length.
    """

    logprob: float
    n_tokens: int
    truncated: bool = False
    tokens: tuple[str, ...] | None = None
    token_logprobs: tuple[float, ...] | None = None

    @property
    def mean(self) -> float:
        """Per-token mean log-probability (NaN when nothing was scored)."""
        return self.logprob / self.n_tokens if self.n_tokens else math.nan

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = list(self.tokens) if self.tokens is not None else None
        d["token_logprobs"] = list(self.token_logprobs) if self.token_logprobs is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SentenceScore:
        return cls(
            logprob=float(d["logprob"]),
            n_tokens=int(d["n_tokens"]),
            truncated=bool(d.get("truncated", False)),
            tokens=tuple(d["tokens"]) if d.get("tokens") is not None else None,
            token_logprobs=tuple(d["token_logprobs"]) if d.get("token_logprobs") is not None else None,
        )
