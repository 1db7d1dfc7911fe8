"""StereoSet candidate scores given the context, with some heads switched off.

The scorer is the stereo study's (:func:`stereolens.scoring.candidates.score_candidates`:
PLL-word-l2r for masked LMs, log P(candidate | context) for causal LMs, every token
of the candidate scored, ``[UNK]`` included), so the scores with every head on are
``stereolens stereo score``'s for the same model and items.  The head gate is its
only addition: the gate's hooks sit on the attention output projections, which
every path of the scoring engine calls.  No response cache is used, since a cache
entry knows nothing of which heads were off.

``score`` aggregates the candidate's token log-probabilities as the stereo study's
evaluation does: ``mean`` over its tokens (the default there) or ``sum``.
StereoSet's own generative score is not offered under a gate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch

from stereolens.errors import ConfigError
from stereolens.scoring.candidates import score_candidates
from stereolens.stats.stereoset import DEFAULT_CANDIDATE_SCORE
from stereolens.studies.heads.config import GATED_SCORES
from stereolens.studies.heads.gates import HeadGate


def candidate_scores(model, tokenizer, kind: str, contexts: Sequence[str], candidates: Sequence[str],
                     gate: HeadGate | None = None, gate_values: torch.Tensor | None = None, *,
                     score: str = DEFAULT_CANDIDATE_SCORE, ids: Sequence | None = None) -> np.ndarray:
    """Scores of ``candidates`` given ``contexts`` with ``gate_values`` (layers x heads) applied.

    ``score``: ``mean`` (per token) or ``sum`` of the candidate's token log-probabilities; ``ids`` name the
    items in error messages.
    """
    if score not in GATED_SCORES:
        raise ConfigError(f"the heads study scores StereoSet candidates by {' or '.join(GATED_SCORES)}, not {score!r}")
    with gate.applied(gate_values) if gate is not None else contextlib.nullcontext():
        return score_candidates(model, tokenizer, kind, contexts, candidates, score=score, ids=ids, cache=None).values
