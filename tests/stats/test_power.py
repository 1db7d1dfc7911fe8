"""Power, minimum detectable effects and sample sizes (stats/power.py), each against a computation
that does not share its code: scipy's ``binomtest`` decision summed over the binomial
distribution, statsmodels' power classes, the noncentral t distribution, statsmodels' ``mcnemar``
over every table of a multinomial, and the known values of issue 32."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import proportion_effectsize

from stereolens.errors import ConfigError
from stereolens.stats.power import (
    critical_count,
    exact_power,
    family_alpha,
    mcnemar_exact_power,
    mcnemar_items_needed,
    mcnemar_normal_power,
    eta_squared_of_f,
    mde_table,
    minimum_detectable_d_z,
    minimum_detectable_f,
    minimum_detectable_rate,
    normal_power,
    paired_effect_needed,
    paired_t_power,
    pairs_needed,
    undetected_effect,
    undetected_preference,
)


@functools.lru_cache(maxsize=None)
def rejected_by_binomtest(n: int, alpha: float) -> tuple[int, ...]:
    """Every count of n pairs that scipy's two-sided binomtest of 0.5 rejects at alpha."""
    return tuple(k for k in range(n + 1) if stats.binomtest(k, n, 0.5).pvalue < alpha) if n else ()


def power_by_binomtest(n: int, rate: float, alpha: float) -> float:
    """The exact power the slow way: every count scipy's binomtest rejects, weighted by its probability."""
    return float(stats.binom.pmf(np.array(rejected_by_binomtest(n, alpha), dtype=int), n, rate).sum())


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.05 / 9])
def test_exact_power_is_the_binomtest_rejections_summed_over_the_binomial(alpha):
    for n in [*range(0, 41), 60, 99, 100, 194, 200]:
        for rate in (0.6, 0.35, 0.9):
            assert exact_power(n, rate, alpha) == pytest.approx(power_by_binomtest(n, rate, alpha), abs=1e-12), (n, rate)
    # the array form gives the same numbers
    ns = np.arange(1, 61)
    assert np.allclose(exact_power(ns, 0.6, alpha), [power_by_binomtest(int(n), 0.6, alpha) for n in ns], atol=1e-12)


def test_critical_count_is_the_last_count_binomtest_rejects():
    for n in range(1, 120):
        c = int(critical_count(n, 0.05))
        assert all(stats.binomtest(k, n, 0.5).pvalue < 0.05 for k in range(c + 1))
        assert stats.binomtest(c + 1, n, 0.5).pvalue >= 0.05


def test_at_the_null_the_exact_power_is_the_size_and_stays_below_alpha():
    for n in (10, 60, 200):
        assert exact_power(n, 0.5, 0.05) <= 0.05


def test_normal_power_is_statsmodels_normal_ind_power_on_cohens_h():
    solver = NormalIndPower()
    for n in (10, 60, 194, 1000):
        for rate in (0.55, 0.6, 0.3, 0.95):
            for alpha in (0.05, 0.05 / 9):
                expected = solver.power(effect_size=proportion_effectsize(rate, 0.5), nobs1=n, alpha=alpha, ratio=0)
                assert normal_power(n, rate, alpha) == pytest.approx(expected, rel=1e-10)


def test_194_pairs_per_cell_for_a_rate_of_060():
    """Issue 32's known value: 194 untied pairs for a true rate of 0.60 at alpha 0.05 and 80% power
    (normal approximation), as statsmodels solves it."""
    plan = pairs_needed(0.60)
    assert plan.normal == 194
    solved = NormalIndPower().solve_power(effect_size=proportion_effectsize(0.6, 0.5), nobs1=None, alpha=0.05,
                                          power=0.8, ratio=0)
    assert math.ceil(solved) == 194
    # the mirror rate asks the same question
    assert pairs_needed(0.40).normal == 194 and pairs_needed(0.40).exact == plan.exact


def test_exact_pairs_needed_is_the_first_n_reaching_the_target_and_the_stable_one_after_the_sawtooth():
    plan = pairs_needed(0.60)
    ns = np.arange(1, 3 * plan.exact_stable)
    powers = np.array([power_by_binomtest(int(n), 0.6, 0.05) for n in ns[plan.exact - 3: plan.exact_stable + 3]])
    window = ns[plan.exact - 3: plan.exact_stable + 3]
    reaches = dict(zip(window.tolist(), (powers >= 0.8).tolist()))
    assert reaches[plan.exact] and not any(reaches[n] for n in window if n < plan.exact)
    assert not reaches[plan.exact_stable - 1]
    assert (exact_power(ns[ns >= plan.exact_stable], 0.6, 0.05) >= 0.8).all()
    assert plan.exact_power == pytest.approx(power_by_binomtest(plan.exact, 0.6, 0.05), abs=1e-12)
    # measured: 199 first reaches 80%, 209 falls back to 79.8%, every n from 210 reaches it
    assert (plan.exact, plan.exact_stable) == (199, 210)


def test_ties_inflate_the_pairs_to_collect():
    plan = pairs_needed(0.60, ties=0.1)
    assert plan.normal_raw == math.ceil(194 / 0.9) == 216
    assert plan.exact_raw == math.ceil(plan.exact / 0.9)
    assert pairs_needed(0.60, ties=0.0).normal_raw == 194


def test_crows_disability_mde_is_about_068_and_073_with_bonferroni_over_nine_types():
    """Issue 32's known values for CrowS-Pairs' disability type (60 pairs): about 0.68 unadjusted and
    about 0.73 with Bonferroni over the 9 bias types; the exact test needs a little more than the
    normal approximation (0.692 and 0.739)."""
    plain = minimum_detectable_rate(60)
    bonferroni = minimum_detectable_rate(60, alpha=family_alpha(0.05, 9))
    assert plain.normal_above == pytest.approx(0.68, abs=0.005)
    assert bonferroni.normal_above == pytest.approx(0.73, abs=0.006)
    assert plain.above == pytest.approx(0.68, abs=0.015) and bonferroni.above == pytest.approx(0.73, abs=0.015)
    # the MDE is where the exact power crosses 80%
    for mde, alpha in ((plain.above, 0.05), (bonferroni.above, 0.05 / 9)):
        assert power_by_binomtest(60, mde + 1e-6, alpha) >= 0.8 > power_by_binomtest(60, mde - 1e-4, alpha)
    assert plain.below == pytest.approx(1 - plain.above)


def test_normal_mde_is_statsmodels_solved_effect_size():
    for n, alpha in ((60, 0.05), (60, 0.05 / 9), (516, 0.05)):
        h = NormalIndPower().solve_power(effect_size=None, nobs1=n, alpha=alpha, power=0.8, ratio=0)
        rate = math.sin(math.pi / 4 + h / 2) ** 2  # Cohen's h back to a rate: h = 2 asin(sqrt(r)) - pi / 2
        assert minimum_detectable_rate(n, alpha=alpha).normal_above == pytest.approx(rate, abs=1e-6)  # solve_power's tolerance


def test_a_cell_no_split_can_make_significant_has_no_mde():
    # 2 * 0.5^5 = 0.0625 >= 0.05: five untied pairs can never be significant; six can (0.03125)
    assert math.isnan(minimum_detectable_rate(5).above)
    assert not math.isnan(minimum_detectable_rate(6).above)
    assert math.isnan(minimum_detectable_rate(0).above)


def test_holms_first_step_is_bonferronis_level():
    m, alpha = 9, 0.05
    assert family_alpha(alpha, m) == alpha / m
    others = [0.5] * (m - 1)
    # statsmodels' Holm rejects the smallest p exactly when it is below alpha / m
    assert multipletests([alpha / m * 0.999, *others], alpha=alpha, method="holm")[0][0]
    assert not multipletests([alpha / m * 1.001, *others], alpha=alpha, method="holm")[0][0]
    with pytest.raises(ConfigError):
        family_alpha(alpha, 0)


def test_mde_table_has_each_cell_unadjusted_and_at_the_family_level():
    table = mde_table({"disability": 60, "race-color": 516}, family_size=9)
    row = table.set_index("cell").loc["disability"]
    assert row["n"] == 60 and row["alpha_adjusted"] == pytest.approx(0.05 / 9)
    assert row["mde"] == pytest.approx(minimum_detectable_rate(60).above)
    assert row["mde_adjusted"] == pytest.approx(minimum_detectable_rate(60, alpha=0.05 / 9).above)
    assert row["mde_adjusted_below"] == pytest.approx(1 - row["mde_adjusted"])
    # by default the family is the cells given
    assert mde_table({"a": 60, "b": 70})["alpha_adjusted"].tolist() == [0.025, 0.025]


def test_a_non_significant_cell_is_worded_by_what_it_could_not_detect():
    mde = minimum_detectable_rate(60, alpha=0.05 / 9).above
    text = undetected_preference(60, mde, alpha=0.05 / 9)
    assert text.startswith("could not detect a preference below 0.739 (or above 0.261)")
    assert "60 untied pairs" in text and "80% power" in text
    assert "no split of 5 untied pairs" in undetected_preference(5, math.nan)


def t_test_power_by_noncentral_t(n: int, d_z: float, alpha: float) -> float:
    df, shift = n - 1, d_z * math.sqrt(n)
    critical = stats.t.isf(alpha / 2, df)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def test_paired_effect_needed_matches_the_noncentral_t():
    for d_z, alpha in ((0.2, 0.05), (0.5, 0.05), (0.2, 0.05 / 9), (-0.3, 0.01)):
        plan = paired_effect_needed(d_z, alpha=alpha)
        n = plan["items"]
        assert t_test_power_by_noncentral_t(n, abs(d_z), alpha) >= 0.8 > t_test_power_by_noncentral_t(n - 1, abs(d_z), alpha)
        assert plan["power_at_items"] == pytest.approx(t_test_power_by_noncentral_t(n, abs(d_z), alpha), abs=1e-8)
    assert paired_effect_needed(0.2)["items"] == 199
    d = minimum_detectable_d_z(199)
    assert t_test_power_by_noncentral_t(199, d, 0.05) == pytest.approx(0.8, abs=1e-6)


def test_mcnemar_sample_size_is_connors_formula():
    # Connor (1987): n = (z_{alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2
    psi, delta = 0.2, 0.05
    by_hand = (1.959964 * math.sqrt(psi) + 0.841621 * math.sqrt(psi - delta**2)) ** 2 / delta**2  # 625.5
    plan = mcnemar_items_needed(psi, delta)
    assert plan["normal"] == math.ceil(by_hand) == 626
    assert mcnemar_normal_power(plan["normal"], psi, delta) >= 0.8 > mcnemar_normal_power(plan["normal"] - 1, psi, delta)


def test_mcnemar_exact_power_is_statsmodels_mcnemar_over_every_table():
    """Enumerate every (n10, n01) of n items, weight each by its multinomial probability and count
    those statsmodels' exact McNemar rejects."""
    n, psi, delta, alpha = 40, 0.3, 0.15, 0.05
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    cells = stats.multinomial(n, [p10, p01, 1 - psi])
    total = 0.0
    for n10 in range(n + 1):
        for n01 in range(n + 1 - n10):
            table = [[0, n10], [n01, n - n10 - n01]]
            if n10 + n01 and mcnemar(table, exact=True).pvalue < alpha:
                total += cells.pmf([n10, n01, n - n10 - n01])
    assert mcnemar_exact_power(n, psi, delta, alpha) == pytest.approx(total, abs=1e-10)


def test_mcnemar_exact_items_are_the_first_n_reaching_the_target():
    plan = mcnemar_items_needed(0.2, 0.05)
    n = plan["exact"]
    assert mcnemar_exact_power(n, 0.2, 0.05) >= 0.8 > mcnemar_exact_power(n - 1, 0.2, 0.05)
    assert n >= plan["normal"]  # the exact test is conservative: 658 against Connor's 626


@pytest.mark.parametrize("call, message", [
    (lambda: pairs_needed(0.5), "nothing to detect"),
    (lambda: pairs_needed(-0.1), "rate must be in [0, 1]"),
    (lambda: pairs_needed(0.6, alpha=0), "alpha must be in (0, 1)"),
    (lambda: pairs_needed(0.6, ties=1), "ties must be in [0, 1)"),
    (lambda: paired_effect_needed(0), "nonzero"),
    (lambda: mcnemar_items_needed(0.1, 0.2), "at most the discordance"),
    (lambda: minimum_detectable_rate(-1), "whole number"),
])
def test_bad_values_are_one_line_config_errors(call, message):
    with pytest.raises(ConfigError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


# --- the minimum detectable coefficient of a Wald z-test (leakage edges) ------------------------------


@pytest.mark.parametrize("alpha", [0.05, 0.05 / 24, 0.01])
def test_minimum_detectable_coefficient_is_statsmodels_solved_effect_times_se(alpha):
    """statsmodels' one-sample normal power (both tails) solved for the effect at nobs 1 is the MDE in units of
    the standard error; the closed form (z + z_power) x se drops only the far tail."""
    from stereolens.stats.power import minimum_detectable_coefficient

    for se in (0.0123, 0.5, 3.0):
        solved = NormalIndPower().solve_power(effect_size=None, nobs1=1, alpha=alpha, power=0.8, ratio=0)
        assert minimum_detectable_coefficient(se, alpha=alpha) == pytest.approx(solved * se, rel=1e-5)
    # the hand calculation at alpha 0.05: 1.959964 + 0.841621 = 2.801585
    assert minimum_detectable_coefficient(1.0) == pytest.approx(2.801585, abs=1e-6)
    # and the two-sided Wald test at that coefficient has 80% power
    mde = minimum_detectable_coefficient(0.2, alpha=alpha)
    z = stats.norm.isf(alpha / 2)
    assert stats.norm.sf(z - mde / 0.2) + stats.norm.cdf(-z - mde / 0.2) == pytest.approx(0.8, abs=1e-5)


def test_minimum_detectable_coefficient_without_a_standard_error_is_nan_and_worded():
    from stereolens.stats.power import minimum_detectable_coefficient, undetected_coefficient

    assert math.isnan(minimum_detectable_coefficient(math.nan)) and math.isnan(minimum_detectable_coefficient(0.0))
    assert undetected_coefficient(0.0336) == "could not detect a coefficient smaller than 0.0336 in size (80% power at alpha 0.05)"
    assert "no standard error" in undetected_coefficient(math.nan)


def t_test_power_by_simulation(n: int, d_z: float, alpha: float, draws: int = 400_000) -> float:
    """The paired t-test's power counted over simulated samples (where scipy's noncentral t gives NaN)."""
    rng = np.random.default_rng(7)
    x = rng.normal(d_z, 1.0, size=(draws, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.isf(alpha / 2, n - 1)))


@pytest.mark.parametrize("n, alpha", [(2, 0.025), (2, 0.0125), (3, 0.025), (3, 0.0125), (4, 0.005), (2, 0.05), (6, 0.05),
                                      (12, 0.025)])
def test_minimum_detectable_d_z_reaches_the_power_with_few_items(n, alpha):
    """statsmodels' solve_power returned its bracket's end (d_z 10 at 2 items and alpha 0.025, power 0.42) or a value
    short of 80% power at a strict alpha; the MDE must have the target power by the noncentral t."""
    d = minimum_detectable_d_z(n, alpha=alpha)
    exact = t_test_power_by_noncentral_t(n, d, alpha)
    power = exact if math.isfinite(exact) else t_test_power_by_simulation(n, d, alpha)
    assert power == pytest.approx(0.8, abs=1e-6 if math.isfinite(exact) else 3e-3)
    assert paired_t_power(d, n, alpha) == pytest.approx(0.8, abs=1e-6)
    # and no smaller effect reaches it
    smaller = t_test_power_by_noncentral_t(n, 0.98 * d, alpha)
    assert (smaller if math.isfinite(smaller) else t_test_power_by_simulation(n, 0.98 * d, alpha)) < 0.8


def f_test_power_by_noncentral_f(n: int, k: int, f: float, alpha: float) -> float:
    critical = stats.f.isf(alpha, k - 1, n - k)
    return float(stats.ncf.sf(critical, k - 1, n - k, f * f * n))


@pytest.mark.parametrize("n, k, alpha", [(159, 3, 0.05), (36, 2, 0.05), (36, 2, 0.05 / 3), (4, 2, 0.05), (12, 5, 0.01)])
def test_minimum_detectable_f_is_the_noncentral_f(n, k, alpha):
    f = minimum_detectable_f(n, k, alpha=alpha)
    assert f_test_power_by_noncentral_f(n, k, f, alpha) == pytest.approx(0.8, abs=1e-6)
    assert f_test_power_by_noncentral_f(n, k, 0.98 * f, alpha) < 0.8


def test_minimum_detectable_f_known_values():
    # Cohen's medium effect f = 0.25 with 3 groups needs 52-53 per group (Cohen 1988 Table 8.4.4; G*Power: 159 in all)
    assert minimum_detectable_f(159, 3) == pytest.approx(0.2485, abs=5e-4)
    assert minimum_detectable_f(156, 3) > 0.25 > minimum_detectable_f(159, 3)
    # Cohen's f and eta squared: f = 0.25 is eta squared 0.0588, f = 0.4 is 0.138
    assert eta_squared_of_f(0.25) == pytest.approx(0.0588, abs=1e-4)
    assert eta_squared_of_f(0.4) == pytest.approx(0.1379, abs=1e-4)
    # no test, no MDE: one group, or no residual degree of freedom
    assert math.isnan(minimum_detectable_f(10, 1)) and math.isnan(minimum_detectable_f(2, 2))


def test_a_non_significant_anova_or_paired_cell_is_worded_by_what_it_could_not_detect():
    f = minimum_detectable_f(36, 2)
    text = undetected_effect("Cohen's f", f, 36, "scores in 2 languages", also=f"eta squared {eta_squared_of_f(f):.3g}")
    assert text.startswith("could not detect an effect below Cohen's f = 0.48")
    assert "36 scores in 2 languages (80% power at alpha 0.05)" in text and "(eta squared 0.18" in text
    assert undetected_effect("|d_z|", math.nan, 1, "cells").startswith("could not detect any |d_z|: 1 cells are too few")


def test_paired_t_power_is_statsmodels_where_its_noncentral_t_holds_and_stays_right_where_it_breaks():
    from statsmodels.stats.power import TTestPower

    for n in (3, 12, 199):
        for d_z in (0.05, 0.2, 0.5):
            for alpha in (0.05, 0.005):
                assert paired_t_power(d_z, n, alpha) == pytest.approx(
                    float(TTestPower().power(effect_size=d_z, nobs=n, alpha=alpha)), abs=1e-7)
    # scipy's noncentral t (under statsmodels) is NaN here; the test rejects essentially always
    assert math.isnan(float(TTestPower().power(effect_size=1.0, nobs=199, alpha=0.05)))
    assert paired_t_power(1.0, 199) == pytest.approx(1.0, abs=1e-9)
