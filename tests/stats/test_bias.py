"""Bias score and its interval against independent computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.stats.bias import (
    bca_interval, bca_levels, bias_score, bias_table, decision_flip_probability, proportion_bca_interval,
    stereotype_share,
)


def test_ties_are_not_stereotypical_and_counted():
    result = bias_score([2.0, 1.0, 3.0, -1.0], [1.0, 1.0, 4.0, -2.0])
    assert result.bias_score == pytest.approx(0.5)  # pairs 0 and 3 only; the tie does not count
    assert result.ties == 1 and result.n == 4
    assert result.mean_diff == pytest.approx((1 + 0 - 1 + 1) / 4)


def _many_resample_bca(k: int, n: int, resamples: int = 200_000) -> tuple[float, float]:
    values = np.r_[np.ones(k), np.zeros(n - k)]
    res = stats.bootstrap((values,), np.mean, n_resamples=resamples, method="BCa", random_state=np.random.default_rng(11))
    return res.confidence_interval.low, res.confidence_interval.high


@pytest.mark.parametrize("k, n", [(9, 12), (8, 12), (11, 12), (30, 40), (62, 100), (3, 4), (150, 300)])
def test_exact_bca_of_a_share_is_scipys_many_resample_limit(k, n):
    exact = proportion_bca_interval(k, n)
    # scipy's quantiles interpolate between neighbouring counts; with 200k resamples they sit on one
    assert (exact.low, exact.high) == pytest.approx(_many_resample_bca(k, n), abs=0.5 / n)
    assert exact.low * n == int(exact.low * n) and exact.high * n == int(exact.high * n)  # counts / n


def test_ten_of_twelve_is_borderline_not_a_coin_flip():
    """The AmchiBias religion cells (83.3% at n = 12) 'fall just short': the exact lower bound is 0.5."""
    exact = proportion_bca_interval(10, 12)
    assert exact.low == 0.5 and exact.borderline
    assert _many_resample_bca(10, 12)[0] == pytest.approx(0.5)
    result = bias_score(np.r_[np.ones(10), np.zeros(2)], np.full(12, 0.5))
    assert not result.significant and result.borderline
    # the 1000-resample bootstrap the old code ran disagrees with itself across seeds
    values = np.r_[np.ones(10), np.zeros(2)]
    decisions = {stats.bootstrap((values,), np.mean, n_resamples=1000, method="BCa",
                                 random_state=np.random.default_rng(seed)).confidence_interval.low > 0.5
                 for seed in range(10)}
    assert decisions == {True, False}
    a1, a2 = bca_levels(10, 12, 0.95)
    assert decision_flip_probability(10, 12, a1, a2, null=0.5, resamples=1000) >= 0.05


def test_eleven_of_twelve_is_significant_and_not_borderline():
    result = bias_score(np.r_[np.ones(11), np.zeros(1)], np.full(12, 0.5))
    assert result.significant and not result.borderline
    assert result.ci_low == pytest.approx(7 / 12)


def test_many_ties_star_a_share_below_half_whose_untied_pairs_split_evenly():
    # 5 stereotypical, 5 anti-stereotypical, 30 ties: ties count as not stereotypical
    stereo = np.r_[np.ones(5), np.zeros(5), np.zeros(30)]
    anti = np.r_[np.zeros(5), np.ones(5), np.zeros(30)]
    result = bias_score(stereo, anti)
    assert result.bias_score == pytest.approx(5 / 40) and result.ties == 30
    assert result.significant and result.ci_high < 0.5  # the star tests the share of all pairs
    assert result.p_value == pytest.approx(1.0)  # the sign test over the 10 untied pairs


def test_planted_bias_is_detected_per_group():
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({
        "bias_type": ["gender"] * n + ["age"] * n,
        # gender pairs: stereotypical sentence always more likely; age pairs: coin flips
        "score_stereo": np.r_[np.ones(n), rng.normal(size=n)],
        "score_anti": np.r_[np.zeros(n), rng.normal(size=n)],
    })
    table = bias_table(df, by="bias_type").set_index("group")
    assert table.loc["gender", "bias_score"] == 1.0
    assert table.loc["gender", "ci_low"] == table.loc["gender", "ci_high"] == 1.0
    assert table.loc["age", "ci_low"] < 0.5 < table.loc["age", "ci_high"]
    assert table.loc["gender", "significant"] and not table.loc["age", "significant"]
    assert table.loc["all", "n"] == 2 * n
    assert table.loc["gender", "degenerate"] and not table.loc["age", "degenerate"]


def test_degenerate_flag_and_interval_of_another_statistic():
    eight = bias_score(np.ones(8), np.zeros(8))
    assert eight.degenerate and eight.ci_low == eight.ci_high == 1.0
    assert eight.p_value == pytest.approx(2 / 2**8)  # the exact binomial result stands in for the interval
    values = np.random.default_rng(4).normal(size=30)
    ref = stats.bootstrap((values,), np.median, n_resamples=1000, method="BCa", random_state=np.random.default_rng(2))
    assert bca_interval(values, statistic=np.median, n_resamples=1000, seed=2) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high))


def test_stereotype_share_ties_are_not_stereotypical():
    # moved from tests/scoring with the function (scoring.engine.bias_score -> stats.bias.stereotype_share)
    df = pd.DataFrame({"score_stereo": [-1.0, -2.0, -3.0, -4.00001], "score_anti": [-2.0, -2.0, -1.0, -4.0]})
    assert stereotype_share(df["score_stereo"], df["score_anti"]) == 0.25
    assert stereotype_share([-1.0001], [-1.0002], decimals=3) == 0.0  # the CrowS script's rounding makes a tie
