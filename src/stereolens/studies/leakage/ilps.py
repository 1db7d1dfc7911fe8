"""ILPS association scores (Kurita et al.): log P(trait | group template) minus log P(trait | generic
template), for causal LMs (the trait's token log-probabilities, ``sum`` by default) and seq2seq LMs
(span corruption; ``mean``, the leakage code's mT5 loss, by default).  The item scores are the scoring
engine's (:mod:`stereolens.scoring.ilps`, shared with the seegull study); this module builds the leakage
items and aggregates them into group x trait matrices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.scoring.ilps import causal_word_logprobs, group_follows_word, seq2seq_word_logprobs
from stereolens.studies.leakage.items import (AssociationItem, TemplateAggregation, aggregate_scores, build_items,
                                              template_rows)
from stereolens.studies.leakage.lexicon import Lexicon, select_groups


def ilps_causal_item_scores(
    model: Any, items: Sequence[AssociationItem], *, reduction: Literal["sum", "mean"] = "sum",
    cache: Any | None = None, batch_tokens: int | None = None, shared_context: bool = True,
) -> list[float]:
    """log P(trait word | sentence up to the slot) of every item (the suffix is not scored)."""
    return causal_word_logprobs(model, [it.prefix for it in items], [it.trait_word for it in items],
                                reduction=reduction, cache=cache, batch_tokens=batch_tokens,
                                shared_context=shared_context)


def ilps_seq2seq_item_scores(
    model: Any, items: Sequence[AssociationItem], *, reduction: Literal["sum", "mean"] = "mean",
    sentinel_in: str = "<extra_id_0>", sentinel_out: str = "<extra_id_1>", cache: Any | None = None,
) -> list[float]:
    """Span corruption: input ``prefix <extra_id_0> suffix``, target ``<extra_id_0> trait <extra_id_1>``.

    ``mean`` is minus the model's loss on the target (the leakage code's mT5 score, EOS included).
    """
    return seq2seq_word_logprobs(model, [it.prefix for it in items], [it.trait_word for it in items],
                                 [it.suffix for it in items], reduction=reduction, sentinel_in=sentinel_in,
                                 sentinel_out=sentinel_out, cache=cache)


def check_causal_templates(lex: Lexicon, language: str, template_ids: Sequence[str] | None) -> None:
    """Refuse templates whose ``{group}`` follows ``{trait}``: a causal LM scores the trait from the text
    before it, so the group could not condition the score and every group-minus-prior cell would be 0."""
    rows = template_rows(lex, language, template_ids)
    for row in rows.itertuples(index=False):
        t = str(row.template)
        if group_follows_word(t, "{group}", "{trait}"):
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
