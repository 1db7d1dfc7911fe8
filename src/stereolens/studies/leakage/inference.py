"""Beside MixedLM's model-based standard errors of the leakage coefficients: a cluster bootstrap by group, the
paired difference of two models' coefficients, and the minimum detectable coefficient.

**Why cluster.** MixedLM treats the (group, trait) rows of a fit as independent once each trait's random
intercept is taken out.  The 32 rows of one group are not: they share the group's words in every template the
model read and the group's column of every human matrix, so a group-level shift in the model's scores moves
all of them together and the model-based standard error is too small.  Templates are not the unit: a row's
score is already the median over the language's templates (one template per language in the default run), so
no two rows differ only by template.  The cluster is the **group** (ours).

**The bootstrap (ours).** Resample the groups with replacement (a group drawn twice enters twice, each copy a
cluster) and recompute the fixed effects of Equation 1 by generalised least squares at the fit's own variance
components (residual variance sigma^2 and trait intercept variance tau^2, MixedLM's REML estimates): within
trait t, with n_t rows in the resample, V_t^-1 is proportional to I - kappa_t J with
kappa_t = tau^2 / (sigma^2 + n_t tau^2), so

    beta* = (sum_i w_i x_i x_i' - sum_t kappa_t s_t s_t')^-1 (sum_i w_i x_i y_i - sum_t kappa_t s_t u_t),

s_t = sum over trait t of w_i x_i, u_t = sum of w_i y_i, w_i how often row i's group was drawn.  With every
weight 1 this is MixedLM's own estimate (the GLS at its REML variance components).  Holding the variance
components at the full-sample estimates instead of refitting MixedLM in every resample is the approximation
(ours): it ignores their sampling error, a second-order term for the fixed effects, and makes 1,000 resamples
cost well under a second where 1,000 MixedLM refits (four optimisers each) would cost most of an hour.
The clustered standard error is the standard deviation of beta* over the resamples, and the clustered interval
is estimate +- z_{1 - alpha/2} x that standard error: the same Wald form as MixedLM's interval, with the other
standard error, so the two differ only where clustering matters.  A resample whose design is singular (a
column constant across the drawn groups) is left out and counted.

**Paired differences.** Two models fitted on the same (group, trait) rows have correlated coefficients: the
same human matrices, the same groups, and model scores that share much of their group-level structure.
sqrt(se_a^2 + se_b^2) is right only when the two estimates are independent and too wide when they are
positively correlated.  Each resample draws one set of groups and refits *both* models on it, so the standard
deviation of beta*_a - beta*_b over the resamples is the paired, clustered standard error of the difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from stereolens.errors import DataError

CLUSTER_UNIT = "group"
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
INTERCEPT = "Intercept"
# a resample whose normal matrix is this ill-conditioned is singular (a column constant across the drawn groups)
SINGULAR_CONDITION = 1e12
CLUSTER_COLUMNS = ["se_cluster", "ci_low_cluster", "ci_high_cluster", "p_cluster"]


@dataclass(frozen=True)
class FittedDesign:
    """What a resample needs of one fit: its rows (``trait``, ``group``, ``y`` and the fitted ``terms``) and its
    REML variance components."""

    design: pd.DataFrame
    terms: tuple[str, ...]  # the fitted terms, without the intercept
    residual_variance: float
    trait_variance: float

    def __post_init__(self) -> None:
        missing = [c for c in ("trait", "group", "y", *self.terms) if c not in self.design.columns]
        if missing:
            raise DataError(f"leakage design lacks column(s) {', '.join(missing)}")
        if not (math.isfinite(self.residual_variance) and self.residual_variance > 0):
            raise DataError(f"leakage fit has no positive residual variance ({self.residual_variance})")

    @property
    def columns(self) -> list[str]:
        """The coefficients in the order of the rows of :func:`gls_resamples`: the terms, then the intercept."""
        return [*self.terms, INTERCEPT]


def gls_estimates(fitted: FittedDesign, row_weights: np.ndarray) -> np.ndarray:
    """The GLS fixed effects (terms, then intercept) at the fit's variance components, one row per weight vector
    (``row_weights``: resamples x rows, how often each row enters); NaN rows for a singular design."""
    d = fitted.design
    x = np.column_stack([d[list(fitted.terms)].to_numpy(float), np.ones(len(d))]) if fitted.terms else np.ones((len(d), 1))
    y = d["y"].to_numpy(float)
    codes, _ = pd.factorize(d["trait"], sort=True)
    n_traits = int(codes.max()) + 1 if len(codes) else 0
    w = np.atleast_2d(np.asarray(row_weights, dtype=float))
    p = x.shape[1]
    one_hot = np.zeros((len(d), n_traits))
    one_hot[np.arange(len(d)), codes] = 1.0
    sxx = (w @ (x[:, :, None] * x[:, None, :]).reshape(len(d), p * p)).reshape(-1, p, p)
    sxy = w @ (x * y[:, None])
    n_t = w @ one_hot  # resamples x traits
    s_x = (w @ (one_hot[:, :, None] * x[:, None, :]).reshape(len(d), n_traits * p)).reshape(-1, n_traits, p)
    s_y = w @ (one_hot * y[:, None])
    # a trait variance on the boundary (0) or not estimated leaves ordinary least squares
    tau2 = float(fitted.trait_variance) if math.isfinite(fitted.trait_variance) and fitted.trait_variance > 0 else 0.0
    sigma2 = float(fitted.residual_variance)
    kappa = tau2 / (sigma2 + n_t * tau2)
    a = sxx - np.einsum("bt,btj,btk->bjk", kappa, s_x, s_x)
    b = sxy - np.einsum("bt,btj,bt->bj", kappa, s_x, s_y)
    out = np.full((a.shape[0], p), np.nan)
    ok = np.isfinite(a).all(axis=(1, 2))
    ok[ok] = np.linalg.cond(a[ok]) < SINGULAR_CONDITION
    if ok.any():
        out[ok] = np.linalg.solve(a[ok], b[ok][:, :, None])[:, :, 0]
    return out


def cluster_draws(n_clusters: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """How often each of ``n_clusters`` clusters is drawn in each resample (resamples x clusters; each row sums
    to ``n_clusters``), seeded so the same clusters give the same draws in every stage that asks."""
    if n_clusters < 2:
        raise DataError(f"a cluster bootstrap needs at least 2 clusters, got {n_clusters}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_clusters, size=(int(resamples), n_clusters))
    counts = np.zeros((int(resamples), n_clusters))
    np.add.at(counts, (np.repeat(np.arange(int(resamples)), n_clusters), picks.ravel()), 1.0)
    return counts


def cluster_resamples(fits: Sequence[FittedDesign], *, resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> tuple[list[np.ndarray], int]:
    """The coefficients of every fit in every resample of the groups (one resample draws the groups once for all
    ``fits``, which is what pairs them); returns (one resamples x coefficients array per fit, number of groups).
    The groups are the sorted union of the fits' groups, so one set of groups gives the same draws everywhere."""
    groups = sorted({str(g) for f in fits for g in f.design["group"].unique()})
    if len(groups) < 2:  # one group cannot be resampled: no clustered error (NaN), not an error
        return [np.full((int(resamples), len(f.columns)), np.nan) for f in fits], len(groups)
    counts = cluster_draws(len(groups), resamples=resamples, seed=seed)
    index = {g: k for k, g in enumerate(groups)}
    out = []
    for f in fits:
        rows = np.array([index[str(g)] for g in f.design["group"]], dtype=int)
        out.append(gls_estimates(f, counts[:, rows]))
    return out, len(groups)


@dataclass(frozen=True)
class ClusterErrors:
    se: dict[str, float]  # coefficient -> clustered standard error
    n_clusters: int
    resamples: int
    valid_resamples: int  # resamples with a non-singular design

    def as_dict(self) -> dict[str, object]:
        return {"unit": CLUSTER_UNIT, "n_clusters": self.n_clusters, "resamples": self.resamples,
                "valid_resamples": self.valid_resamples, "method": "cluster bootstrap of the GLS fixed effects at the "
                "fit's REML variance components, groups resampled with replacement"}


def _sd(values: np.ndarray) -> tuple[np.ndarray, int]:
    valid = np.isfinite(values).all(axis=1)
    if valid.sum() < 2:
        return np.full(values.shape[1], np.nan), int(valid.sum())
    return values[valid].std(axis=0, ddof=1), int(valid.sum())


def cluster_standard_errors(fitted: FittedDesign, *, resamples: int = DEFAULT_RESAMPLES,
                            seed: int = DEFAULT_SEED) -> ClusterErrors:
    """The clustered (by group) standard error of every coefficient of one fit."""
    (draws,), n_groups = cluster_resamples([fitted], resamples=resamples, seed=seed)
    sd, n_valid = _sd(draws)
    return ClusterErrors(dict(zip(fitted.columns, map(float, sd))), n_groups, int(resamples), n_valid)


def with_cluster_columns(coefficients: pd.DataFrame, errors: ClusterErrors, *, alpha: float = 0.05) -> pd.DataFrame:
    """``coefficients`` (``term``, ``estimate`` columns) with ``se_cluster``, the Wald interval on it
    (``ci_low_cluster``, ``ci_high_cluster``) and its two-sided p (``p_cluster``); NaN for a term not fitted."""
    out = coefficients.copy()
    se = out["term"].map(errors.se).astype(float)
    z = stats.norm.isf(alpha / 2)
    out["se_cluster"] = se
    out["ci_low_cluster"] = out["estimate"] - z * se
    out["ci_high_cluster"] = out["estimate"] + z * se
    out["p_cluster"] = 2 * stats.norm.sf((out["estimate"] / se).abs())
    return out


@dataclass(frozen=True)
class PairedDifference:
    """One coefficient of two fits on the same groups: the difference a - b and its standard errors."""

    term: str
    estimate_a: float
    estimate_b: float
    difference: float
    se_difference: float  # paired cluster bootstrap: sd of (beta*_a - beta*_b) over the resamples
    se_independent: float  # sqrt(se_a^2 + se_b^2) of the two clustered standard errors, as if independent
    correlation: float  # of beta*_a and beta*_b over the resamples
    n_rows_shared: int  # (group, trait) rows in both fits
    n_clusters: int
    valid_resamples: int


def paired_differences(fit_a: FittedDesign, fit_b: FittedDesign, estimates_a: dict[str, float],
                       estimates_b: dict[str, float], terms: Sequence[str], *, resamples: int = DEFAULT_RESAMPLES,
                       seed: int = DEFAULT_SEED) -> list[PairedDifference]:
    """The paired difference of each of ``terms`` between two fits (``estimates_*``: the fits' own, MixedLM's,
    coefficients; the resamples give only the standard errors).  A term one fit does not have is NaN."""
    (draws_a, draws_b), n_groups = cluster_resamples([fit_a, fit_b], resamples=resamples, seed=seed)
    shared = len(fit_a.design.merge(fit_b.design[["trait", "group"]], on=["trait", "group"]))
    out = []
    for term in terms:
        est_a, est_b = float(estimates_a.get(term, math.nan)), float(estimates_b.get(term, math.nan))
        if term not in fit_a.columns or term not in fit_b.columns:
            out.append(PairedDifference(term, est_a, est_b, est_a - est_b, math.nan, math.nan, math.nan, shared,
                                        n_groups, 0))
            continue
        a = draws_a[:, fit_a.columns.index(term)]
        b = draws_b[:, fit_b.columns.index(term)]
        valid = np.isfinite(a) & np.isfinite(b)
        if valid.sum() < 2:
            se_d = se_i = corr = math.nan
        else:
            se_d = float(np.std(a[valid] - b[valid], ddof=1))
            se_i = float(math.hypot(np.std(a[valid], ddof=1), np.std(b[valid], ddof=1)))
            corr = float(np.corrcoef(a[valid], b[valid])[0, 1]) if np.std(a[valid]) > 0 and np.std(b[valid]) > 0 else math.nan
        out.append(PairedDifference(term, est_a, est_b, est_a - est_b, se_d, se_i, corr, shared, n_groups,
                                    int(valid.sum())))
    return out


def fitted_design(fit: object) -> FittedDesign:
    """The :class:`FittedDesign` of a :class:`~stereolens.studies.leakage.fit.LeakageFit`."""
    design = getattr(fit, "design", None)
    if design is None:
        raise DataError("this leakage fit kept no design rows to resample")
    return FittedDesign(design, tuple(fit.terms), float(fit.residual_variance), float(fit.trait_variance))


def add_cluster_intervals(fit: object, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                          alpha: float = 0.05) -> ClusterErrors:
    """Put the clustered columns (:data:`CLUSTER_COLUMNS`) into ``fit.coefficients`` and their provenance into
    ``fit.cluster``; returns the standard errors."""
    errors = cluster_standard_errors(fitted_design(fit), resamples=resamples, seed=seed)
    fit.coefficients = with_cluster_columns(fit.coefficients, errors, alpha=alpha)
    fit.cluster = errors.as_dict()
    return errors
