"""The cluster bootstrap (stats/cluster.py): with one item per cluster it is the item-level BCa interval of the
same seed, its width follows statsmodels' cluster-robust standard error, clustered duplicates widen it; the pooled
mean against scipy's own bootstrap on the same draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from stereolens.stats.bias import bca_interval
from stereolens.stats.cluster import MIN_CLUSTERS, cluster_ratio_interval


def test_one_item_per_cluster_is_the_item_level_bca_interval_of_the_same_seed():
    rng = np.random.default_rng(3)
    wins = (rng.random(80) < 0.6).astype(float)
    result = cluster_ratio_interval(wins, np.ones(80), [f"c{i}" for i in range(80)], n_resamples=2000, seed=7)
    low, high = bca_interval(wins, n_resamples=2000, seed=7)
    assert result.estimate == pytest.approx(wins.mean())
    assert (result.low, result.high) == pytest.approx((low, high), abs=1e-12)
    assert result.n_clusters == 80


def test_the_interval_follows_statsmodels_cluster_robust_standard_error():
    """200 clusters of 1 to 6 items sharing a cluster effect: the bootstrap interval's half-width is close to
    1.96 x the cluster-robust (CR1) standard error of the mean that statsmodels' OLS on a constant gives."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 7, size=200)
    clusters = np.repeat(np.arange(200), sizes)
    shared = rng.normal(size=200)[clusters]
    wins = (shared + rng.normal(size=len(clusters)) > -0.3).astype(float)
    result = cluster_ratio_interval(wins, np.ones_like(wins), clusters, n_resamples=4000, seed=1)
    fit = sm.OLS(wins, np.ones((len(wins), 1))).fit(cov_type="cluster", cov_kwds={"groups": clusters})
    assert result.estimate == pytest.approx(float(fit.params[0]))
    half_width = (result.high - result.low) / 2
    assert half_width == pytest.approx(1.96 * float(fit.bse[0]), rel=0.1)
    # the item-level interval ignores the shared effect and is clearly narrower
    item_low, item_high = bca_interval(wins, n_resamples=4000, seed=1)
    assert (item_high - item_low) < 0.8 * (result.high - result.low)


def test_a_ratio_with_ties_left_out_resamples_whole_clusters():
    """Untied pairs only (denominator 0 for a tie): the estimate is wins / untied, and a cluster whose pairs
    all tie adds nothing; duplicating every item inside its cluster leaves the cluster interval as it was."""
    rng = np.random.default_rng(5)
    n = 60
    wins = (rng.random(n) < 0.55).astype(float)
    untied = (rng.random(n) < 0.8).astype(float)
    wins *= untied
    clusters = np.arange(n) // 3
    once = cluster_ratio_interval(wins, untied, clusters, seed=2)
    twice = cluster_ratio_interval(np.repeat(wins, 2), np.repeat(untied, 2), np.repeat(clusters, 2), seed=2)
    assert once.estimate == pytest.approx(wins.sum() / untied.sum())
    assert (twice.low, twice.high) == pytest.approx((once.low, once.high), abs=1e-12)


def test_too_few_clusters_give_no_interval_and_equal_clusters_a_point():
    few = cluster_ratio_interval([1, 0, 1, 1], [1, 1, 1, 1], ["a", "a", "b", "c"])
    assert few.n_clusters == 3 < MIN_CLUSTERS and math.isnan(few.low) and math.isnan(few.high)
    same = cluster_ratio_interval([1, 0] * 6, [1, 1] * 6, np.repeat(np.arange(6), 2))
    assert (same.low, same.high, same.estimate) == (0.5, 0.5, 0.5)


def test_a_pooled_mean_of_equal_clusters_is_the_bootstrap_of_their_means():
    """pcs's use (a mean of cells, denominators of one): 9 clusters of 4 values, against scipy's BCa over the 9
    cluster means on the same draws. The pooled mean of equal clusters is the mean of their means; BCa's bias
    correction counts the resamples below the estimate, and rounding moves the ones that equal it, so the two agree
    to a few thousandths."""
    rng = np.random.default_rng(2)
    means = rng.normal(size=9)
    values = np.repeat(means, 4) + rng.normal(scale=0.1, size=36)
    labels = np.repeat([f"c{i}" for i in range(9)], 4)
    direct = stats.bootstrap((values.reshape(9, 4).mean(axis=1),), np.mean, n_resamples=2000, method="BCa",
                             random_state=np.random.default_rng(5)).confidence_interval
    result = cluster_ratio_interval(values, np.ones_like(values), labels, seed=5)
    assert result.estimate == pytest.approx(values.mean())
    assert (result.low, result.high) == pytest.approx((direct.low, direct.high), abs=2e-3)
    # and it is wider than the interval that takes the 36 values as independent
    item_low, item_high = bca_interval(values, seed=5)
    assert result.high - result.low > 1.5 * (item_high - item_low)


def test_unequal_clusters_weigh_by_their_items():
    values = np.array([1.0, 1.0, 1.0, 0.0, 5.0, 2.0, 2.0, 0.0, 0.0])
    labels = np.array(["a", "a", "a", "b", "c", "d", "d", "e", "e"])
    result = cluster_ratio_interval(values, np.ones_like(values), labels, n_resamples=4000)
    # the estimate is the pooled mean 12 / 9, not the mean of the cluster means; every resample lies between the
    # smallest and largest cluster mean
    assert result.estimate == pytest.approx(12 / 9)
    assert 0 <= result.low <= 12 / 9 <= result.high <= 5


def test_degenerate_input():
    assert math.isnan(cluster_ratio_interval([0.2, 0.4], [1, 1], ["s1", "s1"]).low)  # one cluster
    assert math.isnan(cluster_ratio_interval([], [], []).estimate)
    with pytest.raises(ValueError, match="must align"):
        cluster_ratio_interval([1.0, 2.0], [1.0, 1.0], ["a"])
