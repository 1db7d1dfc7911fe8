"""ILPS, the increased log-probability score (Kurita et al. 2019, as Cao, Sotnikova et al. 2024 adapt it):
the log-probability of a word after a template naming a group, minus after the same template naming the
generic group ("people").  One implementation for every study that measures an association this way (the
leakage study's group x trait matrices, the seegull study's identity-attribute tuples).

Causal LMs score the word's tokens given the sentence up to the slot, BOS-conditioned; the text after the
slot is not scored (the model cannot see it), so a template must name the group before the word.
Seq2seq LMs score span corruption: input ``prefix <extra_id_0> suffix``, target ``<extra_id_0> word
<extra_id_1>``.  Token log-probabilities are reduced by ``sum`` (the causal default) or ``mean`` (the
seq2seq default, minus the model's loss, the leakage code's mT5 score).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from stereolens.errors import ConfigError
from stereolens.scoring.continuations import causal_continuation_logprobs, is_hf_model, split_context
from stereolens.scoring.shared_context import shared_context_logprobs

Reduction = Literal["sum", "mean"]
# the reduction of a word's token log-probabilities each model kind uses unless told otherwise
DEFAULT_REDUCTION: dict[str, Reduction] = {"causal": "sum", "seq2seq": "mean"}
ILPS_KINDS = tuple(DEFAULT_REDUCTION)


def _reduce(scored: Sequence[tuple[float, int]], reduction: Reduction) -> list[float]:
    if reduction not in ("sum", "mean"):
        raise ConfigError(f"ILPS reduction must be sum or mean, got {reduction!r}")
    return [lp / n if reduction == "mean" else lp for lp, n in scored]


def causal_word_logprobs(
    model: Any, prefixes: Sequence[str], words: Sequence[str], *, reduction: Reduction = "sum",
    cache: Any | None = None, batch_tokens: int | None = None, shared_context: bool = True,
) -> list[float]:
    """log P(word | text up to the slot) of every (prefix, word), the prefix's trailing space moved to the word
    (:func:`~stereolens.scoring.continuations.split_context`); each distinct prefix runs once on the key-value
    cache when ``shared_context``."""
    pairs = [split_context(prefix, word) for prefix, word in zip(prefixes, words)]
    contexts, continuations = [p[0] for p in pairs], [p[1] for p in pairs]
    if shared_context:
        scored = shared_context_logprobs(model, contexts, continuations, cache=cache)
    else:
        scored = causal_continuation_logprobs(model, contexts, continuations, cache=cache, batch_tokens=batch_tokens)
    return _reduce(scored, reduction)


def seq2seq_word_logprobs(
    model: Any, prefixes: Sequence[str], words: Sequence[str], suffixes: Sequence[str], *,
    reduction: Reduction = "mean", sentinel_in: str = "<extra_id_0>", sentinel_out: str = "<extra_id_1>",
    cache: Any | None = None,
) -> list[float]:
    """Span corruption: input ``prefix <extra_id_0> suffix``, target ``<extra_id_0> word <extra_id_1>``;
    ``mean`` is minus the model's loss on the target (EOS included)."""
    inputs = [prefix + sentinel_in + suffix for prefix, suffix in zip(prefixes, suffixes)]
    targets = [f"{sentinel_in} {word} {sentinel_out}" for word in words]
    if is_hf_model(model):
        from stereolens.scoring import score_seq2seq

        cache = cache if cache is not None else getattr(model, "cache", None)
        scored = [(s.logprob, s.n_tokens) for s in score_seq2seq(model, None, inputs, targets, cache=cache)]
    else:
        from stereolens.models.base import LoglikelihoodRequest

        scored = [(r.logprob, r.n_tokens) for r in model.loglikelihood(
            [LoglikelihoodRequest(i, t) for i, t in zip(inputs, targets)])]
    return _reduce(scored, reduction)


def word_logprobs(
    model: Any, kind: str, prefixes: Sequence[str], words: Sequence[str], suffixes: Sequence[str] | None = None, *,
    reduction: Reduction | None = None, cache: Any | None = None, batch_tokens: int | None = None,
) -> list[float]:
    """The ILPS item score of every ``prefix + word + suffix`` for a ``causal`` or ``seq2seq`` model: the two
    terms of an ILPS are this score with the group's prefix and with the generic group's."""
    reduction = reduction or DEFAULT_REDUCTION.get(kind)  # type: ignore[assignment]
    if kind == "causal":
        return causal_word_logprobs(model, prefixes, words, reduction=reduction, cache=cache, batch_tokens=batch_tokens)
    if kind == "seq2seq":
        return seq2seq_word_logprobs(model, prefixes, words, suffixes or [""] * len(prefixes), reduction=reduction,
                                     cache=cache)
    raise ConfigError(f"ILPS needs a causal or seq2seq model, got kind {kind!r}")


def group_follows_word(template: str, group_slot: str, word_slot: str) -> bool:
    """Whether ``template`` names the group after the scored word: a causal LM scores the word from the text
    before it, so the group could not condition the score and every ILPS would be 0."""
    return group_slot in template and word_slot in template and template.index(group_slot) > template.index(word_slot)
