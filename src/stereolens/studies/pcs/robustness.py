"""Does each pcs headline verdict survive the analysis choices the paper leaves open?

Two headline verdicts are recomputed, from the stored judged scores alone (re-aggregation, no
model pass):

* **PCS** (:func:`~stereolens.studies.pcs.analysis.pcs_estimate`): where its scenario interval
  puts it against 0 and 1.  Choices: the minimum explicit-prompt gain (ours) over its sensitivity
  range; the unit of the interval (scenario-feature cells as independent, the response level,
  against whole scenarios); invalid responses excluded (the headline) or kept where they were
  judged; each judge alone and the first sample alone where the run has several.
* **the Hindi-Urdu difference** of Prompt A scores: the paper's response-level t-test (the
  headline test) against the scenario-level paired t-test and Wilcoxon test over matched
  scenarios, and with invalid responses kept.

A variant that needs another model pass (the paper's four samples, its three-judge panel) is
listed with ``ran`` false and the reason.  ``agrees`` says whether a variant that ran reaches its
measure's headline decision (the same decision text); where the headline reaches none (PCS undefined, a
test not computed, too few units) there is nothing to survive, and ``agrees`` is empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from stereolens.report.markdown import format_cell
from stereolens.studies.pcs.analysis import (
    ALPHA,
    add_pcs,
    cell_scores,
    drop_invalid_responses,
    hindi_urdu_test,
    invalid_reasons,
    min_gain_points,
    paired_language_test,
    pcs_estimate,
    response_scores,
    scenario_means,
    triads,
)

# the contract's columns (issue 32), then the measure whose headline a row recomputes
COLUMNS = ["choice", "variant", "estimate", "ci_low", "ci_high", "n", "decision", "agrees", "ran", "reason", "measure"]
HEADLINE = "headline"
PCS_MEASURE = "PCS"
HINDI_URDU_MEASURE = "Hindi-Urdu difference"


def _cells(scores: pd.DataFrame, min_gain: float) -> pd.DataFrame:
    """Triads with per-cell PCS from (checked) judged scores."""
    return add_pcs(triads(cell_scores(scores)), min_gain)


def _pcs_row(choice: str, variant: str, cells: pd.DataFrame, min_gain: float, seed: int, *,
             unit: str = "scenario", reason: str = "") -> dict[str, Any]:
    estimate = pcs_estimate(cells, min_gain, seed=seed)
    if unit == "scenario":
        low, high, n, decision = (estimate["ci_low_cluster"], estimate["ci_high_cluster"], estimate["n_scenarios"],
                                  estimate["decision"])
    else:
        low, high, n, decision = estimate["ci_low"], estimate["ci_high"], estimate["n_cells"], estimate["decision_cells"]
    why = "; ".join(filter(None, [reason, estimate["pcs_note"]]))
    return {"choice": choice, "variant": variant, "estimate": estimate["pcs"], "ci_low": low, "ci_high": high, "n": n,
            "decision": decision, "ran": True, "reason": why, "measure": PCS_MEASURE}


def _not_run(choice: str, variant: str, reason: str, measure: str) -> dict[str, Any]:
    return {"choice": choice, "variant": variant, "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
            "n": None, "decision": "", "ran": False, "reason": reason, "measure": measure}


def hindi_urdu_decision(p: float, difference: float, hindi: str, urdu: str, alpha: float = ALPHA) -> str:
    if p is None or math.isnan(p):
        return "not computed"
    if p >= alpha:
        return "no difference detected"
    return f"{hindi} higher" if difference > 0 else f"{urdu} higher"


def _hindi_urdu_rows(scores: pd.DataFrame, hindi: str, urdu: str, *, kept: pd.DataFrame | None) -> list[dict[str, Any]]:
    resp = response_scores(scores)
    response_level = hindi_urdu_test(resp, hindi, urdu)
    scenario_level = paired_language_test(scenario_means(resp, "A"), hindi, urdu)
    unit = "Hindi-Urdu difference: unit of analysis"

    def row(choice: str, variant: str, test: dict[str, Any], p: float, n: Any, *, ci: bool = True) -> dict[str, Any]:
        # mean Hindi - mean Urdu (response level) or the mean paired difference (scenario level: the same means)
        paired = "mean_first" in test
        difference = (test["mean_first"] - test["mean_second"]) if paired else (test["hindi_mean"] - test["urdu_mean"])
        return {"choice": choice, "variant": variant, "estimate": difference,
                "ci_low": test.get("ci_low", math.nan) if ci else math.nan,
                "ci_high": test.get("ci_high", math.nan) if ci else math.nan, "n": n,
                "decision": hindi_urdu_decision(p, difference, hindi, urdu), "ran": True,
                "reason": test.get("note", ""), "measure": HINDI_URDU_MEASURE}

    rows = [row(f"{HINDI_URDU_MEASURE} (the paper's response-level t-test on Prompt A scores)", HEADLINE,
                response_level, response_level["p"], response_level["n_hindi"] + response_level["n_urdu"]),
            row(unit, "matched scenarios, paired t-test (scenario level)", scenario_level, scenario_level["p_t"],
                scenario_level["n_pairs"]),
            row(unit, "matched scenarios, Wilcoxon signed-rank test (scenario level; no interval)", scenario_level,
                scenario_level["p_wilcoxon"], scenario_level["n_pairs"], ci=False)]
    if kept is not None:
        kept_test = hindi_urdu_test(response_scores(kept), hindi, urdu)
        rows.append(row("Hindi-Urdu difference: invalid responses", "kept (the judged ones)", kept_test, kept_test["p"],
                        kept_test["n_hindi"] + kept_test["n_urdu"]))
    return rows


def robustness_table(judged: pd.DataFrame, *, min_gain_steps: float, sensitivity_steps: Sequence[float],
                     hindi: str = "hi", urdu: str = "ur", seed: int = 0) -> pd.DataFrame:
    """The robustness table of one analysis: ``judged`` are the checked judged scores, invalid responses
    included (with ``invalid_reason``), as :func:`~stereolens.studies.pcs.analysis.analyze_scores` receives them."""
    valid, _ = drop_invalid_responses(judged)
    gain = min_gain_points(min_gain_steps)
    cells = _cells(valid, gain)
    rows = [_pcs_row(f"{PCS_MEASURE} (minimum gain {format_cell(min_gain_steps)} steps, invalid responses excluded, "
                     "scenario interval)", HEADLINE, cells, gain, seed)]
    for steps in sorted({float(s) for s in sensitivity_steps} - {float(min_gain_steps)}):
        rows.append(_pcs_row("PCS: minimum explicit-prompt gain (ours, not the paper's)", f"{format_cell(steps)} step{'' if steps == 1 else 's'}",
                             add_pcs(cells, min_gain_points(steps)), min_gain_points(steps), seed))
    rows.append(_pcs_row("PCS: unit of the interval", "scenario-feature cells as independent (response level)", cells,
                         gain, seed, unit="cells"))
    invalid = invalid_reasons(judged) != ""
    n_invalid = int(judged.loc[invalid, _response_keys(judged)].drop_duplicates().shape[0])
    if n_invalid:
        rows.append(_pcs_row("PCS: invalid responses", "kept (the judged ones)", _cells(judged, gain), gain, seed,
                             reason=f"{n_invalid} judged invalid responses kept; invalid responses the judges never "
                                    "saw (empty ones) cannot be kept"))
    else:
        rows.append(_pcs_row("PCS: invalid responses", "kept (the judged ones)", cells, gain, seed,
                             reason="no judged response is invalid: the same scores as the headline"))
    rows += _panel_rows(valid, gain, seed)
    if {hindi, urdu} & set(judged["language"]):
        rows += _hindi_urdu_rows(valid, hindi, urdu, kept=judged if n_invalid else None)
    table = pd.DataFrame(rows, columns=COLUMNS)
    headline = table.loc[table["variant"] == HEADLINE].set_index("measure")["decision"]
    table["agrees"] = [None if not ran or variant == HEADLINE or not is_verdict(headline.get(measure, ""))
                       else bool(decision == headline.get(measure))
                       for ran, variant, decision, measure in zip(table["ran"], table["variant"], table["decision"],
                                                                  table["measure"])]
    return table[COLUMNS]


def is_verdict(decision: str) -> bool:
    """Whether a decision says something a variant can agree with (not undefined, not computed, not undecidable)."""
    return bool(decision) and decision not in ("undefined", "not computed") and not decision.startswith("cannot be decided")


def _response_keys(scores: pd.DataFrame) -> list[str]:
    return ["model", "language", "scenario_id", "condition"] + (["sample"] if "sample" in scores.columns else [])


def _panel_rows(valid: pd.DataFrame, gain: float, seed: int) -> list[dict[str, Any]]:
    """Each judge alone and the first sample alone where the scores hold several; otherwise the paper's panel and
    samples, which need another model pass."""
    rows = []
    judges = sorted(valid["judge"].astype(str).unique()) if "judge" in valid.columns else []
    if len(judges) > 1:
        for judge in judges:
            rows.append(_pcs_row("PCS: judge panel", f"judge {judge} alone", _cells(valid.loc[valid["judge"].astype(str) == judge], gain),
                                 gain, seed))
    else:
        rows.append(_not_run("PCS: judge panel", "the paper's three-judge panel",
                             "one judge scored these responses: another panel needs another judge pass "
                             "(study/pcs=paper, or a panel of conf/study/pcs/judges/)", PCS_MEASURE))
    samples = sorted(valid["sample"].unique()) if "sample" in valid.columns else []
    if len(samples) > 1:
        rows.append(_pcs_row("PCS: samples per prompt", f"first sample only (of {len(samples)})",
                             _cells(valid.loc[valid["sample"] == samples[0]], gain), gain, seed))
    else:
        rows.append(_not_run("PCS: samples per prompt", "the paper's 4 samples at temperature 0.7",
                             "one sample per prompt was collected: more need another responder pass (study/pcs=paper)",
                             PCS_MEASURE))
    return rows


def robustness_block(table: pd.DataFrame, file: str = "robustness.csv") -> dict[str, Any]:
    """The ``robustness`` block of summary.json: each headline decision and how many variants that ran agree."""
    def counts(part: pd.DataFrame) -> dict[str, Any]:
        variants = part.loc[part["variant"] != HEADLINE]
        compared = variants.loc[variants["agrees"].notna()]  # ran, against a headline that reached a decision
        head = part.loc[part["variant"] == HEADLINE, "decision"]
        return {"headline_decision": str(head.iloc[0]) if len(head) else "",
                "survives": int(compared["agrees"].eq(True).sum()), "of": int(len(compared)),
                "not_run": int((~variants["ran"].astype(bool)).sum())}

    by_measure = {str(measure): counts(part) for measure, part in table.groupby("measure", sort=False)}
    whole = counts(table)
    whole["headline_decision"] = "; ".join(f"{measure}: {block['headline_decision']}" for measure, block in by_measure.items())
    return {**whole, "table": file, "by_measure": by_measure}
