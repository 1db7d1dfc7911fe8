"""StereoSet candidate scores given their context: the one scorer of the stereo and heads studies.

- masked LMs: PLL-word-l2r of the candidate's tokens with the context present
  (:func:`stereolens.scoring.score_masked_continuations`);
- causal LMs: log P(" " + candidate | context), encoded as lm-evaluation-harness does
  (:func:`stereolens.scoring.score_continuations`).

Every token the tokenizer gives the candidate is scored, ``[UNK]`` included:
StereoSet's reference code (moinnadeem/StereoSet ``code/dataloader.py`` and
``code/eval_generative_models.py``) scores every token id the tokenizer returns
for the scored text and has no rule that drops one, and an unknown word is part
of what the model is asked to predict.  Only the special tokens the tokenizer
adds around a text ([CLS], [SEP], BOS) are never scored.

``score`` turns the candidate's token log-probabilities into one number with
:func:`stereolens.stats.stereoset.aggregate_logprob` (``mean`` per token or ``sum``).

The heads study scores candidates with some attention heads switched off by
forward pre-hooks on the attention output projections; every path of the engine
(including the BERT fast paths of :mod:`stereolens.scoring.access`) calls those
projections, so the hooks fire.  It passes no cache: a cache entry is keyed by the
model's identity and knows nothing of which heads were off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stereolens.errors import ConfigError
from stereolens.stats.stereoset import DEFAULT_CANDIDATE_SCORE, aggregate_logprob

CANDIDATE_MODEL_KINDS = ("masked", "causal")


@dataclass(frozen=True)
class CandidateScores:
    """One score per candidate (``score``-aggregated natural-log probabilities) and its scored token count."""

    values: np.ndarray
    n_tokens: list[int]


def score_candidates(model: Any, tokenizer: Any | None, kind: str, contexts: Sequence[str], candidates: Sequence[str],
                     *, score: str = DEFAULT_CANDIDATE_SCORE, ids: Sequence[Any] | None = None, cache: Any | None = None,
                     progress: bool = False) -> CandidateScores:
    """Each candidate's score given its context under a ``kind`` (masked or causal) LM.

    ``model`` is a loaded backend (then ``tokenizer`` may be None) or a transformers model with its tokenizer;
    ``ids`` name the items in error messages.
    """
    from stereolens.scoring.engine import score_continuations, score_masked_continuations

    if kind not in CANDIDATE_MODEL_KINDS:
        raise ConfigError(f"StereoSet candidates are scored under masked or causal LMs, not kind={kind!r}")
    contexts, candidates = list(contexts), list(candidates)
    if kind == "masked":
        scored = score_masked_continuations(model, tokenizer, contexts, candidates, "pll_word_l2r", ids=ids,
                                            cache=cache, progress=progress)
    else:
        scored = score_continuations(model, tokenizer, contexts, [" " + c for c in candidates], ids=ids, cache=cache,
                                     progress=progress)
    values = np.asarray([aggregate_logprob(s.logprob, s.n_tokens, score) for s in scored], dtype=float)
    return CandidateScores(values, [s.n_tokens for s in scored])
