"""ILPS association scores (Kurita et al.): log P(trait | group template) minus log P(trait | generic
template), for causal LMs (the trait's token log-probabilities, ``sum`` by default) and seq2seq LMs
(span corruption; ``mean``, the leakage code's mT5 loss, by default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.scoring.continuations import causal_continuation_logprobs, is_hf_model, split_context
from stereolens.scoring.shared_context import shared_context_logprobs
from stereolens.studies.leakage.items import (AssociationItem, TemplateAggregation, aggregate_scores, build_items,
                                              template_rows)
from stereolens.studies.leakage.lexicon import Lexicon, select_groups


def ilps_causal_item_scores(
    model: Any, items: Sequence[AssociationItem], *, reduction: Literal["sum", "mean"] = "sum",
    cache: Any | None = None, batch_tokens: int | None = None, shared_context: bool = True,
) -> list[float]:
    """log P(trait word | sentence up to the slot) of every item (the suffix is not scored)."""
    pairs = [split_context(it.prefix, it.trait_word) for it in items]
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
    if is_hf_model(model):
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
    rows = template_rows(lex, language, template_ids)
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
