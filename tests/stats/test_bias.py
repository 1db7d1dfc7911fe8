"""Bias score and its interval against independent computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.stats.bias import bca_interval, bias_score, bias_table


def test_ties_are_not_stereotypical_and_counted():
    result = bias_score([2.0, 1.0, 3.0, -1.0], [1.0, 1.0, 4.0, -2.0])
    assert result.bias_score == pytest.approx(0.5)  # pairs 0 and 3 only; the tie does not count
    assert result.ties == 1 and result.n == 4
    assert result.mean_diff == pytest.approx((1 + 0 - 1 + 1) / 4)


def test_bca_interval_matches_scipy_directly():
    rng = np.random.default_rng(7)
    stereo, anti = rng.normal(size=300) + 0.2, rng.normal(size=300)
    result = bias_score(stereo, anti, n_resamples=999, seed=3)
    indicator = (stereo > anti).astype(float)
    ref = stats.bootstrap((indicator,), np.mean, n_resamples=999, method="BCa", random_state=np.random.default_rng(3))
    assert result.ci_low == pytest.approx(ref.confidence_interval.low)
    assert result.ci_high == pytest.approx(ref.confidence_interval.high)
    assert result.ci_low < indicator.mean() < result.ci_high
    assert result.p_value == pytest.approx(stats.binomtest(int(indicator.sum()), 300).pvalue)


def test_planted_bias_is_detected_per_group():
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({
        "bias_type": ["gender"] * n + ["age"] * n,
        # gender pairs: stereotypical sentence always more likely; age pairs: coin flips
        "score_stereo": np.r_[np.ones(n), rng.normal(size=n)],
        "score_anti": np.r_[np.zeros(n), rng.normal(size=n)],
    })
    table = bias_table(df, by="bias_type", n_resamples=500).set_index("group")
    assert table.loc["gender", "bias_score"] == 1.0
    assert table.loc["gender", "ci_low"] == table.loc["gender", "ci_high"] == 1.0
    assert table.loc["age", "ci_low"] < 0.5 < table.loc["age", "ci_high"]
    assert table.loc["all", "n"] == 2 * n
    assert table.loc["gender", "degenerate"] and not table.loc["age", "degenerate"]


def test_degenerate_flag_and_interval_of_another_statistic():
    eight = bias_score(np.ones(8), np.zeros(8), n_resamples=1000)
    assert eight.degenerate and eight.ci_low == eight.ci_high == 1.0
    assert eight.p_value == pytest.approx(2 / 2**8)  # the exact binomial result stands in for the interval
    values = np.random.default_rng(4).normal(size=30)
    ref = stats.bootstrap((values,), np.median, n_resamples=1000, method="BCa", random_state=np.random.default_rng(2))
    assert bca_interval(values, statistic=np.median, n_resamples=1000, seed=2) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high))
