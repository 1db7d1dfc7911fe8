"""Group-trait association scores of seed 001 (stereotype leakage): SeT, ILPS, generative choice.

Every scorer returns one long table with a row per (group, trait) and the score
``score`` (higher = stronger association), built from template items rendered from the seed data under ``data/seed/leakage/``
(:func:`load_lexicon`, :func:`build_items`).  See METHODS.md ("Association scores") for the exact
definitions; the choices where the public implementations differ are parameters:

* SeT piece aggregation ``min`` (Cao et al. 2022) or ``sum`` (leakage code,
  ``quick_sens_v2.py``; default), and the guard of ``log(1 - norm)``.
* ILPS reduction ``sum`` of the trait's token log-probabilities (Kurita et al.;
  default for causal LMs) or ``mean`` (the leakage code's mT5 loss; default for
  seq2seq).
* Aggregation over templates (and synonyms) ``median`` (default) or ``mean``.
* Generative choice by ``logprob`` (normalised option probabilities, default)
  or ``sample`` (n samples, exact match; non-matching outputs are counted per
  group and language, never dropped).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import read_csv_checked

GENERIC = "__generic__"  # the group id of prior ("people") items
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th"})

PieceAggregation = Literal["min", "sum"]
TemplateAggregation = Literal["median", "mean"]
SetGuard = Literal["clip", "nan", "neg_norm"]


# ----------------------------------------------------------------------------- lexicon


@dataclass(frozen=True)
class Lexicon:
    """The seed data of the leakage study (see data/seed/leakage/README.md)."""

    traits: pd.DataFrame  # trait, pair_id, dimension, pole, polarity
    groups: pd.DataFrame  # group, category, origin
    group_words: pd.DataFrame  # language, group, form, word, gender, translation_status
    trait_words: pd.DataFrame  # language, trait, form, word, translation_status
    generic_words: pd.DataFrame  # language, form, word, gender, translation_status
    templates: pd.DataFrame  # language, template_id, number, gender, template, translation_status
    choice_prompts: pd.DataFrame  # language, group_form, system, user, answer_prefix, neither, translation_status

    @property
    def trait_order(self) -> list[str]:
        return list(self.traits["trait"])

    @property
    def group_order(self) -> list[str]:
        return list(self.groups["group"])

    def translation_status(self, language: str) -> dict[str, int]:
        """How many of the language's words and templates are authored / reviewed / original."""
        frames = [self.group_words, self.trait_words, self.generic_words, self.templates, self.choice_prompts]
        status = pd.concat([f.loc[f["language"] == language, "translation_status"] for f in frames])
        return {str(k): int(v) for k, v in status.value_counts().sort_index().items()}


_LEXICON_FILES = {
    "traits": ("traits.csv", ["trait", "pair_id", "dimension", "pole", "polarity"]),
    "groups": ("groups.csv", ["group", "category"]),
    "group_words": ("group_words.csv", ["language", "group", "form", "word", "gender", "translation_status"]),
    "trait_words": ("trait_words.csv", ["language", "trait", "form", "word", "translation_status"]),
    "generic_words": ("generic_words.csv", ["language", "form", "word", "gender", "translation_status"]),
    "templates": ("templates.csv", ["language", "template_id", "number", "gender", "template", "translation_status"]),
    "choice_prompts": (
        "choice_prompts.csv",
        ["language", "group_form", "system", "user", "answer_prefix", "neither", "translation_status"],
    ),
}
TRANSLATION_STATUSES = frozenset({"original", "authored", "reviewed"})
# neutral: the non-polar traits (seed 001 section 4.2.3), compared only with each other in the choice task
POLARITIES = frozenset({"positive", "negative", "neutral"})


def load_lexicon(seed_dir: str | os.PathLike = "data/seed/leakage") -> Lexicon:
    """Read and check the seed tables; one-line DataError naming file, row and column otherwise."""
    seed_dir = Path(seed_dir)
    tables: dict[str, pd.DataFrame] = {}
    for key, (name, required) in _LEXICON_FILES.items():
        df = read_csv_checked(seed_dir / name, required, what=f"leakage seed table {name}", dtype=str, keep_default_na=False)
        if "translation_status" in df.columns:
            bad = df.index[~df["translation_status"].isin(TRANSLATION_STATUSES)]
            if len(bad):
                raise DataError(
                    f"{seed_dir / name} line {bad[0] + 2}, column translation_status: translation_status {df.loc[bad[0], 'translation_status']!r}"
                    f" is not one of {', '.join(sorted(TRANSLATION_STATUSES))}"
                )
        tables[key] = df
    bad = tables["traits"].index[~tables["traits"]["polarity"].isin(POLARITIES)]
    if len(bad):
        raise DataError(f"{seed_dir / 'traits.csv'} line {bad[0] + 2}, column polarity: "
                        f"{tables['traits'].loc[bad[0], 'polarity']!r} is not one of {', '.join(sorted(POLARITIES))}")
    lex = Lexicon(**tables)
    traits, groups = set(lex.traits["trait"]), set(lex.groups["group"])
    for name, df, col, known in (
        ("group_words.csv", lex.group_words, "group", groups),
        ("trait_words.csv", lex.trait_words, "trait", traits),
    ):
        unknown = df.index[~df[col].isin(known)]
        if len(unknown):
            raise DataError(f"{seed_dir / name} line {unknown[0] + 2}, column {col}: {col} {df.loc[unknown[0], col]!r} is not in the seed list")
    return lex


# ----------------------------------------------------------------------------- items


@dataclass(frozen=True)
class AssociationItem:
    """One templated sentence with a trait slot: ``prefix + trait + suffix``."""

    language: str
    template_id: str
    group: str  # a group id, or GENERIC for the prior sentence
    trait: str
    trait_word: str
    prefix: str
    suffix: str

    @property
    def sentence(self) -> str:
        return self.prefix + self.trait_word + self.suffix

    @property
    def key(self) -> tuple[str, str, str]:
        """What the prior of a group item is matched on: (template, trait, trait word)."""
        return (self.template_id, self.trait, self.trait_word)


def _words(df: pd.DataFrame, **where: str) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for col, value in where.items():
        mask &= (df[col] == value).to_numpy()
    return df[mask]


def _trait_forms(lex: Lexicon, language: str, trait: str, gender: str, number: str) -> list[str]:
    """Trait words agreeing with (gender, number): exact form, number-only form, then the base form."""
    rows = _words(lex.trait_words, language=language, trait=trait)
    if rows.empty:
        raise DataError(f"trait_words.csv has no {language!r} word for trait {trait!r}")
    for form in (f"{gender}_{number}" if gender else None, number, "base"):
        if form is None:
            continue
        found = rows[rows["form"] == form]
        if not found.empty:
            return list(dict.fromkeys(found["word"]))  # several rows = synonyms
    return list(dict.fromkeys(rows["word"]))


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def _template_rows(lex: Lexicon, language: str, template_ids: Sequence[str] | None) -> pd.DataFrame:
    rows = lex.templates[lex.templates["language"] == language]
    if rows.empty:
        raise ConfigError(f"templates.csv has no templates for language {language!r}")
    if template_ids is not None:
        unknown = sorted(set(template_ids) - set(rows["template_id"]))
        if unknown:
            raise ConfigError(f"template id(s) {unknown} not in templates.csv for {language!r} (have {sorted(set(rows['template_id']))})")
        rows = rows[rows["template_id"].isin(template_ids)]
    return rows


def _render(template: str, group_word: str) -> tuple[str, str]:
    if template.count("{trait}") != 1 or template.count("{group}") != 1:
        raise DataError(f"template {template!r} needs exactly one {{group}} and one {{trait}}")
    prefix, suffix = template.split("{trait}")
    if "{group}" in prefix:
        prefix = prefix.replace("{group}", group_word)
        prefix = _capitalise(prefix)
    else:
        suffix = suffix.replace("{group}", group_word)
        prefix = _capitalise(prefix)
    return prefix, suffix


def build_items(
    lex: Lexicon,
    language: str,
    *,
    template_ids: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    traits: Sequence[str] | None = None,
    include_prior: bool = True,
) -> list[AssociationItem]:
    """Group items for every (template, group, trait, synonym) plus the generic-word prior items.

    A template row with ``gender`` m/f is used for groups of that grammatical
    gender and ``any`` for the rest; trait words agree with the group (or with
    the generic word in prior items).
    """
    rows = _template_rows(lex, language, template_ids)
    groups = list(groups) if groups is not None else lex.group_order
    traits = list(traits) if traits is not None else lex.trait_order
    items: list[AssociationItem] = []
    subjects: list[tuple[str, pd.DataFrame]] = [(g, _words(lex.group_words, language=language, group=g)) for g in groups]
    if include_prior:
        subjects.append((GENERIC, _words(lex.generic_words, language=language)))
    for template_id, variants in rows.groupby("template_id", sort=False):
        number = variants["number"].iloc[0]
        for group, words in subjects:
            words = words[words["form"] == number]
            if words.empty:
                what = "generic_words.csv" if group == GENERIC else f"group_words.csv group {group!r}"
                raise DataError(f"{what} has no {language!r} word of form {number!r} (template {template_id})")
            for _, w in words.iterrows():
                gender = w["gender"] or ""
                chosen = variants[variants["gender"] == gender] if gender else variants.iloc[0:0]
                if chosen.empty:
                    chosen = variants[variants["gender"] == "any"]
                if chosen.empty:
                    raise DataError(f"templates.csv {language}/{template_id}: no variant for gender {gender or 'none'!r} or 'any'")
                prefix, suffix = _render(chosen["template"].iloc[0], w["word"])
                for trait in traits:
                    for trait_word in _trait_forms(lex, language, trait, gender, number):
                        items.append(AssociationItem(language, str(template_id), group, trait, trait_word, prefix, suffix))
    return items


# ----------------------------------------------------------------------------- aggregation


def aggregate_scores(
    items: Sequence[AssociationItem],
    raw: Sequence[float],
    *,
    template_aggregation: TemplateAggregation = "median",
    subtract_prior: bool = True,
) -> pd.DataFrame:
    """Long table (group, trait, score, target, prior, n_items) from per-item raw scores.

    score = aggregate over templates/synonyms of (raw(group item) - raw(prior item with the same template,
    trait and trait word)); when the prior item used another trait form (gender agreement), the prior of
    the same template and trait is averaged over its forms.
    """
    if len(items) != len(raw):
        raise ValueError(f"{len(items)} items but {len(raw)} scores")
    df = pd.DataFrame(
        {
            "group": [it.group for it in items],
            "trait": [it.trait for it in items],
            "template_id": [it.template_id for it in items],
            "trait_word": [it.trait_word for it in items],
            "raw": np.asarray(raw, dtype=float),
        }
    )
    prior = df[df["group"] == GENERIC]
    target = df[df["group"] != GENERIC].copy()
    if subtract_prior:
        if prior.empty:
            raise ValueError("subtract_prior needs the generic prior items (build_items(include_prior=True))")
        exact = prior.groupby(["template_id", "trait", "trait_word"])["raw"].mean()
        loose = prior.groupby(["template_id", "trait"])["raw"].mean()
        keys = list(zip(target["template_id"], target["trait"], target["trait_word"]))
        target["prior"] = [
            exact.get(k, loose.get((k[0], k[1]), np.nan)) for k in keys
        ]
        target["diff"] = target["raw"] - target["prior"]
    else:
        target["prior"] = np.nan
        target["diff"] = target["raw"]
    if template_aggregation not in ("median", "mean"):
        raise ConfigError(f"template aggregation must be median or mean, got {template_aggregation!r}")
    grouped = target.groupby(["group", "trait"], sort=False)
    out = grouped.agg(
        score=("diff", template_aggregation),
        target=("raw", template_aggregation),
        prior=("prior", template_aggregation),
        n_items=("diff", "count"),
    ).reset_index()
    return out


def to_matrix(long: pd.DataFrame, traits: Sequence[str], groups: Sequence[str], value: str = "score") -> pd.DataFrame:
    """traits x groups matrix (index ``Traits``) in the H_<LANG>.csv layout's order."""
    m = long.pivot(index="trait", columns="group", values=value).reindex(index=list(traits), columns=list(groups))
    m.index.name = "Traits"
    m.columns.name = None
    return m


# ----------------------------------------------------------------------------- SeT


def multiclass_update_norm(logits: np.ndarray, target: int, x_norm: float, margin: float = 1.0) -> float:
    """||B - W'||_F of the smallest change of W' making ``target`` the top logit by ``margin``.

    Closed form (METHODS.md): raise logit j to T and lower every competitor above
    T - margin to T - margin, T = (a_j + sum_S (a_i + margin)) / (1 + |S|), S grown
    in descending order of a_i; the weight change is the logit change u over ||x||.
    """
    a = np.asarray(logits, dtype=np.float64)
    a_j = a[target]
    others = np.delete(a, target)
    # only competitors within reach can ever join S; sorting those is enough
    candidates = np.sort(others[others > a_j - margin])[::-1]
    total, size, level = a_j, 1, a_j
    for a_i in candidates:
        if a_i > level - margin:
            total += a_i + margin
            size += 1
            level = total / size
        else:
            break
    joined = candidates[: size - 1]
    u_sq = (level - a_j) ** 2 + float(np.sum((level - margin - joined) ** 2))
    return math.sqrt(u_sq) / x_norm


def guarded_log1m(norm: float, guard: SetGuard = "clip", eps: float = 1e-6) -> float:
    """log(1 - norm), undefined for norm >= 1: ``clip`` uses log(eps) there, ``nan`` gives NaN,
    ``neg_norm`` replaces the whole transform by -norm (monotone, always defined)."""
    if guard == "neg_norm":
        return -norm
    if norm < 1.0:
        return math.log1p(-norm) if guard == "nan" else math.log(max(1.0 - norm, eps))
    if guard == "nan":
        return math.nan
    if guard == "clip":
        return math.log(eps)
    raise ConfigError(f"SeT guard must be clip, nan or neg_norm, got {guard!r}")


def _trait_span_positions(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def masked_head_inputs(model: Any, input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
    """(x, logits): the output layer's input and output at every position, captured with a hook.

    x is the MLM head's transform of the final hidden state (the decoder's input);
    logits = W x + b with W, b the decoder's weight and bias.
    """
    import torch

    decoder = model.get_output_embeddings()
    captured: dict[str, torch.Tensor] = {}

    def hook(_module, inputs, output):
        captured["x"] = inputs[0].detach()
        captured["logits"] = output.detach()

    handle = decoder.register_forward_hook(hook)
    try:
        with torch.inference_mode():
            model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    return captured["x"], captured["logits"]


def set_item_scores(
    model: Any,
    tokenizer: Any,
    items: Sequence[AssociationItem],
    *,
    piece_aggregation: PieceAggregation = "sum",
    guard: SetGuard = "clip",
    margin: float = 1.0,
    batch_size: int = 64,
    cache: Any | None = None,
    identity: str | None = None,
) -> list[float]:
    """SeT score of every item (Cao et al. 2022): per trait piece, left to right, log(1 - ||B - W'||_F).

    All pieces of the trait are masked; piece k is scored with pieces < k filled
    with their gold ids, pieces >= k masked.  Pieces combine by ``min`` or ``sum``.
    """
    import torch

    from stereolens.scoring.access import unwrap

    if piece_aggregation not in ("min", "sum"):
        raise ConfigError(f"SeT piece aggregation must be min or sum, got {piece_aggregation!r}")
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    identity = identity or backend_identity
    if tokenizer.mask_token_id is None:
        raise ConfigError("SeT needs a masked LM tokenizer with a mask token")
    decoder = model.get_output_embeddings()
    # (item, piece) jobs: input ids with masks, the scored position and the gold id
    jobs: list[tuple[int, list[int], int, int]] = []
    n_pieces: list[int] = []
    for n, it in enumerate(items):
        enc = tokenizer(it.sentence, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
        start = len(it.prefix)
        positions = _trait_span_positions(offsets, start, start + len(it.trait_word))
        if not positions:
            raise DataError(f"SeT: trait word {it.trait_word!r} has no tokens in {it.sentence!r}")
        gold = [ids[p] for p in positions]
        n_pieces.append(len(positions))
        for k, pos in enumerate(positions):
            masked = list(ids)
            for later in positions[k:]:
                masked[later] = tokenizer.mask_token_id
            jobs.append((n, masked, pos, gold[k]))

    results: dict[int, float] = {}
    payloads: list[dict[str, Any] | None] = []
    base = None
    if cache is not None:
        from stereolens.scoring.access import model_identity

        base = {"scorer": "set", "model": identity or model_identity(model), "margin": margin}
    todo = []
    for j, (n, ids, pos, gold) in enumerate(jobs):
        payload = None if base is None else {**base, "ids": ids, "pos": pos, "gold": gold}
        payloads.append(payload)
        hit = cache.get(payload) if payload is not None else None
        if hit is not None:
            results[j] = float(hit)
        else:
            todo.append(j)
    bias = getattr(decoder, "bias", None)
    # ||x~||^2 = ||x||^2 + 1: the appended 1 multiplies the bias column of W'
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    todo.sort(key=lambda j: len(jobs[j][1]))
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        width = max(len(jobs[j][1]) for j in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, j in enumerate(chunk):
            seq = jobs[j][1]
            ids[r, : len(seq)] = torch.tensor(seq)
            mask[r, : len(seq)] = 1
        x_all, logits_all = masked_head_inputs(model, ids.to(device), mask.to(device))
        for r, j in enumerate(chunk):
            pos, gold = jobs[j][2], jobs[j][3]
            x = x_all[r, pos].double()
            logits = logits_all[r, pos].double().cpu().numpy()
            x_norm = math.sqrt(float((x * x).sum()) + (1.0 if bias is not None else 0.0))
            norm = multiclass_update_norm(logits, gold, x_norm, margin)
            results[j] = norm
            if cache is not None:
                cache.put(payloads[j], norm)
    piece_scores: list[list[float]] = [[] for _ in items]
    for j, (n, _ids, _pos, _gold) in enumerate(jobs):
        piece_scores[n].append(guarded_log1m(results[j], guard))
    agg = min if piece_aggregation == "min" else sum
    return [float(agg(s)) for s in piece_scores]


def set_scores(
    model: Any,
    lex: Lexicon,
    language: str,
    *,
    tokenizer: Any | None = None,
    template_ids: Sequence[str] | None = None,
    piece_aggregation: PieceAggregation = "sum",
    template_aggregation: TemplateAggregation = "median",
    guard: SetGuard = "clip",
    batch_size: int = 64,
    groups: Sequence[str] | None = None,
    cache: Any | None = None,
) -> pd.DataFrame:
    """SeT(group, trait) = aggregate over templates of SeT(template with group) - SeT(template with generic word)."""
    items = build_items(lex, language, template_ids=template_ids, groups=select_groups(lex, groups))
    raw = set_item_scores(
        model, tokenizer, items, piece_aggregation=piece_aggregation, guard=guard, batch_size=batch_size, cache=cache
    )
    out = aggregate_scores(items, raw, template_aggregation=template_aggregation)
    out.insert(0, "method", "set")
    out.insert(0, "language", language)
    return out


# ----------------------------------------------------------------------------- ILPS


def _is_hf(model: Any) -> bool:
    # the class attribute first: an executor-backed HF model (RayModel) would load a local
    # replica to answer hasattr(model, "model")
    return getattr(type(model), "backend", None) == "hf" or hasattr(model, "model") and hasattr(model, "tokenizer")


def causal_continuation_logprobs(
    model: Any, contexts: Sequence[str], continuations: Sequence[str], *, cache: Any | None = None,
    batch_tokens: int | None = None, truncate: bool = False,
) -> list[tuple[float, int]]:
    """(sum log P(continuation | context), n_tokens) for every pair, BOS-conditioned.

    HF backends go through :func:`stereolens.scoring.score_continuations`, which projects
    only the scored positions through the 262k-word head; other backends through
    ``LanguageModel.loglikelihood``.  Both are cached.
    """
    if _is_hf(model):
        from stereolens.scoring import DEFAULT_BATCH_TOKENS, score_continuations

        cache = cache if cache is not None else getattr(model, "cache", None)
        scores = score_continuations(
            model, None, list(contexts), list(continuations), cache=cache,
            batch_tokens=batch_tokens or DEFAULT_BATCH_TOKENS, truncate=truncate,
        )
        return [(s.logprob, s.n_tokens) for s in scores]
    from stereolens.models.base import LoglikelihoodRequest

    out = model.loglikelihood([LoglikelihoodRequest(c, t) for c, t in zip(contexts, continuations)])
    return [(r.logprob, r.n_tokens) for r in out]


def _continuation_logprobs(bh: Any, hidden: Any, conts: Sequence[Sequence[int]], chunk_rows: int = 512) -> list[list[float]]:
    """log P(cont[t+1] | ...) from hidden[r, t] for every row's continuation tokens after the first.

    All rows go through the output head in a few large products: projecting row by row would read the
    262k x 640 head weights from memory once per row, which dominates the cost on CPU.
    """
    import torch

    rows, targets, owners = [], [], []
    for r, cont in enumerate(conts):
        if len(cont) > 1:
            rows.append(hidden[r, : len(cont) - 1])
            targets.extend(cont[1:])
            owners.extend([r] * (len(cont) - 1))
    out: list[list[float]] = [[] for _ in conts]
    if not rows:
        return out
    flat = torch.cat(rows)
    tgt = torch.tensor(targets, device=flat.device)
    values: list[float] = []
    for start in range(0, len(flat), chunk_rows):
        lp = torch.log_softmax(bh.head(flat[start : start + chunk_rows]).float(), dim=-1)
        values.extend(lp.gather(1, tgt[start : start + chunk_rows].unsqueeze(1)).squeeze(1).tolist())
    for r, v in zip(owners, values):
        out[r].append(v)
    return out


def shared_context_logprobs(
    model: Any, contexts: Sequence[str], continuations: Sequence[str], *, cache: Any | None = None,
    max_rows: int = 256,
) -> list[tuple[float, int]]:
    """log P(continuation | context) like :func:`causal_continuation_logprobs`, computing each distinct
    context once (key-value cache reused by all its continuations).

    Association templates share contexts massively (32 traits per group sentence, 3 options per
    choice prompt), so this does a fraction of the work.  Tokenisation is lm-eval's (BOS + context,
    continuation split off the encoding of the whole string); a request whose whole-string encoding
    does not start with its context's tokens, and any non-HF backend, goes through
    :func:`causal_continuation_logprobs` instead.  Results are cached per request.
    """
    import torch

    from stereolens.models.executor import flat_map_shards
    from stereolens.scoring.access import device_of, split_head, unwrap

    # executor=ray: each actor runs this function on its shard (shared contexts stay together
    # except at shard edges)
    if (sharded := flat_map_shards(model, shared_context_logprobs, {"contexts": contexts, "continuations": continuations},
                                   {"cache": cache, "max_rows": max_rows})) is not None:
        return sharded
    if not _is_hf(model) or getattr(getattr(model, "spec", None), "kind", "causal") != "causal":
        return causal_continuation_logprobs(model, contexts, continuations, cache=cache)
    cache = cache if cache is not None else getattr(model, "cache", None)
    torch_model, tok, identity = unwrap(model, None)
    identity = identity or getattr(model, "identity", None)
    base = {"scorer": "causal_shared_context", "model": identity}
    results: dict[int, tuple[float, int]] = {}
    todo: list[int] = []
    for i, (ctx, cont) in enumerate(zip(contexts, continuations)):
        hit = cache.get({**base, "context": ctx, "continuation": cont}) if cache is not None else None
        if hit is not None:
            results[i] = (float(hit[0]), int(hit[1]))
        else:
            todo.append(i)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    by_context: dict[tuple[int, ...], list[tuple[int, list[int]]]] = {}
    fallback: list[int] = []
    ctx_cache: dict[str, list[int]] = {}
    for i in todo:
        ctx, cont = _split_context(contexts[i], continuations[i])
        if ctx not in ctx_cache:
            ctx_cache[ctx] = tok(ctx, add_special_tokens=False)["input_ids"] if ctx else []
        ctx_ids = ctx_cache[ctx]
        whole = tok(ctx + cont, add_special_tokens=False)["input_ids"]
        if whole[: len(ctx_ids)] != ctx_ids or len(whole) == len(ctx_ids):
            fallback.append(i)
            continue
        by_context.setdefault(tuple([bos] + ctx_ids), []).append((i, whole[len(ctx_ids):]))
    if fallback:
        for i, r in zip(fallback, causal_continuation_logprobs(
                model, [contexts[i] for i in fallback], [continuations[i] for i in fallback], cache=cache)):
            results[i] = r
    if not by_context:
        return [results[i] for i in range(len(contexts))]
    bh = split_head(torch_model, "causal", list(next(iter(by_context)))[:8])
    device = device_of(torch_model)
    inner = getattr(torch_model, "model", None)
    if inner is None or not bh.split:
        raise ConfigError(f"shared-context scoring needs a causal LM with a separable output head ({type(torch_model).__name__})")
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    # contexts of one length run together; their continuations follow on the expanded key-value cache
    by_length: dict[int, list[tuple[int, ...]]] = {}
    for ctx_ids in by_context:
        by_length.setdefault(len(ctx_ids), []).append(ctx_ids)
    with torch.inference_mode():
        for length, ctx_list in sorted(by_length.items()):
            start = 0
            while start < len(ctx_list):
                # as many contexts as keep the continuation rows under max_rows
                chunk, rows = [], 0
                while start < len(ctx_list) and (not chunk or rows + len(by_context[ctx_list[start]]) <= max_rows):
                    chunk.append(ctx_list[start])
                    rows += len(by_context[ctx_list[start]])
                    start += 1
                ids = torch.tensor(chunk, dtype=torch.long, device=device)
                out = inner(input_ids=ids, use_cache=True)
                kv = out.past_key_values
                last = bh.head(out.last_hidden_state[:, -1]).float()
                first_lp = torch.log_softmax(last, dim=-1)
                members = [(c, i, cont) for c, ctx_ids in enumerate(chunk) for i, cont in by_context[ctx_ids]]
                width = max(len(cont) for _c, _i, cont in members)
                logps = [[float(first_lp[c, cont[0]])] for c, _i, cont in members]
                if width > 1:
                    kv.batch_select_indices(torch.tensor([c for c, _i, _cont in members], device=device))
                    cont_ids = torch.full((len(members), width - 1), pad, dtype=torch.long)
                    mask = torch.zeros((len(members), length + width - 1), dtype=torch.long)
                    mask[:, :length] = 1
                    for r, (_c, _i, cont) in enumerate(members):
                        cont_ids[r, : len(cont) - 1] = torch.tensor(cont[:-1])
                        mask[r, length : length + len(cont) - 1] = 1
                    positions = torch.arange(length, length + width - 1).unsqueeze(0).expand(len(members), -1)
                    hidden = inner(input_ids=cont_ids.to(device), attention_mask=mask.to(device), past_key_values=kv,
                                   position_ids=positions.to(device), use_cache=True).last_hidden_state
                    for r, rest in enumerate(_continuation_logprobs(bh, hidden, [cont for _c, _i, cont in members])):
                        logps[r].extend(rest)
                for r, (_c, i, cont) in enumerate(members):
                    results[i] = (float(sum(logps[r])), len(cont))
                    if cache is not None:
                        cache.put({**base, "context": contexts[i], "continuation": continuations[i]}, list(results[i]))
    return [results[i] for i in range(len(contexts))]


def prefixed_context_logprobs(
    model: Any, prefixes: Sequence[str], contexts: Sequence[str], continuations: Sequence[str], *,
    cache: Any | None = None, max_rows: int = 96,
) -> list[tuple[float, int]]:
    """As :func:`shared_context_logprobs`, with a second level of sharing: contexts that start with the
    same ``prefix`` (a choice prompt up to its first trait) run that prefix once, then their remainders
    as one padded batch, then every continuation on the expanded key-value cache.

    Same cache entries as :func:`shared_context_logprobs` (the numbers agree to float error); requests
    whose tokenisation does not split cleanly at the prefix go through that function.
    """
    import torch

    from stereolens.models.executor import flat_map_shards
    from stereolens.scoring.access import device_of, split_head, unwrap

    if (sharded := flat_map_shards(
            model, prefixed_context_logprobs, {"prefixes": prefixes, "contexts": contexts, "continuations": continuations},
            {"cache": cache, "max_rows": max_rows})) is not None:
        return sharded
    if not _is_hf(model) or getattr(getattr(model, "spec", None), "kind", "causal") != "causal":
        return causal_continuation_logprobs(model, contexts, continuations, cache=cache)
    cache = cache if cache is not None else getattr(model, "cache", None)
    torch_model, tok, identity = unwrap(model, None)
    identity = identity or getattr(model, "identity", None)
    base = {"scorer": "causal_shared_context", "model": identity}
    results: dict[int, tuple[float, int]] = {}
    todo = []
    for i, (ctx, cont) in enumerate(zip(contexts, continuations)):
        hit = cache.get({**base, "context": ctx, "continuation": cont}) if cache is not None else None
        if hit is not None:
            results[i] = (float(hit[0]), int(hit[1]))
        else:
            todo.append(i)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"] if text else []  # noqa: E731
    memo: dict[str, list[int]] = {}

    def ids(text: str) -> list[int]:
        if text not in memo:
            memo[text] = enc(text)
        return memo[text]

    # prefix ids -> remainder ids -> [(request, continuation ids)]
    tree: dict[tuple[int, ...], dict[tuple[int, ...], list[tuple[int, list[int]]]]] = {}
    fallback = []
    for i in todo:
        ctx, cont = _split_context(contexts[i], continuations[i])
        pre, ctx_ids = ids(prefixes[i]), ids(ctx)
        whole = enc(ctx + cont)
        if (not contexts[i].startswith(prefixes[i]) or ctx_ids[: len(pre)] != pre or len(ctx_ids) == len(pre)
                or whole[: len(ctx_ids)] != ctx_ids or len(whole) == len(ctx_ids)):
            fallback.append(i)
            continue
        node = tree.setdefault(tuple([bos] + pre), {})
        node.setdefault(tuple(ctx_ids[len(pre):]), []).append((i, whole[len(ctx_ids):]))
    if fallback:
        for i, r in zip(fallback, shared_context_logprobs(
                model, [contexts[i] for i in fallback], [continuations[i] for i in fallback], cache=cache)):
            results[i] = r
    if not tree:
        return [results[i] for i in range(len(contexts))]
    bh = split_head(torch_model, "causal", list(next(iter(tree)))[:8])
    inner = getattr(torch_model, "model", None)
    if inner is None or not bh.split:
        raise ConfigError(f"shared-context scoring needs a causal LM with a separable output head ({type(torch_model).__name__})")
    device = device_of(torch_model)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    with torch.inference_mode():
        for pre_ids, remainders in tree.items():
            rem_list = list(remainders)
            start = 0
            while start < len(rem_list):
                chunk, rows = [], 0
                while start < len(rem_list) and (not chunk or rows + len(remainders[rem_list[start]]) <= max_rows):
                    chunk.append(rem_list[start])
                    rows += len(remainders[rem_list[start]])
                    start += 1
                lp_len = len(pre_ids)
                kv = inner(input_ids=torch.tensor([pre_ids], device=device), use_cache=True).past_key_values
                kv.batch_select_indices(torch.zeros(len(chunk), dtype=torch.long, device=device))
                r_max = max(len(r) for r in chunk)
                r_ids = torch.full((len(chunk), r_max), pad, dtype=torch.long)
                r_mask = torch.zeros((len(chunk), lp_len + r_max), dtype=torch.long)
                r_mask[:, :lp_len] = 1
                for k, r in enumerate(chunk):
                    r_ids[k, : len(r)] = torch.tensor(r)
                    r_mask[k, lp_len : lp_len + len(r)] = 1
                r_pos = torch.arange(lp_len, lp_len + r_max).unsqueeze(0).expand(len(chunk), -1)
                hidden = inner(input_ids=r_ids.to(device), attention_mask=r_mask.to(device), past_key_values=kv,
                               position_ids=r_pos.to(device), use_cache=True).last_hidden_state
                last = torch.stack([hidden[k, len(r) - 1] for k, r in enumerate(chunk)])
                first_lp = torch.log_softmax(bh.head(last).float(), dim=-1)
                members = [(k, i, cont) for k, r in enumerate(chunk) for i, cont in remainders[r]]
                logps = [[float(first_lp[k, cont[0]])] for k, _i, cont in members]
                width = max(len(cont) for _k, _i, cont in members)
                if width > 1:
                    kv.batch_select_indices(torch.tensor([k for k, _i, _c in members], device=device))
                    c_ids = torch.full((len(members), width - 1), pad, dtype=torch.long)
                    c_mask = torch.zeros((len(members), lp_len + r_max + width - 1), dtype=torch.long)
                    c_pos = torch.zeros((len(members), width - 1), dtype=torch.long)
                    for m, (k, _i, cont) in enumerate(members):
                        c_ids[m, : len(cont) - 1] = torch.tensor(cont[:-1])
                        c_mask[m, : lp_len + r_max] = r_mask[k]
                        c_mask[m, lp_len + r_max : lp_len + r_max + len(cont) - 1] = 1
                        r_len = len(chunk[k])
                        c_pos[m] = torch.arange(lp_len + r_len, lp_len + r_len + width - 1)
                    hidden = inner(input_ids=c_ids.to(device), attention_mask=c_mask.to(device), past_key_values=kv,
                                   position_ids=c_pos.to(device), use_cache=True).last_hidden_state
                    for m, rest in enumerate(_continuation_logprobs(bh, hidden, [cont for _k, _i, cont in members])):
                        logps[m].extend(rest)
                for m, (_k, i, cont) in enumerate(members):
                    results[i] = (float(sum(logps[m])), len(cont))
                    if cache is not None:
                        cache.put({**base, "context": contexts[i], "continuation": continuations[i]}, list(results[i]))
    return [results[i] for i in range(len(contexts))]


def _split_context(prefix: str, word: str) -> tuple[str, str]:
    """Trailing spaces of the context belong to the continuation (lm-eval convention)."""
    ctx = prefix.rstrip()
    return ctx, prefix[len(ctx) :] + word


def ilps_causal_item_scores(
    model: Any, items: Sequence[AssociationItem], *, reduction: Literal["sum", "mean"] = "sum",
    cache: Any | None = None, batch_tokens: int | None = None, shared_context: bool = True,
) -> list[float]:
    """log P(trait word | sentence up to the slot) of every item (the suffix is not scored)."""
    pairs = [_split_context(it.prefix, it.trait_word) for it in items]
    if shared_context:
        scored = shared_context_logprobs(model, [p[0] for p in pairs], [p[1] for p in pairs], cache=cache)
    else:
        scored = causal_continuation_logprobs(
            model, [p[0] for p in pairs], [p[1] for p in pairs], cache=cache, batch_tokens=batch_tokens
        )
    return [lp / n if reduction == "mean" else lp for lp, n in scored]


def ilps_seq2seq_item_scores(
    model: Any, items: Sequence[AssociationItem], *, reduction: Literal["sum", "mean"] = "mean",
    sentinel_in: str = "<extra_id_0>", sentinel_out: str = "<extra_id_1>", cache: Any | None = None,
) -> list[float]:
    """Span corruption: input ``prefix <extra_id_0> suffix``, target ``<extra_id_0> trait <extra_id_1>``.

    ``mean`` is minus the model's loss on the target (the leakage code's mT5 score, EOS included).
    """
    inputs = [it.prefix + sentinel_in + it.suffix for it in items]
    targets = [f"{sentinel_in} {it.trait_word} {sentinel_out}" for it in items]
    if _is_hf(model):
        from stereolens.scoring import score_seq2seq

        cache = cache if cache is not None else getattr(model, "cache", None)
        scores = score_seq2seq(model, None, inputs, targets, cache=cache)
        pairs = [(s.logprob, s.n_tokens) for s in scores]
    else:
        from stereolens.models.base import LoglikelihoodRequest

        res = model.loglikelihood([LoglikelihoodRequest(i, t) for i, t in zip(inputs, targets)])
        pairs = [(r.logprob, r.n_tokens) for r in res]
    return [lp / n if reduction == "mean" else lp for lp, n in pairs]


def check_causal_templates(lex: Lexicon, language: str, template_ids: Sequence[str] | None) -> None:
    """Refuse templates whose ``{group}`` follows ``{trait}``: a causal LM scores the trait from the text
    before it, so the group could not condition the score and every group-minus-prior cell would be 0."""
    rows = _template_rows(lex, language, template_ids)
    for row in rows.itertuples(index=False):
        t = str(row.template)
        if "{group}" in t and "{trait}" in t and t.index("{group}") > t.index("{trait}"):
            raise ConfigError(
                f"templates.csv {language}/{row.template_id} ({t!r}): {{group}} comes after {{trait}}, so causal "
                "ILPS (log P(trait | text before it)) cannot see the group; use a template with the group first "
                "or leave it out of study.leakage.templates"
            )


def ilps_scores(
    model: Any,
    lex: Lexicon,
    language: str,
    *,
    kind: Literal["causal", "seq2seq"] = "causal",
    template_ids: Sequence[str] | None = None,
    reduction: Literal["sum", "mean"] | None = None,
    template_aggregation: TemplateAggregation = "median",
    groups: Sequence[str] | None = None,
    cache: Any | None = None,
    batch_tokens: int | None = None,
) -> pd.DataFrame:
    """ILPS(group, trait) = log P(trait | group template) - log P(trait | generic template), aggregated."""
    if kind == "causal":
        check_causal_templates(lex, language, template_ids)
    items = build_items(lex, language, template_ids=template_ids, groups=select_groups(lex, groups))
    if kind == "causal":
        raw = ilps_causal_item_scores(model, items, reduction=reduction or "sum", cache=cache, batch_tokens=batch_tokens)
    elif kind == "seq2seq":
        raw = ilps_seq2seq_item_scores(model, items, reduction=reduction or "mean", cache=cache)
    else:
        raise ConfigError(f"ILPS needs a causal or seq2seq model, got kind {kind!r}")
    out = aggregate_scores(items, raw, template_aggregation=template_aggregation)
    out.insert(0, "method", "ilps")
    out.insert(0, "language", language)
    return out


# ----------------------------------------------------------------------------- generative choice


@dataclass(frozen=True)
class ChoiceQuery:
    language: str
    group: str
    trait1: str
    trait2: str
    word1: str
    word2: str
    neither: str
    system: str
    user: str
    answer_prefix: str
    group_part: str = ""  # the user turn up to the first trait: the same for every pair of a group

    @property
    def options(self) -> tuple[str, str, str]:
        return (self.word1, self.word2, self.neither)

    def plain_prompt(self) -> str:
        """The chat turn as plain text for a base LM, ending at the answer slot."""
        return f"{self.system}\n\n{self.user}\n{self.answer_prefix}"

    def shared_prompt_prefix(self) -> str:
        """The part of :meth:`plain_prompt` every pair of this group and language shares."""
        return f"{self.system}\n\n{self.group_part}"


def same_polarity_pairs(
    lex: Lexicon, *, design: Literal["all", "cyclic", "matching"] = "all", opponents: int | None = None,
    both_orders: bool = True,
) -> list[tuple[str, str]]:
    """Trait pairs of the same polarity class (positive with positive, negative with negative, neutral
    with neutral: traits.csv ``polarity``), each also asked with the traits swapped when ``both_orders``.

    ``all``: every pair of a class (the paper's design).  ``cyclic``: each trait against the next
    ``opponents`` traits of its class in table order (every trait in 2k comparisons).  ``matching``:
    consecutive traits of the class paired once (every trait in one comparison per group, the cheapest
    design); in a class of odd size the last trait is paired with the first, which so gets two.
    """
    pairs: list[tuple[str, str]] = []
    for _, block in lex.traits.groupby("polarity", sort=True):
        names = list(block["trait"])
        if design == "all":
            chosen = list(itertools.combinations(names, 2))
        elif design == "cyclic":
            if not opponents or opponents < 1:
                raise ConfigError(f"choice design cyclic needs opponents >= 1, got {opponents}")
            k = min(int(opponents), len(names) // 2)
            chosen = [(names[i], names[(i + d) % len(names)]) for d in range(1, k + 1) for i in range(len(names))]
            if len(names) % 2 == 0 and k == len(names) // 2:
                chosen = chosen[: len(chosen) - len(names) // 2]  # the opposite pairs appear twice otherwise
        elif design == "matching":
            if len(names) < 2:
                raise ConfigError(f"choice design matching needs two {block['polarity'].iloc[0]} traits or more")
            chosen = [(names[i], names[(i + 1) % len(names)]) for i in range(0, len(names), 2)]
        else:
            raise ConfigError(f"choice design must be all, cyclic or matching, got {design!r}")
        pairs.extend(chosen)
        if both_orders:
            pairs.extend((b, a) for a, b in chosen)
    return pairs


def select_groups(lex: Lexicon, selection: Sequence[str] | None) -> list[str]:
    """Group ids from a selection of ids and ``category:<name>`` entries (None = every group, seed order)."""
    if selection is None:
        return lex.group_order
    chosen: set[str] = set()
    for entry in selection:
        if entry.startswith("category:"):
            members = set(lex.groups.loc[lex.groups["category"] == entry.split(":", 1)[1], "group"])
            if not members:
                raise ConfigError(f"no group has category {entry.split(':', 1)[1]!r} (groups.csv)")
            chosen |= members
        elif entry in set(lex.group_order):
            chosen.add(entry)
        else:
            raise ConfigError(f"unknown group {entry!r} (groups.csv ids or category:<name>)")
    return [g for g in lex.group_order if g in chosen]


def choice_queries(
    lex: Lexicon, language: str, pairs: Sequence[tuple[str, str]], groups: Sequence[str] | None = None
) -> list[ChoiceQuery]:
    prompt = lex.choice_prompts[lex.choice_prompts["language"] == language]
    if prompt.empty:
        raise DataError(f"choice_prompts.csv has no prompt for language {language!r}")
    p = prompt.iloc[0]
    groups = select_groups(lex, groups)
    out = []
    for g in groups:
        gw = _words(lex.group_words, language=language, group=g, form=p["group_form"])
        if gw.empty:
            raise DataError(f"group_words.csv has no {language!r} form {p['group_form']!r} for group {g!r}")
        group_word = gw["word"].iloc[0]
        for t1, t2 in pairs:
            w1 = _trait_forms(lex, language, t1, "", "base")[0]
            w2 = _trait_forms(lex, language, t2, "", "base")[0]
            user = p["user"].replace("{group}", group_word).replace("{trait1}", w1).replace("{trait2}", w2)
            head = p["user"].split("{trait1}", 1)[0].split("{trait2}", 1)[0].replace("{group}", group_word)
            out.append(ChoiceQuery(language, g, t1, t2, w1, w2, p["neither"], p["system"], user, p["answer_prefix"], head))
    return out


def _option_continuation(q: ChoiceQuery, option: str) -> str:
    return option if q.language in NO_SPACE_LANGUAGES else " " + option


def choice_logprob_table(
    model: Any, queries: Sequence[ChoiceQuery], *, cache: Any | None = None, batch_tokens: int | None = None,
    truncate: bool = False,
) -> pd.DataFrame:
    """One row per query: normalised probabilities of trait1 / trait2 / neither.

    An option's log-probability is the sum over its sub-tokens; the three are
    renormalised with a softmax over the options.  Chat backends get the system and
    user turns as messages; base LMs the plain transcript ending in the answer prefix.
    """
    from stereolens.models.base import ChatMessage, LoglikelihoodRequest

    contexts, conts = [], []
    for q in queries:
        for opt in q.options:
            contexts.append(q.plain_prompt())
            conts.append(_option_continuation(q, opt))
    kind = getattr(getattr(model, "spec", None), "kind", None)
    if kind == "chat":
        reqs = [
            LoglikelihoodRequest(
                "", opt, messages=(ChatMessage("system", q.system), ChatMessage("user", q.user))
            )
            for q in queries for opt in q.options
        ]
        lps = [r.logprob for r in model.loglikelihood(reqs)]
    else:
        if truncate:
            scored = causal_continuation_logprobs(model, contexts, conts, cache=cache, batch_tokens=batch_tokens, truncate=True)
        else:
            prefixes = [q.shared_prompt_prefix() for q in queries for _opt in q.options]
            scored = prefixed_context_logprobs(model, prefixes, contexts, conts, cache=cache)
        lps = [lp for lp, _n in scored]
    arr = np.asarray(lps, dtype=float).reshape(len(queries), 3)
    arr = arr - arr.max(axis=1, keepdims=True)
    probs = np.exp(arr) / np.exp(arr).sum(axis=1, keepdims=True)
    return pd.DataFrame(
        {
            "language": [q.language for q in queries],
            "group": [q.group for q in queries],
            "trait1": [q.trait1 for q in queries],
            "trait2": [q.trait2 for q in queries],
            "p_trait1": probs[:, 0],
            "p_trait2": probs[:, 1],
            "p_neither": probs[:, 2],
        }
    )


_PUNCT = re.compile(r"[\s\"'`«»“”‘’„。，、．.,!?！？;；:：()（）\[\]।]+")


def normalise_answer(text: str) -> str:
    """Lower-case, NFC, punctuation and surrounding quotes removed (exact match after this only)."""
    text = unicodedata.normalize("NFC", text.strip().splitlines()[0] if text.strip() else "")
    return _PUNCT.sub(" ", text).strip().lower()


def choice_sample_table(
    model: Any, queries: Sequence[ChoiceQuery], *, n_samples: int = 10, temperature: float = 1.0,
    max_tokens: int = 10, seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-query shares of trait1 / trait2 / neither / non-matching, every generation with its match).

    Each sample is its own request (seed = seed + sample index), so the cache keeps
    all of them.  An output counts for an option only on an exact match after
    :func:`normalise_answer`; anything else is ``nonmatching`` and stays in the table.
    """
    from stereolens.models.base import ChatMessage, GenerationRequest

    kind = getattr(getattr(model, "spec", None), "kind", None)
    reqs = []
    for q in queries:
        for s in range(n_samples):
            if kind == "chat":
                reqs.append(GenerationRequest(
                    messages=(ChatMessage("system", q.system), ChatMessage("user", q.user)),
                    max_tokens=max_tokens, temperature=temperature, seed=seed + s,
                ))
            else:
                reqs.append(GenerationRequest(
                    prompt=q.plain_prompt(), max_tokens=max_tokens, temperature=temperature, seed=seed + s, stop=("\n",),
                ))
    gens = model.generate(reqs)
    rows, shares = [], []
    for qi, q in enumerate(queries):
        norm_opts = {normalise_answer(q.word1): "trait1", normalise_answer(q.word2): "trait2", normalise_answer(q.neither): "neither"}
        counts = {"trait1": 0, "trait2": 0, "neither": 0, "nonmatching": 0}
        for s in range(n_samples):
            text = gens[qi * n_samples + s].text
            match = norm_opts.get(normalise_answer(text), "nonmatching")
            counts[match] += 1
            rows.append({"language": q.language, "group": q.group, "trait1": q.trait1, "trait2": q.trait2,
                         "sample": s, "output": text, "match": match})
        shares.append({"language": q.language, "group": q.group, "trait1": q.trait1, "trait2": q.trait2,
                       "p_trait1": counts["trait1"] / n_samples, "p_trait2": counts["trait2"] / n_samples,
                       "p_neither": counts["neither"] / n_samples, "n_nonmatching": counts["nonmatching"],
                       "n_samples": n_samples})
    return pd.DataFrame(shares), pd.DataFrame(rows)


def nonmatching_counts(generations: pd.DataFrame) -> pd.DataFrame:
    """Appendix B.1 table: generations that matched no option, per language and group."""
    g = generations.assign(nonmatching=generations["match"] == "nonmatching")
    out = g.groupby(["language", "group"], sort=False).agg(
        n_generations=("match", "size"), n_nonmatching=("nonmatching", "sum")
    ).reset_index()
    out["share_nonmatching"] = out["n_nonmatching"] / out["n_generations"]
    return out


def choice_group_trait_scores(per_query: pd.DataFrame) -> pd.DataFrame:
    """Group-trait score = mean over the trait's comparisons of its (normalised) choice probability."""
    a = per_query[["language", "group", "trait1", "p_trait1"]].rename(columns={"trait1": "trait", "p_trait1": "p"})
    b = per_query[["language", "group", "trait2", "p_trait2"]].rename(columns={"trait2": "trait", "p_trait2": "p"})
    both = pd.concat([a, b], ignore_index=True)
    out = both.groupby(["language", "group", "trait"], sort=False).agg(score=("p", "mean"), n_items=("p", "size")).reset_index()
    out.insert(1, "method", "choice")
    return out


ChoiceMode = Literal["auto", "logprob", "sample"]


def resolve_choice_mode(model: Any, mode: str) -> str:
    """``auto``: ``logprob`` where the backend scores given continuations, else ``sample``.

    OpenAI-style chat endpoints only score what they generate themselves, so their loglikelihood raises
    UnsupportedRequest; auto sends them to exact-match sampling instead (seed 001's protocol for them).
    """
    if mode in ("logprob", "sample"):
        return mode
    if mode != "auto":
        raise ConfigError(f"choice mode must be auto, logprob or sample, got {mode!r}")
    return "logprob" if bool(getattr(model, "supports_loglikelihood", True)) else "sample"


def choice_scores(
    model: Any,
    lex: Lexicon,
    language: str,
    *,
    mode: ChoiceMode = "auto",
    design: Literal["all", "cyclic", "matching"] = "all",
    opponents: int | None = None,
    both_orders: bool = True,
    n_samples: int = 10,
    temperature: float = 1.0,
    seed: int = 0,
    groups: Sequence[str] | None = None,
    cache: Any | None = None,
    batch_tokens: int | None = None,
    truncate: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """(group-trait scores, per-query table, non-matching counts or None in logprob mode).

    ``mode`` is resolved with :func:`resolve_choice_mode`; in ``auto`` mode an endpoint that claims
    log-likelihoods but refuses them (a completions server without echo) falls back to sampling.
    The mode that ran is ``logprob`` exactly when the third element is None.
    """
    from stereolens.models.base import UnsupportedRequest

    resolved = resolve_choice_mode(model, mode)
    pairs = same_polarity_pairs(lex, design=design, opponents=opponents, both_orders=both_orders)
    queries = choice_queries(lex, language, pairs, groups)
    if resolved == "logprob":
        try:
            per_query = choice_logprob_table(model, queries, cache=cache, batch_tokens=batch_tokens, truncate=truncate)
            return choice_group_trait_scores(per_query), per_query, None
        except UnsupportedRequest:
            if mode != "auto":
                raise
    per_query, gens = choice_sample_table(model, queries, n_samples=n_samples, temperature=temperature, seed=seed)
    return choice_group_trait_scores(per_query), gens, nonmatching_counts(gens)


def methods_for_kind(kind: str) -> list[str]:
    """The association methods seed 001 applies to a model kind."""
    return {"masked": ["set"], "causal": ["ilps", "choice"], "seq2seq": ["ilps"], "chat": ["choice"],
            "completion": ["choice"]}.get(kind, [])

