"""Sentence scoring: pseudo-log-likelihoods (PLL, PLL-word-l2r, CrowS-Pairs) and log-likelihoods.

Every study scores sentences through these functions; see docs/methods.md for the
exact definitions.  All scores are natural logarithms.

The engine (and with it torch) is imported on first use of one of its
functions, so that ``stereolens --help`` and the metric names stay cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from stereolens.scoring.types import MASKED_METRICS, METRICS, Metric, SentenceScore

_ENGINE_EXPORTS = (
    "DEFAULT_BATCH_TOKENS",
    "option_probabilities",
    "score_continuations",
    "score_masked_continuations",
    "score_pair_lists",
    "score_pairs",
    "score_sentences",
    "score_seq2seq",
    "scoring_setup",
)

__all__ = ["MASKED_METRICS", "METRICS", "Metric", "SentenceScore", *_ENGINE_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _ENGINE_EXPORTS:
        return getattr(importlib.import_module("stereolens.scoring.engine"), name)
    raise AttributeError(f"module 'stereolens.scoring' has no attribute {name!r}")
