"""Sentence scoring: pseudo-log-likelihoods (PLL, PLL-word-l2r, CrowS-Pairs) and log-likelihoods.

Every study scores sentences through these functions; see METHODS.md for the
exact definitions.  All scores are natural logarithms.
"""

from stereolens.scoring.engine import (
    DEFAULT_BATCH_TOKENS,
    bias_score,
    option_probabilities,
    pair_summary,
    score_continuations,
    score_pair_lists,
    score_pairs,
    score_sentences,
    score_seq2seq,
)
from stereolens.scoring.types import MASKED_METRICS, METRICS, Metric, SentenceScore

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "MASKED_METRICS",
    "METRICS",
    "Metric",
    "SentenceScore",
    "bias_score",
    "option_probabilities",
    "pair_summary",
    "score_continuations",
    "score_pair_lists",
    "score_pairs",
    "score_sentences",
    "score_seq2seq",
]
