"""Paired comparisons of two models on the same items (stats/paired.py): McNemar against statsmodels,
Newcombe's paired interval against a published example, statsmodels' unpaired Newcombe interval
(to which it reduces when the table's correlation is 0) and a direct paired bootstrap, the
sign-flip test against its full enumeration, and a planted difference that only the paired test finds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep

from stereolens.errors import DataError
from stereolens.stats.bias import bias_score
from stereolens.stats.paired import (
    A_MORE,
    NO_DIFFERENCE,
    UNDECIDABLE,
    mcnemar_exact_p,
    newcombe_paired_interval,
    paired_mean_difference,
    paired_share_difference,
    paired_table,
    sign_flip_p,
)
from stereolens.stats.power import minimum_detectable_rate


@pytest.mark.parametrize("a_only, b_only", [(6, 16), (0, 7), (13, 0), (5, 5), (1, 0), (40, 25), (120, 95)])
def test_mcnemar_exact_p_is_statsmodels_mcnemar_exact(a_only, b_only):
    expected = mcnemar([[30, a_only], [b_only, 50]], exact=True).pvalue
    assert mcnemar_exact_p(a_only, b_only) == pytest.approx(expected, rel=1e-12)


def test_no_discordant_item_is_no_test():
    assert math.isnan(mcnemar_exact_p(0, 0))
    result = paired_share_difference([1, 0, 1], [1, 0, 1])
    assert math.isnan(result.p_value) and result.verdict == UNDECIDABLE and result.difference == 0


def test_newcombe_interval_reproduces_the_published_example():
    """Fagerland, Lydersen and Laake (2017), chapter 8, complete response before and after consolidation
    therapy (Cavo et al. 2012), table [[59, 6], [16, 80]]: Newcombe square-and-add estimate -0.0621,
    95% CI -0.1186 to -0.0046 (the R package contingencytables pins the same numbers)."""
    low, high = newcombe_paired_interval(59, 6, 16, 80)
    assert (6 - 16) / 161 == pytest.approx(-0.0621, abs=5e-5)
    assert low == pytest.approx(-0.1186, abs=5e-5) and high == pytest.approx(-0.0046, abs=5e-5)


@pytest.mark.parametrize("both, a_only, b_only, neither", [(12, 8, 10, 7), (10, 10, 10, 10), (3, 9, 2, 7)])
def test_with_no_correlation_it_is_statsmodels_unpaired_newcombe_interval(both, a_only, b_only, neither):
    """Newcombe's shrunken phi is 0 when 0 <= ad - bc <= n / 2, and the paired interval is then the
    unpaired hybrid score interval of the two shares."""
    n = both + a_only + b_only + neither
    assert 0 <= both * neither - a_only * b_only <= n / 2
    expected = confint_proportions_2indep(both + a_only, n, both + b_only, n, method="newcomb", compare="diff")
    assert newcombe_paired_interval(both, a_only, b_only, neither) == pytest.approx(expected, abs=1e-12)


def test_negative_correlation_widens_and_positive_narrows_the_interval():
    def width(both, a_only, b_only, neither):
        low, high = newcombe_paired_interval(both, a_only, b_only, neither)
        return high - low

    def unpaired_width(both, a_only, b_only, neither):
        n = both + a_only + b_only + neither
        low, high = confint_proportions_2indep(both + a_only, n, both + b_only, n, method="newcomb", compare="diff")
        return high - low

    negative, positive = (2, 20, 18, 3), (30, 4, 2, 24)
    assert width(*negative) > unpaired_width(*negative)
    assert width(*positive) < unpaired_width(*positive)


def test_newcombe_interval_is_close_to_a_direct_paired_bootstrap_on_many_items():
    rng = np.random.default_rng(3)
    n = 3000
    shared = rng.random(n) < 0.55
    a = np.where(rng.random(n) < 0.15, ~shared, shared)  # each model departs from the shared outcome on ~15%
    b = np.where(rng.random(n) < 0.10, ~shared, shared)
    resampled = rng.integers(0, n, size=(4000, n))  # the same items drawn for both models: a paired bootstrap
    differences = a[resampled].mean(axis=1) - b[resampled].mean(axis=1)
    boot_low, boot_high = np.percentile(differences, [2.5, 97.5])
    result = paired_share_difference(a, b)
    assert result.ci_low == pytest.approx(boot_low, abs=0.004) and result.ci_high == pytest.approx(boot_high, abs=0.004)


def test_newcombe_interval_covers_about_95_percent():
    rng = np.random.default_rng(0)
    n, p10, p01, p11 = 80, 0.12, 0.05, 0.4
    true = p10 - p01
    covered = 0
    for _ in range(2000):
        cells = rng.multinomial(n, [p11, p10, p01, 1 - p11 - p10 - p01])
        low, high = newcombe_paired_interval(*cells)
        covered += low <= true <= high
    assert 0.93 <= covered / 2000 <= 0.975


def test_sign_flip_p_is_the_full_enumeration():
    d = np.array([1.2, -0.3, 0.8, 0.5, 2.0, -0.1, 0.9, 0.4, 1.1, 0.2, -0.7, 0.6])
    flips = np.array(list(itertools.product([1, -1], repeat=len(d))))
    means = (flips * d).mean(axis=1)
    expected = np.mean(np.abs(means) >= abs(d.mean()) * (1 - 1e-12))
    assert sign_flip_p(d) == pytest.approx(expected, rel=1e-12)  # 2^12 = 4096 <= 9999 resamples: exact
    assert sign_flip_p(np.zeros(5)) == 1.0
    # one item: its two sign patterns are equally extreme (scipy's permutation_test refuses a single observation)
    assert sign_flip_p(np.array([0.7])) == 1.0
    assert paired_mean_difference([0.9], [0.2]).p_value == 1.0


def test_undecidable_when_no_split_of_the_discordant_items_can_reach_alpha():
    # four discordant items, all one way: 2 * 0.5^4 = 0.125, never significant
    a = [1, 1, 1, 1] + [0] * 20
    b = [0, 0, 0, 0] + [0] * 20
    result = paired_share_difference(a, b)
    assert not result.decidable and result.verdict == UNDECIDABLE and math.isnan(result.mde_difference)


def test_mde_difference_is_the_binomial_mde_of_the_discordant_items():
    rng = np.random.default_rng(5)
    a, b = rng.random(300) < 0.5, rng.random(300) < 0.5
    result = paired_share_difference(a, b)
    discordant = result.n_a_only + result.n_b_only
    assert result.verdict == NO_DIFFERENCE
    rate = minimum_detectable_rate(discordant).above
    assert result.mde_difference == pytest.approx((2 * rate - 1) * discordant / 300)


def planted_models(seed: int = 11, n: int = 300, shift: float = 0.3):
    """Per-item margins (score_stereo - score_anti) of two models sharing each item's difficulty; model B's
    margin is lowered by ``shift`` on the first half of the items only."""
    rng = np.random.default_rng(seed)
    item = rng.normal(0.1, 1.0, n)
    margin_a = item.copy()
    margin_b = item.copy()
    margin_b[: n // 2] -= shift
    return margin_a, margin_b


def test_a_difference_planted_on_half_the_items_is_found_paired_and_missed_unpaired():
    margin_a, margin_b = planted_models()
    zeros = np.zeros_like(margin_a)
    unpaired_a, unpaired_b = bias_score(margin_a, zeros), bias_score(margin_b, zeros)
    # the two models' own intervals overlap: compared unpaired, no difference shows
    assert unpaired_a.ci_low < unpaired_b.ci_high and unpaired_b.ci_low < unpaired_a.ci_high
    paired = paired_share_difference(margin_a > 0, margin_b > 0)
    assert paired.n_b_only == 0 and paired.n_a_only > 10
    assert paired.p_value < 0.001 and paired.verdict == A_MORE and paired.ci_low > 0
    assert paired.difference == pytest.approx(unpaired_a.bias_score - unpaired_b.bias_score)
    margins = paired_mean_difference(margin_a, margin_b)
    assert margins.p_value < 0.001 and margins.ci_low > 0 and margins.mean_difference == pytest.approx(0.15)
    # the control: nothing planted, nothing found
    same = paired_share_difference(margin_a > 0, margin_a > 0)
    assert same.verdict == UNDECIDABLE and same.difference == 0


def long_scores() -> pd.DataFrame:
    margin_a, margin_b = planted_models(n=240)
    rng = np.random.default_rng(2)
    cells = np.array(["gender", "race", "age"])[np.arange(240) % 3]
    rows = []
    for model, margins in (("model-a", margin_a), ("model-b", margin_b)):
        anti = -rng.uniform(5, 10, 240)
        rows.append(pd.DataFrame({"model": model, "id": [f"i{i}" for i in range(240)], "bias_type": cells,
                                  "score_stereo": anti + margins, "score_anti": anti}))
    return pd.concat(rows, ignore_index=True)


def test_paired_table_corrects_over_the_cells_of_a_model_pair():
    scores = long_scores()
    table = paired_table(scores, by="bias_type", n_resamples=500, permutations=999)
    assert table[["model_a", "model_b"]].drop_duplicates().values.tolist() == [["model-a", "model-b"]]
    assert table["group"].tolist() == ["all", "age", "gender", "race"]
    cells = table.loc[table["group"] != "all"]
    assert cells["p_holm"].astype(float).tolist() == pytest.approx(
        multipletests(cells["p_value"].astype(float), method="holm")[1].tolist())
    assert cells["p_bh"].astype(float).tolist() == pytest.approx(
        multipletests(cells["p_value"].astype(float), method="fdr_bh")[1].tolist())
    overall = table.iloc[0]
    assert overall["p_holm"] is None and overall["n"] == 240
    a, b = scores.loc[scores.model == "model-a"], scores.loc[scores.model == "model-b"]
    direct = paired_share_difference((a.score_stereo > a.score_anti).to_numpy(), (b.score_stereo > b.score_anti).to_numpy())
    assert overall["difference"] == pytest.approx(direct.difference) and overall["p_value"] == pytest.approx(direct.p_value)


def test_paired_table_compares_only_the_items_both_models_scored():
    scores = long_scores()
    fewer = scores.drop(scores.index[(scores.model == "model-b") & (scores.id.isin(["i0", "i1", "i2"]))])
    table = paired_table(fewer, n_resamples=200, permutations=199)
    assert table["n"].tolist() == [237] and table["p_holm"].tolist() == [None]


def test_paired_table_refuses_an_item_scored_twice():
    scores = long_scores()
    with pytest.raises(DataError, match="scored item 'i0' twice"):
        paired_table(pd.concat([scores, scores.iloc[[0]]]), n_resamples=200)


def test_a_cell_of_one_item_has_a_sign_flip_p_of_one_not_an_error():
    """One item's sign flips are d and -d, both as extreme as d: p = 1 (scipy's permutation_test refuses a
    single observation, which stopped the paired stage on a bias type with one pair)."""
    assert sign_flip_p([0.7]) == 1.0 and sign_flip_p([-2.0]) == 1.0
    scores = pd.DataFrame({"model": ["a", "a", "b", "b"], "id": [1, 2, 1, 2], "kind": ["x", "y", "x", "y"],
                           "score_stereo": [-1.0, -1.0, -3.0, -1.0], "score_anti": -2.0})
    table = paired_table(scores, by="kind").set_index("group")
    assert table.loc["x", "p_margin"] == 1.0 and table.loc["x", "n"] == 1
