"""Intervals of a mean when items share a source (a cluster bootstrap).

The item-level bootstrap (``stats/bias.py`` ``bca_interval``) resamples items as if each were
an independent draw.  When items come in clusters that share their source (the features one
judge scored on one response, the languages of one translated scenario, the sentences of one
template), the items of a cluster move together and the item-level interval is too narrow.
The cluster bootstrap resamples whole clusters with replacement and recomputes the pooled mean
of their items, sum of values / number of values over the clusters drawn (so a large cluster
weighs as many items as it holds, as it does in the point estimate).

It is scipy's ``stats.bootstrap`` run on the clusters: the per-cluster sums and counts are
resampled together (``paired=True``) and the statistic is their ratio, so the interval method
(BCa by default, its jackknife over clusters) is scipy's.  With one item per cluster it is the
item-level bootstrap exactly (same draws for the same seed).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats


def cluster_bootstrap_interval(values, clusters, *, confidence: float = 0.95, n_resamples: int = 2000,
                               seed: int = 0, method: str = "BCa") -> tuple[float, float]:
    """Interval of the mean of ``values`` resampling whole ``clusters`` (one label per value).

    Clusters that all hold the same mean give no spread to resample: the interval collapses to the
    estimate, as ``bca_interval`` does for a constant sample.  A single cluster says nothing about
    how clusters vary, and no value says nothing at all: (NaN, NaN)."""
    values = np.asarray(values, dtype=float)
    labels = pd.Series(np.asarray(clusters)).astype(str).to_numpy()
    if values.shape != labels.shape:
        raise ValueError(f"one cluster label per value: {values.shape} values, {labels.shape} labels")
    if values.size == 0:
        return math.nan, math.nan
    grouped = pd.DataFrame({"value": values, "cluster": labels}).groupby("cluster", sort=True)["value"]
    sums, counts = grouped.sum().to_numpy(float), grouped.count().to_numpy(float)
    estimate = float(sums.sum() / counts.sum())
    means = sums / counts
    if len(sums) < 2:
        return math.nan, math.nan
    if np.all(means == means[0]):
        return estimate, estimate

    def pooled_mean(s, n, axis=-1):
        return np.sum(s, axis=axis) / np.sum(n, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on near-degenerate resamples; the interval is still reported
        res = stats.bootstrap((sums, counts), pooled_mean, paired=True, vectorized=True, n_resamples=n_resamples,
                              confidence_level=confidence, method=method, random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
