"""Paired comparisons of the run's models on the same scenarios (the ``pcs_paired`` stage).

Every model of a run answers the same scenarios, so two models' PCS are compared scenario by
scenario, not as two unpaired means:

* **the unit** is a scenario in one language: its PCS for a model is the mean ratio of its
  included scenario-feature cells (those whose explicit-prompt gain is above the minimum gain, the
  headline's rule), so the features scored on one response count once together.  A scenario enters
  a comparison when both models have an included cell in it; the rest are counted (``n_unmatched``).
* **cells**: one comparison per language, and ``all`` over every language, whose unit is the
  scenario (its languages' differences averaged first: the languages translate one text).
* **the test**: the mean of the per-scenario differences (model_a - model_b) with its BCa bootstrap
  interval and a two-sided sign-flip permutation test (``stats/paired.py``
  ``paired_mean_difference``; exact when the scenarios are few).
* **the family**: Holm and Benjamini-Hochberg over the languages of one model pair (``all``
  outside it, as every paired table of the project); the verdict of a language uses Holm's p, that
  of ``all`` its own p.  A sign-flip test on n scenarios cannot give p below 2 / 2^n, so a cell
  whose n could never reach its level (alpha / m for a language, alpha for ``all``) *cannot be
  decided at this n*.
* **mde**: the smallest |difference| the test finds with 80% power at that level, read from the
  paired t-test's minimum detectable d_z (``stats/power.py``) times the SD of the differences (an
  approximation: the sign-flip test's own power is close to the t-test's, not equal).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from stereolens.io import finite_json
from stereolens.stats.multiple import add_corrections
from stereolens.stats.paired import paired_mean_difference
from stereolens.stats.power import minimum_detectable_d_z
from stereolens.studies.pcs.analysis import (
    ALPHA,
    add_pcs,
    cell_scores,
    check_scores,
    drop_invalid_responses,
    min_gain_points,
    triads,
)

STUDY = "pcs"
ALL = "all"
MODEL_A_MORE = "model_a more"
MODEL_B_MORE = "model_b more"
NO_DIFFERENCE = "no difference detected"
UNDECIDABLE = "cannot be decided at this n"
TEST = ("per-scenario PCS (the mean ratio (C - A) / (B - A) of a scenario's included feature cells) compared "
        "scenario by scenario: the mean of the differences model_a - model_b over the scenarios both models have a "
        "PCS for, its 95% BCa bootstrap interval, and a two-sided sign-flip permutation test over the scenarios")
FAMILY = ("Holm and Benjamini-Hochberg over the languages of one model pair (the `all` row, the scenarios of every "
          "language averaged per scenario, stands outside the family); a language's verdict uses Holm's p, "
          "`all` its own p")
COMPARISON_KEYS = ("model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low", "ci_high",
                   "p_value", "p_holm", "p_bh", "significant_holm", "significant_bh", "verdict", "mde", "n_unmatched")


def scenario_pcs(scores: pd.DataFrame, min_gain_steps: float) -> pd.DataFrame:
    """One row per model, language and scenario: the mean PCS of its included cells (``n_cells`` of them).

    ``scores`` are judged scores as the analysis reads them (invalid responses, flagged in ``invalid_reason``,
    are left out first)."""
    valid, _ = drop_invalid_responses(check_scores(scores))
    cells = add_pcs(triads(cell_scores(valid)), min_gain_points(min_gain_steps))
    included = cells.loc[~cells["excluded"]]
    out = included.groupby(["model", "language", "scenario_id"], as_index=False, sort=True)["pcs"].agg(
        pcs="mean", n_cells="count")
    return out


def _decidable(n: int, level: float) -> bool:
    """Whether a two-sided sign-flip test on n paired units can reach ``level`` at all (smallest p = 2 / 2^n)."""
    return n >= 2 and 2 * 0.5**n < level


def _verdict(n: int, p: float, difference: float, *, reachable_at: float, alpha: float) -> str:
    """``p`` (raw, or Holm's adjusted) against ``alpha``; undecidable when no outcome on ``n`` units could reach
    ``reachable_at`` (alpha, or Holm's first step alpha / m)."""
    if not _decidable(n, reachable_at):
        return UNDECIDABLE
    if not math.isnan(p) and p < alpha:
        return MODEL_A_MORE if difference > 0 else MODEL_B_MORE
    return NO_DIFFERENCE


def _compare(a: np.ndarray, b: np.ndarray, *, seed: int) -> dict[str, Any]:
    result = paired_mean_difference(a, b, confidence=1 - ALPHA, seed=seed)
    d = a - b
    # one scenario says nothing about how scenarios vary: no interval (not a zero-width one)
    low, high = (result.ci_low, result.ci_high) if len(d) > 1 else (math.nan, math.nan)
    return {"n": int(len(d)), "estimate_a": float(a.mean()) if len(a) else math.nan,
            "estimate_b": float(b.mean()) if len(b) else math.nan, "difference": result.mean_difference,
            "ci_low": low, "ci_high": high, "p_value": result.p_value,
            "sd": float(d.std(ddof=1)) if len(d) > 1 else math.nan}


def compare_pair(scenarios: pd.DataFrame, model_a: str, model_b: str, languages: Sequence[str], *,
                 alpha: float = ALPHA, seed: int = 0) -> list[dict[str, Any]]:
    """The comparisons of one model pair: one per language of ``languages`` and ``all``."""
    a = scenarios.loc[scenarios["model"] == model_a, ["language", "scenario_id", "pcs"]]
    b = scenarios.loc[scenarios["model"] == model_b, ["language", "scenario_id", "pcs"]]
    merged = a.merge(b, on=["language", "scenario_id"], how="outer", suffixes=("_a", "_b"))
    both = merged.dropna(subset=["pcs_a", "pcs_b"])
    rows = []
    for language in languages:
        part = both.loc[both["language"] == language]
        row = {"model_a": model_a, "model_b": model_b, "cell": str(language),
               **_compare(part["pcs_a"].to_numpy(float), part["pcs_b"].to_numpy(float), seed=seed),
               "n_unmatched": int(((merged["language"] == language).sum()) - len(part))}
        rows.append(row)
    # all languages: a scenario's languages averaged first (they translate one text)
    per_scenario = both.groupby("scenario_id", sort=True)[["pcs_a", "pcs_b"]].mean()
    rows.append({"model_a": model_a, "model_b": model_b, "cell": ALL,
                 **_compare(per_scenario["pcs_a"].to_numpy(float), per_scenario["pcs_b"].to_numpy(float), seed=seed),
                 "n_unmatched": int(merged["scenario_id"].nunique() - len(per_scenario))})
    table = pd.DataFrame(rows)
    family = table["cell"] != ALL
    corrected = add_corrections(table.loc[family], p_col="p_value", alpha=alpha)
    tested = int(table.loc[family, "p_value"].notna().sum())
    out = []
    for index, row in table.iterrows():
        entry = {key: row[key] for key in ("model_a", "model_b", "cell", "n", "estimate_a", "estimate_b",
                                            "difference", "ci_low", "ci_high", "p_value", "n_unmatched")}
        if family[index]:
            adjusted = {key: corrected.loc[index, key] for key in ("p_holm", "p_bh", "significant_holm", "significant_bh")}
            # Holm's adjusted p decides; whether the n could reach it at all is asked at its strictest step, alpha / m
            level = alpha / max(tested, 1)
            p_decides = float(adjusted["p_holm"])
        else:
            adjusted = {"p_holm": None, "p_bh": None, "significant_holm": None, "significant_bh": None}
            level, p_decides = alpha, float(row["p_value"])
        verdict = _verdict(int(row["n"]), p_decides, float(row["difference"]), reachable_at=level, alpha=alpha)
        mde = (minimum_detectable_d_z(int(row["n"]), alpha=level) * row["sd"]
               if row["n"] >= 2 and row["sd"] > 0 else math.nan)
        out.append({**entry, **adjusted, "verdict": verdict, "mde": mde})
    return out


def paired_comparisons(scores_by_model: Mapping[str, pd.DataFrame], *, models: Sequence[str],
                       languages: Sequence[str], min_gain_steps: float, alpha: float = ALPHA,
                       seed: int = 0) -> dict[str, Any]:
    """``paired.json`` of the pcs study: every pair of ``models`` (in the run's order) on the scenarios both answered."""
    result: dict[str, Any] = {"study": STUDY, "models": list(models), "test": TEST, "family": FAMILY,
                              "alpha": alpha, "min_gain_steps": float(min_gain_steps), "comparisons": [], "reason": ""}
    if len(models) < 2:
        result["reason"] = (f"one model in the run ({', '.join(models) or 'none'}): a paired comparison needs two "
                            "models measured on the same scenarios")
        return result
    scenarios = pd.concat([scenario_pcs(scores_by_model[m].assign(model=m), min_gain_steps) for m in models],
                          ignore_index=True)
    for model_a, model_b in itertools.combinations(models, 2):
        result["comparisons"] += compare_pair(scenarios, model_a, model_b, languages, alpha=alpha, seed=seed)
    return finite_json(result)  # as paired.json holds it: a value that does not exist is null


def comparisons_frame(paired: Mapping[str, Any]) -> pd.DataFrame:
    """``paired.csv``: one row per comparison, the columns of ``paired.json``'s comparisons."""
    return pd.DataFrame(paired.get("comparisons") or [], columns=list(COMPARISON_KEYS))


def pair_key(model_a: str, model_b: str) -> str:
    """How a model pair is named in MLflow metric names (``difference.<a>__<b>.<cell>``)."""
    return f"{model_a}__{model_b}"


def model_pairs(models: Sequence[str]) -> list[str]:
    return [pair_key(a, b) for a, b in itertools.combinations(models, 2)]


def paired_block(paired: Mapping[str, Any] | None, model: str) -> dict[str, Any]:
    """The ``paired`` block of one model's summary.json: the comparisons that involve ``model``."""
    if not paired:
        return {"comparisons": [], "reason": "no paired comparison file (reports/pcs/paired.json): run pcs_paired"}
    involving = [c for c in paired.get("comparisons") or [] if model in (c.get("model_a"), c.get("model_b"))]
    reason = paired.get("reason") or ("" if involving else f"{model} is not among the compared models "
                                                            f"({', '.join(paired.get('models') or [])})")
    return {"study": paired.get("study", STUDY), "models": list(paired.get("models") or []), "test": paired.get("test"),
            "family": paired.get("family"), "comparisons": involving, "reason": reason}
