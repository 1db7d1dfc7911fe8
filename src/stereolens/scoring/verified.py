"""Decision-exact reduced precision: score in bfloat16, rescore in float32 what the rounding could decide.

A study's decision compares scores within a group: a CrowS pair (stereotypical against
anti-stereotypical sentence), a minimal pair with its control, a StereoSet triple (the order of its
three candidates).  A half-precision model moves each score by a rounding error; a decision changes
only where the margin between two scores of a group moves across zero.  So (:func:`verify_decisions`):

1. every group is scored with the half-precision model, except that a causal model's first
   :data:`~stereolens.models.base.VERIFY_FLOAT32_PREFIX` targets of a sequence (those predicted from BOS and
   at most three tokens after it) are float32's: there the half-precision error is heavy-tailed (a
   small model's first positions can become attention sinks, and a rounding decides whether they do), so a
   sample cannot bound it (engine ``FLOAT32_PREFIX_ATTR``; docs/methods.md);
2. a fixed random sample of :data:`CALIBRATION_GROUPS` groups is scored again in float32; the largest
   margin error on it per scored token of the two compared items,
   ``rate = max |(half_i - half_j) - (float32_i - float32_j)| / (n_i + n_j)``, is the error model of
   summed scores (and the largest margin error of per-token means, ``mean_rate``, that of means);
3. every other group with two members whose margin is at most ``SAFETY * rate * (n_i + n_j)``
   (``SAFETY * mean_rate`` for means: :data:`VIEWS`), plus :data:`ROUNDING_SLACK`, is rescored in float32,
   all of its members, and those float32 scores replace the half-precision ones.

Every decision then equals float32's as long as no margin's error exceeds ``SAFETY`` times the
sample's largest.  The margin, not each score, is calibrated: the two sentences of a pair share most
of their tokens and most of their rounding, so a margin errs far less than its two scores.
``benchmarks/precision.py`` (method ``bf16_verify_fp32``) checks every decision of CrowS-Pairs against
float32 and reports how far the sample's rate sits below the whole set's (the margin SAFETY leaves);
docs/methods.md ("Decision-exact reduced precision") derives the bound.

Scores rescored (and the calibration sample) are float32's exactly: the same engine, the same
model weights loaded in float32 (:meth:`stereolens.models.hf.HFModel.float32_reference`), the same
cache entries a float32 run writes.  Each item is labelled with the precision its score came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stereolens.errors import ConfigError
from stereolens.models.base import VERIFY_FLOAT32_PREFIX
from stereolens.scoring.types import SentenceScore

# groups scored in both precisions at the start of a run, to measure the half-precision error
CALIBRATION_GROUPS = 64
# the bound is this many times the largest per-token error seen in the calibration sample
SAFETY = 3.0
# added to every bound: CrowS-Pairs' metric.py compares scores rounded to 3 decimals, and two scores
# whose margin exceeds 0.001 in both precisions round to the same order in both
ROUNDING_SLACK = 1e-3
# the sample is drawn with this seed, so a rerun rescores the same groups
CALIBRATION_SEED = 0
EXACT_LABEL = "fp32"
LABELS = {"bfloat16": "bf16", "float16": "fp16", "float32": EXACT_LABEL}

# scores the members of each of the given groups with the given model: one list of scores per group
GroupScorer = Callable[[Any, list[int]], list[list[SentenceScore]]]


def _view(s: SentenceScore, view: str) -> float:
    return s.logprob if view == "sum" else s.logprob / s.n_tokens if s.n_tokens else 0.0


@dataclass(frozen=True)
class ErrorModel:
    """How far half precision can move a decision: the largest margin error seen on the calibration sample,
    per scored token of the two compared items (``rate``, summed scores) or outright (``mean_rate``, per-token
    means), each times ``safety``."""

    rate: float  # largest |half margin - float32 margin| / (n_i + n_j) over the sample's pairs of members (nats)
    mean_rate: float  # largest |half - float32| difference of two members' per-token means (nats)
    safety: float
    calibration_items: int

    def bound(self, n_tokens: int, *, mean: bool = False) -> float:
        """One item's share of a margin's bound: a margin between items i and j is protected up to
        ``bound(n_i) + bound(n_j)`` (``safety * rate * (n_i + n_j)``; for means ``safety * mean_rate``)."""
        return self.safety * (self.mean_rate / 2 if mean else self.rate * n_tokens)


def margin_error_rate(half: Sequence[Sequence[SentenceScore]], exact: Sequence[Sequence[SentenceScore]], *,
                      mean: bool = False) -> float:
    """The largest margin error over groups scored both ways: for every two members i, j of a group,
    ``|(half_i - half_j) - (exact_i - exact_j)|`` divided by ``n_i + n_j`` (of summed scores) or, with
    ``mean``, of their per-token means, undivided.  Members with no scored token count for nothing."""
    worst = 0.0
    for fast_group, exact_group in zip(half, exact, strict=True):
        for i in range(len(exact_group)):
            for j in range(i + 1, len(exact_group)):
                a, b = exact_group[i], exact_group[j]
                if not (a.n_tokens and b.n_tokens):
                    continue
                view = "mean" if mean else "sum"
                error = abs((_view(fast_group[i], view) - _view(fast_group[j], view)) - (_view(a, view) - _view(b, view)))
                worst = max(worst, error if mean else error / (a.n_tokens + b.n_tokens))
    return worst


def error_rate(half: Sequence[SentenceScore], exact: Sequence[SentenceScore]) -> float:
    """The largest ``|half - exact| / n_tokens`` over single items scored both ways (items with no token: none):
    what a margin error could reach if the two members' errors did not correlate (benchmarks/precision.py)."""
    rates = [abs(a.logprob - b.logprob) / b.n_tokens for a, b in zip(half, exact, strict=True) if b.n_tokens]
    return max(rates, default=0.0)


def near_boundary(values: Sequence[Sequence[float]], bounds: Sequence[Sequence[float]], slack: float = 0.0
                  ) -> list[int]:
    """The groups whose decision the error could change: two members whose values differ by at most the sum
    of their bounds plus ``slack`` (a difference exactly at that sum counts)."""
    near = []
    for g, (vals, bnds) in enumerate(zip(values, bounds, strict=True)):
        if any(abs(vals[i] - vals[j]) <= bnds[i] + bnds[j] + slack
               for i in range(len(vals)) for j in range(i + 1, len(vals))):
            near.append(g)
    return near


def calibration_sample(n_groups: int, size: int = CALIBRATION_GROUPS, seed: int = CALIBRATION_SEED) -> list[int]:
    """The groups scored in both precisions: ``size`` drawn without replacement with ``seed`` (all when fewer)."""
    if n_groups <= size:
        return list(range(n_groups))
    return sorted(int(g) for g in np.random.default_rng(seed).choice(n_groups, size=size, replace=False))


@dataclass(frozen=True)
class Verified:
    """Each group's scores (float32's where rescored), each group's precision label, and how it went."""

    scores: list[list[SentenceScore]]
    precision: list[str]
    error_model: ErrorModel
    calibration: list[int]
    rescored: list[int]  # groups rescored for being near the boundary (the calibration sample not included)
    fast_label: str
    # wall seconds of the three passes (fast, calibration, rescoring): how a run went, not what it scored
    seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def summary(self) -> dict[str, Any]:
        """What a study's summary says about the mode: how many groups carry float32 scores, and why."""
        exact = sum(1 for p in self.precision if p == EXACT_LABEL)
        return {
            "mode": f"{self.fast_label}, decisions verified in {EXACT_LABEL}",
            "groups": len(self.precision),
            "groups_fp32": exact,
            "groups_rescored_near_boundary": len(self.rescored),
            "calibration_groups": len(self.calibration),
            "error_rate_per_token": self.error_model.rate,
            "error_of_mean_margins": self.error_model.mean_rate,
            "safety_factor": self.error_model.safety,
            # causal scoring only: a masked model's positions each see the whole sentence
            "float32_prefix_targets": VERIFY_FLOAT32_PREFIX,
        }


# what a decision may compare: a group's summed log-probabilities, or their per-token means (CrowS-Pairs'
# length-controlled view, the pairs study's decoder means, StereoSet's mean score)
VIEWS = ("sum", "mean")


def verify_decisions(score: GroupScorer, fast: Any, exact: Any, n_groups: int, *, views: Sequence[str] = VIEWS,
                     fast_label: str = "bf16", calibration_groups: int = CALIBRATION_GROUPS,
                     safety: float = SAFETY, slack: float = ROUNDING_SLACK) -> Verified:
    """Score ``n_groups`` groups with ``fast`` and rescore with ``exact`` those whose decision the error could change.

    ``score(model, groups)`` scores the members of the listed groups with one of the two models.  A group
    is near the boundary when it is so in any of ``views`` (:data:`VIEWS`): by default both the sums and
    the per-token means of its members are protected, whichever a study's decisions compare; ``slack``
    (:data:`ROUNDING_SLACK`) widens every bound so that decisions on rounded scores are protected too.
    """
    if n_groups == 0:
        return Verified([], [], ErrorModel(0.0, 0.0, safety, 0), [], [], fast_label)
    t0 = time.perf_counter()
    scores = score(fast, list(range(n_groups)))
    t1 = time.perf_counter()
    calibration = calibration_sample(n_groups, calibration_groups)
    exact_calibration = score(exact, calibration)
    t2 = time.perf_counter()
    sampled = [scores[g] for g in calibration]
    model = ErrorModel(margin_error_rate(sampled, exact_calibration), margin_error_rate(sampled, exact_calibration, mean=True),
                       safety, sum(len(part) for part in exact_calibration))
    precision = [fast_label] * n_groups
    for g, part in zip(calibration, exact_calibration):
        scores[g], precision[g] = part, EXACT_LABEL
    rest = [g for g in range(n_groups) if precision[g] != EXACT_LABEL]
    near: set[int] = set()
    for view in views:
        if view not in VIEWS:
            raise ValueError(f"unknown decision view {view!r} (known: {', '.join(VIEWS)})")
        values = [[_view(s, view) for s in scores[g]] for g in rest]
        bounds = [[model.bound(s.n_tokens, mean=view == "mean") for s in scores[g]] for g in rest]
        near.update(rest[k] for k in near_boundary(values, bounds, slack))
    rescored = sorted(near)
    for g, part in zip(rescored, score(exact, rescored) if rescored else []):
        scores[g], precision[g] = part, EXACT_LABEL
    return Verified(scores, precision, model, calibration, rescored, fast_label,
                    (t1 - t0, t2 - t1, time.perf_counter() - t2))


# ---------------------------------------------------------------- the two models of a backend


def verifying_models(lm: Any) -> tuple[Any, Any, str] | None:
    """``(fast, exact, fast_label)`` when ``lm`` is configured with ``model.verify`` and computes in half precision;
    None when it scores in one precision (no ``verify``, or a dtype that fell back to float32)."""
    spec = getattr(lm, "spec", None)
    if spec is None or getattr(spec, "verify", None) is None:
        return None
    dtype = str(spec.dtype or "float32")
    if dtype == "float32":
        return None  # nothing to verify: the model already computes in float32
    reference = getattr(lm, "float32_reference", None)
    if reference is None:
        raise ConfigError(f"model.verify={spec.verify} needs a model scored in this process (executor.kind=local), "
                          f"not {type(lm).__name__}")
    return lm, reference(), LABELS.get(dtype, dtype)


def pair_members(scored: Any) -> list[list[SentenceScore]]:
    """The two scores of each row of a :func:`stereolens.scoring.score_pairs` table, stereo then anti."""
    return [[SentenceScore(float(a), int(na), bool(ta)), SentenceScore(float(b), int(nb), bool(tb))]
            for a, na, ta, b, nb, tb in zip(scored["score_stereo"], scored["n_tokens_stereo"], scored["truncated_stereo"],
                                            scored["score_anti"], scored["n_tokens_anti"], scored["truncated_anti"])]


def with_pair_scores(pairs: Any, verified: Verified) -> Any:
    """A copy of ``pairs`` with the verified scores of each group's first two members as ``score_stereo``,
    ``score_anti`` (and their ``n_tokens_*``, ``truncated_*``) and the ``precision`` column."""
    out = pairs.copy()
    for k, name in enumerate(("stereo", "anti")):
        out[f"score_{name}"] = [g[k].logprob for g in verified.scores]
        out[f"n_tokens_{name}"] = [g[k].n_tokens for g in verified.scores]
        out[f"truncated_{name}"] = [g[k].truncated for g in verified.scores]
    out["precision"] = verified.precision
    return out


def verified_pairs(lm: Any, pairs: Any, metric: str, **options: Any) -> tuple[Any, Verified]:
    """:func:`stereolens.scoring.score_pairs` of ``pairs`` under a verifying backend: the scored table with a
    ``precision`` column per pair, and the :class:`Verified` record.  The pair's decision is which of its two
    sentences scores higher."""
    from stereolens.scoring.engine import score_pairs

    fast, exact, label = verifying_models(lm)
    verified = verify_decisions(lambda model, groups: pair_members(score_pairs(model, None, pairs.iloc[groups], metric,
                                                                               **options)),
                                fast, exact, len(pairs), fast_label=label)
    return with_pair_scores(pairs, verified), verified
