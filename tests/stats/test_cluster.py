"""The cluster bootstrap (stats/cluster.py) against scipy's own bootstrap on the same draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stereolens.stats.bias import bca_interval
from stereolens.stats.cluster import cluster_bootstrap_interval


def test_one_value_per_cluster_is_the_item_bootstrap():
    values = np.random.default_rng(1).normal(size=25)
    labels = [f"{i:03d}" for i in range(25)]  # sorted as given, so the draws are the item bootstrap's
    assert cluster_bootstrap_interval(values, labels, seed=3) == pytest.approx(bca_interval(values, seed=3), abs=1e-12)


def test_equal_clusters_are_the_bootstrap_of_their_means():
    rng = np.random.default_rng(2)
    means = rng.normal(size=9)
    values = np.repeat(means, 4) + rng.normal(scale=0.1, size=36)
    labels = np.repeat([f"c{i}" for i in range(9)], 4)
    cluster_means = values.reshape(9, 4).mean(axis=1)
    # scipy's bootstrap over the 9 cluster means, same seed: the pooled mean of equal clusters is the mean of their
    # means, so the percentile interval is the same to rounding; BCa's bias correction counts the resamples below the
    # estimate, and rounding moves the ones that equal it, so there it agrees to a few thousandths
    for method, tolerance in (("percentile", 1e-12), ("BCa", 2e-3)):
        direct = stats.bootstrap((cluster_means,), np.mean, n_resamples=2000, method=method,
                                 random_state=np.random.default_rng(5)).confidence_interval
        assert cluster_bootstrap_interval(values, labels, seed=5, method=method) == pytest.approx(
            (direct.low, direct.high), abs=tolerance)
    # and it is wider than the interval that takes the 36 values as independent
    low, high = cluster_bootstrap_interval(values, labels, seed=5)
    item_low, item_high = bca_interval(values, seed=5)
    assert high - low > 1.5 * (item_high - item_low)


def test_unequal_clusters_weigh_by_their_items():
    values = np.array([1.0, 1.0, 1.0, 0.0, 5.0])
    labels = np.array(["a", "a", "a", "b", "c"])
    low, high = cluster_bootstrap_interval(values, labels, n_resamples=4000, method="percentile")
    # every resample's pooled mean lies between the cluster means 0 and 5 and the estimate is 8 / 5
    assert 0 <= low <= 1.6 <= high <= 5


def test_degenerate_clusters():
    assert all(math.isnan(x) for x in cluster_bootstrap_interval([0.2, 0.4], ["s1", "s1"]))  # one cluster
    assert cluster_bootstrap_interval([0.2, 0.4, 0.3, 0.3], ["a", "a", "b", "b"]) == pytest.approx((0.3, 0.3))  # equal means
    assert all(math.isnan(x) for x in cluster_bootstrap_interval([], []))
    with pytest.raises(ValueError, match="one cluster label per value"):
        cluster_bootstrap_interval([1.0, 2.0], ["a"])
