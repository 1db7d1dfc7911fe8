"""Rubric judging of responses (Fifteen Percent Fluency section 3.5, appendix B) and the judge panel's validation.

Two ways a judge scores one response on the four features of its dimension:

* ``json``: a chat request returning ``{"scores": {feature: 1..7}, "rationale":
  "..."}``, validated against a JSON schema; an invalid answer is retried once
  with the validation error in a follow-up turn (a new request, so the cache
  cannot replay the bad answer), and a second failure is recorded as a failed
  judgement (empty score, ``status=failed``, the error text).
* ``logprob``: per feature, the probability-weighted score
  ``sum_k k * p(k) / sum_k p(k)`` over the answers "1".."7", read either from
  the first generated position's top log-probabilities (one forward pass,
  ``logprob_method=top_logprobs``) or from the log-likelihood of each digit as
  a continuation (``logprob_method=loglikelihood``).  This works with base
  models that cannot follow a JSON instruction.

Judges see the neutral scenario (Prompt A text) whatever the condition, so a
judge cannot score the explicit instruction in Prompt B instead of the response.

Panel validation (appendix B.1): construct validity (share of scenario-features
with B above A), inter-judge Krippendorff's alpha (interval), and accuracy on a
synthetic calibration set of contrastive high/low exemplars per feature
(built by :mod:`stereolens.studies.pcs.calibration`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.studies.pcs.scenarios import RubricFeature
from stereolens.errors import ConfigError
from stereolens.models.base import (
    ChatMessage,
    GenerationRequest,
    LanguageModel,
    LoglikelihoodRequest,
)

JudgeMode = Literal["json", "logprob"]
LogprobMethod = Literal["top_logprobs", "loglikelihood"]
SCALE = tuple(range(1, 8))
DIMENSION_NAMES = {
    "PDI": "Power Distance",
    "IDV": "Individualism-Collectivism",
    "UAI": "Uncertainty Avoidance",
}

JUDGE_SYSTEM = (
    "You are an expert rater of cross-cultural pragmatics. You score a response to a scenario on behavioural "
    "features, each on a 1-7 scale with anchors at 1, 4 and 7. Judge only the response's communicative behaviour, "
    "whatever language it is written in. Answer with one JSON object and nothing else."
)


@dataclass(frozen=True)
class JudgeSpec:
    """One panel member: which model, how it scores, and its decoding settings."""

    id: str
    mode: JudgeMode = "logprob"
    logprob_method: LogprobMethod = "top_logprobs"
    top_logprobs: int = 20
    temperature: float = 0.0
    max_tokens: int = 400
    retries: int = 1
    max_response_chars: int = 6000
    # the scenario lengthens every prompt; a CPU run may leave it out of probability-weighted prompts
    include_scenario: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("json", "logprob"):
            raise ConfigError(f"judge {self.id!r}: mode must be json or logprob, got {self.mode!r}")
        if self.logprob_method not in ("top_logprobs", "loglikelihood"):
            raise ConfigError(f"judge {self.id!r}: logprob_method must be top_logprobs or loglikelihood")


@dataclass(frozen=True)
class JudgeItem:
    """A response to score on the features of its dimension."""

    item_id: str
    dimension: str
    scenario: str  # the neutral scenario text the judge sees
    response: str
    features: tuple[RubricFeature, ...]


# ---------------------------------------------------------------- prompts and schema


def rubric_text(features: Sequence[RubricFeature]) -> str:
    lines = []
    for f in features:
        lines.append(f'- "{f.name}" ({f.label}):')
        for level in (1, 4, 7):
            lines.append(f"    {level} = {f.anchors[level]}")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def json_messages(item: JudgeItem, spec: JudgeSpec) -> tuple[ChatMessage, ...]:
    names = ", ".join(f'"{f.name}"' for f in item.features)
    user = (
        f"Dimension: {DIMENSION_NAMES.get(item.dimension, item.dimension)}\n"
        f"Features and anchors:\n{rubric_text(item.features)}\n\n"
        f"Scenario:\n{item.scenario}\n\n"
        f"Response to rate:\n{_clip(item.response, spec.max_response_chars)}\n\n"
        f"Return JSON: {{\"scores\": {{{names}: integers 1-7}}, \"rationale\": \"one or two sentences\"}}"
    )
    return (ChatMessage("system", JUDGE_SYSTEM), ChatMessage("user", user))


def judgement_schema(features: Sequence[RubricFeature]) -> dict[str, Any]:
    """JSON schema of one judgement: every feature scored 1..7, and a non-empty rationale."""
    names = [f.name for f in features]
    return {
        "type": "object",
        "required": ["scores", "rationale"],
        "properties": {
            "scores": {
                "type": "object",
                "required": names,
                "properties": {n: {"type": "integer", "minimum": 1, "maximum": 7} for n in names},
                "additionalProperties": False,
            },
            "rationale": {"type": "string", "minLength": 1},
        },
    }


# appended to the completion-style feature prompt when it goes to a chat model as a user message
CHAT_DIGIT_INSTRUCTION = "\nAnswer with the score only: one digit from 1 to 7."


class JudgementInvalid(ValueError):
    """An answer that is not a judgement matching the schema."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _json_object(text: str) -> Any:
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1)
    start = text.find("{")
    if start < 0:
        raise JudgementInvalid("no JSON object in the answer")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise JudgementInvalid(f"invalid JSON: {exc.msg} at char {exc.pos}") from None
    return obj


def parse_judgement(text: str, features: Sequence[RubricFeature]) -> dict[str, Any]:
    """The validated ``{"scores": {...}, "rationale": str}`` of an answer, or JudgementInvalid."""
    import jsonschema

    obj = _json_object(text)
    # judges often write "5" for 5: accept integral numbers and numeric strings, nothing else
    if isinstance(obj, dict) and isinstance(obj.get("scores"), dict):
        for key, value in list(obj["scores"].items()):
            if isinstance(value, str) and value.strip().isdigit():
                obj["scores"][key] = int(value.strip())
            elif isinstance(value, float) and value.is_integer():
                obj["scores"][key] = int(value)
    try:
        jsonschema.validate(obj, judgement_schema(features))
    except jsonschema.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise JudgementInvalid(f"schema violation at {path}: {exc.message}") from None
    return obj


def feature_prompt(item: JudgeItem, feature: RubricFeature, spec: JudgeSpec) -> str:
    """Completion-style prompt whose next token is the score (for probability-weighted judging)."""
    return (
        f"Rating the communicative behaviour of a response on \"{feature.label}\" "
        f"({DIMENSION_NAMES.get(item.dimension, item.dimension)}), on a scale from 1 to 7.\n"
        f"1 = {feature.anchors[1]}\n4 = {feature.anchors[4]}\n7 = {feature.anchors[7]}\n\n"
        + (f"Scenario: {item.scenario}\n\n" if spec.include_scenario else "")
        + f"Response: {_clip(item.response, spec.max_response_chars)}\n\n"
        f"{feature.label} score (1-7):"
    )


def expected_score(digit_logprobs: dict[int, float]) -> tuple[float, float]:
    """(probability-weighted score, probability mass on the digits) from log-probabilities per digit."""
    if not digit_logprobs:
        return math.nan, 0.0
    levels = np.array(sorted(digit_logprobs), dtype=float)
    lps = np.array([digit_logprobs[int(k)] for k in levels], dtype=float)
    top = lps.max()
    weights = np.exp(lps - top)
    mass = float(np.exp(top) * weights.sum())
    return float((levels * weights).sum() / weights.sum()), mass


def digits_from_top_logprobs(alternatives: dict[str, float]) -> dict[int, float]:
    """Fold the top alternatives onto the digits 1..7 ("5", " 5" and "▁5" are the same answer)."""
    out: dict[int, float] = {}
    for token, lp in alternatives.items():
        key = token.replace("▁", " ").strip()
        if key.isdigit() and int(key) in SCALE and len(key) == 1:
            k = int(key)
            out[k] = float(np.logaddexp(out[k], lp)) if k in out else float(lp)
    return out


# ---------------------------------------------------------------- judging


def _rows_for(item: JudgeItem, judge: str, scores: dict[str, float] | None, *, status: str, rationale: str = "",
              error: str = "", mass: dict[str, float] | None = None) -> list[dict[str, Any]]:
    return [
        {
            "item_id": item.item_id,
            "judge": judge,
            "feature": f.name,
            "score": (scores or {}).get(f.name, math.nan),
            "digit_mass": (mass or {}).get(f.name, math.nan),
            "rationale": rationale,
            "status": status,
            "error": error,
        }
        for f in item.features
    ]


def judge_json(model: LanguageModel, spec: JudgeSpec, items: Sequence[JudgeItem]) -> pd.DataFrame:
    """JSON judgements with schema validation, one retry per invalid answer, failures recorded."""
    def request(messages: tuple[ChatMessage, ...]) -> GenerationRequest:
        return GenerationRequest(messages=messages, temperature=spec.temperature, max_tokens=spec.max_tokens, seed=0)

    conversations = {i: json_messages(item, spec) for i, item in enumerate(items)}
    rows: dict[int, list[dict[str, Any]]] = {}
    pending = list(range(len(items)))
    errors: dict[int, str] = {}
    for attempt in range(spec.retries + 1):
        if not pending:
            break
        answers = model.generate([request(conversations[i]) for i in pending])
        still = []
        for i, answer in zip(pending, answers):
            item = items[i]
            try:
                parsed = parse_judgement(answer.text, item.features)
            except JudgementInvalid as exc:
                errors[i] = str(exc)
                conversations[i] = conversations[i] + (
                    ChatMessage("assistant", answer.text),
                    ChatMessage("user", f"That answer was invalid ({exc}). Reply with only the JSON object."),
                )
                still.append(i)
                continue
            rows[i] = _rows_for(item, spec.id, {k: float(v) for k, v in parsed["scores"].items()},
                                status="ok" if attempt == 0 else "retried", rationale=parsed["rationale"])
        pending = still
    for i in pending:
        rows[i] = _rows_for(items[i], spec.id, None, status="failed", error=errors.get(i, ""))
    return pd.DataFrame([r for i in range(len(items)) for r in rows[i]])


def judge_logprob(model: LanguageModel, spec: JudgeSpec, items: Sequence[JudgeItem]) -> pd.DataFrame:
    """Probability-weighted scores over "1".."7", one prompt per item and feature."""
    pairs = [(item, f) for item in items for f in item.features]
    prompts = [feature_prompt(item, f, spec) for item, f in pairs]
    digit_lps: list[dict[int, float]] = []
    # a model with a chat format is asked as the user, its answer's first token being the score; a base
    # model continues the completion prompt
    chat = model.takes_chat_messages
    if spec.logprob_method == "top_logprobs":
        answers = model.generate(
            [GenerationRequest(messages=(ChatMessage("user", p + CHAT_DIGIT_INSTRUCTION),), max_tokens=1,
                               temperature=0.0, top_logprobs=spec.top_logprobs) if chat
             # the trailing space is its own token before a digit in SentencePiece vocabularies (Gemma: "▁", "5"),
             # so the next position is the digit itself
             else GenerationRequest(prompt=p + " ", max_tokens=1, temperature=0.0, top_logprobs=spec.top_logprobs)
             for p in prompts]
        )
        for ans in answers:
            first = ans.top_logprobs[0] if ans.top_logprobs else {}
            digit_lps.append(digits_from_top_logprobs(first))
    else:
        reqs = [LoglikelihoodRequest(context="", continuation=str(k),
                                     messages=(ChatMessage("user", p + CHAT_DIGIT_INSTRUCTION),)) if chat
                else LoglikelihoodRequest(context=p, continuation=f" {k}") for p in prompts for k in SCALE]
        lls = model.loglikelihood(reqs)
        for j in range(len(prompts)):
            digit_lps.append({k: lls[j * len(SCALE) + idx].logprob for idx, k in enumerate(SCALE)})
    by_item: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    for (item, f), lps in zip(pairs, digit_lps):
        score, mass = expected_score(lps)
        scores, masses = by_item.setdefault(item.item_id, ({}, {}))
        scores[f.name], masses[f.name] = score, mass
    rows = []
    for item in items:
        scores, masses = by_item[item.item_id]
        for row in _rows_for(item, spec.id, scores, status="ok", mass=masses):
            if math.isnan(row["score"]):
                row.update(status="failed", error="no digit 1-7 among the top log-probabilities")
            rows.append(row)
    return pd.DataFrame(rows)


def judge_items(model: LanguageModel, spec: JudgeSpec, items: Sequence[JudgeItem]) -> pd.DataFrame:
    """Score every item with one judge: columns item_id, judge, feature, score, digit_mass, rationale, status, error."""
    if not items:
        return pd.DataFrame(columns=["item_id", "judge", "feature", "score", "digit_mass", "rationale", "status", "error"])
    if spec.mode == "json":
        return judge_json(model, spec, items)
    return judge_logprob(model, spec, items)


# ---------------------------------------------------------------- panel validation


def judge_items_for(responses: pd.DataFrame, bank) -> list[JudgeItem]:
    """One item per response: its dimension, the scenario's neutral prompt (Prompt A) and the rubric's features."""
    neutral = {(r.scenario_id, r.language): r.prompt_a for r in bank.scenarios.itertuples()}
    return [JudgeItem(r.response_id, r.dimension, neutral[(r.scenario_id, r.language)], str(r.response),
                      bank.features(r.dimension))
            for r in responses.itertuples()]


SCORE_COLUMNS = ("model", "language", "scenario_id", "dimension", "feature", "condition", "sample", "judge", "score",
                 "digit_mass", "status", "rationale", "error", "response_id")


def scores_table(judged: Sequence[pd.DataFrame], responses: pd.DataFrame) -> pd.DataFrame:
    """Every judge's feature scores with the response each scores (model, language, scenario, condition, sample)."""
    meta = responses.set_index("response_id")[["model", "language", "scenario_id", "dimension", "condition", "sample"]]
    scores = pd.concat(judged, ignore_index=True).join(meta, on="item_id").rename(columns={"item_id": "response_id"})
    return scores[list(SCORE_COLUMNS)]


def construct_validity(cells: pd.DataFrame) -> dict[str, Any]:
    """Share of scenario-feature cells (judge and sample means) where B scores above A."""
    wide = cells.pivot_table(index=["model", "language", "scenario_id", "feature"], columns="condition",
                             values="score", aggfunc="mean")
    if "A" not in wide.columns or "B" not in wide.columns:
        return {"construct_validity": math.nan, "n": 0}
    wide = wide.dropna(subset=["A", "B"])
    wins = (wide["B"] > wide["A"]).to_numpy()
    return {"construct_validity": float(wins.mean()) if len(wins) else math.nan, "n": int(len(wins))}


def inter_judge_alpha(scores: pd.DataFrame, *, n_boot: int = 200, seed: int = 0) -> dict[str, Any]:
    """Krippendorff's alpha (interval) across judges; units = response x feature."""
    judges = scores["judge"].nunique() if "judge" in scores.columns else 0
    if judges < 2:
        return {"alpha": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_units": 0, "n_judges": int(judges),
                "note": "needs at least two judges"}
    from stereolens.annotation.agreement import krippendorff_alpha

    keys = [c for c in ("model", "language", "scenario_id", "condition", "sample", "feature") if c in scores.columns]
    long = scores.dropna(subset=["score"]).assign(item_id=lambda d: d[keys].astype(str).agg("|".join, axis=1))
    long = long.groupby(["item_id", "judge"], as_index=False)["score"].mean()
    res = krippendorff_alpha(long, "interval", annotator_col="judge", label_col="score", n_boot=n_boot, seed=seed)
    return {"alpha": res.value, "ci_low": res.ci_low, "ci_high": res.ci_high, "n_units": res.n, "n_judges": int(judges)}


def calibration_accuracy(scored: pd.DataFrame) -> dict[str, Any]:
    """Panel accuracy on contrastive pairs: the high exemplar's panel mean must exceed the low one's.

    ``scored``: calibration exemplars with columns pair_id, feature, dimension, pole (high/low), judge, score.
    """
    panel = scored.groupby(["pair_id", "dimension", "feature", "pole"], as_index=False)["score"].mean()
    wide = panel.pivot_table(index=["pair_id", "dimension", "feature"], columns="pole", values="score").reset_index()
    if "high" not in wide.columns or "low" not in wide.columns:
        return {"accuracy": math.nan, "n_pairs": 0, "by_dimension": {}}
    wide = wide.dropna(subset=["high", "low"])
    wide["correct"] = wide["high"] > wide["low"]
    by_dim = {str(d): float(g["correct"].mean()) for d, g in wide.groupby("dimension")}
    per_judge = {}
    if "judge" in scored.columns:
        for judge, g in scored.groupby("judge"):
            w = g.pivot_table(index="pair_id", columns="pole", values="score").dropna()
            if {"high", "low"} <= set(w.columns) and len(w):
                per_judge[str(judge)] = float((w["high"] > w["low"]).mean())
    return {
        "accuracy": float(wide["correct"].mean()) if len(wide) else math.nan,
        "n_pairs": int(len(wide)),
        "by_dimension": by_dim,
        "by_judge": per_judge,
    }


# ---------------------------------------------------------------- calibration set
# (the set itself is built by stereolens.studies.pcs.calibration, a versioned artefact of its own)


def judge_calibration(model: LanguageModel, spec: JudgeSpec, calib: pd.DataFrame,
                      rubrics: dict[str, tuple[RubricFeature, ...]]) -> pd.DataFrame:
    """Score each exemplar on its own feature only."""
    feats = {(f.dimension, f.name): f for fs in rubrics.values() for f in fs}
    items = [
        JudgeItem(f"{r.pair_id}|{r.pole}", r.dimension, r.scenario, r.response, (feats[(r.dimension, r.feature)],))
        for r in calib.itertuples()
    ]
    scored = judge_items(model, spec, items)
    scored[["pair_id", "pole"]] = scored["item_id"].str.split("|", n=1, expand=True)
    meta = calib[["pair_id", "pole", "dimension"]]
    return scored.merge(meta, on=["pair_id", "pole"], how="left")
