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


def _pairs(wins: int, losses: int, ties: int) -> tuple[np.ndarray, np.ndarray]:
    """Score pairs with ``wins`` stereotypical wins, ``losses`` anti-stereotypical wins and ``ties`` ties."""
    stereo = np.r_[np.ones(wins), np.zeros(losses), np.zeros(ties)]
    anti = np.r_[np.zeros(wins), np.ones(losses), np.zeros(ties)]
    return stereo, anti


def test_star_interval_and_p_test_the_untied_pairs_and_point_the_same_way():
    """Issue 31: 80 stereotypical wins, 40 anti-stereotypical, 80 ties read "0.40 [0.335, 0.47],
    significant" (anti) beside p = 0.00033 for the stereotypical direction."""
    result = bias_score(*_pairs(80, 40, 80))
    reference = stats.binomtest(80, 120, 0.5)
    assert result.p_value == pytest.approx(reference.pvalue) and result.p_value == pytest.approx(0.00033, abs=5e-6)
    # the interval is of the same share of the same 120 untied pairs (scipy's BCa, many resamples) and lies
    # on the side the p points to
    low, high = _many_resample_bca(80, 120)
    assert (result.ci_low, result.ci_high) == pytest.approx((low, high), abs=0.5 / 120)
    assert result.significant and result.ci_low > 0.5 and reference.proportion_estimate > 0.5
    assert result.bias_score == pytest.approx(80 / 200) and result.ties == 80  # the paper's score is kept
    assert result.share_untied == pytest.approx(80 / 120) and result.favours == "stereotypical"


@pytest.mark.parametrize("wins, losses, ties, significant, favours", [
    (5, 5, 30, False, "neither"),  # even among the untied pairs: no star whatever the ties
    (10, 0, 2, True, "stereotypical"),  # every untied pair agrees: BCa undefined, p = 2 / 2**10 decides
    (0, 9, 3, True, "anti-stereotypical"),
    (0, 0, 12, False, "neither"),  # nothing untied: no test
])
def test_a_tied_cell_gets_the_star_its_p_gives(wins, losses, ties, significant, favours):
    result = bias_score(*_pairs(wins, losses, ties))
    assert result.ties == ties and result.bias_score == pytest.approx(wins / (wins + losses + ties))
    if wins + losses:
        assert result.p_value == pytest.approx(stats.binomtest(wins, wins + losses, 0.5).pvalue)
        assert (result.p_value < 0.05) is significant
    assert result.significant is significant
    assert result.favours == favours
    if not wins + losses:
        assert np.isnan(result.p_value) and np.isnan(result.share_untied) and result.degenerate


def test_star_and_p_never_disagree_outside_a_borderline_cell():
    """Over every split of up to 30 untied pairs, with and without ties: a starred row has p < 0.05 and
    an interval on the side its share favours; an unstarred row with p < 0.05 is marked borderline."""
    for ties in (0, 7):
        for n_untied in range(1, 31):
            for wins in range(n_untied + 1):
                result = bias_score(*_pairs(wins, n_untied - wins, ties))
                p_below = result.p_value < 0.05
                if result.significant:
                    assert p_below, (wins, n_untied, ties)
                    # the interval's side is the side the untied pairs favour, the p's direction
                    assert (result.ci_low > 0.5) == (wins > n_untied - wins), (wins, n_untied, ties)
                elif p_below:
                    assert result.borderline, (wins, n_untied, ties)


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
