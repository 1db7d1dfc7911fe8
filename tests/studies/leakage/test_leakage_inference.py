"""The clustered interval and the paired difference of leakage coefficients (studies/leakage/inference.py),
against computations that share none of its code: statsmodels' MixedLM, a dense-matrix GLS on explicitly
duplicated rows, and the sampling distribution of the estimator over simulated regressions with known
coefficients."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from stereolens.studies.leakage.inference import (
    FittedDesign,
    cluster_draws,
    cluster_resamples,
    cluster_standard_errors,
    gls_estimates,
    paired_differences,
    with_cluster_columns,
)

TRAITS, GROUPS = 32, 30


def clustered_regression(seed: int, *, slope: float = 0.3, group_x: float = 8.0, group_y: float = 3.0,
                         noise: float = 3.0) -> pd.DataFrame:
    """One row per (trait, group): a human term with a group-level part (``group_x``) and a model score
    y = slope H + trait intercept + group shift (``group_y``) + noise.  The group shift is what a random
    intercept per trait does not model."""
    rng = np.random.default_rng(seed)
    trait = np.repeat(np.arange(TRAITS), GROUPS)
    group = np.tile(np.arange(GROUPS), TRAITS)
    h = 20 + rng.normal(0, group_x, GROUPS)[group] + rng.normal(0, 6, TRAITS * GROUPS)
    y = (slope * h + rng.normal(0, 2, TRAITS)[trait] + rng.normal(0, group_y, GROUPS)[group]
         + rng.normal(0, noise, TRAITS * GROUPS))
    return pd.DataFrame({"trait": [f"t{t:02d}" for t in trait], "group": [f"g{g:02d}" for g in group], "H_A": h, "y": y})


def mixedlm(df: pd.DataFrame, terms: list[str]):
    import statsmodels.formula.api as smf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smf.mixedlm("y ~ " + " + ".join(terms), df, groups=df["trait"]).fit(reml=True, method="powell")


def fitted(df: pd.DataFrame, terms: list[str], result) -> FittedDesign:
    return FittedDesign(df, tuple(terms), float(result.scale), float(np.asarray(result.cov_re)[0, 0]))


def dense_gls(df: pd.DataFrame, terms: list[str], sigma2: float, tau2: float) -> np.ndarray:
    """GLS with the full covariance V = sigma^2 I + tau^2 Z Z' (Z: trait indicators), solved directly."""
    x = np.column_stack([df[terms].to_numpy(float), np.ones(len(df))])
    z = pd.get_dummies(df["trait"]).to_numpy(float)
    v_inv = np.linalg.inv(sigma2 * np.eye(len(df)) + tau2 * z @ z.T)
    return np.linalg.solve(x.T @ v_inv @ x, x.T @ v_inv @ df["y"].to_numpy(float))


def test_gls_at_the_reml_variance_components_is_mixedlms_estimate():
    df = clustered_regression(1)
    result = mixedlm(df, ["H_A"])
    fd = fitted(df, ["H_A"], result)
    full = gls_estimates(fd, np.ones((1, len(df))))[0]
    assert full == pytest.approx([result.fe_params["H_A"], result.fe_params["Intercept"]], rel=1e-7)
    assert full == pytest.approx(dense_gls(df, ["H_A"], fd.residual_variance, fd.trait_variance), rel=1e-9)


def test_a_resample_is_the_gls_of_the_drawn_groups_rows_duplicated():
    df = clustered_regression(2).query("trait < 't12'").reset_index(drop=True)  # small enough for a dense V
    fd = FittedDesign(df, ("H_A",), 9.5, 3.2)
    groups = sorted(df["group"].unique())
    counts = cluster_draws(len(groups), resamples=3, seed=5)
    (draws,), n_groups = cluster_resamples([fd], resamples=3, seed=5)
    assert n_groups == GROUPS and (counts.sum(axis=1) == GROUPS).all()
    for k in range(3):
        # each drawn copy of a group is its own set of rows in the same traits
        copies = [df[df["group"] == g] for g, c in zip(groups, counts[k]) for _ in range(int(c))]
        resample = pd.concat(copies, ignore_index=True)
        assert draws[k] == pytest.approx(dense_gls(resample, ["H_A"], 9.5, 3.2), rel=1e-8)


def test_a_design_constant_in_a_resample_is_left_out_not_solved():
    df = clustered_regression(3)
    df["H_B"] = np.where(df["group"] == "g00", 1.0, 0.0)  # a term only one group carries
    fd = FittedDesign(df, ("H_A", "H_B"), 9.0, 4.0)
    (draws,), _ = cluster_resamples([fd], resamples=200, seed=0)
    singular = np.isnan(draws).all(axis=1)
    # exactly the resamples that did not draw group 0 (then H_B is 0 in every row)
    drawn = cluster_draws(GROUPS, resamples=200, seed=0)[:, 0] > 0
    assert (singular == ~drawn).all() and singular.any()
    errors = cluster_standard_errors(fd, resamples=200, seed=0)
    assert errors.valid_resamples == int(drawn.sum()) < 200


def test_the_clustered_se_tracks_the_estimators_spread_where_mixedlms_understates_it():
    """Regressions with a known slope 0.3 and a group shift shared by the 32 rows of a group: over 300 simulated
    data sets the estimate's standard deviation is the truth; the cluster bootstrap's standard error comes close to
    it, MixedLM's (which takes the rows as independent given the trait) is far below it, and the planted slope is
    inside the clustered interval about as often as 95%."""
    sigma2, tau2 = 9.0 + 9.0, 4.0  # what the random-intercept model absorbs: the group shift joins the residual
    estimates = []
    for seed in range(300):
        df = clustered_regression(100 + seed)
        estimates.append(gls_estimates(FittedDesign(df, ("H_A",), sigma2, tau2), np.ones((1, len(df))))[0, 0])
    truth_sd = float(np.std(estimates, ddof=1))
    assert np.mean(estimates) == pytest.approx(0.3, abs=0.01)
    model_se, cluster_se, covered = [], [], 0
    for seed in range(6):
        df = clustered_regression(100 + seed)
        result = mixedlm(df, ["H_A"])
        errors = cluster_standard_errors(fitted(df, ["H_A"], result), resamples=400, seed=seed)
        model_se.append(float(result.bse_fe["H_A"]))
        cluster_se.append(errors.se["H_A"])
        table = with_cluster_columns(pd.DataFrame({"term": ["H_A"], "estimate": [result.fe_params["H_A"]]}), errors)
        covered += bool(table["ci_low_cluster"].iloc[0] < 0.3 < table["ci_high_cluster"].iloc[0])
    assert np.mean(model_se) < 0.5 * truth_sd  # the model-based error misses most of the spread
    assert np.mean(cluster_se) == pytest.approx(truth_sd, rel=0.25)
    assert covered >= 5


def cluster_robust_sandwich(df: pd.DataFrame, terms: list[str], sigma2: float, tau2: float) -> np.ndarray:
    """The analytic counterpart of the cluster bootstrap: the CR0 sandwich of the random-intercept GLS, written as
    OLS on the quasi-demeaned rows (x - theta_t mean_t(x), theta_t = 1 - sqrt(sigma^2 / (sigma^2 + n_t tau^2))),
    the score summed by group (Stata's ``xtreg, re vce(cluster group)`` form)."""
    x = np.column_stack([df[terms].to_numpy(float), np.ones(len(df))])
    y = df["y"].to_numpy(float)
    xt, yt = x.copy(), y.copy()
    for _, rows in df.groupby("trait").indices.items():
        theta = 1 - math.sqrt(sigma2 / (sigma2 + len(rows) * tau2))
        xt[rows] -= theta * x[rows].mean(axis=0)
        yt[rows] -= theta * y[rows].mean()
    beta = np.linalg.lstsq(xt, yt, rcond=None)[0]
    resid = yt - xt @ beta
    bread = np.linalg.inv(xt.T @ xt)
    scores = [xt[rows].T @ resid[rows] for rows in df.groupby("group").indices.values()]
    return np.sqrt(np.diag(bread @ sum(np.outer(s, s) for s in scores) @ bread))


@pytest.mark.parametrize("group_part", [0.0, 8.0])
def test_the_bootstrap_se_is_the_cluster_robust_sandwich(group_part):
    """Resampling groups estimates what the analytic cluster-robust (by group) variance of the slope estimates, at
    MixedLM's REML variance components, with and without group structure: within 10% (over 24 data sets the ratio
    ran 0.94 to 1.07: the Monte-Carlo error of 4,000 resamples, about 1%, and the bootstrap's own finite-sample
    terms, of order 1 / 30 groups, which the sandwich, holding the full sample's trait means, does not have).  (Not the intercept: it
    carries the trait intercepts, shared by every group, which no resampling of groups can see.)"""
    for seed in range(3):
        df = clustered_regression(20 + seed, group_x=group_part, group_y=group_part / 2)
        fd = fitted(df, ["H_A"], mixedlm(df, ["H_A"]))
        errors = cluster_standard_errors(fd, resamples=4000, seed=seed)
        analytic = cluster_robust_sandwich(df, ["H_A"], fd.residual_variance, fd.trait_variance)
        assert errors.se["H_A"] == pytest.approx(analytic[0], rel=0.1)


def test_without_group_structure_the_clustered_se_is_close_to_mixedlms():
    """No group-level part in the data: the two standard errors estimate the same spread.  One data set's
    clustered error varies by about 13% with 30 groups (and averages about 2% low over 1,500 simulated data sets:
    the cluster bootstrap, like the CR0 sandwich, has no small-sample correction), so six are averaged."""
    model_se, cluster_se = [], []
    for seed in range(6):
        df = clustered_regression(7 + seed, group_x=0.0, group_y=0.0)
        result = mixedlm(df, ["H_A"])
        model_se.append(float(result.bse_fe["H_A"]))
        cluster_se.append(cluster_standard_errors(fitted(df, ["H_A"], result), resamples=1000, seed=seed).se["H_A"])
    assert np.mean(cluster_se) == pytest.approx(np.mean(model_se), rel=0.2)


def test_cluster_columns_are_the_wald_interval_and_p_on_the_clustered_se():
    from scipy import stats

    coefficients = pd.DataFrame({"term": ["H_A", "H_B", "Intercept"], "estimate": [0.3, 0.01, -1.0]})
    errors = type("E", (), {"se": {"H_A": 0.1, "Intercept": 0.5}})()
    out = with_cluster_columns(coefficients, errors, alpha=0.05)
    z = stats.norm.isf(0.025)
    assert out.loc[0, "ci_low_cluster"] == pytest.approx(0.3 - z * 0.1)
    assert out.loc[0, "ci_high_cluster"] == pytest.approx(0.3 + z * 0.1)
    assert out.loc[0, "p_cluster"] == pytest.approx(2 * stats.norm.sf(3.0))
    assert out.loc[[1], CLUSTER_COLUMNS].isna().all().all()  # a term not fitted has none


CLUSTER_COLUMNS = ["se_cluster", "ci_low_cluster", "ci_high_cluster", "p_cluster"]


def two_models(seed: int, *, shared: float = 10.0, own: float = 0.5, difference: float = 0.1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two models scoring the same (trait, group) rows: a large score component they share and a small one
    each has alone; model b's slope on H_A is ``difference`` lower on half of the groups (0.05 on average)."""
    rng = np.random.default_rng(seed)
    base = clustered_regression(seed, group_x=0.0, group_y=0.0, noise=0.0)
    common = rng.normal(0, shared, len(base))
    a = base.assign(y=0.3 * base["H_A"] + common + rng.normal(0, own, len(base)))
    half = base["group"].isin([f"g{g:02d}" for g in range(0, GROUPS, 2)])
    b = base.assign(y=(0.3 - difference * half) * base["H_A"] + common + rng.normal(0, own, len(base)))
    return a, b


def test_a_planted_difference_is_found_paired_and_missed_by_the_two_unpaired_intervals():
    a, b = two_models(11)
    fit_a, fit_b = mixedlm(a, ["H_A"]), mixedlm(b, ["H_A"])
    ci_a, ci_b = fit_a.conf_int().loc["H_A"], fit_b.conf_int().loc["H_A"]
    assert ci_a[0] < ci_b[1] and ci_b[0] < ci_a[1]  # the models' own intervals overlap
    (d,) = paired_differences(fitted(a, ["H_A"], fit_a), fitted(b, ["H_A"], fit_b),
                              dict(fit_a.fe_params), dict(fit_b.fe_params), ["H_A"], resamples=1000, seed=0)
    assert d.difference == pytest.approx(fit_a.fe_params["H_A"] - fit_b.fe_params["H_A"])
    assert d.difference == pytest.approx(0.05, abs=0.01)
    assert d.correlation > 0.95  # the shared component makes the two estimates move together
    assert d.se_difference < 0.2 * d.se_independent
    # found: the clustered error of the difference is mostly the planted slope's spread across groups (0.1 on
    # half of them, 0 on the others), not noise, and still far below the difference
    assert abs(d.difference) / d.se_difference > 3
    assert abs(d.difference) / d.se_independent < 1.96  # what treating them as independent misses
    assert (d.n_rows_shared, d.n_clusters, d.valid_resamples) == (TRAITS * GROUPS, GROUPS, 1000)


def test_the_paired_se_is_the_sd_of_the_paired_resampled_differences():
    """Same draws for both fits: the standard error is the spread of the per-resample differences, computed here
    from each fit's own resamples with the same seed."""
    a, b = two_models(12)
    fa, fb = FittedDesign(a, ("H_A",), 100.0, 1.0), FittedDesign(b, ("H_A",), 100.0, 1.0)
    (d,) = paired_differences(fa, fb, {"H_A": 0.3}, {"H_A": 0.25}, ["H_A"], resamples=300, seed=4)
    (ra,), _ = cluster_resamples([fa], resamples=300, seed=4)
    (rb,), _ = cluster_resamples([fb], resamples=300, seed=4)
    assert d.se_difference == pytest.approx(float(np.std(ra[:, 0] - rb[:, 0], ddof=1)), rel=1e-10)
    assert d.se_independent == pytest.approx(math.hypot(np.std(ra[:, 0], ddof=1), np.std(rb[:, 0], ddof=1)), rel=1e-10)
    # a term one fit lacks has no difference and no standard error
    (missing,) = paired_differences(fa, fb, {"H_A": 0.3}, {"H_A": 0.25}, ["H_B"], resamples=50, seed=4)
    assert math.isnan(missing.difference) and math.isnan(missing.se_difference)


def test_one_group_or_no_trait_variance_is_handled_not_raised():
    df = clustered_regression(30)
    one = df[df["group"] == "g00"].reset_index(drop=True)
    errors = cluster_standard_errors(FittedDesign(one, ("H_A",), 9.0, 4.0), resamples=50)
    assert math.isnan(errors.se["H_A"]) and errors.valid_resamples == 0 and errors.n_clusters == 1
    # a trait variance on the boundary (0) or missing (NaN) is ordinary least squares
    x = np.column_stack([df["H_A"], np.ones(len(df))])
    ols = np.linalg.lstsq(x, df["y"].to_numpy(), rcond=None)[0]
    for tau2 in (0.0, math.nan):
        assert gls_estimates(FittedDesign(df, ("H_A",), 9.0, tau2), np.ones((1, len(df))))[0] == pytest.approx(ols)
