"""Human validation of the pcs judges (Fifteen Percent Fluency appendix J) through the annotation layer.

Native speakers compare two responses to the same scenario, shown blinded and in
random order, and say which is more culturally appropriate for the scenario, or
that there is no meaningful difference.  Pairs are A-vs-C and B-vs-C per
language; the analysis runs binomial tests on the decisive cases.

This module builds the pairwise items from the collected responses and the
judged scores, turns annotation-layer judgements (labels ``1`` / ``2`` / ``tie``
on the shown positions) back into condition preferences (``A``/``B``/``C``/``tie``),
and aggregates them to one preference per item by majority vote.

* Items: per language and comparison, scenario-model pairs sampled round-robin
  over dimensions (stratified, as in appendix J), one response per condition
  (the first valid judged sample).  Item ids are a hash of the pair's key, so the
  files annotators see do not reveal which condition is which, and a re-export
  gives the same ids and the same order.
* Invalid responses (the collect stage's ``invalid_reason``: empty, refusal,
  wrong language) are never shown, judged or not: an English reply to a Hindi
  prompt is no Hindi A-vs-C comparison.  A pair left without a valid response of
  one of its conditions is listed by :func:`excluded_pairs` and counted in
  Table 17 and the binomial tests' counts.
* Latent truth (for the simulator only): the response whose judged score,
  averaged over judges and over the dimension's features, is higher; a
  difference within ``tie_margin`` is a tie.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import ConfigError, DataError
from stereolens.io import write_csv
from stereolens.stats.seeds import derived_seed as _stable_seed

COMPARISONS: dict[str, tuple[str, str]] = {"A-C": ("A", "C"), "B-C": ("B", "C")}
TIE = "tie"
# The annotators' answer scale: the two positions shown, or no meaningful difference (appendix J).
PAIRWISE_SCALE = Scale(
    "pairwise_preference",
    "nominal",
    options=("1", "2", TIE),
    option_texts=("Response 1", "Response 2", "No meaningful difference"),
)
INSTRUCTIONS = (
    "Read the scenario and the two responses to it. Which response is more culturally appropriate for the "
    "situation described? Answer 'Response 1', 'Response 2', or 'No meaningful difference'. Judge how each "
    "response communicates (directness, deference, hedging, whose interests it puts first), not its length or "
    "its language quality."
)
# what annotators may see; the conditions stay in the key file
TASK_COLUMNS = ("item_id", "language", "scenario", "response_1", "response_2", "text")


def item_id(language: str, comparison: str, model: str, scenario_id: str, sample: Any) -> str:
    """A stable id that does not reveal the conditions (annotators see it)."""
    key = f"{language}|{comparison}|{model}|{scenario_id}|{sample}"
    return "pv-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def response_means(scores: pd.DataFrame) -> pd.Series:
    """Judged score per response: mean over judges per feature, then over the dimension's features."""
    need = ["response_id", "feature", "score"]
    missing = [c for c in need if c not in scores.columns]
    if missing:
        raise DataError(f"pcs scores lack column(s) {', '.join(missing)} needed for human-validation items")
    s = scores.assign(score=pd.to_numeric(scores["score"], errors="coerce")).dropna(subset=["score"])
    per_feature = s.groupby(["response_id", "feature"])["score"].mean()
    return per_feature.groupby(level="response_id").mean()


RESPONSE_COLUMNS = ("response_id", "model", "language", "scenario_id", "dimension", "condition", "sample", "response",
                    "prompt", "invalid_reason")
PAIR_KEYS = ["model", "language", "scenario_id"]
EXCLUDED_COLUMNS = ["language", "comparison", "model", "scenario_id", "dimension", "invalid_reason", "response_ids"]


def _check_inputs(responses: pd.DataFrame, comparisons: Sequence[str]) -> None:
    unknown = sorted(set(comparisons) - set(COMPARISONS))
    if unknown:
        raise ConfigError(f"human validation comparisons {unknown} are not among {sorted(COMPARISONS)}")
    missing = [c for c in RESPONSE_COLUMNS if c not in responses.columns]
    if missing:
        raise DataError(f"pcs responses lack column(s) {', '.join(missing)} needed for human-validation items")


def _usable(responses: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """``responses`` with ``judged_score`` (NaN: not judged) and ``invalid`` (the collect stage's reason, empty = valid)."""
    from stereolens.studies.pcs.analysis import invalid_reasons

    return responses.assign(judged_score=responses["response_id"].map(response_means(scores)),
                            invalid=invalid_reasons(responses))


def excluded_pairs(responses: pd.DataFrame, scores: pd.DataFrame, *,
                   comparisons: Sequence[str] = tuple(COMPARISONS)) -> pd.DataFrame:
    """The pairs (model, language, scenario, comparison) left out of the round because a condition of the pair
    has responses but no valid judged one, and at least one of them is invalid: one row per pair, with the
    reason(s) and the invalid responses' ids.  A pair missing only a judged score (a failed judgement) is
    not an invalid response and is not listed."""
    _check_inputs(responses, comparisons)
    data = _usable(responses, scores)
    rows = []
    for (model, lang, sid), group in data.groupby(PAIR_KEYS, sort=True):
        for comp in comparisons:
            by_condition = {c: group.loc[group["condition"] == c] for c in COMPARISONS[comp]}
            if any(g.empty for g in by_condition.values()):
                continue  # never collected: not a pair the round could have shown
            lacking = [g for g in by_condition.values()
                       if not ((g["invalid"] == "") & g["judged_score"].notna()).any()]
            invalid = pd.concat(lacking).loc[lambda g: g["invalid"] != ""] if lacking else group.iloc[:0]
            if invalid.empty:
                continue
            rows.append({"language": lang, "comparison": comp, "model": model, "scenario_id": sid,
                         "dimension": group["dimension"].iloc[0],
                         "invalid_reason": "+".join(sorted(set(invalid["invalid"]))),
                         "response_ids": ";".join(sorted(invalid["response_id"].astype(str)))})
    return pd.DataFrame(rows, columns=EXCLUDED_COLUMNS)


def preference_items(
    responses: pd.DataFrame,
    scores: pd.DataFrame,
    *,
    items_per_comparison: int | None = None,
    tie_margin: float = 0.0,
    seed: int = 0,
    comparisons: Sequence[str] = tuple(COMPARISONS),
) -> pd.DataFrame:
    """One row per pairwise item: key columns, the two shown responses, and ``truth`` (``1``/``2``/``tie``).

    Only valid judged responses are shown (``invalid_reason`` empty); the pairs this leaves out are
    :func:`excluded_pairs`.  ``items_per_comparison`` caps the pairs per language and comparison (None:
    every pair), drawn from the valid pairs.
    """
    _check_inputs(responses, comparisons)
    data = _usable(responses, scores)
    judged = data.loc[(data["invalid"] == "") & data["judged_score"].notna()]
    # the first valid judged sample of each scenario x condition: annotators compare single responses
    judged = judged.sort_values(["model", "language", "scenario_id", "condition", "sample"])
    first = judged.groupby(["model", "language", "scenario_id", "condition"], as_index=False).head(1)
    by_cell = {(r.model, r.language, r.scenario_id, r.condition): r for r in first.itertuples(index=False)}
    # the scenario annotators read is the neutral prompt, whether or not its reply was valid (a B-vs-C pair
    # stands when only the A reply was in the wrong language)
    prompts_a = (data.loc[data["condition"] == "A"].sort_values(["model", "language", "scenario_id", "sample"])
                 .drop_duplicates(["model", "language", "scenario_id"]))
    neutral = {(r.model, r.language, r.scenario_id): r.prompt for r in prompts_a.itertuples(index=False)}

    rows = []
    for (model, lang, sid), _ in sorted(neutral.items()):
        for comp in comparisons:
            left, right = COMPARISONS[comp]
            if (model, lang, sid, left) not in by_cell or (model, lang, sid, right) not in by_cell:
                continue
            x, y = by_cell[(model, lang, sid, left)], by_cell[(model, lang, sid, right)]
            iid = item_id(lang, comp, model, sid, f"{x.sample}/{y.sample}")
            flip = np.random.default_rng(_stable_seed(seed, iid)).random() < 0.5
            first_r, second_r = (y, x) if flip else (x, y)
            diff = float(first_r.judged_score) - float(second_r.judged_score)
            truth = TIE if abs(diff) <= tie_margin else ("1" if diff > 0 else "2")
            scenario = str(neutral[(model, lang, sid)])
            rows.append({
                "item_id": iid, "language": lang, "comparison": comp, "model": model, "scenario_id": sid,
                "dimension": x.dimension, "first_condition": first_r.condition, "second_condition": second_r.condition,
                "first_response_id": first_r.response_id, "second_response_id": second_r.response_id,
                "first_score": float(first_r.judged_score), "second_score": float(second_r.judged_score),
                "truth": truth, "scenario": scenario, "response_1": str(first_r.response),
                "response_2": str(second_r.response),
                "text": f"Scenario:\n{scenario}\n\nResponse 1:\n{first_r.response}\n\nResponse 2:\n{second_r.response}",
            })
    items = pd.DataFrame(rows)
    if items.empty:
        n_invalid = int((data["invalid"] != "").sum())
        raise DataError(f"no A/B/C response pair with valid judged responses ({n_invalid} invalid response(s) "
                        "left out): nothing for human validation")
    if items_per_comparison is not None:
        items = _stratified(items, int(items_per_comparison), seed)
    return items.sort_values(["language", "comparison", "model", "scenario_id"]).reset_index(drop=True)


def _stratified(items: pd.DataFrame, k: int, seed: int) -> pd.DataFrame:
    """Up to ``k`` items per language x comparison, taken round-robin over dimensions in a seeded order."""
    keep = []
    for (lang, comp), group in items.groupby(["language", "comparison"], sort=True):
        rng = np.random.default_rng(_stable_seed(seed, f"{lang}|{comp}"))
        queues = [list(g.index[rng.permutation(len(g))]) for _, g in group.groupby("dimension", sort=True)]
        chosen: list[int] = []
        while len(chosen) < k and any(queues):
            for q in queues:
                if q and len(chosen) < k:
                    chosen.append(q.pop(0))
        keep += chosen
    return items.loc[sorted(keep)]


def to_preferences(aggregated: pd.DataFrame, items: pd.DataFrame, *, source: str) -> pd.DataFrame:
    """Majority-vote labels (on shown positions) -> condition preferences the analysis reads.

    Items without a decided majority are kept with an empty preference and ``decided=False``;
    the analysis reads only decided rows.
    """
    key = items.set_index("item_id")
    missing = sorted(set(aggregated["item_id"]) - set(key.index))
    if missing:
        raise DataError(f"aggregated preferences name unknown item(s) {missing[:3]}")
    rows = []
    for r in aggregated.itertuples(index=False):
        item = key.loc[r.item_id]
        label = r.label
        if not r.decided or label is None or (isinstance(label, float) and math.isnan(label)):
            pref = ""
        elif str(label) == TIE:
            pref = TIE
        elif str(label) == "1":
            pref = item["first_condition"]
        elif str(label) == "2":
            pref = item["second_condition"]
        else:
            raise DataError(f"item {r.item_id}: label {label!r} is not 1, 2 or tie")
        rows.append({
            "item_id": r.item_id, "language": item["language"], "comparison": item["comparison"],
            "preference": pref, "decided": bool(r.decided), "votes": int(r.votes), "n": int(r.n),
            "model": item["model"], "scenario_id": item["scenario_id"], "dimension": item["dimension"],
            "source": source,
        })
    return pd.DataFrame(rows, columns=["item_id", "language", "comparison", "preference", "decided", "votes", "n",
                                       "model", "scenario_id", "dimension", "source"])


def human_validation_round(
    responses: pd.DataFrame,
    scores: pd.DataFrame,
    annotation: dict[str, Any],
    hv: dict[str, Any],
    *,
    seed: int,
    interim: Path,
    reports: Path,
    report_dir: str | Path = "reports/quality",
):
    """Pairwise A-vs-C / B-vs-C preferences from ``annotation.source``, reviewed and aggregated.

    Returns (items, judgements, review, preferences, excluded): ``excluded`` lists the pairs left out
    because of an invalid response (also written to ``excluded_pairs.csv``).  Task files for annotators
    (CSV, Label Studio JSON and labelling config) are written for every source,
    so a real team can take over from a simulated round.
    """
    from dataclasses import replace

    from stereolens.annotation.config import AnnotationConfig
    from stereolens.annotation.round import collect_judgements, review_round
    from stereolens.annotation.tasks import export_tasks

    hv = dict(hv or {})
    known = {"items_per_comparison", "tie_margin", "judgements", "comparisons"}
    unknown = sorted(set(hv) - known)
    if unknown:
        raise ConfigError(f"study.pcs.human_validation: unknown key(s) {unknown} (known: {sorted(known)})")
    # annotation.scale belongs to the Likert studies; a pairwise preference has its own answer scale
    acfg = replace(AnnotationConfig.from_config(annotation), scale=PAIRWISE_SCALE)
    if acfg.source == "llm_panel":
        raise ConfigError("annotation.source=llm_panel is not supported for pcs pairwise preferences yet "
                          "(the judges already are an LLM panel); use annotation=simulated or annotation=human")
    comparisons = tuple(hv.get("comparisons") or ("A-C", "B-C"))
    items = preference_items(
        responses, scores, items_per_comparison=hv.get("items_per_comparison"),
        tie_margin=float(hv.get("tie_margin", 0.0)), seed=seed, comparisons=comparisons,
    )
    excluded = excluded_pairs(responses, scores, comparisons=comparisons)
    write_csv(interim / "excluded_pairs.csv", excluded)
    # the key (which condition is shown where) stays out of the annotators' files
    write_csv(interim / "items.csv", items.drop(columns=["text"]))
    export_tasks(items[list(TASK_COLUMNS)], PAIRWISE_SCALE, INSTRUCTIONS, reports / "tasks", name="pairwise_tasks")
    if acfg.source == "human":
        path = hv.get("judgements")
        if not path or not Path(path).exists():
            raise ConfigError(
                f"annotation.source=human: study.pcs.human_validation.judgements ({path!r}) is not a completed "
                f"judgements CSV (item_id, annotator_id, label) or Label Studio export; the tasks to annotate are in {reports / 'tasks'}"
            )
        judgements = collect_judgements(acfg, items, judgements_path=path)
        judgements["language"] = judgements["item_id"].map(items.set_index("item_id")["language"])
    else:
        # one pool of simulated native speakers per language, as in appendix J
        frames = []
        for i, (lang, group) in enumerate(items.groupby("language", sort=True)):
            sim = replace(acfg, simulator={**acfg.simulator, "seed": int(acfg.simulator.get("seed", 0)) + i})
            judged = collect_judgements(sim, group[["item_id", "truth"]])
            judged["annotator_id"] = lang + "-" + judged["annotator_id"].astype(str)
            frames.append(judged.assign(language=lang))
        judgements = pd.concat(frames, ignore_index=True)
        judgements["source"] = "simulated"
    write_csv(interim / "judgements.csv", judgements)
    review = review_round(judgements, acfg, study="pcs", artefact=str(interim / "judgements.csv"),
                          items=items[["item_id"]], report_dir=report_dir, seed=seed)
    review.write(reports)
    prefs = to_preferences(review.aggregated, items, source=acfg.source)
    write_csv(interim / "preferences.csv", prefs)
    return items, judgements, review, prefs, excluded
