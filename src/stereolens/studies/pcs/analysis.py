"""Triad statistics of seed 004 (Fifteen Percent Fluency): LDI, PCS, capability utilisation, HUD.

Input is a long table of judged scores, one row per
``model, language, scenario_id, dimension, feature, condition`` (``A`` neutral,
``B`` explicit, ``C`` implicit) and optionally ``judge`` and ``sample``.
Aggregation follows appendix B.1: the mean over judges first, then over
samples, giving one score per scenario-feature cell and condition.

Definitions (METHODS.md, seed 004 section 3.6):

* LDI(language, feature) = mean Prompt A cell score.
* PCS per cell = (C - A) / (B - A); cells with ``|B - A| < min_gap`` are
  excluded (and counted) because the ratio of two near-equal scores is noise;
  PCS = mean over the included cells.
* capability utilisation = (mean C - mean A) / (mean B - mean A) over every
  complete triad (the aggregate ratio of Table 10, not the mean of ratios).
* HUD(feature) = |LDI_hindi - LDI_urdu|; ``overall`` = |mean LDI_hindi - mean LDI_urdu|.

Significance tests (section 3.6, appendix H) run on response-level scores
(judge means per sample), which is the observation count that reproduces the
paper's degrees of freedom: one-way ANOVA across languages per dimension on
Prompt A scores with eta squared; paired t-tests A vs C per language on the
cells; an independent t-test Hindi vs Urdu on Prompt A scores; binomial tests
on the decisive human preferences (appendix J).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from stereolens.errors import DataError
from stereolens.studies.pcs import DEFAULT_MIN_GAP  # re-exported: the one default, defined without heavy imports

CONDITIONS: tuple[str, ...] = ("A", "B", "C")
REQUIRED_COLUMNS: tuple[str, ...] = ("model", "language", "scenario_id", "dimension", "feature", "condition", "score")
CELL_KEYS: list[str] = ["model", "language", "scenario_id", "dimension", "feature"]


# ---------------------------------------------------------------- aggregation


def scores_schema(features: Mapping[str, Sequence[str]] | None = None) -> "pa.DataFrameSchema":
    """The judged-score table: known dimension (and feature, given the rubrics), condition A/B/C,
    score on the 1-7 scale or blank (a failed judgement)."""
    import pandera.pandas as pa

    from stereolens.studies.pcs.judging import DIMENSION_NAMES, SCALE
    from stereolens.tables import choice_column, number_column, text_column

    columns = {
        "model": text_column(what="model"),
        "language": text_column(what="language"),
        "scenario_id": text_column(what="scenario_id"),
        "dimension": choice_column(DIMENSION_NAMES, what="dimension"),
        "feature": text_column(what="feature"),
        "condition": choice_column(CONDITIONS, what="condition"),
        "score": number_column(minimum=min(SCALE), maximum=max(SCALE), nullable=True, what="score"),
    }
    checks = []
    if features:
        allowed = {(str(d), str(f)) for d, names in features.items() for f in names}
        shown = "; ".join(f"{d}: {', '.join(names)}" for d, names in features.items())
        checks.append(pa.Check(
            lambda df: pd.Series([(str(d), str(f)) in allowed for d, f in zip(df["dimension"], df["feature"])],
                                 index=df.index),
            error=f"feature is not one of its dimension's rubric features ({shown}); column feature"))
    return pa.DataFrameSchema(columns, checks=checks, name="pcs judged scores")


def validate_scores(
    df: pd.DataFrame, *, what: str = "scores", features: Mapping[str, Sequence[str]] | None = None
) -> None:
    """The entry-point check of a judged-score file (CLI and stage alike), before any analysis.

    On top of :func:`check_scores`: dimensions and (given the rubrics) features are
    known, scores lie on the 1-7 scale or are blank, and every scenario-feature cell
    has rows for all three conditions (a score may be blank where its judgement
    failed): a cell without its C rows is a construction error, not a cell to drop.
    """
    from stereolens.tables import validate_table

    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{what} is missing column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns))})")
    out = df.reset_index(drop=True).copy()
    out["condition"] = out["condition"].astype(str).str.strip().str.upper()
    validate_table(out, scores_schema(features), what)
    keys = out[CELL_KEYS].astype(str).agg("|".join, axis=1)
    present = out.assign(_cell=keys).groupby("_cell", sort=False)["condition"].agg(set)
    for cell, conditions in present.items():
        lacking = [c for c in CONDITIONS if c not in conditions]
        if lacking:
            first = int((keys == cell).to_numpy().nonzero()[0][0])
            model, language, scenario, dimension, feature = cell.split("|")
            raise DataError(
                f"{what} line {first + 2}: scenario {scenario!r}, feature {feature!r} ({model}, {language}) has no "
                f"condition {' or '.join(lacking)} rows; every scenario-feature needs A, B and C (a failed "
                "judgement is a row with a blank score)"
            )
    check_scores(out, what=what)


def check_scores(df: pd.DataFrame, *, what: str = "scores") -> pd.DataFrame:
    """Validate a judged-score table; return a copy with typed columns."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{what} is missing column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns))})")
    out = df.copy()
    out["condition"] = out["condition"].astype(str).str.strip().str.upper()
    bad = out.loc[~out["condition"].isin(CONDITIONS)]
    if len(bad):
        row = int((~out["condition"].isin(CONDITIONS)).to_numpy().nonzero()[0][0])
        raise DataError(f"{what} line {row + 2}, column condition: {bad['condition'].iloc[0]!r} is not one of A, B, C")
    out["score"] = pd.to_numeric(out["score"], errors="coerce")
    # a blank judge or sample would vanish from the groupby that averages over it: refuse it instead
    for col in ("judge", "sample"):
        if col in out.columns:
            blank = out[col].isna() | (out[col].astype(str).str.strip() == "")
            if blank.any():
                row = int(blank.to_numpy().nonzero()[0][0])
                raise DataError(
                    f"{what} line {row + 2}, column {col}: blank {col!r} (fill it in, or drop the {col} column when every "
                    f"response has one {col})"
                )
    for col in CELL_KEYS:
        out[col] = out[col].astype(str)
    # failed judgements are recorded with an empty score: they drop out of every mean
    return out.dropna(subset=["score"])


def response_scores(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over judges: one score per response (model, language, scenario, condition, sample) and feature."""
    keys = [*CELL_KEYS, "condition"] + (["sample"] if "sample" in df.columns else [])
    return df.groupby(keys, as_index=False, sort=True, dropna=False)["score"].mean()


def cell_scores(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over judges, then over samples: one score per scenario-feature cell and condition."""
    resp = response_scores(df)
    return resp.groupby([*CELL_KEYS, "condition"], as_index=False, sort=True, dropna=False)["score"].mean()


def triads(cells: pd.DataFrame) -> pd.DataFrame:
    """Wide table: one row per cell with columns A, B, C (cells lacking a condition are dropped)."""
    wide = cells.pivot_table(index=CELL_KEYS, columns="condition", values="score", aggfunc="mean")
    for cond in CONDITIONS:
        if cond not in wide.columns:
            wide[cond] = np.nan
    wide = wide[list(CONDITIONS)].reset_index()
    wide.columns.name = None
    return wide.dropna(subset=list(CONDITIONS)).reset_index(drop=True)


def add_pcs(tri: pd.DataFrame, min_gap: float = DEFAULT_MIN_GAP) -> pd.DataFrame:
    """Per-cell ``gap = B - A``, ``excluded = |gap| < min_gap`` and ``pcs`` (NaN where excluded)."""
    out = tri.copy()
    out["gap"] = out["B"] - out["A"]
    out["excluded"] = out["gap"].abs() < min_gap
    out["pcs"] = np.where(out["excluded"], np.nan, (out["C"] - out["A"]) / out["gap"].where(~out["excluded"], 1.0))
    return out


def capability_utilisation(tri: pd.DataFrame) -> float:
    """(mean C - mean A) / (mean B - mean A): the aggregate ratio of means (Table 10)."""
    if tri.empty:
        return math.nan
    a, b, c = tri["A"].mean(), tri["B"].mean(), tri["C"].mean()
    return float((c - a) / (b - a)) if b != a else math.nan


def ldi_table(cells: pd.DataFrame) -> pd.DataFrame:
    """LDI per language x feature: mean, SD and n of the Prompt A cell scores (Table 11)."""
    base = cells.loc[cells["condition"] == "A"]
    out = (
        base.groupby(["dimension", "feature", "language"], as_index=False)["score"]
        .agg(ldi="mean", sd="std", n="count")
        .sort_values(["dimension", "feature", "language"])
    )
    return out.reset_index(drop=True)


def hud_by_feature(ldi: pd.DataFrame, hindi: str = "hi", urdu: str = "ur") -> pd.DataFrame:
    """|LDI_hindi - LDI_urdu| per feature plus an ``overall`` row from the mean LDIs (Table 13)."""
    wide = ldi.pivot_table(index=["dimension", "feature"], columns="language", values="ldi")
    if hindi not in wide.columns or urdu not in wide.columns:
        return pd.DataFrame(columns=["dimension", "feature", "hindi", "urdu", "hud"])
    out = pd.DataFrame({"hindi": wide[hindi], "urdu": wide[urdu]}).dropna().reset_index()
    out["hud"] = (out["hindi"] - out["urdu"]).abs()
    overall = {"dimension": "", "feature": "overall", "hindi": out["hindi"].mean(), "urdu": out["urdu"].mean()}
    overall["hud"] = abs(overall["hindi"] - overall["urdu"])
    return pd.concat([out, pd.DataFrame([overall])], ignore_index=True)


def hud_by_model(cells: pd.DataFrame, hindi: str = "hi", urdu: str = "ur") -> pd.DataFrame:
    """Per model: mean Prompt A score in Hindi and in Urdu and their absolute difference (Table 12)."""
    base = cells.loc[(cells["condition"] == "A") & cells["language"].isin([hindi, urdu])]
    wide = base.pivot_table(index="model", columns="language", values="score", aggfunc="mean")
    if hindi not in wide.columns or urdu not in wide.columns:
        return pd.DataFrame(columns=["model", "hindi_ldi", "urdu_ldi", "hud"])
    out = pd.DataFrame({"hindi_ldi": wide[hindi], "urdu_ldi": wide[urdu]}).dropna().reset_index()
    out["hud"] = (out["hindi_ldi"] - out["urdu_ldi"]).abs()
    return out.sort_values("hud", ascending=False).reset_index(drop=True)


# ---------------------------------------------------------------- statistics


def eta_squared(groups: Sequence[np.ndarray]) -> float:
    """SS_between / SS_total of a one-way layout."""
    values = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    grand = values.mean()
    ss_total = float(((values - grand) ** 2).sum())
    ss_between = float(sum(len(g) * (np.mean(g) - grand) ** 2 for g in groups))
    return ss_between / ss_total if ss_total > 0 else math.nan


def one_way_anova(df: pd.DataFrame, value: str, factor: str) -> dict[str, Any]:
    """F, p, eta squared and degrees of freedom of ``value`` across the levels of ``factor``."""
    groups = [g[value].to_numpy(dtype=float) for _, g in df.groupby(factor, sort=True) if len(g)]
    n = sum(len(g) for g in groups)
    result = {"k": len(groups), "n": n, "df_between": len(groups) - 1, "df_within": n - len(groups)}
    if len(groups) < 2 or n - len(groups) < 1:
        return {**result, "F": math.nan, "p": math.nan, "eta2": math.nan}
    f, p = stats.f_oneway(*groups)
    return {**result, "F": float(f), "p": float(p), "eta2": eta_squared(groups)}


def cohen_d_independent(x: np.ndarray, y: np.ndarray) -> float:
    """(mean x - mean y) / pooled SD (n-1 weighted)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    nx, ny = len(x), len(y)
    if nx < 2 or ny < 2:
        return math.nan
    pooled = math.sqrt(((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2))
    return float((x.mean() - y.mean()) / pooled) if pooled > 0 else math.nan


def paired_test(a: np.ndarray, c: np.ndarray) -> dict[str, Any]:
    """Paired t-test of A against C with two effect sizes.

    ``t`` follows ``scipy.stats.ttest_rel(a, c)`` (negative when C is higher,
    as in Table 16); ``d`` = (mean C - mean A) / sqrt((sd_A^2 + sd_C^2) / 2)
    (Cohen's d_av, comparable with an independent-groups d); ``dz`` = mean
    difference / SD of the differences.
    """
    a, c = np.asarray(a, float), np.asarray(c, float)
    out: dict[str, Any] = {"n": len(a), "mean_a": float(a.mean()) if len(a) else math.nan}
    out["mean_c"] = float(c.mean()) if len(c) else math.nan
    if len(a) < 2:
        return {**out, "t": math.nan, "p": math.nan, "d": math.nan, "dz": math.nan}
    diff = c - a
    if np.allclose(diff, diff[0]):
        t, p = (math.nan, math.nan)
    else:
        res = stats.ttest_rel(a, c)
        t, p = float(res.statistic), float(res.pvalue)
    sd_av = math.sqrt((a.var(ddof=1) + c.var(ddof=1)) / 2)
    sd_diff = diff.std(ddof=1)
    return {
        **out,
        "t": t,
        "p": p,
        "d": float(diff.mean() / sd_av) if sd_av > 0 else math.nan,
        "dz": float(diff.mean() / sd_diff) if sd_diff > 0 else math.nan,
    }


def independent_test(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Student's t-test (equal variances, as scipy's default) with Cohen's d."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out: dict[str, Any] = {"n_x": len(x), "n_y": len(y)}
    out["mean_x"] = float(x.mean()) if len(x) else math.nan
    out["mean_y"] = float(y.mean()) if len(y) else math.nan
    out["sd_x"] = float(x.std(ddof=1)) if len(x) > 1 else math.nan
    out["sd_y"] = float(y.std(ddof=1)) if len(y) > 1 else math.nan
    if len(x) < 2 or len(y) < 2 or (x.var() == 0 and y.var() == 0):
        return {**out, "t": math.nan, "p": math.nan, "d": math.nan}
    res = stats.ttest_ind(x, y)
    return {**out, "t": float(res.statistic), "p": float(res.pvalue), "d": cohen_d_independent(x, y)}


def anova_by_dimension(resp: pd.DataFrame, factor: str = "language") -> pd.DataFrame:
    """Table 15: one-way ANOVA of Prompt A response scores across ``factor`` levels, per dimension."""
    base = resp.loc[resp["condition"] == "A"]
    rows = []
    for dim, group in base.groupby("dimension", sort=True):
        res = one_way_anova(group, "score", factor)
        rows.append({"dimension": dim, **res, "significant": bool(res["p"] < 0.05) if not math.isnan(res["p"]) else False})
    cols = ["dimension", "F", "p", "eta2", "df_between", "df_within", "k", "n", "significant"]
    return pd.DataFrame(rows, columns=cols).sort_values("eta2", ascending=False, na_position="last").reset_index(drop=True)


def paired_tests_by_language(tri: pd.DataFrame) -> pd.DataFrame:
    """Table 16: paired A vs C per language over the scenario-feature cells."""
    rows = []
    for lang, group in tri.groupby("language", sort=True):
        rows.append({"language": lang, **paired_test(group["A"].to_numpy(), group["C"].to_numpy())})
    cols = ["language", "mean_a", "mean_c", "t", "p", "d", "dz", "n"]
    return pd.DataFrame(rows, columns=cols)


def hindi_urdu_test(resp: pd.DataFrame, hindi: str = "hi", urdu: str = "ur") -> dict[str, Any]:
    """Independent t-test of Prompt A response scores, Hindi vs Urdu (appendix H.3)."""
    base = resp.loc[resp["condition"] == "A"]
    x = base.loc[base["language"] == hindi, "score"].to_numpy()
    y = base.loc[base["language"] == urdu, "score"].to_numpy()
    res = independent_test(x, y)
    return {
        "hindi": hindi,
        "urdu": urdu,
        "hindi_mean": res["mean_x"],
        "urdu_mean": res["mean_y"],
        "hindi_sd": res["sd_x"],
        "urdu_sd": res["sd_y"],
        "n_hindi": res["n_x"],
        "n_urdu": res["n_y"],
        "t": res["t"],
        "p": res["p"],
        "d": res["d"],
    }


# ---------------------------------------------------------------- PCS breakdowns


def _pcs_stats(pcs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean, median, SD and count of cell PCS per group, the excluded cells, and the group's
    capability utilisation (the aggregate ratio over every complete triad of the group, section 4.1)."""
    grouped = pcs.groupby(by, sort=True)
    out = grouped["pcs"].agg(mean_pcs="mean", median_pcs="median", sd="std", n="count")
    out["n_excluded"] = grouped["excluded"].sum().astype(int)
    out["cap_util"] = grouped[list(CONDITIONS)].apply(capability_utilisation)
    return out.reset_index()


def model_summary(pcs: pd.DataFrame) -> pd.DataFrame:
    """Table 10: per model PCS, capability utilisation and the mean A, B, C scores."""
    rows = []
    for model, group in pcs.groupby("model", sort=True):
        rows.append(
            {
                "model": model,
                "pcs": float(group["pcs"].mean()) if group["pcs"].notna().any() else math.nan,
                "cap_util": capability_utilisation(group),
                "mean_a": float(group["A"].mean()),
                "mean_b": float(group["B"].mean()),
                "mean_c": float(group["C"].mean()),
                "n_cells": int(len(group)),
                "n_excluded": int(group["excluded"].sum()),
            }
        )
    cols = ["model", "pcs", "cap_util", "mean_a", "mean_b", "mean_c", "n_cells", "n_excluded"]
    return pd.DataFrame(rows, columns=cols).sort_values("pcs", ascending=False, na_position="last").reset_index(drop=True)


def model_dimension_summary(pcs: pd.DataFrame) -> pd.DataFrame:
    """Table 1: per model PCS, capability utilisation and PCS per dimension (columns)."""
    summary = model_summary(pcs)[["model", "pcs", "cap_util"]]
    by_dim = pcs.pivot_table(index="model", columns="dimension", values="pcs", aggfunc="mean")
    by_dim.columns = [str(c) for c in by_dim.columns]
    return summary.merge(by_dim.reset_index(), on="model", how="left")


def ldi_by_language(ldi: pd.DataFrame) -> pd.DataFrame:
    """Table 2: mean LDI per language, overall and per dimension."""
    overall = ldi.groupby("language", sort=True)["ldi"].mean().rename("mean_ldi")
    by_dim = ldi.pivot_table(index="language", columns="dimension", values="ldi", aggfunc="mean")
    by_dim.columns = [f"ldi_{c}" for c in by_dim.columns]
    return pd.concat([overall, by_dim], axis=1).reset_index()


def ldi_wide(ldi: pd.DataFrame) -> pd.DataFrame:
    """Table 11 as printed: one row per feature, ``mean ± sd`` per language."""
    text = ldi.assign(
        cell=[f"{m:.2f} ± {s:.2f}" if not math.isnan(s) else f"{m:.2f}" for m, s in zip(ldi["ldi"], ldi["sd"].fillna(math.nan))]
    )
    wide = text.pivot_table(index=["dimension", "feature"], columns="language", values="cell", aggfunc="first")
    wide.columns.name = None
    return wide.reset_index()


def feature_ranking(pcs: pd.DataFrame) -> pd.DataFrame:
    """Table 14: features ranked by median PCS."""
    out = _pcs_stats(pcs, ["feature", "dimension"]).sort_values("median_pcs", ascending=False, na_position="last")
    out.insert(0, "rank", range(1, len(out) + 1))
    return out.reset_index(drop=True)


def model_anova(pcs: pd.DataFrame) -> dict[str, Any]:
    """Section 4.5: share of PCS variance explained by model identity (one-way ANOVA, eta squared)."""
    return one_way_anova(pcs.dropna(subset=["pcs"]), "pcs", "model")


# ---------------------------------------------------------------- human validation


HUMAN_COLUMNS = ("language", "comparison", "preference")
COMPARISONS = {"A-C": ("A", "C"), "B-C": ("B", "C")}
TIE = "tie"


def check_human_preferences(df: pd.DataFrame, *, what: str = "human preferences") -> pd.DataFrame:
    """Normalise ``comparison`` to ``A-C``/``B-C`` and ``preference`` to a condition letter or ``tie``."""
    missing = [c for c in HUMAN_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{what} is missing column(s) {', '.join(missing)}")
    out = df.copy()
    out["comparison"] = out["comparison"].astype(str).str.upper().str.replace(" ", "").str.replace("VS", "-")
    out["preference"] = out["preference"].astype(str).str.strip()
    out.loc[out["preference"].str.lower().isin(["tie", "none", "no meaningful difference", "equal"]), "preference"] = TIE
    out.loc[out["preference"] != TIE, "preference"] = out["preference"].str.upper()
    for pos, (_, row) in enumerate(out.iterrows()):
        if row["comparison"] not in COMPARISONS:
            raise DataError(f"{what} line {pos + 2}, column comparison: {row['comparison']!r} is not A-C or B-C")
        if row["preference"] != TIE and row["preference"] not in COMPARISONS[row["comparison"]]:
            raise DataError(
                f"{what} line {pos + 2}, column preference: {row['preference']!r} is not one of "
                f"{', '.join(COMPARISONS[row['comparison']])} or tie for comparison {row['comparison']}"
            )
    return out


def human_validation(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Table 17 counts per language and the two-sided binomial tests on decisive cases (p = 0.5)."""
    prefs = check_human_preferences(df)
    rows = []
    for lang, group in prefs.groupby("language", sort=True):
        row: dict[str, Any] = {"language": lang}
        for comp, (first, second) in COMPARISONS.items():
            sub = group.loc[group["comparison"] == comp, "preference"]
            tag = comp.replace("-", "_")
            row[f"{tag}_{first}"] = int((sub == first).sum())
            row[f"{tag}_{second}"] = int((sub == second).sum())
            row[f"{tag}_tie"] = int((sub == TIE).sum())
        row["n"] = int(len(group))
        rows.append(row)
    table = pd.DataFrame(rows)
    if len(table):
        total = table.drop(columns="language").sum()
        table = pd.concat([table, pd.DataFrame([{"language": "total", **total.to_dict()}])], ignore_index=True)
    tests: dict[str, Any] = {}
    for comp, (first, second) in COMPARISONS.items():
        sub = prefs.loc[prefs["comparison"] == comp, "preference"]
        k_first, k_second = int((sub == first).sum()), int((sub == second).sum())
        decisive = k_first + k_second
        p = float(stats.binomtest(k_second, decisive, 0.5).pvalue) if decisive else math.nan
        tests[comp] = {
            f"n_{first}": k_first,
            f"n_{second}": k_second,
            "n_tie": int((sub == TIE).sum()),
            "n_decisive": decisive,
            f"share_{second}": k_second / decisive if decisive else math.nan,
            "p": p,
        }
    return table, tests


# ---------------------------------------------------------------- everything at once


@dataclass
class PCSAnalysis:
    """All numbers of one analysis: the summary, the named tables and the test results."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    statistics: dict[str, Any] = field(default_factory=dict)
    cells: pd.DataFrame | None = None  # triads with per-cell PCS


def _clean(value: Any) -> Any:
    """NaN -> None recursively (JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def analyze_scores(
    scores: pd.DataFrame,
    *,
    min_gap: float = DEFAULT_MIN_GAP,
    hindi: str = "hi",
    urdu: str = "ur",
    human: pd.DataFrame | None = None,
) -> PCSAnalysis:
    """Every metric and test of seed 004 sections 3.6, 4 and appendices C-I from judged scores."""
    scores = check_scores(scores)
    if scores.empty:
        raise DataError("scores table has no scored rows")
    resp = response_scores(scores)
    cells = cell_scores(scores)
    tri = add_pcs(triads(cells), min_gap)
    ldi = ldi_table(cells)
    hud_feat = hud_by_feature(ldi, hindi, urdu)
    included = tri.loc[~tri["excluded"]]
    summary = {
        "pcs": float(included["pcs"].mean()) if len(included) else math.nan,
        "cap_util": capability_utilisation(tri),
        "n_excluded": int(tri["excluded"].sum()),
        "by_dimension": {str(k): float(v) for k, v in tri.groupby("dimension")["pcs"].mean().items()},
        "ldi": {
            str(lang): {str(f): float(v) for f, v in zip(group["feature"], group["ldi"])}
            for lang, group in ldi.groupby("language", sort=True)
        },
        "hud": {str(f): float(v) for f, v in zip(hud_feat["feature"], hud_feat["hud"])},
    }
    if "overall" not in summary["hud"]:
        summary["hud"]["overall"] = math.nan
    tables = {
        "table01_model_dimension": model_dimension_summary(tri),
        "table02_ldi_by_language": ldi_by_language(ldi),
        "table08_pcs_model_dimension": _pcs_stats(tri, ["model", "dimension"]),
        "table09_pcs_model_language": _pcs_stats(tri, ["model", "language"]),
        "pcs_by_language": _pcs_stats(tri, ["language"]),
        "table10_model_summary": model_summary(tri),
        "table11_ldi": ldi,
        "table11_ldi_wide": ldi_wide(ldi),
        "table12_hud_by_model": hud_by_model(cells, hindi, urdu),
        "table13_hud_by_feature": hud_feat,
        "table14_feature_ranking": feature_ranking(tri),
        "table15_anova_language": anova_by_dimension(resp, "language"),
        "table16_paired_a_vs_c": paired_tests_by_language(tri),
        "pcs_dimension_language": _pcs_stats(tri, ["dimension", "language"]),
        "pcs_cells": tri,
    }
    statistics: dict[str, Any] = {
        "n_scores": int(len(scores)),
        "n_cells": int(len(tri)),
        "n_included": int(len(included)),
        "min_gap": min_gap,
        "pcs_sd": float(included["pcs"].std()) if len(included) > 1 else math.nan,
        "models": sorted(tri["model"].unique().tolist()),
        "languages": sorted(tri["language"].unique().tolist()),
        "hindi_urdu": hindi_urdu_test(resp, hindi, urdu),
        "model_anova": model_anova(tri),
        "means": {c: float(tri[c].mean()) if len(tri) else math.nan for c in CONDITIONS},
    }
    if human is not None and len(human):
        table, tests = human_validation(human)
        tables["table17_human_validation"] = table
        statistics["human_validation"] = tests
    return PCSAnalysis(summary=_clean(summary), tables=tables, statistics=_clean(statistics), cells=tri)
