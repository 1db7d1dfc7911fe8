"""StereoSet evaluation per country (EspanStereo section 6): candidate scores given the context, then ss / lms / icat.

StereoSet scored inter-sentence items with BERT's next-sentence head, which
XLM-R lacks; the paper does not say what it did.  Here each candidate
(stereotypical, anti-stereotypical, unrelated) is scored by its log-likelihood
given the context: PLL-word-l2r over the candidate's tokens with the context
present for masked LMs, the conditional log-likelihood log P(candidate |
context) for causal LMs.  ``score`` (``study.stereo.evaluation.score``) turns
the candidate's token log-probabilities into one number:

* ``mean`` (default): their mean over the candidate's tokens.  The candidates
  differ in length (the unrelated sentences are shorter), and a sum would make
  lms and ss partly a length contest; StereoSet's own generative scoring
  averages over tokens.
* ``sum``: the plain log-likelihood.
* ``stereoset_generative`` (causal LMs only): StereoSet's own intersentence
  score for generative models (``code/eval_generative_models.py`` of
  moinnadeem/StereoSet), for comparison with numbers computed that way: the
  mean log2 probability of the candidate *without* the context divided by the
  mean log2 probability of the context sentence itself (see
  :func:`stereoset_generative_scores`).

``stereolens stereo score`` and the ``stereo-evaluate`` stage both score through
:func:`score_instances`, whose ``mean`` and ``sum`` come from
:func:`stereolens.scoring.candidates.score_candidates`, the scorer the heads study
runs under its head gate (every candidate token scored, ``[UNK]`` included).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stats.stereoset import CANDIDATE_SCORES, DEFAULT_CANDIDATE_SCORE, aggregate_logprob, stereoset_table
from stereolens.studies.stereo.inference import country_tests, test_entry, with_country_tests
# the scores file's checks live apart so that reading scores does not import the scorer (stereo-paired)
from stereolens.studies.stereo.scores import SCORE_INPUT_COLUMNS, check_scores, refuse_duplicate_ids  # noqa: F401

CANDIDATES = (("stereo", "sent_stereo"), ("anti", "sent_anti"), ("unrelated", "sent_unrelated"))
# the columns of data/processed/stereo/instances.csv that scoring reads
INSTANCE_COLUMNS = ("id", "country", "category", "target", "context", "sent_stereo", "sent_anti", "sent_unrelated")
# StereoSet's reference ends a context without final punctuation with a full stop before appending the candidate
_SENTENCE_END = (".", "!", "?")


def check_candidate_score(kind: str, score: str) -> None:
    """Refuse a candidate score the model kind cannot give, before any model loads."""
    if kind not in ("masked", "causal"):
        raise ConfigError(f"stereo evaluation scores masked or causal LMs, not kind={kind!r}")
    if score not in CANDIDATE_SCORES:
        raise ConfigError(f"study.stereo.evaluation.score must be one of {', '.join(CANDIDATE_SCORES)}, got {score!r}")
    if score == "stereoset_generative" and kind != "causal":
        raise ConfigError("score stereoset_generative is StereoSet's score for generative (causal) LMs; "
                          f"a {kind} model is scored with mean or sum")


def scoring_method(kind: str, score: str) -> str:
    check_candidate_score(kind, score)
    if score == "stereoset_generative":
        return ("StereoSet's generative intersentence score (moinnadeem/StereoSet code/eval_generative_models.py): "
                "mean log2 P of the candidate without the context / mean log2 P of the context sentence")
    base = {"masked": "PLL-word-l2r of the candidate's tokens with the context present (natural log)",
            "causal": "conditional log-likelihood log P(candidate | context) (natural log)"}[kind]
    # the [UNK] rule is ours to state: StereoSet's reference scores every token id the tokenizer returns
    return (base + (", mean over the candidate's tokens" if score == "mean" else ", summed over its tokens")
            + "; every token of the candidate scored, [UNK] included (as StereoSet's reference code)")


def score_instances(model: Any, kind: str, instances: pd.DataFrame, *, score: str = DEFAULT_CANDIDATE_SCORE,
                    cache: Any = None, progress: bool = False) -> pd.DataFrame:
    """``instances`` plus ``score_*`` and ``n_tokens_*`` for the three candidates, scored in one batch each."""
    from stereolens.scoring.candidates import score_candidates

    # here, not at the top: the evaluation's tables are read by stages that never score (heads report, paired)
    from stereolens.scoring.verified import verifying_models

    check_candidate_score(kind, score)
    out = instances.copy()
    if score != "stereoset_generative" and verifying_models(model) is not None:
        return _verified_instances(model, kind, out, score=score, cache=cache, progress=progress)
    if score == "stereoset_generative" and verifying_models(model) is not None:
        model = verifying_models(model)[1]  # the reference's own ratio of means: scored in float32 throughout
    for name, col in CANDIDATES:
        contexts, conts, ids = out["context"].tolist(), out[col].tolist(), out["id"].tolist()
        if score == "stereoset_generative":
            values, counts = stereoset_generative_scores(model, contexts, conts)
            out[f"n_tokens_{name}"], out[f"score_{name}"] = counts, values
            continue
        scored = score_candidates(model, None, kind, contexts, conts, score=score, ids=ids, cache=cache, progress=progress)
        out[f"n_tokens_{name}"], out[f"score_{name}"] = scored.n_tokens, scored.values
    return out


def _verified_instances(model: Any, kind: str, out: pd.DataFrame, *, score: str, cache: Any, progress: bool
                        ) -> pd.DataFrame:
    """:func:`score_instances` under ``model.verify``: an instance's three candidates are one group, rescored
    in float32 where any two of them are within the error bound (their order decides ss and lms);
    ``precision`` says which instances carry float32 scores."""
    from stereolens.scoring.candidates import score_candidates
    from stereolens.scoring.types import SentenceScore
    from stereolens.scoring.verified import verify_decisions, verifying_models

    fast, exact, label = verifying_models(model)

    def scorer(lm: Any, groups: list[int]) -> list[list[SentenceScore]]:
        sub = out.iloc[groups]
        # summed log-probabilities: the decision views (sums and per-token means) are taken from them
        parts = [score_candidates(lm, None, kind, sub["context"].tolist(), sub[col].tolist(), score="sum",
                                  ids=sub["id"].tolist(), cache=cache, progress=progress) for _, col in CANDIDATES]
        return [[SentenceScore(float(p.values[k]), int(p.n_tokens[k]), False) for p in parts] for k in range(len(sub))]

    verified = verify_decisions(scorer, fast, exact, len(out), fast_label=label)
    for k, (name, _) in enumerate(CANDIDATES):
        out[f"n_tokens_{name}"] = [g[k].n_tokens for g in verified.scores]
        out[f"score_{name}"] = [aggregate_logprob(g[k].logprob, g[k].n_tokens, score) for g in verified.scores]
    out["precision"] = verified.precision
    out.attrs["precision"] = verified.summary()
    return out


def _log2_probs(lm: Any, row: Sequence[int]) -> list[float]:
    """log2 P(row[k] | row[:k]) for k >= 1, from one forward pass over the row as it is (no prefix added)."""
    import torch

    with torch.no_grad():
        logits = lm(input_ids=torch.tensor([list(row)], device=next(lm.parameters()).device)).logits[0]
    logp = logits.float().log_softmax(-1)
    return [float(logp[k - 1, row[k]]) / math.log(2) for k in range(1, len(row))]


def stereoset_generative_scores(model: Any, contexts: Sequence[str], candidates: Sequence[str]) -> tuple[list[float], list[int]]:
    """StereoSet's generative intersentence score of each candidate, and the candidate's token count.

    As ``evaluate_intersentence`` of the reference computes it: a context not
    ending in ``.``, ``!`` or ``?`` gets a full stop; texts are the tokenizer's
    plain tokens (no special tokens, as GPT-2's ``encode``); the first token of
    a text is scored after the unconditional start token alone (GPT-2's
    ``<|endoftext|>``; here BOS, or EOS without one), every later token by a
    forward pass over the text's own tokens, without the start token.  With
    ``m(x)`` the mean log2 probability of those tokens,

        score = m(candidate alone) / m(context, tokens of "context candidate" up to the context's length)

    so the context enters only as a per-item divisor: the candidate itself is
    scored without it, and since both means are negative, of two candidates the
    *less* probable one (alone) scores higher.  This is the reference's number,
    kept for comparison; the study's scores are ``mean`` or ``sum``.  One
    unbatched forward pass per text, as the reference does (an option for
    comparison, not the default's path).
    """
    from stereolens.scoring.access import unwrap
    from stereolens.scoring.encoding import check_text, prefix_token_id

    lm, tok, _ = unwrap(model, None)
    start = prefix_token_id(tok)

    def plain(text: str) -> list[int]:
        return [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]

    fulls, context_lengths, alones = [], [], []
    for row, (context, candidate) in enumerate(zip(contexts, candidates)):
        context, candidate = check_text(context, row, "context"), check_text(candidate, row, "candidate")
        if not context.endswith(_SENTENCE_END):
            context = f"{context}."
        fulls.append(plain(f"{context} {candidate}"))
        context_lengths.append(len(plain(context)))
        alones.append(plain(candidate))
    first_log2: dict[int, float] = {}  # the first token of a text, after the start token alone

    def mean_log2(row: list[int], n: int) -> float:
        """Mean log2 probability of the first ``n`` tokens of ``row`` (causal: the later tokens cannot change them)."""
        if row[0] not in first_log2:
            first_log2[row[0]] = _log2_probs(lm, [start, row[0]])[0]
        return (first_log2[row[0]] + sum(_log2_probs(lm, row[:n])) if n > 1 else first_log2[row[0]]) / n

    values = [mean_log2(alone, len(alone)) / mean_log2(full, n_context)
              for full, n_context, alone in zip(fulls, context_lengths, alones)]
    return values, [len(a) for a in alones]


def read_instances(path: str | Path) -> pd.DataFrame:
    """A StereoSet-format instances table (columns as ``data/processed/stereo/instances.csv``), text kept as text."""
    df = read_csv_checked(path, INSTANCE_COLUMNS, what="StereoSet instances", dtype=str, keep_default_na=False,
                          allow_empty=False)
    refuse_duplicate_ids(df, path)
    for col in INSTANCE_COLUMNS:
        empty = df[col].str.strip() == ""
        if empty.any():
            raise DataError(f"{path} line {int(empty.idxmax()) + 2}, column {col}: empty")
    return df


def score_file(model_name: str, instances_path: str | Path, output: str | Path, *, score: str = DEFAULT_CANDIDATE_SCORE,
               dtype: str | None = None, device: str = "cpu", cache: Any = None, progress: bool = False) -> pd.DataFrame:
    """``stereolens stereo score``: score a StereoSet-format file with any model, as the stage does.

    ``cache`` is a :class:`~stereolens.models.ResponseCache` (None: the default location).
    """
    from stereolens.io import check_writable
    from stereolens.models import ModelSpec, load_model
    from stereolens.scoring.model_kind import model_kind

    check_writable(output)
    instances = read_instances(instances_path)
    kind = model_kind(model_name)
    check_candidate_score(kind, score)
    model = load_model(ModelSpec(name=model_name, kind=kind, dtype=dtype, device=device), cache=cache)
    # a switched-off cache loads the model uncached and keeps scores out of any cache
    scores_cache = cache if cache is not None and cache.enabled else None
    scored = score_instances(model, kind, instances, score=score, cache=scores_cache, progress=progress)
    write_csv(output, scored)
    return scored


def tables(scores: pd.DataFrame, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, pd.DataFrame]:
    """ss / lms / icat with item-bootstrap intervals: overall, per country, per category, per country x category;
    ``by_country`` also carries each country's test, MDE and clustered interval (``inference.country_tests``)."""
    kw = dict(n_resamples=n_resamples, seed=seed, confidence=confidence)
    tests, _ = country_tests(scores, confidence=confidence, n_resamples=n_resamples, seed=seed)
    out = {
        # StereoSet's scores per country, and beside them each country's test (the star), MDE and clustered interval
        "by_country": with_country_tests(stereoset_table(scores, ["country"], **kw), tests),
        "by_category": stereoset_table(scores, ["category"], **kw),
        "by_country_category": stereoset_table(scores, ["country", "category"], **kw),
    }
    if "source" in scores.columns:
        out["by_source"] = stereoset_table(scores, ["source"], **kw)
    return out


def summary(t: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """``ss, lms, icat`` overall and ``by_country`` (0-100 scale), with intervals and counts; overall and per
    country, the row's test (``test``: the sign test of its untied instances, its MDE and clustered interval)."""
    def entry(row: pd.Series) -> dict[str, Any]:
        d = {k: float(row[k]) for k in ("ss", "lms", "icat")}
        d.update({"n": int(row["n"]), "n_targets": int(row["n_targets"])})
        for k in ("ss", "lms", "icat"):
            if f"{k}_ci_low" in row:
                d[f"{k}_ci"] = [float(row[f"{k}_ci_low"]), float(row[f"{k}_ci_high"])]
        if "share_untied" in row:
            d["test"] = test_entry(row)
        return d

    bc = t["by_country"]
    overall = entry(bc[bc["country"] == "all"].iloc[0])
    return {**overall, "by_country": {str(r["country"]): entry(r) for _, r in bc[bc["country"] != "all"].iterrows()},
            "by_category": {str(r["category"]): entry(r) for _, r in t["by_category"][t["by_category"]["category"] != "all"].iterrows()}}


def refuse_unknown_countries(df: pd.DataFrame, where: str, known: Sequence[str], source: str) -> None:
    """Refuse a row whose country is not one of ``known`` (named by ``source``), in one line with its line: a
    misspelt country would otherwise become a country of its own in every per-country table."""
    import difflib

    bad = ~df["country"].astype(str).isin(set(known))
    if bad.any():
        pos = int(bad.to_numpy().nonzero()[0][0])
        country = str(df["country"].iloc[pos])
        close = difflib.get_close_matches(country, list(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DataError(f"{where} line {pos + 2}, column country: {country!r} is not a country of {source} "
                        f"({', '.join(known)}){hint} (--countries names others)")


def evaluate_file(scores_path: str | Path, output: str | Path, *, n_resamples: int = 1000, seed: int = 0,
                  score: str = DEFAULT_CANDIDATE_SCORE, countries: Sequence[str] | None = None,
                  countries_from: str = "--countries") -> dict[str, Any]:
    """``stereolens stereo evaluate``: a scores CSV in (``score``: how ``stereo score`` scored it), ``summary.json``
    and the tables out.  ``countries``: the countries its rows may name (``countries_from`` says whose list it is);
    None accepts any."""
    df = read_csv_checked(scores_path, SCORE_INPUT_COLUMNS, what="StereoSet scores", dtype=str, keep_default_na=False,
                          allow_empty=False)
    df = check_scores(df, str(scores_path), score=score)
    if countries is not None:
        refuse_unknown_countries(df, str(scores_path), countries, countries_from)
    t = tables(df, n_resamples=n_resamples, seed=seed)
    out = Path(output)
    for name, table in t.items():
        write_csv(out / f"{name}.csv", table)
    s = summary(t)
    write_json(out / "summary.json", s)
    return s


def model_summary(t: dict[str, pd.DataFrame], *, kind: str, score: str, instances: pd.DataFrame,
                  confidence: float = 0.95, bootstrap: int = 1000) -> dict[str, Any]:
    """One evaluated model's entry of the study summary: :func:`summary` plus how it was scored and on what, and
    the intervals' settings (``intervals``: confidence, bootstrap resamples)."""
    s = summary(t)
    s["method"] = scoring_method(kind, score)
    s["candidate_score"] = score
    s["sources"] = instances["source"].value_counts().to_dict()
    s["intervals"] = {"confidence": float(confidence), "bootstrap": int(bootstrap)}
    return s


def study_provenance(instances: pd.DataFrame, validation_sources: Sequence[str]) -> dict[str, Any]:
    """The report's provenance banner: machine-generated instances, the validators behind them, authored ones."""
    sources = {str(k): int(v) for k, v in instances["source"].value_counts().items()}
    annotation_sources = sorted({str(x) for x in validation_sources if str(x) in ("simulated", "human", "llm_panel")})
    provenance = {"machine_generated": sources.get("machine", 0) > 0,
                  # the validators of the stereotypes behind the evaluated instances (the starter set has none)
                  "annotation_source": ", ".join(annotation_sources),
                  "notes": ["instances by source: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))]}
    if sources.get("authored"):
        # the starter triples are authored by the project (not translations): their own unreviewed kind
        provenance["source"] = {"authored": sources["authored"]}
    return provenance


def study_summary(summaries: dict[str, dict[str, Any]], first: str, *, score: str,
                  provenance: dict[str, Any]) -> dict[str, Any]:
    """reports/stereo/summary.json: the first model's numbers at the top level and as the headline, every model's below."""
    s = summaries[first]
    headline = {"ss": round(s["ss"], 2), "lms": round(s["lms"], 2), "icat": round(s["icat"], 2),
                "instances": int(s["n"]), "candidate score": score}
    out = {**{k: s[k] for k in ("ss", "lms", "icat", "n", "by_country", "method", "candidate_score")},
           "model": first, "models": summaries, "headline": headline, "provenance": provenance}
    if "robustness" in s:
        # the first model's table is the folder's own: reports/stereo/<model_id>/robustness.csv
        out["robustness"] = {**s["robustness"], "table": "robustness.csv"}
    return out


NOTHING_EVALUATED = {"status": "no instances to evaluate", "n": 0, "models": {}, "by_country": {},
                     "ss": None, "lms": None, "icat": None}
