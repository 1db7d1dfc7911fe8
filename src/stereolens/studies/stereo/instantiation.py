"""Instantiation (EspanStereo sections 3.3, 4.4, appendix G): StereoSet inter-sentence triples per stereotype.

Triples (context, stereotypical, anti-stereotypical) come from the generator
(the Figure G1 conversation; ``source=machine``), from annotators (an import
that records the paper's two-stage review: survey distributor, then authors;
``source=human``) or from the authored starter set (``source=authored``).
Each triple gets one irrelevant sentence from a corpus in the language that
shares no content word with the context (our criterion; the paper drew them
from the Spanish Billion Words Corpus and states none).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError
from stereolens.io import read_csv_checked
from stereolens.studies.stereo.prompts import PromptSet
from stereolens.studies.stereo.text import content_words, fold, load_stopwords

INSTANCE_COLUMNS = ("id", "country", "category", "target", "stereotype_id", "context", "sent_stereo", "sent_anti",
                    "sent_unrelated", "source")
SOURCES = ("machine", "human", "authored")
REVIEW_VALUES = ("accepted", "rejected")
_LETTER = re.compile(r"[^\W\d_]")
_LABELLED = re.compile(r"^\s*(?:\d+[.)]\s*)?[-*•]?\s*\**\s*([^:*]{3,40}?)\s*\**\s*:\s*\**\s*(.+?)\s*$")


# ---------------------------------------------------------------- generator


def parse_triples(text: str, labels: dict[str, Sequence[str]]) -> list[tuple[str, str, str]]:
    """Complete (context, stereo, anti) triples from labelled lines, in order.

    Incomplete triples, triples with a sentence without a letter (an echoed "...") and triples whose
    stereotypical and anti-stereotypical sentences are equal are dropped.
    """
    which = {fold(lab): part for part, labs in labels.items() for lab in labs}
    triples, current = [], {}
    for line in str(text).splitlines():
        m = _LABELLED.match(line)
        if not m:
            continue
        part = which.get(fold(m.group(1)).strip())
        if part is None:
            continue
        if part == "context":
            current = {}
        current[part] = m.group(2).strip().strip('"“”')
        if all(k in current for k in ("context", "stereo", "anti")):
            triple = (current["context"], current["stereo"], current["anti"])
            # a base model often echoes the format ("Contexto: ...") or repeats one sentence: not a triple
            if all(_LETTER.search(t) for t in triple) and triple[1] != triple[2]:
                triples.append(triple)
            current = {}
    return triples


@dataclass(frozen=True)
class InstantiationSettings:
    per_stereotype: int = 5
    max_tokens: int = 256
    intro_max_tokens: int = 48
    temperature: float = 0.0
    seed: int = 0
    stop: tuple[str, ...] = ()


def generate_triples(model: Any, prompts: PromptSet, stereotypes: pd.DataFrame, s: InstantiationSettings,
                     *, progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Generated triples (``source=machine``) and the raw responses, one model call per stereotype (batched)."""
    from stereolens.models import ChatMessage, GenerationRequest

    intro: list[Any] = []
    for turn in prompts.instantiation[:-1]:
        intro.append(ChatMessage("user", turn.format(n_examples=s.per_stereotype)))
        req = GenerationRequest(messages=tuple(intro), max_tokens=s.intro_max_tokens, temperature=0.0, seed=s.seed, stop=s.stop)
        intro.append(ChatMessage("assistant", model.generate([req])[0].text.strip()))
    reqs = []
    for r in stereotypes.itertuples(index=False):
        examples = "\n".join(f"- {e}" for e in json.loads(r.examples)[:3])
        last = prompts.instantiation[-1].format(stereotype=r.stereotype, examples=examples, n_examples=s.per_stereotype)
        reqs.append(GenerationRequest(messages=(*intro, ChatMessage("user", last)), max_tokens=s.max_tokens,
                                      temperature=s.temperature, seed=s.seed, stop=s.stop))
    gens = model.generate(reqs) if reqs else []
    triples, raw = [], []
    for r, gen in zip(stereotypes.itertuples(index=False), gens):
        parsed = parse_triples(gen.text, prompts.instance_labels)[: s.per_stereotype]
        raw.append({"stereotype_id": r.stereotype_id, "response": gen.text, "n_triples": len(parsed), "cached": gen.cached})
        for j, (ctx, st, an) in enumerate(parsed, 1):
            triples.append({"id": f"{r.stereotype_id}-m{j}", "country": r.country, "category": r.category, "target": r.target,
                            "stereotype_id": r.stereotype_id, "context": ctx, "sent_stereo": st, "sent_anti": an,
                            "source": "machine", "review": "none (machine)"})
    return pd.DataFrame(triples), pd.DataFrame(raw, columns=["stereotype_id", "response", "n_triples", "cached"])


# ---------------------------------------------------------------- annotators and the starter set


def load_instantiation_annotators(triples_path: str | Path, triples: pd.DataFrame,
                                  annotators_path: str | Path | None) -> pd.DataFrame:
    """Demographics of the annotators who wrote triples: a separate table (``annotator_id, country, <demographics>``)
    or the same columns in the triples file (one set of values per annotator), checked by the same schema."""
    from stereolens.studies.stereo.validation import DEMOGRAPHIC_COLUMNS, annotators_schema
    from stereolens.tables import read_table, validate_table

    schema = annotators_schema("country", what="instantiation annotator")
    if annotators_path:
        return read_table(annotators_path, schema, what="instantiation annotators", allow_empty=False)
    inline = ["country", *DEMOGRAPHIC_COLUMNS]
    missing = [c for c in inline if c not in triples.columns]
    if missing:
        raise DataError(f"{triples_path} line 1: no annotator demographics (missing column(s) {', '.join(missing)}); add them, "
                        "or set study.stereo.instantiation.annotators to a CSV annotator_id,country,"
                        + ",".join(DEMOGRAPHIC_COLUMNS))
    # inline, an annotator's row repeats once per triple: unique per annotator, not per row
    per = validate_table(triples[["annotator_id", *inline]], schema.update_column("annotator_id", unique=False),
                         f"instantiation import {triples_path}")
    first = per.drop_duplicates("annotator_id", keep="first").set_index("annotator_id")
    for pos, row in per.iterrows():
        for col in inline:
            if str(row[col]) != str(first.at[row["annotator_id"], col]):
                raise DataError(f"{triples_path} line {pos + 2}, column {col}: annotator {row['annotator_id']!r} has "
                                f"{row[col]!r} here but {first.at[row['annotator_id'], col]!r} on an earlier line")
    return first.reset_index()


def import_human_triples(path: str | Path, stereotypes: pd.DataFrame, annotators_path: str | Path | None = None
                         ) -> tuple[pd.DataFrame, dict[str, int], pd.DataFrame]:
    """Annotator triples with the two-stage review, and the demographics of their annotators.

    Only rows accepted by distributor and authors are kept.  Every annotator needs demographics (a separate table or
    columns of the same file) from the country of the stereotypes they instantiate.
    """
    cols = ["stereotype_id", "annotator_id", "context", "sent_stereo", "sent_anti", "distributor_review", "author_review"]
    df = read_csv_checked(path, cols, what="instantiation import", dtype=str)
    known = stereotypes.set_index("stereotype_id")
    for pos, row in df.iterrows():
        line = pos + 2
        if row["stereotype_id"] not in known.index:
            raise DataError(f"{path} line {line}, column stereotype_id: {row['stereotype_id']!r} is not a validated stereotype")
        for col in ("distributor_review", "author_review"):
            if str(row[col]).strip().lower() not in REVIEW_VALUES:
                raise DataError(f"{path} line {line}, column {col}: {row[col]!r} is not one of {REVIEW_VALUES}")
        for col in ("context", "sent_stereo", "sent_anti"):
            if not isinstance(row[col], str) or not row[col].strip():
                raise DataError(f"{path} line {line}, column {col}: empty sentence")
        # the same sentence on both sides is no choice: the tie would count as an anti-stereotypical preference
        # (StereoSet's ss) without the model preferring anything
        if " ".join(row["sent_stereo"].split()) == " ".join(row["sent_anti"].split()):
            raise DataError(f"{path} line {line}, column sent_anti: the same sentence as sent_stereo (a triple needs a "
                            "stereotypical and an anti-stereotypical sentence that differ)")
    # the same triple submitted twice would count (and be evaluated) twice
    triple = ["stereotype_id", "context", "sent_stereo", "sent_anti"]
    normalised = df[triple].apply(lambda col: col.str.strip())
    repeated = normalised.duplicated()
    if repeated.any():
        pos = int(repeated.to_numpy().nonzero()[0][0])
        first = int((normalised == normalised.iloc[pos]).all(axis=1).to_numpy().nonzero()[0][0])
        raise DataError(f"{path} line {pos + 2}: the same triple (stereotype_id, context, sent_stereo, sent_anti) "
                        f"as line {first + 2}")
    annotators = load_instantiation_annotators(path, df, annotators_path)
    country_of = annotators.set_index("annotator_id")["country"]
    for pos, row in df.iterrows():
        if row["annotator_id"] not in country_of.index:
            raise DataError(f"{path} line {pos + 2}, column annotator_id: {row['annotator_id']!r} is not in {annotators_path}")
        if country_of[row["annotator_id"]] != known.at[row["stereotype_id"], "country"]:
            raise DataError(f"{path} line {pos + 2}, column annotator_id: annotator {row['annotator_id']!r} is from "
                            f"{country_of[row['annotator_id']]!r}, stereotype {row['stereotype_id']!r} from "
                            f"{known.at[row['stereotype_id'], 'country']!r} (instantiation annotators are in-country)")
    dist = df["distributor_review"].str.strip().str.lower() == "accepted"
    auth = df["author_review"].str.strip().str.lower() == "accepted"
    counts = {"submitted": len(df), "accepted_by_distributor": int(dist.sum()), "accepted_by_authors": int((dist & auth).sum())}
    kept = df[dist & auth].copy()
    kept["n"] = kept.groupby("stereotype_id").cumcount() + 1
    out = pd.DataFrame({
        "id": kept["stereotype_id"] + "-h" + kept["n"].astype(str),
        "country": kept["stereotype_id"].map(known["country"]), "category": kept["stereotype_id"].map(known["category"]),
        "target": kept["stereotype_id"].map(known["target"]), "stereotype_id": kept["stereotype_id"],
        "context": kept["context"], "sent_stereo": kept["sent_stereo"], "sent_anti": kept["sent_anti"], "source": "human",
        "review": "distributor+authors accepted",
    })
    # the panel of an instantiation annotator is the country x category of the stereotypes they wrote for (Tables D shape)
    wrote = df.assign(category=df["stereotype_id"].map(known["category"]))[["annotator_id", "category"]].drop_duplicates()
    annotators = annotators.merge(wrote, on="annotator_id", how="inner")
    annotators["panel"] = annotators["country"] + "/" + annotators["category"]
    annotators["source"] = "human"
    return out, counts, annotators


def load_starter(path: str | Path) -> pd.DataFrame:
    cols = ["id", "country", "category", "target", "stereotype", "context", "sent_stereo", "sent_anti", "source"]
    df = read_csv_checked(path, cols, what="starter instances", dtype=str)
    bad = df[cols].isna().any(axis=1)
    if bad.any():
        pos = int(bad.idxmax())
        col = next(c for c in cols if pd.isna(df.at[pos, c]))
        raise DataError(f"{path} line {pos + 2}, column {col}: empty")
    wrong = df["source"] != "authored"
    if wrong.any():
        pos = int(wrong.idxmax())
        raise DataError(f"{path} line {pos + 2}, column source: starter instances are 'authored', got {df.at[pos, 'source']!r}")
    out = df.copy()
    out["stereotype_id"] = "starter-" + out["id"]
    out["id"] = "starter-" + out["id"]
    out["review"] = out.get("review_status", "not_native_reviewed")
    return out


# ---------------------------------------------------------------- irrelevant sentences


def load_corpus(path: str | Path) -> pd.DataFrame:
    df = read_csv_checked(path, ["id", "text", "source"], what="irrelevant-sentence corpus", dtype=str)
    empty = df["text"].isna() | (df["text"].str.strip() == "")
    if empty.any():
        raise DataError(f"{path} line {int(empty.idxmax()) + 2}, column text: empty sentence")
    return df


def pick_unrelated(context: str, corpus: pd.DataFrame, stopwords: frozenset[str], key: str) -> tuple[str, str]:
    """(sentence id, sentence): the corpus sentence first in a key-seeded order sharing no content word with the context."""
    ctx_words = content_words(context, stopwords)
    order = sorted(range(len(corpus)), key=lambda i: hashlib.sha256(f"{key}:{corpus['id'].iat[i]}".encode()).hexdigest())
    for i in order:
        text = corpus["text"].iat[i]
        if not (content_words(text, stopwords) & ctx_words):
            return corpus["id"].iat[i], text
    raise DataError(f"instance {key}: every sentence of the irrelevant-sentence corpus shares a content word with its context")


def assemble(triples: pd.DataFrame, corpus: pd.DataFrame, stopwords: frozenset[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The instances table (contract columns) and the provenance of each row's irrelevant sentence and review."""
    if triples.empty:
        return pd.DataFrame(columns=list(INSTANCE_COLUMNS)), pd.DataFrame(columns=["id", "unrelated_id", "unrelated_source", "review"])
    dup = triples["id"].duplicated()
    if dup.any():
        raise DataError(f"instance id {triples.loc[dup, 'id'].iloc[0]!r} occurs twice")
    picks = [pick_unrelated(r.context, corpus, stopwords, r.id) for r in triples.itertuples(index=False)]
    out = triples.copy()
    out["sent_unrelated"] = [text for _, text in picks]
    src = corpus.set_index("id")["source"]
    prov = pd.DataFrame({"id": out["id"], "unrelated_id": [i for i, _ in picks],
                         "unrelated_source": [src[i] for i, _ in picks], "review": out.get("review", "")})
    bad = ~out["source"].isin(SOURCES)
    if bad.any():
        raise DataError(f"instance {out.loc[bad, 'id'].iloc[0]!r}: source {out.loc[bad, 'source'].iloc[0]!r} not in {SOURCES}")
    return out[list(INSTANCE_COLUMNS)].reset_index(drop=True), prov


RESPONSE_COLUMNS = ("stereotype_id", "response", "n_triples", "cached")


def settings_from_config(icfg: Mapping[str, Any], seed: int) -> InstantiationSettings:
    """InstantiationSettings from ``study.stereo.instantiation``."""
    return InstantiationSettings(per_stereotype=int(icfg.get("per_stereotype", 5)), max_tokens=int(icfg.get("max_tokens", 256)),
                                 intro_max_tokens=int(icfg.get("intro_max_tokens", 48)),
                                 temperature=float(icfg.get("temperature", 0.0)), seed=int(seed),
                                 stop=tuple(icfg.get("stop") or ()))


@dataclass(frozen=True)
class Instantiation:
    instances: pd.DataFrame
    provenance: pd.DataFrame
    responses: pd.DataFrame  # the generator's raw responses (no rows when nothing was generated)
    human_review: Any  # the annotator import's review counts, None without one
    annotators: pd.DataFrame  # who wrote the human triples (no rows without them)


def instantiate(validated: pd.DataFrame, *, corpus: str | Path, stopwords: str | Path, human: str | Path | None = None,
                annotators: str | Path | None = None, starter: str | Path | None = None, model: Any = None,
                prompts: PromptSet | None = None, settings: InstantiationSettings | None = None,
                progress: bool = False) -> Instantiation:
    """Triples from the generator (when ``model`` is given), the annotators' import and the starter set,
    each completed with an irrelevant sentence from ``corpus``; provenance names who validated each stereotype."""
    parts, raw, review, writers = [], pd.DataFrame(columns=list(RESPONSE_COLUMNS)), None, pd.DataFrame()
    if model is not None:
        machine, raw = generate_triples(model, prompts, validated, settings, progress=progress)
        parts.append(machine)
    if human:
        human_triples, review, writers = import_human_triples(human, validated, annotators)
        parts.append(human_triples)
    if starter:
        parts.append(load_starter(starter))
    triples = pd.concat([x for x in parts if len(x)], ignore_index=True) if any(len(x) for x in parts) else pd.DataFrame()
    instances, prov = assemble(triples, load_corpus(corpus), load_stopwords(stopwords))
    # who validated the stereotype each instance comes from (simulated / human / llm_panel), carried to the evaluation
    validated_by = validated.set_index("stereotype_id")["validation_source"] if "validation_source" in validated else pd.Series(dtype=str)
    prov["validation_source"] = (instances["stereotype_id"].map(validated_by).fillna("none (authored starter set)")
                                 if len(instances) else pd.Series(dtype=str))
    if not len(raw):
        raw = pd.DataFrame(columns=list(RESPONSE_COLUMNS))
    return Instantiation(instances, prov, raw, review, writers)


def instantiation_summary(result: Instantiation, validated: pd.DataFrame, *, generator: str | None,
                          corpus: str | Path) -> dict[str, Any]:
    """reports/stereo/instantiation/summary.json."""
    instances, raw, annotators = result.instances, result.responses, result.annotators
    counts = instances["source"].value_counts().to_dict() if len(instances) else {}
    summary = {"n_instances": len(instances), "by_source": {k: int(counts.get(k, 0)) for k in SOURCES},
               "n_validated_stereotypes": len(validated), "generator": generator,
               "generator_requests": len(raw), "generator_unparsed": int((raw["n_triples"] == 0).sum()) if len(raw) else 0,
               "human_review": result.human_review, "unrelated_corpus": corpus,
               "unrelated_criterion": "no shared content word with the context (ours)"}
    if len(annotators):
        summary["instantiation_annotators"] = {str(k): int(n) for k, n in
                                               annotators.drop_duplicates("annotator_id").groupby("country").size().items()}
    return summary
