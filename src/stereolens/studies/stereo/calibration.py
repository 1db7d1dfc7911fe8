"""A labelled calibration set for the overlap's "same meaning" threshold, and the threshold picked on it.

The paper does not say when two stereotypes are "the same"; the similarity
models give a score and the threshold turns it into a decision.  Instead of
guessing the threshold we pick it on pairs whose answer we know, built from
material already in the repository:

* ``pcs-translation`` (positive): one pcs scenario (``data/seed/pcs``, Prompt A,
  the neutral dilemma) in two of its five languages (en, de, hi, ne, ur);
  every scenario, every language pair.  The translations are authored (see
  the pcs seed README), not machine output.
* ``pcs-same-dimension`` (negative): for each positive, the same two languages
  but the second side replaced by a different scenario of the same cultural
  dimension (drawn with the seed), so negatives mirror the positives'
  language mix and share their topic and closing question.
* ``crows-same-category`` (negative, English): two different CrowS-Pairs
  stereotypes (``sent_more``) of one bias type: what the CrowS-Pairs overlap
  compares a stereotype with.
* ``crows-minimal-pair`` (negative, English): a CrowS-Pairs ``sent_more`` and
  its ``sent_less``, the same sentence about another group: a near-miss that
  any meaning model scores high.

The threshold rule: the score that maximises F1 (a pair is "present" when its
score >= the threshold); among equal F1 the highest threshold (fewer false
"present").  Precision and recall at the chosen threshold are reported with it,
and the overlap stage reports them at whatever threshold it runs with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.stereo.overlap import CROWS_CATEGORIES

PAIR_COLUMNS = ["pair_id", "source", "label", "language_a", "language_b", "item_a", "item_b", "text_a", "text_b"]
RULE = "max F1 over thresholds at the observed scores (present when score >= threshold); ties: the highest threshold"


@dataclass(frozen=True)
class CalibrationText:
    """One side of a calibration pair as the similarity models read it (see ``similarity.StatementPair``)."""

    stereotype: str
    category: str = ""
    target: str = ""


def pcs_pairs(scenarios: pd.DataFrame, *, seed: int) -> pd.DataFrame:
    """Translation positives and same-dimension negatives (one per positive, same language pair) from the pcs bank."""
    need = {"scenario_id", "dimension", "language", "prompt_a"}
    if missing := need - set(scenarios.columns):
        raise DataError(f"pcs scenario bank lacks columns {sorted(missing)}")
    text = {(r.scenario_id, r.language): r.prompt_a for r in scenarios.itertuples(index=False)}
    dimension = dict(zip(scenarios["scenario_id"], scenarios["dimension"]))
    by_dimension = {d: sorted(g["scenario_id"].unique()) for d, g in scenarios.groupby("dimension")}
    languages = sorted(scenarios["language"].unique())
    rng = np.random.default_rng(seed)
    rows = []
    for sid in sorted(dimension):
        others = [o for o in by_dimension[dimension[sid]] if o != sid]
        for la, lb in combinations(languages, 2):
            if (sid, la) not in text or (sid, lb) not in text:
                continue
            rows.append(("pcs-translation", 1, la, lb, sid, sid, text[(sid, la)], text[(sid, lb)]))
            other = others[int(rng.integers(len(others)))] if others else None
            if other is not None and (other, lb) in text:
                rows.append(("pcs-same-dimension", 0, la, lb, sid, other, text[(sid, la)], text[(other, lb)]))
    return pd.DataFrame(rows, columns=PAIR_COLUMNS[1:])


def crows_pairs(crows: pd.DataFrame, *, n_per_source: int, seed: int) -> pd.DataFrame:
    """English negatives from CrowS-Pairs: minimal pairs and two stereotypes of one bias type (``n_per_source`` each)."""
    df = crows[crows["bias_type"].isin(CROWS_CATEGORIES)].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    rows = []
    picked = rng.choice(len(df), size=min(n_per_source, len(df)), replace=False) if len(df) else []
    for i in sorted(int(i) for i in picked):
        r = df.iloc[i]
        rows.append(("crows-minimal-pair", 0, "en", "en", f"crows-{r['row']}", f"crows-{r['row']}-less",
                     str(r["sent_more"]), str(r["sent_less"])))
    groups = [g.index.to_numpy() for _, g in df.groupby("bias_type", sort=True) if len(g) > 1]
    weights = np.array([len(g) for g in groups], dtype=float)
    seen = set()
    while groups and len(seen) < n_per_source:
        g = groups[int(rng.choice(len(groups), p=weights / weights.sum()))]
        i, j = sorted(int(x) for x in rng.choice(g, size=2, replace=False))
        if (i, j) in seen:
            continue
        seen.add((i, j))
    for i, j in sorted(seen):
        a, b = df.iloc[i], df.iloc[j]
        rows.append(("crows-same-category", 0, "en", "en", f"crows-{a['row']}", f"crows-{b['row']}",
                     str(a["sent_more"]), str(b["sent_more"])))
    return pd.DataFrame(rows, columns=PAIR_COLUMNS[1:])


def load_crows_rows(path: str | Path) -> pd.DataFrame:
    """CrowS-Pairs with its row number (the unnamed first column, else the position) kept as ``row``."""
    df = read_csv_checked(path, ["sent_more", "sent_less", "bias_type"], what="CrowS-Pairs")
    first = df.columns[0]
    rows = df[first] if str(first).startswith("Unnamed") or first == "" else pd.Series(range(len(df)))
    return df.assign(row=rows.astype(int).to_numpy())


def build_calibration_set(scenarios: pd.DataFrame, crows: pd.DataFrame | None, *, n_crows: int, seed: int) -> pd.DataFrame:
    """The labelled pairs (``PAIR_COLUMNS``); without CrowS-Pairs only the pcs part."""
    parts = [pcs_pairs(scenarios, seed=seed)]
    if crows is not None:
        parts.append(crows_pairs(crows, n_per_source=n_crows, seed=seed))
    out = pd.concat(parts, ignore_index=True)
    out.insert(0, "pair_id", [f"cal-{i:04d}" for i in range(len(out))])
    return out[PAIR_COLUMNS]


def score_pairs(model: Any, pairs: pd.DataFrame) -> list[float]:
    """The similarity model's score for every calibration pair (texts only: no category or target to match)."""
    sides = [(CalibrationText(a), CalibrationText(b)) for a, b in zip(pairs["text_a"], pairs["text_b"])]
    return [float(s) for s in model.scores(sides)]


@dataclass(frozen=True)
class Operating:
    """The decision "score >= threshold" on the calibration set."""

    threshold: float
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int
    tn: int


def operating_point(scores: Sequence[float], labels: Sequence[int], threshold: float) -> Operating:
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int).astype(bool)
    pred = s >= threshold
    tp, fp = int((pred & y).sum()), int((pred & ~y).sum())
    fn, tn = int((~pred & y).sum()), int((~pred & ~y).sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return Operating(float(threshold), precision, recall, f1, tp, fp, fn, tn)


def pick_threshold(scores: Sequence[float], labels: Sequence[int]) -> Operating:
    """The threshold of :data:`RULE` (candidates: every observed score)."""
    if not any(labels):
        raise DataError("calibration set has no positive pair: no threshold can be picked")
    points = [operating_point(scores, labels, t) for t in sorted(set(float(s) for s in scores), reverse=True)]
    return max(points, key=lambda p: (p.f1, p.threshold))


def by_source(scores: Sequence[float], pairs: pd.DataFrame, threshold: float) -> dict[str, dict[str, Any]]:
    """Per part of the set: its size and the share the threshold calls "present" (the recall of a
    positive part, the false-positive rate of a negative one)."""
    s = np.asarray(scores, dtype=float)
    out = {}
    for source, idx in pairs.groupby("source", sort=True).indices.items():
        present = s[idx] >= threshold
        out[source] = {"label": int(pairs["label"].iloc[idx[0]]), "n": int(len(idx)),
                       "share_present": float(present.mean()), "median_score": float(np.median(s[idx]))}
    return out


def calibration_key(model: Any) -> str:
    """The column of a similarity model in the scored calibration pairs: ``lexical``, ``offline-<encoder>``,
    ``embedding-<model label>``."""
    described = model.describe()
    if model.method == "offline":
        return f"offline-{described['encoder']}"
    if model.method == "embedding":
        return f"embedding-{described['model']}"
    return model.method


def calibrate(pairs: pd.DataFrame, models: Sequence[Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every model's score on every pair (one column per :func:`calibration_key`) and, per model, the
    threshold of :data:`RULE` with its precision, recall and per-part shares."""
    scored = pairs.copy()
    methods = {}
    for model in models:
        key = calibration_key(model)
        scores = score_pairs(model, pairs)
        scored[key] = scores
        chosen = pick_threshold(scores, pairs["label"].tolist())
        methods[key] = {"similarity": model.describe(), "chosen": asdict(chosen),
                        "by_source": by_source(scores, pairs, chosen.threshold)}
    parts = pairs.groupby("source", sort=True)["label"].agg(["size", "first"])
    summary = {"rule": RULE, "n_pairs": len(pairs), "n_positive": int(pairs["label"].sum()),
               "sources": {s: {"n": int(r["size"]), "label": int(r["first"])} for s, r in parts.iterrows()},
               "methods": methods}
    return scored, summary


def operating_at(scored: pd.DataFrame, key: str, threshold: float) -> Operating | None:
    """Precision and recall on the calibration set of the model ``key`` at ``threshold``; None when the set
    was not scored with that model."""
    if key not in scored.columns:
        return None
    return operating_point(scored[key].astype(float).tolist(), scored["label"].astype(int).tolist(), threshold)
