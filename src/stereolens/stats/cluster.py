"""Intervals resampled by cluster, for items that share a source.

An item-level interval treats every item as an independent draw.  When items share a source
(the pairs starter set's mirrored couples: "Bamon ... rich" / "Shudras ... servile" contrast the
same two groups; stereo instances of one stereotype; pcs responses to one scenario) their
outcomes are correlated and the item-level interval is too narrow.  The cluster bootstrap
resamples whole clusters with replacement, so that correlation is carried into the interval.

The quantity is a ratio of sums over items, ``sum(numerator) / sum(denominator)``: a share of
stereotypical wins among untied pairs (numerator 1 for a win, denominator 1 for an untied
pair), or a plain mean (denominator 1 everywhere).  A resample draws G cluster indices from the
G clusters and recomputes the ratio of the drawn clusters' sums; the interval is scipy's BCa
(``scipy.stats.bootstrap(method="BCa")`` over the cluster indices, so its jackknife leaves out
one cluster at a time), seeded.  With one item per cluster it is exactly the item-level
Monte-Carlo BCa interval of the same seed (``stats.bias.bca_interval``).

Too few clusters make any cluster-resampled interval unreliable (the resamples take only a
handful of distinct values); below ``MIN_CLUSTERS`` no interval is given (ours: a common rule
of thumb, stated wherever the interval is shown).

One entry point for every study: ``cluster_ratio_interval`` (crows, pairs and stereo give a share of untied
pairs; pcs a pooled mean of its cells, with denominators of 1).  ``stats.ranking`` resamples clusters too, for
statistics that are not sums over items (an AUC, a rank correlation).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats

# fewer clusters than this give no cluster-resampled interval (ours)
MIN_CLUSTERS = 5


@dataclass(frozen=True)
class ClusterInterval:
    estimate: float  # sum(numerator) / sum(denominator) over every item
    low: float  # NaN when fewer than MIN_CLUSTERS clusters (or no denominator)
    high: float
    n_clusters: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def cluster_ratio_interval(numerators, denominators, clusters, *, confidence: float = 0.95, n_resamples: int = 2000,
                           seed: int = 0, min_clusters: int = MIN_CLUSTERS) -> ClusterInterval:
    """The BCa interval of ``sum(numerators) / sum(denominators)`` resampling whole ``clusters`` (aligned
    arrays, one entry per item; see the module docstring)."""
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    keys = pd.Series(np.asarray(clusters, dtype=object)).astype(str).to_numpy()
    if not (len(num) == len(den) == len(keys)):
        raise ValueError(f"numerators, denominators and clusters must align: {len(num)}, {len(den)}, {len(keys)}")
    total = float(den.sum())
    estimate = float(num.sum()) / total if total else math.nan
    # per cluster: the sums of its items (clusters in order of first appearance: the draw does not depend on names)
    codes, uniques = pd.factorize(keys)
    g = len(uniques)
    num_c = np.bincount(codes, weights=num, minlength=g) if g else np.zeros(0)
    den_c = np.bincount(codes, weights=den, minlength=g) if g else np.zeros(0)
    # a cluster without a denominator (all its pairs tied) adds nothing to either sum: it cannot move the ratio
    used = den_c > 0
    num_c, den_c = num_c[used], den_c[used]
    n_clusters = int(used.sum())
    if n_clusters < max(min_clusters, 2) or not total:
        return ClusterInterval(estimate, math.nan, math.nan, n_clusters)
    ratios = num_c / den_c
    if np.all(ratios == ratios[0]):
        # every cluster has the same ratio: every resample gives it, BCa is undefined and the interval is that point
        return ClusterInterval(estimate, estimate, estimate, n_clusters)

    def ratio(idx, axis=-1):
        idx = np.asarray(idx, dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return num_c[idx].sum(axis=axis) / den_c[idx].sum(axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on near-degenerate resamples; the interval is still reported
        res = stats.bootstrap((np.arange(n_clusters),), ratio, confidence_level=confidence, n_resamples=n_resamples,
                              method="BCa", vectorized=True, random_state=np.random.default_rng(seed))
    return ClusterInterval(estimate, float(res.confidence_interval.low), float(res.confidence_interval.high),
                           n_clusters)
