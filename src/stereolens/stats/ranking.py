"""How well a score ranks one class of items above another, with intervals that respect clustered items.

- :func:`auc`: the probability that a random item of the positive class scores above a random item of the
  negative class, ties counting one half: the Mann-Whitney U of the positives divided by n_pos x n_neg
  (computed from average ranks).
- :func:`cluster_bootstrap_interval`: a percentile interval of any statistic of the rows, resampling whole
  clusters with replacement (the rows of one identity share its template sentences, so they are not
  independent draws), seeded.
- :func:`spearman`: Spearman's rank correlation and its two-sided p-value (``scipy.stats.spearmanr``), None
  where a side is constant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """P(score of a positive > score of a negative) + P(tie) / 2; None without an item in either class."""
    pos, neg = np.asarray(positive, dtype=float), np.asarray(negative, dtype=float)
    n_pos, n_neg = len(pos), len(neg)
    if not n_pos or not n_neg:
        return None
    ranks = stats.rankdata(np.concatenate([pos, neg]))  # average ranks: a tie counts one half either way
    u_pos = ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2
    return float(u_pos / (n_pos * n_neg))


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """(rho, two-sided p) of Spearman's correlation; (None, None) with fewer than three pairs or a constant side."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None, None
    result = stats.spearmanr(a, b)
    return float(result.statistic), float(result.pvalue)


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    n_resamples: int      # resamples asked for
    n_defined: int        # resamples where the statistic was defined (both classes drawn, ...)


def cluster_bootstrap_interval(
    statistic: Callable[[np.ndarray], float | None], clusters: Sequence, *, n_resamples: int = 1000,
    confidence: float = 0.95, seed: int = 0,
) -> Interval:
    """Percentile interval of ``statistic(row_indices)`` over ``n_resamples`` draws of whole clusters with
    replacement (as many clusters as there are, each drawn cluster contributing all its rows, a cluster drawn
    twice twice).  Resamples where the statistic is undefined (None or NaN) are left out and counted; with no
    cluster, fewer than two, or no defined resample the interval is (None, None)."""
    codes, _ = _codes(clusters)
    n_clusters = int(codes.max()) + 1 if len(codes) else 0
    if n_clusters < 2 or n_resamples < 1:
        return Interval(None, None, n_resamples, 0)
    rows_of = [np.flatnonzero(codes == c) for c in range(n_clusters)]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        drawn = rng.integers(0, n_clusters, size=n_clusters)
        value = statistic(np.concatenate([rows_of[c] for c in drawn]))
        if value is not None and np.isfinite(value):
            values.append(value)
    if not values:
        return Interval(None, None, n_resamples, 0)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high), n_resamples, len(values))


def _codes(clusters: Sequence) -> tuple[np.ndarray, list]:
    """Integer codes 0..k-1 of the cluster labels, in order of first appearance."""
    seen: dict = {}
    codes = np.array([seen.setdefault(c, len(seen)) for c in clusters], dtype=int)
    return codes, list(seen)
