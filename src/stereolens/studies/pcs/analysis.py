"""Triad statistics of Fifteen Percent Fluency: LDI, PCS, capability utilisation, HUD.

Input is a long table of judged scores, one row per
``model, language, scenario_id, dimension, feature, condition`` (``A`` neutral,
``B`` explicit, ``C`` implicit) and optionally ``judge`` and ``sample``.
Aggregation follows appendix B.1: the mean over judges first, then over
samples, giving one score per scenario-feature cell and condition.

Definitions (docs/methods.md, Fifteen Percent Fluency section 3.6):

* LDI(language, feature) = mean Prompt A cell score.
* PCS per cell = (C - A) / (B - A); PCS = mean over the included cells.  Ours,
  not the paper's: a cell is included only when its explicit-prompt gain
  ``B - A`` exceeds the minimum gain (``min_gain_steps`` steps of the judges'
  scale); the rest are excluded and counted, since a ratio over no gain (or a
  loss) is not a share of a gain, and over a tiny one is noise.
* capability utilisation = (mean C - mean A) / (mean B - mean A) over every
  complete triad (the aggregate ratio of Table 10, not the mean of ratios): the
  share of the A-to-B gain that C captures, so undefined (with the reason) when
  mean B - mean A is not above the same minimum gain.
* HUD(feature) = |LDI_hindi - LDI_urdu|; ``overall`` = |mean LDI_hindi - mean LDI_urdu|.

Responses flagged invalid by the collect stage (an ``invalid_reason`` column:
empty, refusal, wrong_language) are left out of every analysis and counted:
an English reply to a Hindi prompt is not a Hindi default.

Significance tests (section 3.6, appendix H) run on response-level scores
(judge means per sample), which is the observation count that reproduces the
paper's degrees of freedom: one-way ANOVA across languages per dimension on
Prompt A scores with eta squared; paired t-tests A vs C per language on the
cells; an independent t-test Hindi vs Urdu on Prompt A scores; binomial tests
on the decisive human preferences (appendix J).  Beyond the paper, those rows
are not independent (features share a response, languages share a scenario),
so the scenario-level analysis sits beside them: the mean Prompt A score per
scenario and language, a paired t-test and a Wilcoxon signed-rank test of
Hindi against Urdu across the matched scenarios, and a repeated-measures
ANOVA (scenario as subject, language within) per dimension.
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
from stereolens.io import finite_json
from stereolens.stats.multiple import add_corrections, family_description
from stereolens.stats.power import (
    DEFAULT_POWER,
    eta_squared_of_f,
    family_alpha,
    mde_table,
    minimum_detectable_d_z,
    minimum_detectable_f,
    undetected_effect,
    undetected_preference,
)
# re-exported: the one default, defined without heavy imports
from stereolens.studies.pcs import DEFAULT_MIN_GAIN_STEPS, SENSITIVITY_GAIN_STEPS

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


def scale_step() -> float:
    """The judges' score resolution: the smallest difference one judge can record (1 point on the 1-7 scale)."""
    from stereolens.studies.pcs.judging import SCALE

    return float(min(np.diff(sorted(SCALE))))


def min_gain_points(min_gain_steps: float) -> float:
    """The minimum explicit-prompt gain in score points, from its size in steps of the judges' scale."""
    if not (isinstance(min_gain_steps, (int, float)) and math.isfinite(min_gain_steps) and min_gain_steps >= 0):
        raise DataError(f"min_gain_steps must be a number >= 0 (steps of the judges' scale), got {min_gain_steps!r}")
    return float(min_gain_steps) * scale_step()


# a gain equal to the minimum up to float noise (3.1 - 3.0 is 0.10000000000000009) is not above it
GAIN_TOLERANCE = 1e-9


def add_pcs(tri: pd.DataFrame, min_gain: float) -> pd.DataFrame:
    """Per-cell ``gap = B - A``, ``excluded = gap <= min_gain`` (in score points) and ``pcs`` (NaN where excluded).

    The exclusion is signed: a cell whose explicit prompt lowered the score (or left it) has no gain for C to
    capture a share of, and with ``min_gain`` 0 no cell divides by zero.
    """
    out = tri.copy()
    out["gap"] = out["B"] - out["A"]
    out["excluded"] = out["gap"] <= min_gain + GAIN_TOLERANCE
    out["pcs"] = np.where(out["excluded"], np.nan, (out["C"] - out["A"]) / out["gap"].where(~out["excluded"], 1.0))
    return out


def capability_utilisation(tri: pd.DataFrame, min_gain: float) -> tuple[float, str]:
    """(mean C - mean A) / (mean B - mean A), the aggregate ratio of means (Table 10), and why it is undefined.

    Table 10 defines it as the share of the A-to-B gain that C captures, which presumes a gain: when
    mean B - mean A is not above ``min_gain`` (score points) the value is NaN and the reason says so.
    """
    if tri.empty:
        return math.nan, "undefined: no complete A/B/C triad"
    a, b, c = tri["A"].mean(), tri["B"].mean(), tri["C"].mean()
    if not b - a > min_gain + GAIN_TOLERANCE:
        lowered = " (the explicit prompt did not raise the scores: no gain to take a share of)" if b - a <= 0 else ""
        return math.nan, f"undefined: mean B - mean A = {b - a:+.3f} is not above the minimum gain {min_gain:g}{lowered}"
    return float((c - a) / (b - a)), ""


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


def hud_note(ldi: pd.DataFrame, hindi: str = "hi", urdu: str = "ur") -> str:
    """Why HUD is undefined (a language without any valid Prompt A score), else empty."""
    missing = [lang for lang in (hindi, urdu) if lang not in set(ldi["language"])]
    if not missing:
        return ""
    return f"undefined: no valid Prompt A score in {' or '.join(missing)} (invalid responses are excluded)"


def ldi_notes(languages: Sequence[str], ldi: pd.DataFrame, excluded: pd.DataFrame) -> dict[str, str]:
    """Why a language that was run has no LDI: its Prompt A responses were all excluded as invalid (counted by
    reason from the excluded-responses table), so "no valid responses", not "not measured"."""
    notes = {}
    for language in languages:
        if language in set(ldi["language"]):
            continue
        rows = excluded.loc[(excluded["language"] == language) & (excluded["condition"] == "A")]
        reasons = [c for c in excluded.columns if c not in ("model", "language", "condition", "n_responses", "n_excluded")]
        counted = ", ".join(f"{why}: {int(rows[why].sum())}" for why in reasons if why in rows and rows[why].sum())
        notes[str(language)] = (f"no valid responses: {int(rows['n_excluded'].sum())} of {int(rows['n_responses'].sum())} "
                                f"judged Prompt A responses excluded as invalid" + (f" ({counted})" if counted else ""))
    return notes


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
    """Student's t-test (equal variances, as scipy's default) with Cohen's d and the 95% interval of
    mean x - mean y."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out: dict[str, Any] = {"n_x": len(x), "n_y": len(y)}
    out["mean_x"] = float(x.mean()) if len(x) else math.nan
    out["mean_y"] = float(y.mean()) if len(y) else math.nan
    out["sd_x"] = float(x.std(ddof=1)) if len(x) > 1 else math.nan
    out["sd_y"] = float(y.std(ddof=1)) if len(y) > 1 else math.nan
    if len(x) < 2 or len(y) < 2 or (x.var() == 0 and y.var() == 0):
        return {**out, "t": math.nan, "p": math.nan, "d": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    res = stats.ttest_ind(x, y)
    ci = res.confidence_interval(1 - ALPHA)  # of mean x - mean y, from the same pooled-variance t
    return {**out, "t": float(res.statistic), "p": float(res.pvalue), "d": cohen_d_independent(x, y),
            "ci_low": float(ci.low), "ci_high": float(ci.high)}


# the paper's significance level (Tables 15 and 16 star p < .05), also the corrections' alpha
ALPHA = 0.05
# Tables 15 and 16 each run one test per row; the corrections run over the rows of one table
CORRECTION_FAMILIES = {
    "table15_anova_language": "every dimension of this table (one one-way ANOVA of Prompt A scores across languages "
                              "per dimension); `significant` is the paper's rule, uncorrected (p < .05)",
    "table16_paired_a_vs_c": "every language of this table (one paired A-vs-C t-test per language, over the "
                             "scenario-feature cells of every model)",
    "table17_binomial_tests": "the two binomial tests of this table (A vs C and B vs C preferences, the decisive "
                              "comparisons of every language pooled)",
}
# what each starred table's minimum detectable effect (MDE) is, for its legend
MDE_LEGENDS = {
    "table15_anova_language": (
        "MDE: the smallest Cohen's f the row's one-way ANOVA finds with {power}% power from the row's own n and k "
        "(statsmodels FTestAnovaPower), at alpha {alpha} (`mde_f`; as eta squared `mde_eta2` = f^2 / (1 + f^2), "
        "comparable with `eta2`) and at the family's Bonferroni level alpha / m = `alpha_adjusted` (`mde_f_adjusted`, "
        "which is also the level Holm's first step asks of the smallest p; Benjamini-Hochberg has no single per-row "
        "level, so no MDE is given for it)."),
    "table16_paired_a_vs_c": (
        "MDE: the smallest standardised paired effect |d_z| (mean C - A difference / SD of the differences, "
        "comparable with `dz`) the row's paired t-test finds with {power}% power from its n cells (statsmodels "
        "TTestPower), at alpha {alpha} (`mde_dz`) and at the family's Bonferroni level alpha / m = `alpha_adjusted` "
        "(`mde_dz_adjusted`, Holm's first step; Benjamini-Hochberg has no single per-row level)."),
    "table17_binomial_tests": (
        "MDE: the smallest share of decisive comparisons won by the second response (C in A-C, C in B-C) above 0.5 "
        "that the exact two-sided binomial test finds with {power}% power from the row's decisive n (ties set "
        "aside), at alpha {alpha} (`mde`, its mirror below 0.5 `mde_below`, the normal approximation `mde_normal`) "
        "and at the family's Bonferroni level alpha / m = `alpha_adjusted` (`mde_adjusted`, Holm's first step; "
        "Benjamini-Hochberg has no single per-row level)."),
}


def anova_by_dimension(resp: pd.DataFrame, factor: str = "language", *, alpha: float = ALPHA) -> pd.DataFrame:
    """Table 15: one-way ANOVA of Prompt A response scores across ``factor`` levels, per dimension, with Holm and
    Benjamini-Hochberg adjusted p over the table's dimensions (a dimension without a test stays out)."""
    base = resp.loc[resp["condition"] == "A"]
    rows = []
    for dim, group in base.groupby("dimension", sort=True):
        res = one_way_anova(group, "score", factor)
        rows.append({"dimension": dim, **res, "significant": bool(res["p"] < alpha) if not math.isnan(res["p"]) else False})
    cols = ["dimension", "F", "p", "eta2", "df_between", "df_within", "k", "n", "significant"]
    table = pd.DataFrame(rows, columns=cols).sort_values("eta2", ascending=False, na_position="last")
    table = add_corrections(table.reset_index(drop=True), p_col="p", alpha=alpha)
    adjusted = _family_level(table, alpha)
    table["mde_f"] = [minimum_detectable_f(int(n), int(k), alpha=alpha) for n, k in zip(table["n"], table["k"])]
    table["mde_eta2"] = [eta_squared_of_f(f) for f in table["mde_f"]]
    table["alpha_adjusted"] = adjusted
    table["mde_f_adjusted"] = [minimum_detectable_f(int(n), int(k), alpha=adjusted) for n, k in zip(table["n"], table["k"])]
    return table


def _family_level(table: pd.DataFrame, alpha: float) -> float:
    """Bonferroni's alpha / m over the table's tested rows (Holm's first step); alpha when nothing was tested."""
    tested = int(table["p"].notna().sum())
    return family_alpha(alpha, tested) if tested else alpha


def paired_tests_by_language(tri: pd.DataFrame, *, alpha: float = ALPHA) -> pd.DataFrame:
    """Table 16: paired A vs C per language over the scenario-feature cells, with Holm and Benjamini-Hochberg
    adjusted p over the table's languages."""
    rows = []
    for lang, group in tri.groupby("language", sort=True):
        rows.append({"language": lang, **paired_test(group["A"].to_numpy(), group["C"].to_numpy())})
    cols = ["language", "mean_a", "mean_c", "t", "p", "d", "dz", "n"]
    table = add_corrections(pd.DataFrame(rows, columns=cols), p_col="p", alpha=alpha)
    adjusted = _family_level(table, alpha)
    table["mde_dz"] = [minimum_detectable_d_z(int(n), alpha=alpha) for n in table["n"]]
    table["alpha_adjusted"] = adjusted
    table["mde_dz_adjusted"] = [minimum_detectable_d_z(int(n), alpha=adjusted) for n in table["n"]]
    return table


def correction_legends(tables: Mapping[str, pd.DataFrame], alpha: float = ALPHA) -> dict[str, str]:
    """The legend line of each corrected table: the corrections, the family's size and what the family is."""
    return {name: f"{family_description(int(tables[name]['p'].notna().sum()), alpha)} Family: {family}."
            for name, family in CORRECTION_FAMILIES.items() if name in tables}


def mde_notes(tables: Mapping[str, pd.DataFrame], alpha: float = ALPHA,
              power: float = DEFAULT_POWER) -> dict[str, dict[str, Any]]:
    """Per starred table: the legend saying what its MDE columns are, and for each row its test did not find
    significant (the paper's p < .05) what that test could not have detected, in words."""
    from stereolens.report.markdown import format_cell

    notes: dict[str, dict[str, Any]] = {}
    for name, template in MDE_LEGENDS.items():
        table = tables.get(name)
        if table is None:
            continue
        undetected = []
        for row in table.to_dict("records"):
            if not (isinstance(row.get("p"), float) and row["p"] >= alpha):
                continue  # significant, or no test: nothing to say about what it could not detect
            if name == "table15_anova_language":
                also = f"eta squared {format_cell(row['mde_eta2'])}"
                text = undetected_effect("Cohen's f", row["mde_f"], int(row["n"]), f"responses x features in {row['k']} "
                                         "languages", alpha=alpha, power=power, also=also)
                undetected.append(f"{row['dimension']}: {text}")
            elif name == "table16_paired_a_vs_c":
                text = undetected_effect("|d_z|", row["mde_dz"], int(row["n"]), "scenario-feature cells", alpha=alpha,
                                         power=power)
                undetected.append(f"{row['language']}: {text}")
            else:
                undetected.append(f"{row['comparison']}: "
                                  + undetected_preference(int(row["n_decisive"]), row["mde"], alpha=alpha, power=power))
        legend = template.format(power=format_cell(power * 100), alpha=format_cell(alpha))
        notes[name] = {"legend": legend, "undetected": undetected}
    return notes


def hindi_urdu_test(resp: pd.DataFrame, hindi: str = "hi", urdu: str = "ur") -> dict[str, Any]:
    """Independent t-test of Prompt A response scores, Hindi vs Urdu (appendix H.3).

    Refused (NaN, with a ``note``) when either language has fewer than two valid Prompt A responses: a headline
    t over one or no response per language says nothing.
    """
    base = resp.loc[resp["condition"] == "A"]
    x = base.loc[base["language"] == hindi, "score"].to_numpy()
    y = base.loc[base["language"] == urdu, "score"].to_numpy()
    res = independent_test(x, y)
    n_hindi, n_urdu = _n_responses(base, hindi), _n_responses(base, urdu)
    note = ""
    if min(n_hindi, n_urdu) < 2:
        note = (f"not computed: {n_hindi} valid {hindi} and {n_urdu} valid {urdu} Prompt A responses (at least 2 each "
                "needed; invalid responses are excluded, see the excluded-responses table)")
        res = {**res, "t": math.nan, "p": math.nan, "d": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    return {
        "hindi": hindi,
        "urdu": urdu,
        "hindi_mean": res["mean_x"],
        "urdu_mean": res["mean_y"],
        "hindi_sd": res["sd_x"],
        "urdu_sd": res["sd_y"],
        "n_hindi": res["n_x"],
        "n_urdu": res["n_y"],
        "n_hindi_responses": n_hindi,
        "n_urdu_responses": n_urdu,
        "t": res["t"],
        "p": res["p"],
        "d": res["d"],
        # 95% interval of mean Hindi - mean Urdu (the t-test's own)
        "ci_low": res["ci_low"],
        "ci_high": res["ci_high"],
        "note": note,
    }


# which of the two Hindi-Urdu tests the headline rests on (ours): the paper's, so the number compares with its
# p = .262; the scenario-level test is shown beside it, and a disagreement is said in words
HINDI_URDU_HEADLINE_TEST = "response_level"
HINDI_URDU_TESTS = {
    "response_level": "the paper's response-level t-test (independent t-test of Prompt A scores, every response x "
                      "feature row one observation, appendix H.3)",
    "scenario_level": "the scenario-level paired t-test (mean Prompt A score per matched scenario, ours)",
}


def hindi_urdu_summary(response_level: Mapping[str, Any], scenario_level: Mapping[str, Any],
                       alpha: float = ALPHA) -> dict[str, Any]:
    """Both Hindi-Urdu tests side by side, the one the headline rests on, and whether they agree.

    The paper's test (``response_level``, :func:`hindi_urdu_test`) treats the features and samples of one
    response and the two languages of one scenario as independent observations; the paired test over matched
    scenarios (``scenario_level``, :func:`paired_language_test`) does not.  They agree when they reach the same
    decision at ``alpha`` (and, both significant, point the same way); ``agree`` is None when either was not
    computed.
    """
    def decision(p: Any) -> bool | None:
        return None if p is None or (isinstance(p, float) and math.isnan(p)) else bool(p < alpha)

    resp = {"test": HINDI_URDU_TESTS["response_level"], "t": response_level.get("t"), "p": response_level.get("p"),
            "d": response_level.get("d"), "n_hindi": response_level.get("n_hindi"),
            "n_urdu": response_level.get("n_urdu"), "significant": decision(response_level.get("p")),
            "note": response_level.get("note", "")}
    scen = {"test": HINDI_URDU_TESTS["scenario_level"], "t": scenario_level.get("t"), "p": scenario_level.get("p_t"),
            "dz": scenario_level.get("dz"), "n_pairs": scenario_level.get("n_pairs"),
            "p_wilcoxon": scenario_level.get("p_wilcoxon"), "significant": decision(scenario_level.get("p_t")),
            "note": scenario_level.get("note", "")}
    headline = HINDI_URDU_TESTS[HINDI_URDU_HEADLINE_TEST]
    if resp["significant"] is None or scen["significant"] is None:
        missing = [name for name, block in (("response-level", resp), ("scenario-level", scen))
                   if block["significant"] is None]
        agree = None
        note = f"not compared: the {' and the '.join(missing)} test {'was' if len(missing) == 1 else 'were'} not computed"
    else:
        same_way = not (resp["significant"] and scen["significant"]) or np.sign(resp["t"]) == np.sign(scen["t"])
        agree = bool(resp["significant"] == scen["significant"] and same_way)
        if agree:
            found = "both find a Hindi-Urdu difference" if resp["significant"] else "neither finds a Hindi-Urdu difference"
            note = f"the two Hindi-Urdu tests agree at alpha = {alpha:g}: {found}"
        else:
            note = (f"the two Hindi-Urdu tests disagree at alpha = {alpha:g}: the headline, {headline}, gives p = {resp['p']:.3g}; "
                    f"the scenario-level paired test gives p = {scen['p']:.3g} over {scen['n_pairs']} matched scenarios. "
                    "The response-level test counts every feature and sample of a scenario as an independent "
                    "observation and does not pair the languages' scenarios; the scenario-level test has one "
                    "observation per matched scenario")
    return {"headline_test": HINDI_URDU_HEADLINE_TEST, "headline_test_text": headline, "alpha": alpha,
            "response_level": resp, "scenario_level": scen, "agree": agree, "note": note}


def _n_responses(resp: pd.DataFrame, language: str) -> int:
    """Distinct responses (scenario, sample) of ``language`` in a response-level score table."""
    keys = ["model", "scenario_id", "condition"] + (["sample"] if "sample" in resp.columns else [])
    return int(len(resp.loc[resp["language"] == language, keys].drop_duplicates()))


# ---------------------------------------------------------------- invalid responses


def invalid_reasons(frame: pd.DataFrame) -> pd.Series:
    """Each row's ``invalid_reason`` as the collect stage's validity check wrote it (empty = valid; no column:
    every row valid): the one reading of validity the analysis and the human-validation round share."""
    if "invalid_reason" not in frame.columns:
        return pd.Series("", index=frame.index, dtype=object)
    return frame["invalid_reason"].fillna("").astype(str).str.strip()


def drop_invalid_responses(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scores of valid responses, and per model x language x condition the responses left out and why.

    ``invalid_reason`` (from the collect stage's validity check) empty or absent = valid.  Judging may have
    scored an invalid response (the default run judges wrong-language replies so the gates see them), but no
    analysis may: an English reply to a Hindi prompt would enter Hindi's LDI, HUD and the language tests.
    """
    keys = ["model", "language", "condition"]
    response = keys + ["scenario_id"] + (["sample"] if "sample" in scores.columns else [])
    reason = invalid_reasons(scores)
    responses = scores[response].assign(invalid_reason=reason.to_numpy()).drop_duplicates(response)
    table = responses.groupby(keys, sort=True).agg(n_responses=("invalid_reason", "size"),
                                                   n_excluded=("invalid_reason", lambda r: int((r != "").sum())))
    for why in sorted(set(responses["invalid_reason"]) - {""}):
        table[why] = responses.loc[responses["invalid_reason"] == why].groupby(keys).size()
    table = table.fillna(0).astype(int).reset_index()
    return scores.loc[reason == ""].copy(), table


# ---------------------------------------------------------------- scenario-level (beyond the paper)


def scenario_means(resp: pd.DataFrame, condition: str = "A") -> pd.DataFrame:
    """Mean ``condition`` score per model, language, dimension and scenario (over features and samples).

    The unit a scenario-level test needs: the features of one response, the samples of one prompt and
    the languages of one scenario are not independent observations.
    """
    base = resp.loc[resp["condition"] == condition]
    return base.groupby(["model", "dimension", "scenario_id", "language"], as_index=False, sort=True)["score"].mean()


def paired_language_test(means: pd.DataFrame, first: str, second: str) -> dict[str, Any]:
    """Paired t-test and Wilcoxon signed-rank test of ``first`` against ``second`` across matched scenarios.

    A pair is one (model, scenario) with a mean in both languages; scenarios lacking either are counted.
    """
    wide = means.pivot_table(index=["model", "scenario_id"], columns="language", values="score")
    for lang in (first, second):
        if lang not in wide.columns:
            wide[lang] = np.nan
    both = wide[[first, second]].dropna()
    x, y = both[first].to_numpy(float), both[second].to_numpy(float)
    out: dict[str, Any] = {"first": first, "second": second, "n_pairs": int(len(both)),
                           "n_unmatched": int(len(wide) - len(both)),
                           "mean_first": float(x.mean()) if len(x) else math.nan,
                           "mean_second": float(y.mean()) if len(y) else math.nan,
                           "t": math.nan, "p_t": math.nan, "dz": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                           "wilcoxon_w": math.nan, "p_wilcoxon": math.nan, "note": ""}
    diff = x - y
    if len(both) < 2 or np.allclose(diff, diff[0]):
        out["note"] = (f"not computed: {len(both)} matched scenario(s)" if len(both) < 2
                       else "not computed: every matched scenario has the same difference")
        return out
    t = stats.ttest_rel(x, y)
    ci = t.confidence_interval(1 - ALPHA)  # of the mean paired difference first - second
    out.update(t=float(t.statistic), p_t=float(t.pvalue), dz=float(diff.mean() / diff.std(ddof=1)),
               ci_low=float(ci.low), ci_high=float(ci.high))
    if np.any(diff != 0):
        w = stats.wilcoxon(x, y)
        out.update(wilcoxon_w=float(w.statistic), p_wilcoxon=float(w.pvalue))
    return out


def repeated_measures_anova(means: pd.DataFrame) -> pd.DataFrame:
    """Per dimension: a one-way repeated-measures ANOVA of the scenario means across languages
    (statsmodels AnovaRM; subject = model x scenario, language within), on the scenarios that have every
    language of the dimension (the rest are counted)."""
    from statsmodels.stats.anova import AnovaRM

    rows = []
    for dim, group in means.groupby("dimension", sort=True):
        subject = group["model"].astype(str) + "|" + group["scenario_id"].astype(str)
        data = group.assign(subject=subject)
        languages = sorted(data["language"].unique())
        counts = data.groupby("subject")["language"].nunique()
        complete = counts.index[counts == len(languages)]
        kept = data.loc[data["subject"].isin(complete)]
        row: dict[str, Any] = {"dimension": dim, "F": math.nan, "p": math.nan, "df_between": math.nan,
                               "df_within": math.nan, "k": len(languages), "n_scenarios": int(len(complete)),
                               "n_incomplete": int(len(counts) - len(complete)), "note": ""}
        if len(languages) < 2 or len(complete) < 2:
            row["note"] = f"not computed: {len(languages)} language(s), {len(complete)} complete scenario(s)"
        else:
            table = AnovaRM(kept, "score", "subject", within=["language"]).fit().anova_table
            res = table.loc["language"]
            row.update(F=float(res["F Value"]), p=float(res["Pr > F"]), df_between=float(res["Num DF"]),
                       df_within=float(res["Den DF"]))
        rows.append(row)
    cols = ["dimension", "F", "p", "df_between", "df_within", "k", "n_scenarios", "n_incomplete", "note"]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------- the headline PCS, its intervals and decision


# resamples of the PCS intervals (BCa over cells, and over whole scenarios)
BOOTSTRAP_RESAMPLES = 2000
# the interval the PCS decision (and the report's star) uses, and what the other one resamples (ours: the paper
# gives PCS without an interval)
PCS_INTERVAL_LEGEND = (
    "95% intervals of PCS: `ci_low_cluster` / `ci_high_cluster` resample whole scenarios (cluster bootstrap, BCa: "
    "the features of one scenario are scored on the same responses and its languages translate one text, so they "
    "are not independent; with fewer than 5 scenarios no such interval is given); `ci_low` / `ci_high` resample "
    "scenario-feature cells as if they were. The decision uses the scenario (cluster) interval.")


def headline_pcs(tri: pd.DataFrame, min_gain: float) -> tuple[float, str]:
    """PCS of a set of triads as a headline: the mean of the included cells' ratios, and why it is undefined.

    PCS is the share of the explicit prompt's gain that the implicit prompt captures, so it presumes the
    explicit prompt raised the scores: where mean B - mean A is not above the minimum gain (the condition
    under which capability utilisation is undefined), PCS is undefined too, for the same reason (ours: a mean
    of ratios over the few cells that happened to gain, beside "no gain overall", contradicts itself).  The
    mean over those cells is still given, in the note.
    """
    from stereolens.report.markdown import format_cell

    if tri.empty:
        return math.nan, "undefined: no complete A/B/C triad"
    included = tri.loc[~tri["excluded"]]
    if included.empty:
        return math.nan, (f"undefined: all {len(tri)} scenario-feature cells excluded (B - A not above the minimum "
                          f"gain {format_cell(min_gain)})")
    gain = float(tri["B"].mean() - tri["A"].mean())
    if not gain > min_gain + GAIN_TOLERANCE:
        return math.nan, (f"undefined: mean B - mean A = {format_cell(gain)} over all {len(tri)} cells is not above "
                          f"the minimum gain {format_cell(min_gain)}, so there is no explicit-prompt capability to "
                          f"take a share of (capability utilisation is undefined for the same reason); over the "
                          f"{len(included)} cells whose own gain is above it the mean ratio is "
                          f"{format_cell(float(included['pcs'].mean()))}")
    return float(included["pcs"].mean()), ""


def pcs_clusters(cells: pd.DataFrame) -> pd.Series:
    """The cluster of each cell for the scenario interval: the model's scenario (all its features and languages)."""
    return cells["model"].astype(str) + "|" + cells["scenario_id"].astype(str)


def pcs_decision(value: float, low: float, high: float, n_units: int, *, min_units: int = 2) -> str:
    """Where PCS lies against 0 (no implicit adaptation) and 1 (as much as the explicit prompt), by its interval
    (none below ``min_units`` resampling units: 2 cells, or ``stats.cluster.MIN_CLUSTERS`` scenarios)."""
    if math.isnan(value):
        return "undefined"
    if n_units < min_units or math.isnan(low) or math.isnan(high):
        return f"cannot be decided (fewer than {min_units} units to resample)"
    if high < 0:
        return "below 0 (reverse adaptation)"
    if low > 1:
        return "above 1 (more than the explicit prompt)"
    if low > 0 and high < 1:
        return "between 0 and 1 (partial implicit adaptation)"
    if low <= 0 <= high:
        return ("not distinguishable from 0 or 1" if high >= 1 else
                "not distinguishable from 0 (no implicit adaptation detected)")
    return "not distinguishable from 1 (full implicit adaptation)"


def pcs_estimate(tri: pd.DataFrame, min_gain: float, *, seed: int = 0,
                 n_resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Any]:
    """The headline PCS of ``tri`` (cells with ``pcs`` and ``excluded``: :func:`add_pcs`) with both intervals and
    the decision the scenario interval gives (``decision``) and the one the cell interval would give."""
    from stereolens.stats.bias import bca_interval
    from stereolens.stats.cluster import MIN_CLUSTERS, cluster_ratio_interval

    value, note = headline_pcs(tri, min_gain)
    included = tri.loc[~tri["excluded"]]
    clusters = pcs_clusters(included)
    out = {"pcs": value, "ci_low": math.nan, "ci_high": math.nan, "ci_low_cluster": math.nan,
           "ci_high_cluster": math.nan, "n_cells": int(len(included)), "n_scenarios": int(clusters.nunique()),
           "pcs_note": note}
    if not math.isnan(value):
        values = included["pcs"].to_numpy(float)
        if len(values) >= 2:
            out["ci_low"], out["ci_high"] = bca_interval(values, n_resamples=n_resamples, seed=seed)
        # a pooled mean is the ratio of sums with one in every denominator
        scenario = cluster_ratio_interval(values, np.ones_like(values), clusters.to_numpy(), n_resamples=n_resamples,
                                          seed=seed)
        out["ci_low_cluster"], out["ci_high_cluster"] = scenario.low, scenario.high
    out["decision"] = pcs_decision(value, out["ci_low_cluster"], out["ci_high_cluster"], out["n_scenarios"],
                                   min_units=MIN_CLUSTERS)
    out["decision_cells"] = pcs_decision(value, out["ci_low"], out["ci_high"], out["n_cells"])
    return out


# ---------------------------------------------------------------- PCS breakdowns


def _cap_util_columns(groups: pd.core.groupby.DataFrameGroupBy, min_gain: float) -> pd.DataFrame:
    """``cap_util`` and ``cap_util_note`` (why it is undefined, else empty) per group."""
    values = {key: capability_utilisation(group, min_gain) for key, group in groups}
    return pd.DataFrame({"cap_util": {k: v for k, (v, _) in values.items()},
                         "cap_util_note": {k: why for k, (_, why) in values.items()}})


def _pcs_stats(pcs: pd.DataFrame, by: list[str], min_gain: float) -> pd.DataFrame:
    """Mean, median, SD and count of cell PCS per group, the excluded cells, and the group's
    capability utilisation (the aggregate ratio over every complete triad of the group, section 4.1)."""
    grouped = pcs.groupby(by, sort=True)
    out = grouped["pcs"].agg(mean_pcs="mean", median_pcs="median", sd="std", n="count")
    out["n_excluded"] = grouped["excluded"].sum().astype(int)
    cap = _cap_util_columns(grouped[list(CONDITIONS)], min_gain)
    cap.index = out.index
    return pd.concat([out, cap], axis=1).reset_index()


def model_summary(pcs: pd.DataFrame, min_gain: float, *, seed: int = 0) -> pd.DataFrame:
    """Table 10: per model PCS (undefined where the explicit prompt did not raise the scores overall,
    :func:`headline_pcs`) with its cell and scenario intervals, capability utilisation (with why it is
    undefined) and the mean A, B, C scores."""
    rows = []
    for model, group in pcs.groupby("model", sort=True):
        cap, why = capability_utilisation(group, min_gain)
        estimate = pcs_estimate(group, min_gain, seed=seed)
        rows.append(
            {
                "model": model,
                **{key: estimate[key] for key in ("pcs", "ci_low", "ci_high", "ci_low_cluster", "ci_high_cluster")},
                "cap_util": cap,
                "mean_a": float(group["A"].mean()),
                "mean_b": float(group["B"].mean()),
                "mean_c": float(group["C"].mean()),
                "n_cells": int(len(group)),
                "n_excluded": int(group["excluded"].sum()),
                "n_scenarios": estimate["n_scenarios"],
                "pcs_note": estimate["pcs_note"],
                "cap_util_note": why,
            }
        )
    cols = ["model", "pcs", "ci_low", "ci_high", "ci_low_cluster", "ci_high_cluster", "cap_util", "mean_a", "mean_b",
            "mean_c", "n_cells", "n_excluded", "n_scenarios", "pcs_note", "cap_util_note"]
    return pd.DataFrame(rows, columns=cols).sort_values("pcs", ascending=False, na_position="last").reset_index(drop=True)


def model_dimension_summary(pcs: pd.DataFrame, min_gain: float, *, seed: int = 0) -> pd.DataFrame:
    """Table 1: per model PCS, capability utilisation and PCS per dimension (columns)."""
    summary = model_summary(pcs, min_gain, seed=seed)[["model", "pcs", "cap_util"]]
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


def feature_ranking(pcs: pd.DataFrame, min_gain: float) -> pd.DataFrame:
    """Table 14: features ranked by median PCS."""
    out = _pcs_stats(pcs, ["feature", "dimension"], min_gain).sort_values("median_pcs", ascending=False, na_position="last")
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


def human_validation(df: pd.DataFrame, excluded: pd.DataFrame | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Table 17 counts per language and the two-sided binomial tests on decisive cases (p = 0.5).

    ``excluded`` (one row per pair, ``language`` and ``comparison``; the round's ``excluded_pairs``) are the
    pairs left out because a response was invalid: counted per language and comparison in
    ``<comparison>_excluded_invalid`` columns and ``n_excluded_invalid`` of each test, never tested.
    Without it (preferences from elsewhere) the columns are absent.
    """
    prefs = check_human_preferences(df)
    if excluded is not None:
        missing = [c for c in ("language", "comparison") if c not in excluded.columns]
        unknown = sorted(set(excluded.get("comparison", pd.Series(dtype=object)).astype(str)) - set(COMPARISONS))
        if missing or unknown:
            raise DataError(f"excluded human-validation pairs: missing column(s) {missing}" if missing else
                            f"excluded human-validation pairs: comparison(s) {unknown} are not A-C or B-C")
    languages = sorted(set(prefs["language"]) | (set(excluded["language"]) if excluded is not None else set()))
    rows = []
    for lang in languages:
        group = prefs.loc[prefs["language"] == lang]
        row: dict[str, Any] = {"language": lang}
        for comp, (first, second) in COMPARISONS.items():
            sub = group.loc[group["comparison"] == comp, "preference"]
            tag = comp.replace("-", "_")
            row[f"{tag}_{first}"] = int((sub == first).sum())
            row[f"{tag}_{second}"] = int((sub == second).sum())
            row[f"{tag}_tie"] = int((sub == TIE).sum())
        row["n"] = int(len(group))
        if excluded is not None:
            for comp in COMPARISONS:
                row[f"{comp.replace('-', '_')}_excluded_invalid"] = int(
                    ((excluded["language"] == lang) & (excluded["comparison"] == comp)).sum())
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
        if excluded is not None:
            tests[comp]["n_excluded_invalid"] = int((excluded["comparison"] == comp).sum())
    tested = binomial_tests_table(tests)
    for row in tested.to_dict("records"):
        tests[row["comparison"]].update({key: row[key] for key in BINOMIAL_ADDED})
    return table, tests


# what binomial_tests_table adds to each test of human_validation (corrections over the two tests and the MDE)
BINOMIAL_ADDED = ("p_holm", "p_bh", "significant_holm", "significant_bh", "mde", "mde_below", "alpha_adjusted",
                  "mde_adjusted")


def binomial_tests_table(tests: Mapping[str, Mapping[str, Any]], *, alpha: float = ALPHA) -> pd.DataFrame:
    """Table 17's binomial tests as a starred table: one row per comparison (A-C, B-C) with its decisive counts,
    p, Holm and Benjamini-Hochberg over the two tests, and the minimum detectable share from the decisive n."""
    rows = []
    for comp, (first, second) in COMPARISONS.items():
        test = tests.get(comp)
        if test is None:
            continue
        rows.append({"comparison": comp, "n_first": test[f"n_{first}"], "n_second": test[f"n_{second}"],
                     "n_tie": test["n_tie"], "n_decisive": test["n_decisive"], "share_second": test[f"share_{second}"],
                     "p": test["p"]})
    table = add_corrections(pd.DataFrame(rows), p_col="p", alpha=alpha) if rows else pd.DataFrame(rows)
    if table.empty:
        return table
    tested = int(table["p"].notna().sum())
    mde = mde_table(dict(zip(table["comparison"], table["n_decisive"])), alpha=alpha, family_size=tested or None)
    return table.merge(mde.drop(columns="n").rename(columns={"cell": "comparison"}), on="comparison", how="left")


# ---------------------------------------------------------------- everything at once


@dataclass
class PCSAnalysis:
    """All numbers of one analysis: the summary, the named tables and the test results."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    statistics: dict[str, Any] = field(default_factory=dict)
    cells: pd.DataFrame | None = None  # triads with per-cell PCS
    # the checked judged scores, invalid responses included: what the robustness table re-aggregates
    judged: pd.DataFrame | None = None


def min_gain_sensitivity(tri: pd.DataFrame, steps: Sequence[float], configured: float) -> pd.DataFrame:
    """PCS (the headline's rule, :func:`headline_pcs`) and capability utilisation on the same triads for each
    minimum gain (in scale steps).

    The minimum gain is our rule, not the paper's, so the report shows how much the headline rests on it.
    """
    rows = []
    for value in sorted({*map(float, steps), float(configured)}):
        gain = min_gain_points(value)
        cells = add_pcs(tri, gain)
        cap, why = capability_utilisation(cells, gain)
        pcs, pcs_why = headline_pcs(cells, gain)
        rows.append({"min_gain_steps": value, "min_gain_points": gain, "pcs": pcs,
                     "n_included": int((~cells["excluded"]).sum()), "n_excluded": int(cells["excluded"].sum()),
                     "cap_util": cap, "configured": value == float(configured), "pcs_note": pcs_why,
                     "cap_util_note": why})
    return pd.DataFrame(rows)


def analyze_scores(
    scores: pd.DataFrame,
    *,
    min_gain_steps: float = DEFAULT_MIN_GAIN_STEPS,
    hindi: str = "hi",
    urdu: str = "ur",
    human: pd.DataFrame | None = None,
    human_excluded: pd.DataFrame | None = None,
    sensitivity_steps: Sequence[float] = SENSITIVITY_GAIN_STEPS,
    seed: int = 0,
) -> PCSAnalysis:
    """Every metric and test of Fifteen Percent Fluency sections 3.6, 4 and appendices C-I from judged scores.

    ``min_gain_steps``: a scenario-feature enters PCS only when B - A exceeds this many steps of the judges'
    scale (and capability utilisation is defined only when mean B - mean A does); see the module docstring.
    ``human_excluded``: the human-validation pairs left out for an invalid response, counted in Table 17.
    ``seed``: of the bootstrap intervals.
    """
    min_gain = min_gain_points(min_gain_steps)
    scores = check_scores(scores)
    if scores.empty:
        raise DataError("scores table has no scored rows")
    judged = scores
    scores, excluded_responses = drop_invalid_responses(scores)
    if scores.empty:
        raise DataError(f"scores table has no scored rows of valid responses "
                        f"({int(excluded_responses['n_excluded'].sum())} responses excluded as invalid)")
    resp = response_scores(scores)
    cells = cell_scores(scores)
    tri = add_pcs(triads(cells), min_gain)
    ldi = ldi_table(cells)
    hud_feat = hud_by_feature(ldi, hindi, urdu)
    means_a = scenario_means(resp, "A")
    summary = headline_summary(tri, ldi, hud_feat, min_gain, seed=seed)
    summary["ldi_notes"] = ldi_notes(sorted(set(judged["language"])), ldi, excluded_responses)
    for language in summary["ldi_notes"]:  # run, but no valid response: listed, with the reason beside it
        summary["ldi"][language] = {}
    summary["hud_note"] = hud_note(ldi, hindi, urdu)
    tables = {
        "table01_model_dimension": model_dimension_summary(tri, min_gain, seed=seed),
        "table02_ldi_by_language": ldi_by_language(ldi),
        "table08_pcs_model_dimension": _pcs_stats(tri, ["model", "dimension"], min_gain),
        "table09_pcs_model_language": _pcs_stats(tri, ["model", "language"], min_gain),
        "pcs_by_language": _pcs_stats(tri, ["language"], min_gain),
        "table10_model_summary": model_summary(tri, min_gain, seed=seed),
        "pcs_min_gain_sensitivity": min_gain_sensitivity(tri, sensitivity_steps, min_gain_steps),
        "excluded_responses": excluded_responses,
        "table11_ldi": ldi,
        "table11_ldi_wide": ldi_wide(ldi),
        "table12_hud_by_model": hud_by_model(cells, hindi, urdu),
        "table13_hud_by_feature": hud_feat,
        "table14_feature_ranking": feature_ranking(tri, min_gain),
        "table15_anova_language": anova_by_dimension(resp, "language"),
        "scenario_rm_anova_language": repeated_measures_anova(means_a),
        "table16_paired_a_vs_c": paired_tests_by_language(tri),
        "pcs_dimension_language": _pcs_stats(tri, ["dimension", "language"], min_gain),
        "pcs_cells": tri,
    }
    statistics = analysis_statistics(scores, resp, tri, ldi, means_a, min_gain_steps=min_gain_steps, hindi=hindi,
                                     urdu=urdu, n_excluded_invalid=int(excluded_responses["n_excluded"].sum()))
    summary["hindi_urdu"] = hindi_urdu_summary(statistics["hindi_urdu"], statistics["hindi_urdu_scenarios"])
    if human is not None and len(human):
        table, tests = human_validation(human, excluded=human_excluded)
        tables["table17_human_validation"] = table
        tables["table17_binomial_tests"] = binomial_tests_table(tests)
        statistics["human_validation"] = tests
    statistics["corrections"] = correction_legends(tables)
    statistics["mde"] = mde_notes(tables)
    statistics["pcs_interval"] = PCS_INTERVAL_LEGEND
    return PCSAnalysis(summary=finite_json(summary), tables=tables, statistics=finite_json(statistics), cells=tri,
                       judged=judged)


def headline_summary(tri: pd.DataFrame, ldi: pd.DataFrame, hud_feat: pd.DataFrame, min_gain: float, *,
                     seed: int = 0) -> dict[str, Any]:
    """PCS (:func:`headline_pcs`) with its intervals and decision, capability utilisation, exclusions, PCS per
    dimension, LDI and HUD: the numbers of ``summary.json``."""
    cap_util, cap_util_note = capability_utilisation(tri, min_gain)
    estimate = pcs_estimate(tri, min_gain, seed=seed)
    summary = {
        "pcs": estimate["pcs"],
        "pcs_note": estimate["pcs_note"],
        # the decision's interval (whole scenarios resampled) and the cell-level one beside it
        "pcs_ci_low_cluster": estimate["ci_low_cluster"],
        "pcs_ci_high_cluster": estimate["ci_high_cluster"],
        "pcs_ci_low": estimate["ci_low"],
        "pcs_ci_high": estimate["ci_high"],
        "pcs_decision": estimate["decision"],
        "pcs_n_cells": estimate["n_cells"],
        "pcs_n_scenarios": estimate["n_scenarios"],
        "cap_util": cap_util,
        "cap_util_note": cap_util_note,
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
    return summary


def analysis_statistics(scores: pd.DataFrame, resp: pd.DataFrame, tri: pd.DataFrame, ldi: pd.DataFrame,
                        means_a: pd.DataFrame, *, min_gain_steps: float, hindi: str, urdu: str,
                        n_excluded_invalid: int) -> dict[str, Any]:
    """Counts, the Hindi-Urdu and model tests and the condition means: the numbers of ``statistics.json``."""
    included = tri.loc[~tri["excluded"]]
    return {
        "n_scores": int(len(scores)),
        "n_cells": int(len(tri)),
        "n_included": int(len(included)),
        "min_gain_steps": float(min_gain_steps),
        "min_gain_points": min_gain_points(min_gain_steps),
        "n_responses_excluded_invalid": n_excluded_invalid,
        "pcs_sd": float(included["pcs"].std()) if len(included) > 1 else math.nan,
        "models": sorted(tri["model"].unique().tolist()),
        "languages": sorted(tri["language"].unique().tolist()),
        "hud_note": hud_note(ldi, hindi, urdu),
        "hindi_urdu": hindi_urdu_test(resp, hindi, urdu),
        "hindi_urdu_scenarios": paired_language_test(means_a, hindi, urdu),
        "model_anova": model_anova(tri),
        "means": {c: float(tri[c].mean()) if len(tri) else math.nan for c in CONDITIONS},
    }
