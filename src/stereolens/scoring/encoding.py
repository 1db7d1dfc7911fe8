"""Turning text into the token sequences the scorers work on, with input checks.

Text is passed to the tokenizer exactly as given (no stripping, no ASCII
folding): whatever the tokenizer's own normaliser does is part of the model.
Errors name the row id so a researcher can find the offending row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stereolens.errors import ConfigError, DataError


@dataclass(frozen=True)
class MaskedEncoding:
    ids: tuple[int, ...]  # with the tokenizer's special tokens ([CLS] ... [SEP])
    special: tuple[bool, ...]  # True for special tokens, which are never scored
    word_ids: tuple[int | None, ...] | None
    truncated: bool


@dataclass(frozen=True)
class CausalEncoding:
    ids: tuple[int, ...]  # prefix (BOS or context) followed by the scored tokens
    start: int  # index of the first scored token in ids
    truncated: bool


def item_error(row_id: Any, detail: str) -> DataError:
    """An error about one input item, named by its id.

    The scorers see ids, not files: a caller that read the items from a file names
    the line from ``item_id`` and ``detail`` (see ``stereolens.scoring.cli``).
    """
    exc = DataError(f"id {row_id!r}: {detail}")
    exc.item_id, exc.detail = row_id, detail
    return exc


def check_text(text: Any, row_id: Any, what: str = "sentence") -> str:
    if not isinstance(text, str):
        if text is None or (isinstance(text, float) and text != text):
            text = ""
        else:
            raise item_error(row_id, f"{what} is not text ({type(text).__name__})")
    if not text.strip():
        raise item_error(row_id, f"empty {what}")
    return text


def too_long(row_id: Any, n: int, limit: int, what: str = "sentence") -> DataError:
    return item_error(
        row_id, f"{what} has {n} tokens, more than the model's maximum of {limit}; "
        "use --truncate (truncate=True) to cut it to the maximum"
    )


def encode_masked(
    tokenizer: Any, text: str, row_id: Any, *, limit: int | None, truncate: bool, word_ids: bool, what: str = "sentence"
) -> MaskedEncoding:
    """``what`` names the text in errors (e.g. "sentence in column sent_stereo")."""
    text = check_text(text, row_id, what)
    if word_ids and not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            f"metric pll_word_l2r needs word boundaries from a fast (Rust) tokenizer; "
            f"{type(tokenizer).__name__} is a slow one (load it with use_fast=True)"
        )
    enc = tokenizer(text, add_special_tokens=True, return_special_tokens_mask=True)
    truncated = False
    if limit is not None and len(enc["input_ids"]) > limit:
        if not truncate:
            raise too_long(row_id, len(enc["input_ids"]), limit, what)
        enc = tokenizer(
            text, add_special_tokens=True, return_special_tokens_mask=True, truncation=True, max_length=limit
        )
        truncated = True
    ids = tuple(int(i) for i in enc["input_ids"])
    special = tuple(bool(s) for s in enc["special_tokens_mask"])
    if all(special):
        raise item_error(row_id, f"{what} has no tokens to score after tokenisation")
    wids = tuple(enc.word_ids()) if word_ids else None
    return MaskedEncoding(ids=ids, special=special, word_ids=wids, truncated=truncated)


def prefix_token_id(tokenizer: Any) -> int:
    """What an empty context means: BOS, or EOS for tokenizers without BOS (lm-evaluation-harness' rule)."""
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    raise ConfigError(f"{type(tokenizer).__name__} has neither a BOS nor an EOS token to condition on")


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts BOS before a text by itself (Gemma's, Llama's do; GPT-2's does not).

    lm-evaluation-harness encodes a non-empty context with the tokenizer's own
    special tokens unless told otherwise, so this decides whether a context
    starts with BOS there.  Asked of the tokenizer's behaviour rather than its
    ``add_bos_token`` attribute, which not every tokenizer class keeps in step
    with its post-processor.
    """
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    ids = tokenizer("x")["input_ids"]
    return bool(ids) and int(ids[0]) == int(bos)


def _plain_ids(tokenizer: Any, text: str) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def encode_causal(
    tokenizer: Any,
    context: str,
    continuation: str,
    row_id: Any,
    *,
    limit: int | None,
    truncate: bool,
    prepend_bos: bool = True,
    what: str | None = None,
) -> CausalEncoding:
    """Encode log P(continuation | context) the way lm-evaluation-harness does.

    An empty context means the prefix token alone.  Otherwise trailing spaces
    of the context move to the continuation, and the continuation's tokens are
    those of ``tokenizer(context + continuation)`` after the context's, so
    tokens merging across the boundary are scored as the model sees them.
    ``prepend_bos`` puts the prefix token before a non-empty context too (the
    harness does so for models that need it, e.g. Gemma).
    """
    what = what or ("continuation" if context else "sentence")
    continuation = check_text(continuation, row_id, what)
    prefix = prefix_token_id(tokenizer)
    if context == "":
        ctx_ids, cont_ids = [prefix], _plain_ids(tokenizer, continuation)
    else:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = _plain_ids(tokenizer, context + continuation)
        ctx_ids = _plain_ids(tokenizer, context)
        cont_ids = whole[len(ctx_ids):]
        if prepend_bos:
            ctx_ids = [prefix, *ctx_ids]
    if not cont_ids:
        raise item_error(row_id, f"{what} has no tokens to score after tokenisation")
    ids = ctx_ids + cont_ids
    truncated = False
    # the last token is only a target, never an input
    if limit is not None and len(ids) - 1 > limit:
        if not truncate or len(ctx_ids) >= limit:
            raise too_long(row_id, len(ids) - 1, limit, what)
        ids = ids[: limit + 1]
        truncated = True
    return CausalEncoding(ids=tuple(ids), start=len(ctx_ids), truncated=truncated)
