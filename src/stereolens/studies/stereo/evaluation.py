"""StereoSet evaluation per country (seed 003 section 6): candidate scores given the context, then ss / lms / icat.

StereoSet scored inter-sentence items with BERT's next-sentence head, which
XLM-R lacks; the paper does not say what it did.  Here each candidate
(stereotypical, anti-stereotypical, unrelated) is scored by its
log-likelihood given the context: PLL-word-l2r over the candidate's tokens
with the context present for masked LMs, the conditional log-likelihood
log P(candidate | context) for causal LMs.  ``per_token`` divides each score
by the candidate's token count (StereoSet's own causal scoring averages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stats.stereoset import stereoset_table

SCORE_INPUT_COLUMNS = ("id", "country", "category", "target", "score_stereo", "score_anti", "score_unrelated")
CANDIDATES = (("stereo", "sent_stereo"), ("anti", "sent_anti"), ("unrelated", "sent_unrelated"))


def scoring_method(kind: str, *, per_token: bool) -> str:
    base = {"masked": "PLL-word-l2r of the candidate's tokens with the context present (natural log)",
            "causal": "conditional log-likelihood log P(candidate | context) (natural log)"}
    if kind not in base:
        raise ConfigError(f"stereo evaluation scores masked or causal LMs, not kind={kind!r}")
    return base[kind] + (", divided by the candidate's token count" if per_token else ", summed over its tokens")


def score_instances(model: Any, kind: str, instances: pd.DataFrame, *, per_token: bool = False, cache: Any = None,
                    progress: bool = False) -> pd.DataFrame:
    """``instances`` plus ``score_*`` and ``n_tokens_*`` for the three candidates, scored in one batch each."""
    from stereolens.scoring import score_continuations, score_masked_continuations

    out = instances.copy()
    for name, col in CANDIDATES:
        contexts, conts, ids = out["context"].tolist(), out[col].tolist(), out["id"].tolist()
        if kind == "masked":
            scores = score_masked_continuations(model, None, contexts, conts, "pll_word_l2r", ids=ids, cache=cache, progress=progress)
        elif kind == "causal":
            scores = score_continuations(model, None, contexts, [" " + c for c in conts], ids=ids, cache=cache, progress=progress)
        else:
            raise ConfigError(f"stereo evaluation scores masked or causal LMs, not kind={kind!r}")
        out[f"n_tokens_{name}"] = [s.n_tokens for s in scores]
        out[f"score_{name}"] = [s.logprob / s.n_tokens if per_token else s.logprob for s in scores]
    return out


def check_scores(df: pd.DataFrame, where: str) -> pd.DataFrame:
    for col in ("score_stereo", "score_anti", "score_unrelated"):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna()
        if bad.any():
            raise DataError(f"{where} line {int(bad.idxmax()) + 2}, column {col}: {df.at[bad.idxmax(), col]!r} is not a number")
        df[col] = values
    for col in ("id", "country", "category", "target"):
        bad = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if bad.any():
            raise DataError(f"{where} line {int(bad.idxmax()) + 2}, column {col}: empty")
    return df


def tables(scores: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, pd.DataFrame]:
    """ss / lms / icat with item-bootstrap intervals: overall, per country, per category, per country x category."""
    kw = dict(n_resamples=n_resamples, seed=seed, confidence=confidence)
    out = {
        "by_country": stereoset_table(scores, ["country"], **kw),
        "by_category": stereoset_table(scores, ["category"], **kw),
        "by_country_category": stereoset_table(scores, ["country", "category"], **kw),
    }
    if "source" in scores.columns:
        out["by_source"] = stereoset_table(scores, ["source"], **kw)
    return out


def summary(t: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """``ss, lms, icat`` overall and ``by_country`` (0-100 scale), with intervals and counts."""
    def entry(row: pd.Series) -> dict[str, Any]:
        d = {k: float(row[k]) for k in ("ss", "lms", "icat")}
        d.update({"n": int(row["n"]), "n_targets": int(row["n_targets"])})
        for k in ("ss", "lms", "icat"):
            if f"{k}_ci_low" in row:
                d[f"{k}_ci"] = [float(row[f"{k}_ci_low"]), float(row[f"{k}_ci_high"])]
        return d

    bc = t["by_country"]
    overall = entry(bc[bc["country"] == "all"].iloc[0])
    return {**overall, "by_country": {str(r["country"]): entry(r) for _, r in bc[bc["country"] != "all"].iterrows()},
            "by_category": {str(r["category"]): entry(r) for _, r in t["by_category"][t["by_category"]["category"] != "all"].iterrows()}}


def evaluate_file(scores_path: str | Path, output: str | Path, *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``stereolens stereo evaluate``: a scores CSV in, ``summary.json`` and the tables out."""
    df = read_csv_checked(scores_path, SCORE_INPUT_COLUMNS, what="StereoSet scores", dtype={"id": str, "country": str, "category": str, "target": str})
    df = check_scores(df, str(scores_path))
    t = tables(df, n_resamples=n_resamples, seed=seed)
    out = Path(output)
    for name, table in t.items():
        write_csv(out / f"{name}.csv", table)
    s = summary(t)
    write_json(out / "summary.json", s)
    return s
