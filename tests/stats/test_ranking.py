"""AUC, Spearman and the cluster bootstrap against independent computations (scipy's Mann-Whitney U, a
bootstrap written out here, a hand-counted AUC)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stereolens.stats.ranking import auc, cluster_bootstrap_interval, spearman


def test_auc_by_hand_with_a_tie():
    # pairs (pos, neg): 3>1, 3>2, 2>1, 2=2 (half) -> 3.5 of 4
    assert auc([3.0, 2.0], [1.0, 2.0]) == pytest.approx(3.5 / 4)
    assert auc([1.0], []) is None and auc([], [1.0]) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_is_mann_whitney_u_over_n_pos_n_neg(seed):
    rng = np.random.default_rng(seed)
    pos = np.round(rng.normal(0.3, 1, 37), 1)  # rounded: ties within and across the classes
    neg = np.round(rng.normal(0.0, 1, 52), 1)
    u = stats.mannwhitneyu(pos, neg, alternative="two-sided").statistic
    assert auc(pos, neg) == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)


def test_spearman_is_scipys_and_undefined_when_a_side_is_constant():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=30), rng.integers(1, 4, 30)
    rho, p = spearman(x, y)
    expected = stats.spearmanr(x, y)
    assert (rho, p) == pytest.approx((expected.statistic, expected.pvalue))
    assert spearman(x, np.ones(30)) == (None, None) and spearman([1, 2], [2, 1]) == (None, None)


def _reference_cluster_bootstrap(scores, positive, clusters, *, n_resamples, seed, confidence):
    """The cluster bootstrap written out independently: the same generator draws k cluster labels per resample,
    each resample's AUC from scipy's Mann-Whitney U, then numpy's percentiles."""
    labels = list(dict.fromkeys(clusters))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        drawn = rng.integers(0, len(labels), size=len(labels))
        rows = np.concatenate([[i for i, c in enumerate(clusters) if c == labels[d]] for d in drawn]).astype(int)
        pos, neg = scores[rows][positive[rows]], scores[rows][~positive[rows]]
        if len(pos) and len(neg):
            values.append(stats.mannwhitneyu(pos, neg).statistic / (len(pos) * len(neg)))
    tail = (1 - confidence) / 2 * 100
    return tuple(np.percentile(values, [tail, 100 - tail])), len(values)


def test_the_auc_interval_equals_an_independent_cluster_bootstrap():
    rng = np.random.default_rng(5)
    clusters = [f"id{i // 4}" for i in range(48)]  # 12 identities of 4 tuples
    scores = rng.normal(size=48) + np.repeat(rng.normal(size=12), 4)
    positive = rng.random(48) < 0.5
    interval = cluster_bootstrap_interval(lambda idx: auc(scores[idx][positive[idx]], scores[idx][~positive[idx]]),
                                          clusters, n_resamples=400, seed=11, confidence=0.9)
    (low, high), defined = _reference_cluster_bootstrap(scores, positive, clusters, n_resamples=400, seed=11,
                                                        confidence=0.9)
    assert (interval.low, interval.high, interval.n_defined) == (pytest.approx(low), pytest.approx(high), defined)


def test_clusters_of_identical_rows_give_the_interval_of_one_row_per_cluster():
    """Known answer: when every cluster holds five copies of one row, each resample's AUC is that of the same
    draw of single rows (U and n_pos x n_neg both scale by 25), so the interval equals the ordinary bootstrap of
    the de-duplicated rows with the same seed; resampling rows instead would make it narrower."""
    rng = np.random.default_rng(8)
    base_scores, base_pos = rng.normal(size=20), np.arange(20) % 2 == 0
    scores, positive = np.repeat(base_scores, 5), np.repeat(base_pos, 5)
    clusters = np.repeat(np.arange(20), 5)

    def stat_of(s, p):
        return lambda idx: auc(s[idx][p[idx]], s[idx][~p[idx]])

    clustered = cluster_bootstrap_interval(stat_of(scores, positive), clusters, n_resamples=300, seed=4)
    single = cluster_bootstrap_interval(stat_of(base_scores, base_pos), np.arange(20), n_resamples=300, seed=4)
    rows = cluster_bootstrap_interval(stat_of(scores, positive), np.arange(100), n_resamples=300, seed=4)
    assert (clustered.low, clustered.high) == pytest.approx((single.low, single.high))
    assert rows.high - rows.low < clustered.high - clustered.low


def test_an_interval_needs_two_clusters_and_counts_undefined_resamples():
    assert cluster_bootstrap_interval(lambda idx: 0.5, ["a", "a"], n_resamples=10).low is None
    # one positive row in cluster "p": resamples without it leave the AUC undefined, and are counted out
    scores, positive = np.array([1.0, 0.0, 0.5]), np.array([True, False, False])
    interval = cluster_bootstrap_interval(lambda idx: auc(scores[idx][positive[idx]], scores[idx][~positive[idx]]),
                                          ["p", "n1", "n2"], n_resamples=200, seed=0)
    assert 0 < interval.n_defined < 200 and interval.low == interval.high == 1.0
