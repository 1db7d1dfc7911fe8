"""Stereotype leakage regression (Cao et al. 2024, Equation 1) and the tables built on it.

MLLM_tgt = sum_l alpha_l H_l + beta LM_tgt + C, fitted with statsmodels MixedLM
and a random intercept per trait (as AnnaSou/Stereotype_Leakage ``mixed_effect.py``),
one row per (group, trait) cell.  Missing human cells (the 999 code of the published
files: a group a language's annotators did not rate, or a group unique to another country
rated by fewer than five) are filled with 0 by default (``missing="zero"``, that code's
treatment, ``human_df.replace([999], 0.0)``: a culture that did not rate a group holds no
stereotype of it, the premise of Cao et al. 2024 section 4.2.4); ``missing="drop"`` leaves
those rows out instead.  A *thin* group (rated, but by fewer annotators than the study's
minimum; the published files keep two, Hindi immigrant and Asian person) is not missing:
``thin_rule="keep"`` (default, what that code does) fits its values and counts the rows,
``thin_rule="drop"`` leaves its rows out; never zero-filled.  Scores are used ``raw`` (default) or ``standardised``
(z-scored per column over the fitted rows).  The baseline term is left out, and
the output says so, when no monolingual model matrix is given.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError

Scale = Literal["raw", "standardised"]
Missing = Literal["drop", "zero"]
MISSING_TREATMENTS = ("zero", "drop")
ThinRule = Literal["keep", "drop"]
THIN_RULES = ("keep", "drop")
COEFFICIENT_COLUMNS = ["term", "estimate", "se", "z", "p", "ci_low", "ci_high"]
OPTIMISERS = ("lbfgs", "bfgs", "powell", "nm")


def human_term(language: str) -> str:
    return f"H_{language.upper()}"


def baseline_term(language: str) -> str:
    return f"LM_{language.upper()}"


@dataclass
class LeakageFit:
    target_language: str
    coefficients: pd.DataFrame  # COEFFICIENT_COLUMNS, rows H_<LANG>..., LM_<TGT> (if any), Intercept
    n_obs: int
    n_traits: int
    terms: list[str]
    baseline_available: bool
    scale: str
    missing: str
    converged: bool
    trait_variance: float
    notes: list[str] = field(default_factory=list)
    # n_cells, n_unscored, n_missing_human (dropped or zero-filled as ``missing`` says), n_missing_baseline,
    # n_thin (rows of a thin group, kept or dropped as thin_rule says), thin_rule, thin_groups (language -> groups)
    cell_counts: dict[str, Any] = field(default_factory=dict)
    optimiser: str | None = None  # the statsmodels optimiser whose result was kept
    optimisers: list[dict[str, Any]] = field(default_factory=list)  # every optimiser tried: converged, llf
    log_likelihood: float | None = None
    residual_variance: float = math.nan  # MixedLM's REML scale (sigma^2), beside the trait intercept variance
    # the rows fitted (trait, group, y and the terms): what the cluster bootstrap and the paired comparison resample
    design: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    # the clustered standard errors' provenance (unit, clusters, resamples) once they are added
    # (:func:`stereolens.studies.leakage.inference.add_cluster_intervals`)
    cluster: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "target_language": self.target_language.upper(),
            "n_obs": self.n_obs,
            "n_traits": self.n_traits,
            "terms": self.terms,
            "baseline_available": self.baseline_available,
            "scale": self.scale,
            "missing": self.missing,
            "n_dropped_missing_human": self.cell_counts.get("n_missing_human", 0) if self.missing == "drop" else 0,
            "n_zero_filled_missing_human": self.cell_counts.get("n_missing_human", 0) if self.missing == "zero" else 0,
            # groups rated by too few annotators: never zero-filled; their rows are kept (their values fitted)
            # or dropped as thin_rule says
            "thin_rule": self.cell_counts.get("thin_rule", "keep"),
            "thin_groups": self.cell_counts.get("thin_groups", {}),
            "n_thin_kept": self.cell_counts.get("n_thin", 0) if self.cell_counts.get("thin_rule", "keep") == "keep" else 0,
            "n_thin_dropped": self.cell_counts.get("n_thin", 0) if self.cell_counts.get("thin_rule") == "drop" else 0,
            "cell_counts": self.cell_counts,
            "converged": self.converged,
            "optimiser": self.optimiser,
            "log_likelihood": self.log_likelihood,
            "optimisers_tried": self.optimisers,
            "trait_random_intercept_variance": self.trait_variance,
            "residual_variance": self.residual_variance,
            "cluster": self.cluster,
            "notes": self.notes,
        }


def _long(matrix: pd.DataFrame, name: str) -> pd.Series:
    m = matrix.copy()
    m.index.name = "trait"
    m.columns.name = "group"
    s = m.stack(future_stack=True) if hasattr(m, "stack") else m.stack()
    s.name = name
    return s.astype(float)


def design_table(
    target: pd.DataFrame,
    human: Mapping[str, pd.DataFrame],
    *,
    baseline: pd.DataFrame | None = None,
    target_language: str,
    missing: Missing = "zero",
    scale: Scale = "raw",
    thin: Mapping[str, Sequence[str]] | None = None,
    thin_rule: ThinRule = "keep",
) -> tuple[pd.DataFrame, list[str]]:
    """One row per (trait, group) with columns y, H_<LANG>..., LM_<TGT>; the notes on what was dropped.

    ``thin`` maps a language to its thin groups (rated by fewer annotators than the study's minimum,
    :func:`stereolens.studies.leakage.matrices.read_thin_groups`): their cells hold values and are not
    missing; ``thin_rule`` keeps those rows (``keep``) or leaves them out (``drop``).  Only the cells with no
    value (the published files' 999) are ``missing``: filled with 0 (``zero``) or their rows dropped (``drop``).
    """
    if missing not in MISSING_TREATMENTS:
        raise ConfigError(f"missing must be drop or zero, got {missing!r}")
    if thin_rule not in THIN_RULES:
        raise ConfigError(f"thin_rule must be keep or drop, got {thin_rule!r}")
    if scale not in ("raw", "standardised"):
        raise ConfigError(f"scale must be raw or standardised, got {scale!r}")
    if not human:
        raise DataError("leakage fit needs at least one human matrix")
    notes: list[str] = []
    parts = [_long(target, "y")]
    hterms = []
    for lang in sorted(human, key=lambda s: s.upper()):
        hterms.append(human_term(lang))
        parts.append(_long(human[lang], human_term(lang)))
    if baseline is not None:
        parts.append(_long(baseline, baseline_term(target_language)))
    df = pd.concat(parts, axis=1, join="outer").reset_index()
    n_all = len(df)
    # cells without a model score (trait or group not in the model matrix) never enter the fit
    df = df[df["y"].notna()]
    if len(df) < n_all:
        notes.append(f"{n_all - len(df)} of {n_all} cells have no model score")
    n_scored = len(df)
    # the thin groups of the languages fitted here; a row is thin when its group is thin in any of them (its
    # cells in another language that has no value are still missing there, and zero-filled or dropped as such)
    by_upper = {k.upper(): k for k in human}
    thin_groups = {lang.upper(): [g for g in groups if g in human[by_upper[lang.upper()]].columns]
                   for lang, groups in (thin or {}).items() if lang.upper() in by_upper}
    thin_groups = {lang: groups for lang, groups in thin_groups.items() if groups}
    is_thin = df["group"].isin({g for groups in thin_groups.values() for g in groups})
    listed = ", ".join(f"{lang} {', '.join(groups)}" for lang, groups in sorted(thin_groups.items()))
    if thin_rule == "drop":
        df = df[~is_thin]
        if is_thin.any():
            notes.append(f"dropped {int(is_thin.sum())} rows of groups rated by too few annotators ({listed})")
    elif is_thin.any():
        notes.append(f"kept {int(is_thin.sum())} rows of groups rated by too few annotators with their values "
                     f"({listed}; flagged, not zero-filled)")
    missing_human = df[hterms].isna().any(axis=1)
    if missing == "drop":
        df = df[~missing_human]
        notes.append(f"dropped {int(missing_human.sum())} of {len(missing_human)} scored cells with a missing human rating")
    else:
        df[hterms] = df[hterms].fillna(0.0)
        notes.append(f"filled {int(missing_human.sum())} cells' missing human ratings with 0 (original code's choice)")
    if baseline is not None:
        lm = baseline_term(target_language)
        no_lm = df[lm].isna()
        if no_lm.any():
            notes.append(f"dropped {int(no_lm.sum())} cells without a baseline score")
            df = df[~no_lm]
    df = df.reset_index(drop=True)
    counts = {"n_cells": int(n_all), "n_unscored": int(n_all - n_scored),
              "n_missing_human": int(missing_human.sum()), "missing_human": missing,
              "n_thin": int(is_thin.sum()), "thin_rule": thin_rule, "thin_groups": thin_groups,
              "n_missing_baseline": int(no_lm.sum()) if baseline is not None else 0}
    if scale == "standardised":
        cols = ["y", *hterms] + ([baseline_term(target_language)] if baseline is not None else [])
        for col in cols:
            sd = df[col].std(ddof=0)
            df[col] = (df[col] - df[col].mean()) / sd if sd > 0 else 0.0
    # what was left out, for reports that must say how many (group, trait) rows each fit lost
    df.attrs["counts"] = counts
    return df, notes


def fit_leakage(
    target: pd.DataFrame,
    human: Mapping[str, pd.DataFrame],
    target_language: str,
    *,
    baseline: pd.DataFrame | None = None,
    scale: Scale = "raw",
    missing: Missing = "zero",
    alpha: float = 0.05,
    optimisers: Sequence[str] = OPTIMISERS,
    maxiter: int | None = None,
    thin: Mapping[str, Sequence[str]] | None = None,
    thin_rule: ThinRule = "keep",
) -> LeakageFit:
    """Mixed-effects fit of Equation 1 with a random intercept per trait.

    Every optimiser in ``optimisers`` is tried and the best result kept (:func:`_select_result`):
    one optimiser can report convergence at a degenerate point, e.g. L-BFGS stopping at a singular
    random-effects covariance with an infinite log-likelihood and an intercept SE of 1e7.
    ``maxiter`` caps each optimiser's iterations (None: statsmodels' default).  ``thin`` and ``thin_rule``:
    the groups rated by too few annotators and how they enter (:func:`design_table`).
    """
    import statsmodels.formula.api as smf

    df, notes = design_table(
        target, human, baseline=baseline, target_language=target_language, missing=missing, scale=scale,
        thin=thin, thin_rule=thin_rule,
    )
    terms, constant = _fit_terms(df, human, target_language, baseline_available=baseline is not None, notes=notes)
    if len(df) <= len(terms) + 2:
        raise DataError(f"leakage fit for {target_language}: only {len(df)} usable cells for {len(terms)} terms")
    formula = "y ~ " + (" + ".join(terms) if terms else "1")
    model = smf.mixedlm(formula, df, groups=df["trait"])
    results, candidates, messages = _fit_each_optimiser(model, optimisers, maxiter)
    chosen = _select_result(results)
    if chosen is None:
        raise DataError(f"leakage fit for {target_language}: MixedLM failed with every optimiser ({', '.join(optimisers)})")
    optimiser, result = chosen
    converged = bool(result.converged)
    if not converged:
        notes.append(f"MixedLM did not converge with any optimiser; kept {optimiser}, the highest likelihood "
                     "found; read the coefficients with care")
    for message in messages.get(optimiser, []):
        # typically the trait variance estimate on the boundary (0): the fixed effects are still valid
        notes.append(f"statsmodels ({optimiser}): {message}")
    cov_re = result.cov_re
    trait_var = float(np.asarray(cov_re)[0, 0]) if np.size(cov_re) else math.nan
    return LeakageFit(
        target_language=target_language.upper(),
        coefficients=_coefficient_table(result, terms, constant, alpha),
        n_obs=int(len(df)),
        n_traits=int(df["trait"].nunique()),
        terms=terms,
        baseline_available=baseline is not None,
        scale=scale,
        missing=missing,
        converged=converged,
        trait_variance=trait_var,
        notes=notes,
        cell_counts=dict(df.attrs.get("counts", {})),
        optimiser=optimiser,
        optimisers=candidates,
        log_likelihood=_finite_or_none(result.llf),
        residual_variance=float(result.scale),
        design=df[["trait", "group", "y", *terms]].copy(),
    )


def check_missing_treatment(missing: str) -> str:
    if missing not in MISSING_TREATMENTS:
        raise ConfigError(f"study.leakage.fit.missing must be one of {', '.join(MISSING_TREATMENTS)} "
                          f"(zero: the reference code's treatment; drop: leave the cells out), got {missing!r}")
    return missing


def check_thin_rule(rule: str) -> str:
    if rule not in THIN_RULES:
        raise ConfigError(f"study.leakage.fit.thin_groups must be one of {', '.join(THIN_RULES)} "
                          f"(keep: the published values, the reference code's use; drop: leave the rows out), got {rule!r}")
    return rule


def fit_missing_treatments(
    target: pd.DataFrame, human: Mapping[str, pd.DataFrame], target_language: str, *,
    baseline: pd.DataFrame | None, scale: Scale, missing: Missing, alpha: float, model: str,
    thin: Mapping[str, Sequence[str]] | None = None, thin_rule: ThinRule = "keep",
) -> list[tuple[str, LeakageFit, list[dict[str, Any]]]]:
    """(treatment, fit, edges) under the configured treatment of missing human cells, then under the other:
    the configured one is the reported one, the other is fitted beside it so the report can show both edge sets.
    Both apply the same thin rule."""
    out = []
    for treatment in (missing, *[t for t in MISSING_TREATMENTS if t != missing]):
        fit = fit_leakage(target, human, target_language, baseline=baseline, scale=scale, missing=treatment, alpha=alpha,
                          thin=thin, thin_rule=thin_rule)
        out.append((treatment, fit, leakage_edges(fit, alpha=alpha, model=model, converged_only=False)))
    return out


def _fit_terms(
    df: pd.DataFrame, human: Mapping[str, pd.DataFrame], target_language: str, *, baseline_available: bool,
    notes: list[str],
) -> tuple[list[str], list[str]]:
    """(terms of the formula, constant terms left out), with a note for each term not fitted."""
    terms = [human_term(lang) for lang in sorted(human, key=lambda s: s.upper())]
    if baseline_available:
        terms.append(baseline_term(target_language))
    else:
        notes.append(f"no monolingual baseline LM_{target_language.upper()} configured: the beta term is omitted")
    # a constant column (e.g. all zero after zero-filling) makes the design singular
    constant = [t for t in terms if df[t].nunique() <= 1]
    if constant:
        notes.append(f"left out constant term(s) {constant}")
        terms = [t for t in terms if t not in constant]
    return terms, constant


def _fit_each_optimiser(
    model: Any, optimisers: Sequence[str], maxiter: int | None,
) -> tuple[list[tuple[str, Any]], list[dict[str, Any]], dict[str, list[str]]]:
    """(results of the optimisers that ran, one candidate row per optimiser, convergence warnings by optimiser)."""
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    candidates: list[dict[str, Any]] = []
    results: list[tuple[str, Any]] = []
    messages: dict[str, list[str]] = {}
    for method in optimisers:
        fit_kwargs = {"maxiter": int(maxiter)} if maxiter is not None else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            try:
                res = model.fit(reml=True, method=method, **fit_kwargs)
            except (np.linalg.LinAlgError, ValueError) as exc:
                candidates.append({"method": method, "converged": False, "llf": None, "error": str(exc).splitlines()[0]})
                continue
        messages[method] = list(dict.fromkeys(
            str(w.message).splitlines()[0] for w in caught if issubclass(w.category, ConvergenceWarning)))
        candidates.append({"method": method, "converged": bool(res.converged), "llf": _finite_or_none(res.llf)})
        results.append((method, res))
    return results, candidates, messages


def _coefficient_table(result: Any, terms: Sequence[str], constant: Sequence[str], alpha: float) -> pd.DataFrame:
    """One row per fitted term and the intercept; the constant terms left out are NaN rows before the intercept."""
    ci = result.conf_int(alpha=alpha)
    rows = []
    for term in [*terms, "Intercept"]:
        est = float(result.fe_params[term])
        se = float(result.bse_fe[term])
        z = est / se if se > 0 else math.nan
        p = float(result.pvalues[term])
        rows.append((term, est, se, z, p, float(ci.loc[term, 0]), float(ci.loc[term, 1])))
    for term in constant:
        rows.insert(len(rows) - 1, (term, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan))
    return pd.DataFrame(rows, columns=COEFFICIENT_COLUMNS)


def _finite_or_none(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _select_result(results: Sequence[tuple[str, Any]]) -> tuple[str, Any] | None:
    """The converged result with the highest finite log-likelihood; if none converged, the highest
    finite log-likelihood; failing that, the first result.

    A non-finite log-likelihood marks a degenerate optimum (singular covariance), never a best fit.
    """
    if not results:
        return None
    finite = [(m, r) for m, r in results if _finite_or_none(r.llf) is not None]
    pool = [(m, r) for m, r in finite if r.converged] or finite
    if not pool:
        return results[0]
    # max keeps the first of equal likelihoods, so the preferred (earlier) optimiser wins ties
    return max(pool, key=lambda mr: float(mr[1].llf))


def leakage_edges(
    fit: LeakageFit, *, alpha: float = 0.05, model: str | None = None, converged_only: bool = True
) -> list[dict[str, Any]]:
    """Significant positive effects of a non-target language's human stereotypes (source -> target).

    Each edge carries the fit's ``converged`` flag and ``missing`` treatment.  A fit that did not converge
    gives no edges unless ``converged_only`` is False: its p-values rest on an optimum statsmodels
    did not confirm.
    """
    if converged_only and not fit.converged:
        return []
    target = fit.target_language.upper()
    edges = []
    for row in fit.coefficients.itertuples(index=False):
        if not row.term.startswith("H_"):
            continue
        source = row.term[2:]
        if source == target or not (row.estimate > 0 and row.p < alpha):
            continue
        edge = {"source": source, "target": target, "estimate": float(row.estimate), "p": float(row.p),
                "se": float(row.se), "ci_low": float(row.ci_low), "ci_high": float(row.ci_high),
                "converged": bool(fit.converged), "missing": fit.missing}
        if model is not None:
            edge = {"model": model, **edge}
        edges.append(edge)
    return edges


def non_target_family(coefficients: pd.DataFrame) -> pd.DataFrame:
    """The rows of a stacked coefficient table (``target`` column) that are leakage tests: human terms
    of a language other than the target.  Their p-values are one family for multiple-comparison
    corrections (the target's own H term and the baseline test something else)."""
    terms = coefficients["term"].astype(str)
    is_human = terms.str.startswith("H_")
    return coefficients[is_human & (terms.str[2:] != coefficients["target"].astype(str).str.upper())
                        & coefficients["p"].notna()]


def correction_family(coefficients: pd.DataFrame) -> pd.DataFrame:
    """The tests Holm and Benjamini-Hochberg correct over: the leakage tests (:func:`non_target_family`) of the
    fits whose MixedLM converged, the fits whose edges can be reported.  A fit that did not converge reports no
    edge, so its p-values would only enlarge the family (and raise every adjusted p) without being read."""
    family = non_target_family(coefficients)
    return family[family["converged"].astype(bool)]


def with_edge_corrections(
    coefficients: pd.DataFrame, edges: Sequence[Mapping[str, Any]], *, alpha: float = 0.05
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Holm and Benjamini-Hochberg over the leakage tests, beside the paper's p < alpha rule.

    ``coefficients`` stacks every fit (columns panel, target, missing, converged, term, p, ...); the family
    of one missing-cell treatment is every non-target human term of its converged fits
    (:func:`correction_family`), i.e. every edge the report could have drawn.  Returns the table with
    ``p_holm``, ``p_bh``, ``significant_holm``, ``significant_bh`` (NaN / False outside the family, so for
    every term of a fit that did not converge) and the edges with their adjusted p-values.
    """
    from stereolens.stats.multiple import add_corrections

    family = correction_family(coefficients)
    corrected = add_corrections(family, p_col="p", alpha=alpha, family=family["missing"])
    out = coefficients.copy()
    for col in ("p_holm", "p_bh"):
        out[col] = corrected[col].reindex(out.index)
    for col in ("significant_holm", "significant_bh"):
        out[col] = corrected[col].reindex(out.index).fillna(False).astype(bool)
    keyed = out.set_index(["panel", "target", "missing", "term"])
    # what the edges carry of their coefficient rows besides the corrections, where the table has it
    carried = [c for c in ("se_cluster", "ci_low_cluster", "ci_high_cluster", "p_cluster", "mde", "mde_adjusted")
               if c in out.columns]
    adjusted = []
    for e in edges:
        row = keyed.loc[(e["panel"], e["target"], e["missing"], human_term(e["source"]))]
        adjusted.append({**e, "p_holm": float(row["p_holm"]), "p_bh": float(row["p_bh"]),
                         **{c: float(row[c]) for c in carried}})
    return out, adjusted


def with_minimum_detectable(coefficients: pd.DataFrame, *, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """``mde`` and ``mde_adjusted``: the smallest coefficient each leakage test (:func:`correction_family`, one
    family per missing-cell treatment) finds with ``power``, from its own model-based standard error
    (:func:`stereolens.stats.power.minimum_detectable_coefficient`), at ``alpha`` and at Bonferroni's alpha / m
    (= Holm's first step; ``alpha_adjusted``).  NaN outside the family: the target's own term, the baseline, the
    intercept and every term of a fit that did not converge (no edge can be drawn from those)."""
    from stereolens.stats.power import minimum_detectable_coefficient

    out = coefficients.copy()
    for col in ("alpha_adjusted", "mde", "mde_adjusted"):
        out[col] = math.nan
    family = correction_family(coefficients)
    for _, rows in family.groupby("missing", sort=False):
        adjusted_alpha = alpha / len(rows)
        out.loc[rows.index, "alpha_adjusted"] = adjusted_alpha
        out.loc[rows.index, "mde"] = [minimum_detectable_coefficient(se, alpha=alpha, power=power) for se in rows["se"]]
        out.loc[rows.index, "mde_adjusted"] = [minimum_detectable_coefficient(se, alpha=adjusted_alpha, power=power)
                                               for se in rows["se"]]
    return out


def family_size(coefficients: pd.DataFrame, missing: str) -> int:
    """How many leakage tests one treatment's family holds (the n of the correction legend)."""
    return int((correction_family(coefficients)["missing"] == missing).sum())


def beta_table(
    fits: Mapping[tuple[str, str], "LeakageFit | pd.DataFrame"], languages: Sequence[str] | None = None
) -> pd.DataFrame:
    """Cao et al. 2024 Table 3 shape: one row per model, per target language the beta of LM_tgt and its p.

    ``fits`` maps (model, target language) to a fit or its coefficient table (COEFFICIENT_COLUMNS);
    a fit without a baseline gives NaN.  Columns: model, <LANG>..., p_<LANG>... in ``languages``
    order (default: first seen), every language present even where no model was fitted.
    """
    rows: dict[str, dict[str, float]] = {}
    seen: list[str] = []
    for (model, lang), fit in fits.items():
        lang = lang.upper()
        if lang not in seen:
            seen.append(lang)
        table = fit.coefficients if isinstance(fit, LeakageFit) else fit
        coef = table.set_index("term")
        term = baseline_term(lang)
        row = rows.setdefault(model, {})
        row[lang] = float(coef.loc[term, "estimate"]) if term in coef.index else math.nan
        row[f"p_{lang}"] = float(coef.loc[term, "p"]) if term in coef.index else math.nan
    langs = [lang.upper() for lang in languages] if languages is not None else seen
    columns = langs + [f"p_{lang}" for lang in langs]
    out = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=columns)
    out.index.name = "model"
    return out.reset_index()


def _zscore_within_group(matrix: pd.DataFrame) -> pd.DataFrame:
    """z-scores of each group's column across traits: a group's relative trait profile."""
    mean = matrix.mean(axis=0)
    sd = matrix.std(axis=0, ddof=0).replace(0, np.nan)
    return (matrix - mean) / sd


def qualitative_table(
    target: pd.DataFrame,
    human: Mapping[str, pd.DataFrame],
    source_language: str,
    target_language: str,
    *,
    top_k: int = 20,
    traits: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Section 4.2: cells strengthened in the target model relative to target-language humans that
    agree with source-language humans.

    Each matrix is z-scored within group (across traits).  A cell qualifies when the model rates the
    trait above the group's average (model_z > 0) and the source-language humans rate it higher than the
    target-language humans (source_z > target_human_z); ``leak_score`` = min(model_z - target_human_z,
    source_z - target_human_z) ranks them.  Groups the target-language humans did not rate use
    target_human_z = 0 (no target-culture stereotype), the non-shared-group case of section 4.2.4.
    """
    keys = {k.upper(): v for k, v in human.items()}
    src, tgt = source_language.upper(), target_language.upper()
    if src not in keys or tgt not in keys:
        raise DataError(f"qualitative table needs human matrices for {src} and {tgt} (have {sorted(keys)})")
    z_m = _zscore_within_group(target)
    z_s = _zscore_within_group(keys[src]).reindex_like(z_m)
    z_t = _zscore_within_group(keys[tgt]).reindex_like(z_m)
    df = pd.concat(
        [_long(z_m, "model_z"), _long(z_s, "source_human_z"), _long(z_t, "target_human_z")], axis=1
    ).reset_index()
    df["target_human_rated"] = df["target_human_z"].notna()
    df["target_human_z"] = df["target_human_z"].fillna(0.0)
    df = df.dropna(subset=["model_z", "source_human_z"])
    df = df[(df["model_z"] > 0) & (df["source_human_z"] > df["target_human_z"])].copy()
    df["leak_score"] = np.minimum(df["model_z"] - df["target_human_z"], df["source_human_z"] - df["target_human_z"])
    df = df[df["leak_score"] > 0].sort_values("leak_score", ascending=False).head(top_k)
    df.insert(0, "target", tgt)
    df.insert(0, "source", src)
    if traits is not None:
        df = df.merge(traits[["trait", "dimension", "polarity"]], on="trait", how="left")
    return df.reset_index(drop=True)


def coefficients_from_many(fits: Mapping[tuple[str, str, str], LeakageFit]) -> pd.DataFrame:
    """All fits' coefficients stacked with model, method and target columns."""
    frames = []
    for (model, method, lang), fit in fits.items():
        c = fit.coefficients.copy()
        c.insert(0, "target", lang.upper())
        c.insert(0, "method", method)
        c.insert(0, "model", model)
        frames.append(c)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["model", "method", "target", *COEFFICIENT_COLUMNS])


def available_terms(fits: Sequence[LeakageFit]) -> dict[str, list[str]]:
    return {f.target_language: f.terms for f in fits}
