"""The public scoring functions: sentences, pairs, continuations, seq2seq targets.

Each takes a loaded model (a transformers model plus its tokenizer, or a
Hugging Face backend from :mod:`stereolens.models` carrying both) and text,
and returns natural-log scores.  Identical inputs are scored once.  With a
:class:`~stereolens.models.cache.ResponseCache`, every finished sentence is
stored under its model identity, metric, parameters and text as soon as it is
done, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.models.base import FLOAT32_PREFIX_ATTR
from stereolens.scoring import causal as _causal
from stereolens.scoring import masked as _masked
from stereolens.scoring import seq2seq as _seq2seq
from stereolens.scoring.access import HALF_NORMALISER_ATTR, max_length, model_identity, split_head, split_seq2seq, unwrap
from stereolens.scoring.encoding import CausalEncoding, adds_bos, check_text, encode_causal, encode_masked, item_error, too_long
from stereolens.scoring.types import METRICS, SentenceScore

CACHE_NAMESPACE = "stereolens.scoring/1"
DEFAULT_BATCH_TOKENS = 8192
PAIR_COLUMNS = ("sent_stereo", "sent_anti")


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ConfigError(f"unknown scoring metric {metric!r} (known: {', '.join(METRICS)})")


def _row_ids(n: int, ids: Sequence[Any] | None) -> list[Any]:
    if ids is None:
        return list(range(n))
    ids = list(ids)
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} sentences")
    return ids


def _scatter_of(model: Any) -> Callable[..., list[Any]] | None:
    """The shard-and-gather method of an executor-backed model (``stereolens.models.executor.RayModel``).

    Such a model runs each public function below on its workers, shard by shard,
    with the same arguments; looked up on the type so that a plain model is never asked.
    """
    return model.map_shards if callable(getattr(type(model), "map_shards", None)) else None


def _vocab_size(model: Any) -> int:
    config = getattr(model.config, "get_text_config", lambda: model.config)()
    return int(config.vocab_size)


def _pad_id(tokenizer: Any) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if tid is not None:
            return int(tid)
    return 0  # pragma: no cover


class _Resolver:
    """Cache lookups before compute, cache writes as each item finishes."""

    def __init__(self, cache: Any | None, base_payload: dict[str, Any] | None) -> None:
        self.cache = cache if cache is not None and getattr(cache, "enabled", True) else None
        self.base = base_payload or {}

    def payload(self, item_payload: dict[str, Any]) -> dict[str, Any]:
        return {**self.base, **item_payload}

    def resolve(
        self,
        item_payloads: Sequence[dict[str, Any]],
        compute: Callable[[list[int], Callable[[int, list[float]], None]], None],
    ) -> list[list[float]]:
        got: list[list[float] | None] = [None] * len(item_payloads)
        if self.cache is not None:
            for u, p in enumerate(item_payloads):
                hit = self.cache.get(self.payload(p))
                if hit is not None:
                    got[u] = [float(x) for x in hit]
        missing = [u for u, v in enumerate(got) if v is None]

        def done(j: int, lps: list[float]) -> None:
            u = missing[j]
            got[u] = list(lps)
            if self.cache is not None:
                self.cache.put(self.payload(item_payloads[u]), list(lps))

        if missing:
            compute(missing, done)
        return [v if v is not None else [] for v in got]


def _base_payload(
    cache: Any | None, model: Any, identity: str | None, metric: str, params: dict[str, Any], tokenizer: Any = None
) -> dict | None:
    if cache is None:
        return None
    if tokenizer is not None:
        # a backend identity covers its tokenizer files; a bare model's fingerprint does not
        params = {**params, "tokenizer": tokenizer_fingerprint(tokenizer)}
    # dtype changes the numbers, so it is part of the key even when the identity omits it
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    precision = {"dtype": dtype}
    if dtype != "float32":
        # a half-precision model's normaliser runs in float32 (projection.float32_normaliser):
        # scores cached before it did are not these scores; the fast pass of model.verify keeps it in its dtype
        precision["normaliser"] = dtype if getattr(model, HALF_NORMALISER_ATTR, False) else "float32"
    return {
        "kind": CACHE_NAMESPACE, "model": identity or model_identity(model), "metric": metric,
        "params": {**params, **precision},
    }


_FINGERPRINT_ATTR = "_stereolens_fingerprint"


def _content_hash(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    h = hashlib.sha256()
    if backend is not None:
        # vocabulary, merges, normaliser, pre-tokeniser, post-processor and added tokens
        h.update(backend.to_str().encode("utf-8"))
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode("utf-8"))
        # a slow tokenizer's behaviour also hangs on flags such as do_lower_case
        flags = {k: v for k, v in getattr(tokenizer, "init_kwargs", {}).items() if isinstance(v, (bool, int, float))}
        h.update(json.dumps(flags, sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:16]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """Class, size, a hash of the content and the special-token ids: what makes two tokenizers encode alike.

    Hashing the content (the Rust tokenizer's JSON when fast, else the sorted
    vocabulary) costs a few milliseconds to a second, so it is done once per
    tokenizer object.  The special-token ids are read every time: they live in
    the Python wrapper and can be reassigned after loading.
    """
    content = getattr(tokenizer, _FINGERPRINT_ATTR, None)
    if content is None:
        content = _content_hash(tokenizer)
        try:
            setattr(tokenizer, _FINGERPRINT_ATTR, content)
        except (AttributeError, TypeError):  # pragma: no cover - a tokenizer that refuses new attributes
            pass
    special = [getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "mask", "unk", "cls", "sep")]
    return f"{type(tokenizer).__name__}/{len(tokenizer)}/{content}/{','.join('-' if t is None else str(t) for t in special)}"


def _make_score(lps: list[float], ids: Sequence[int], positions: Sequence[int], truncated: bool, tokenizer: Any, per_token: bool) -> SentenceScore:
    if per_token:
        tokens = tuple(tokenizer.convert_ids_to_tokens([ids[p] for p in positions]))
        return SentenceScore(math.fsum(lps), len(lps), truncated, tokens, tuple(lps))
    return SentenceScore(math.fsum(lps), len(lps), truncated)


# ---------------------------------------------------------------- masked


def _masked_scores(
    model: Any,
    tokenizer: Any,
    items: list[_masked.MaskedItem],
    metric: str,
    params: dict[str, Any],
    payload_of: Callable[[int], dict[str, Any]],
    *,
    batch_tokens: int,
    cache: Any | None,
    identity: str | None,
    per_token: bool,
    progress: bool,
) -> list[SentenceScore]:
    if tokenizer.mask_token_id is None:
        raise ConfigError(f"metric {metric} needs a masked language model; {type(tokenizer).__name__} has no mask token")
    keys: dict[tuple, int] = {}
    index = [keys.setdefault(it.key(), len(keys)) for it in items]
    unique: list[_masked.MaskedItem] = [None] * len(keys)  # type: ignore[list-item]
    first_of: list[int] = [0] * len(keys)
    for i, u in enumerate(index):
        if unique[u] is None:
            unique[u], first_of[u] = items[i], i
    resolver = _Resolver(cache, _base_payload(cache, model, identity, metric, params, tokenizer))

    def compute(missing: list[int], done: Callable[[int, list[float]], None]) -> None:
        bh = split_head(model, "masked", list(unique[missing[0]].enc.ids))
        _masked.run_masked(
            bh, [unique[u] for u in missing], mask_token_id=int(tokenizer.mask_token_id), pad_token_id=_pad_id(tokenizer),
            vocab_size=_vocab_size(model), batch_tokens=batch_tokens, on_item=done, progress=progress,
        )

    lps = resolver.resolve([payload_of(first_of[u]) for u in range(len(unique))], compute)
    return [
        _make_score(lps[u], items[i].enc.ids, items[i].targets, items[i].enc.truncated, tokenizer, per_token)
        for i, u in enumerate(index)
    ]


def _causal_scores(
    model: Any,
    tokenizer: Any,
    encs: list[Any],
    params: dict[str, Any],
    payload_of: Callable[[int], dict[str, Any]],
    *,
    batch_tokens: int,
    cache: Any | None,
    identity: str | None,
    per_token: bool,
    progress: bool,
) -> list[SentenceScore]:
    keys: dict[tuple, int] = {}
    index = [keys.setdefault((e.ids, e.start), len(keys)) for e in encs]
    first_of: dict[int, int] = {}
    for i, u in enumerate(index):
        first_of.setdefault(u, i)
    unique = [encs[first_of[u]] for u in range(len(keys))]
    float32_prefix = getattr(model, FLOAT32_PREFIX_ATTR, None)  # the fast pass of model.verify
    if float32_prefix is not None:
        params = {**params, "float32_prefix": float32_prefix[0]}
    resolver = _Resolver(cache, _base_payload(cache, model, identity, "causal", params, tokenizer))

    def compute(missing: list[int], done: Callable[[int, list[float]], None]) -> None:
        todo = [unique[u] for u in missing]
        opts = dict(pad_token_id=_pad_id(tokenizer), vocab_size=_vocab_size(model), batch_tokens=batch_tokens)
        on_item = done
        if float32_prefix is not None:
            first = _float32_first_targets(*float32_prefix, todo, **opts)
            on_item = lambda j, lps: done(j, first[j] + lps[len(first[j]):])  # noqa: E731
        _causal.run_causal(_causal_head(model, todo[0]), todo, on_item=on_item, progress=progress, **opts)

    lps = resolver.resolve([payload_of(first_of[u]) for u in range(len(unique))], compute)
    return [
        _make_score(lps[u], encs[i].ids, range(encs[i].start, len(encs[i].ids)), encs[i].truncated, tokenizer, per_token)
        for i, u in enumerate(index)
    ]


def _causal_head(model: Any, probe: CausalEncoding) -> Any:
    """The model's verified body/head split, probed on the inputs of one sequence to be scored (its ids but
    the last, which is only a target; a one-token sequence is its own input)."""
    return split_head(model, "causal", list(probe.ids[:-1]) or list(probe.ids))


def _float32_first_targets(positions: int, load: Callable[[], Any], items: Sequence[CausalEncoding], **opts: Any
                           ) -> list[list[float]]:
    """Each item's log-probabilities of the targets predicted from at most ``positions`` tokens (none when its
    first target comes later), by the float32 model ``load()`` returns: the model's FLOAT32_PREFIX_ATTR.
    Each distinct beginning is scored once; sequences open alike (the two sentences of a pair mostly do)."""
    heads: dict[tuple[tuple[int, ...], int], int] = {}
    index = [heads.setdefault((it.ids[: positions + 1], it.start), len(heads)) if it.start <= positions else None
             for it in items]
    if not heads:
        return [[] for _ in items]
    unique = [CausalEncoding(ids, start, False) for ids, start in heads]
    scored = _causal.run_causal(_causal_head(load(), unique[0]), unique, **opts)
    return [[] if u is None else scored[u] for u in index]


# ---------------------------------------------------------------- public API


def score_sentences(
    model: Any,
    tokenizer: Any | None,
    sentences: Sequence[str],
    metric: str,
    *,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    ids: Sequence[Any] | None = None,
    per_token: bool = False,
    progress: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
    what: Sequence[str] | None = None,
) -> list[SentenceScore]:
    """Score each sentence on its own: ``pll``, ``pll_word_l2r`` (masked LM) or ``causal``.

    ``causal`` is sum_i log P(t_i | BOS, t_<i) over the sentence's tokens (EOS
    stands in for a missing BOS), as lm-evaluation-harness scores an empty
    context.  ``crows`` scores a sentence against its partner: use
    :func:`score_pairs`.  ``ids`` name rows in error messages; ``truncate``
    cuts over-long sentences to the model's maximum (else a DataError);
    ``per_token`` fills tokens and token_logprobs; ``what`` names each
    sentence in error messages (default "sentence").
    """
    _check_metric(metric)
    if metric == "crows":
        raise ConfigError("metric crows scores the shared tokens of a pair: use score_pairs")
    if (scatter := _scatter_of(model)) is not None:
        parts = scatter(
            score_sentences, {"sentences": sentences, "ids": _row_ids(len(sentences), ids), "what": what},
            dict(tokenizer=None, metric=metric, batch_tokens=batch_tokens, truncate=truncate, per_token=per_token,
                 progress=progress, cache=cache, identity=identity),
        )
        return [score for part in parts for score in part]
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    identity = identity or backend_identity
    row_ids = _row_ids(len(sentences), ids)
    whats = ["sentence"] * len(sentences) if what is None else list(what)
    if len(whats) != len(sentences):
        raise ValueError(f"what has {len(whats)} entries for {len(sentences)} sentences")
    limit = max_length(model, tokenizer)
    opts = dict(batch_tokens=batch_tokens, cache=cache, identity=identity, per_token=per_token, progress=progress)
    params = {"truncate": bool(truncate), "max_length": limit}
    if metric == "causal":
        encs = [
            encode_causal(tokenizer, "", s, rid, limit=limit, truncate=truncate, what=w)
            for s, rid, w in zip(sentences, row_ids, whats)
        ]
        return _causal_scores(model, tokenizer, encs, params, lambda i: {"text": sentences[i]}, **opts)
    word = metric == "pll_word_l2r"
    build = _masked.pll_word_l2r_item if word else _masked.pll_item
    items = [
        build(encode_masked(tokenizer, s, rid, limit=limit, truncate=truncate, word_ids=word, what=w))
        for s, rid, w in zip(sentences, row_ids, whats)
    ]
    return _masked_scores(model, tokenizer, items, metric, params, lambda i: {"text": sentences[i]}, **opts)


def score_pair_lists(
    model: Any,
    tokenizer: Any | None,
    first: Sequence[str],
    second: Sequence[str],
    metric: str,
    *,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    ids: Sequence[Any] | None = None,
    per_token: bool = False,
    progress: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
    columns: tuple[str, str] | None = None,
) -> tuple[list[SentenceScore], list[SentenceScore]]:
    """Scores of both sentences of each pair; for ``crows`` only their shared tokens count.

    ``columns`` names the two sides in error messages ("sentence in column ...").
    """
    _check_metric(metric)
    if len(first) != len(second):
        raise ValueError(f"{len(first)} first sentences but {len(second)} second sentences")
    n = len(first)
    row_ids = _row_ids(n, ids)
    what_a, what_b = (f"sentence in column {c}" for c in columns) if columns else ("first sentence", "second sentence")
    opts = dict(batch_tokens=batch_tokens, truncate=truncate, per_token=per_token, progress=progress, cache=cache, identity=identity)
    if (scatter := _scatter_of(model)) is not None:
        parts = scatter(score_pair_lists, {"first": first, "second": second, "ids": row_ids},
                        dict(tokenizer=None, metric=metric, columns=columns, **opts))
        return [s for a, _ in parts for s in a], [s for _, b in parts for s in b]
    if metric != "crows":
        scores = score_sentences(
            model, tokenizer, [*first, *second], metric, ids=[*row_ids, *row_ids], what=[what_a] * n + [what_b] * n, **opts
        )
        return scores[:n], scores[n:]
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    limit = max_length(model, tokenizer)
    items: list[_masked.MaskedItem] = []
    pair_items = []
    for a, b, rid in zip(first, second, row_ids):
        ea = encode_masked(tokenizer, a, rid, limit=limit, truncate=truncate, word_ids=False, what=what_a)
        eb = encode_masked(tokenizer, b, rid, limit=limit, truncate=truncate, word_ids=False, what=what_b)
        pair_items.append(_masked.crows_items(ea, eb))
    items = [p[0] for p in pair_items] + [p[1] for p in pair_items]
    texts = [(a, b) for a, b in zip(first, second)] + [(b, a) for a, b in zip(first, second)]
    scores = _masked_scores(
        model, tokenizer, items, "crows", {"truncate": bool(truncate), "max_length": limit},
        lambda i: {"text": texts[i][0], "partner": texts[i][1]},
        batch_tokens=batch_tokens, cache=cache, identity=identity or backend_identity, per_token=per_token, progress=progress,
    )
    return scores[:n], scores[n:]


def score_pairs(
    model: Any,
    tokenizer: Any | None,
    pairs: pd.DataFrame,
    metric: str,
    *,
    columns: tuple[str, str] = PAIR_COLUMNS,
    id_column: str = "id",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    per_token: bool = False,
    progress: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
) -> pd.DataFrame:
    """A copy of ``pairs`` with ``score_stereo``, ``score_anti`` (summed log-likelihoods), the
    numbers of scored tokens ``n_tokens_stereo``, ``n_tokens_anti`` and ``truncated_stereo``,
    ``truncated_anti`` (and ``tokens_*``, ``token_logprobs_*`` with ``per_token``).

    Input columns default to ``id, sent_stereo, sent_anti``; without an ``id``
    column errors name the row index.
    """
    missing = [c for c in columns if c not in pairs.columns]
    if missing:
        raise DataError(f"pairs table is missing column(s) {', '.join(missing)} (has: {', '.join(map(str, pairs.columns))})")
    ids = list(pairs[id_column]) if id_column in pairs.columns else list(pairs.index)
    first, second = list(pairs[columns[0]]), list(pairs[columns[1]])
    stereo, anti = score_pair_lists(
        model, tokenizer, first, second, metric, ids=ids, batch_tokens=batch_tokens, truncate=truncate,
        per_token=per_token, progress=progress, cache=cache, identity=identity, columns=columns,
    )
    out = pairs.copy()
    for name, scores in (("stereo", stereo), ("anti", anti)):
        out[f"score_{name}"] = [s.logprob for s in scores]
        out[f"n_tokens_{name}"] = [s.n_tokens for s in scores]
        out[f"truncated_{name}"] = [s.truncated for s in scores]
        if per_token:
            out[f"tokens_{name}"] = [" ".join(s.tokens or ()) for s in scores]
            out[f"token_logprobs_{name}"] = [" ".join(f"{x:.6f}" for x in s.token_logprobs or ()) for s in scores]
    return out


def score_continuations(
    model: Any,
    tokenizer: Any | None,
    contexts: Sequence[str],
    continuations: Sequence[str],
    *,
    prepend_bos: bool | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    ids: Sequence[Any] | None = None,
    per_token: bool = False,
    progress: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
) -> list[SentenceScore]:
    """log P(continuation | context) under a causal LM, summed over the continuation's tokens.

    Encoding follows lm-evaluation-harness (see
    :func:`stereolens.scoring.encoding.encode_causal`); an empty context is
    the BOS token (EOS without one).  A non-empty context is preceded by BOS
    when the tokenizer adds BOS itself (Gemma's and Llama's do, GPT-2's does
    not), as the harness does with its default ``add_bos_token``;
    ``prepend_bos=True`` or ``False`` overrides that.  Use it for option
    choice (compare the options' sums) and StereoSet intersentence scoring
    (context sentence, then each candidate).
    """
    if len(contexts) != len(continuations):
        raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
    if (scatter := _scatter_of(model)) is not None:
        parts = scatter(
            score_continuations,
            {"contexts": contexts, "continuations": continuations, "ids": _row_ids(len(contexts), ids)},
            dict(tokenizer=None, prepend_bos=prepend_bos, batch_tokens=batch_tokens, truncate=truncate, per_token=per_token,
                 progress=progress, cache=cache, identity=identity),
        )
        return [score for part in parts for score in part]
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    row_ids = _row_ids(len(contexts), ids)
    limit = max_length(model, tokenizer)
    if prepend_bos is None:
        prepend_bos = adds_bos(tokenizer)
    encs = []
    for ctx, cont, rid in zip(contexts, continuations, row_ids):
        if not isinstance(ctx, str):
            raise item_error(rid, f"context is not text ({type(ctx).__name__})")
        encs.append(encode_causal(tokenizer, ctx, cont, rid, limit=limit, truncate=truncate, prepend_bos=prepend_bos))
    params = {"truncate": bool(truncate), "max_length": limit, "prepend_bos": bool(prepend_bos)}
    return _causal_scores(
        model, tokenizer, encs, params, lambda i: {"context": contexts[i], "text": continuations[i]},
        batch_tokens=batch_tokens, cache=cache, identity=identity or backend_identity, per_token=per_token, progress=progress,
    )


def score_seq2seq(
    model: Any,
    tokenizer: Any | None,
    inputs: Sequence[str],
    targets: Sequence[str],
    *,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    ids: Sequence[Any] | None = None,
    per_token: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
) -> list[SentenceScore]:
    """log P(target | input) under an encoder-decoder model, summed over the target's tokens.

    The target is tokenised as labels are (T5 appends ``</s>``, which is
    scored); ``SentenceScore.mean`` equals minus the model's loss on those
    labels.  For span-corruption templates the target is e.g.
    ``"<extra_id_0> kind <extra_id_1>"``.  An input or target longer than the
    model's maximum is an error naming the row; with ``truncate`` the input
    keeps its first tokens and its last (``</s>``), the target its first
    tokens (the score is then that of a prefix), and ``truncated`` is set.
    """
    if len(inputs) != len(targets):
        raise ValueError(f"{len(inputs)} inputs but {len(targets)} targets")
    if (scatter := _scatter_of(model)) is not None:
        parts = scatter(
            score_seq2seq, {"inputs": inputs, "targets": targets, "ids": _row_ids(len(inputs), ids)},
            dict(tokenizer=None, batch_tokens=batch_tokens, truncate=truncate, per_token=per_token, cache=cache, identity=identity),
        )
        return [score for part in parts for score in part]
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    if not getattr(model.config, "is_encoder_decoder", False):
        raise ConfigError(f"score_seq2seq needs an encoder-decoder model, got {type(model).__name__}")
    row_ids = _row_ids(len(inputs), ids)
    limit = max_length(model, tokenizer)
    encoded: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    truncated: list[bool] = []
    for src, tgt, rid in zip(inputs, targets, row_ids):
        src = check_text(src, rid, "input")
        tgt = check_text(tgt, rid, "target")
        a = [int(x) for x in tokenizer(src)["input_ids"]]
        b = [int(x) for x in tokenizer(text_target=tgt)["input_ids"]]
        cut = False
        if limit is not None and len(a) > limit:
            if not truncate:
                raise too_long(rid, len(a), limit, "input")
            a, cut = a[: limit - 1] + a[-1:], True
        if limit is not None and len(b) > limit:
            if not truncate:
                raise too_long(rid, len(b), limit, "target")
            # a prefix of the target is what can be scored; its sum is log P of that prefix
            b, cut = b[:limit], True
        encoded.append((tuple(a), tuple(b)))
        truncated.append(cut)
    keys: dict[tuple, int] = {}
    index = [keys.setdefault(e, len(keys)) for e in encoded]
    unique = list(keys)
    first_of: dict[int, int] = {}
    for i, u in enumerate(index):
        first_of.setdefault(u, i)
    params = {"truncate": bool(truncate), "max_length": limit}
    resolver = _Resolver(cache, _base_payload(cache, model, identity or backend_identity, "seq2seq", params, tokenizer))

    def compute(missing: list[int], done: Callable[[int, list[float]], None]) -> None:
        sh = split_seq2seq(model, list(unique[missing[0]][0]), list(unique[missing[0]][1]))
        res = _seq2seq.run_seq2seq(
            sh, [unique[u] for u in missing], pad_token_id=_pad_id(tokenizer), vocab_size=_vocab_size(model),
            batch_tokens=batch_tokens,
        )
        for j, lps in enumerate(res):
            done(j, lps)

    lps = resolver.resolve(
        [{"input": inputs[first_of[u]], "text": targets[first_of[u]]} for u in range(len(unique))], compute
    )
    return [
        _make_score(lps[u], encoded[i][1], range(len(encoded[i][1])), truncated[i], tokenizer, per_token)
        for i, u in enumerate(index)
    ]


def option_probabilities(
    model: Any,
    tokenizer: Any | None,
    contexts: Sequence[str],
    options: Sequence[Sequence[str]],
    *,
    normalize: str = "sum",
    **kwargs: Any,
) -> list[list[float]]:
    """P(option | context) renormalised over each context's options, from continuation log-likelihoods.

    ``normalize="sum"`` compares summed sub-token log-probabilities (Cao et al. 2024's
    option probabilities); ``"mean"`` compares per-token means (length-normalised).
    Other keyword arguments go to :func:`score_continuations`.
    """
    if len(contexts) != len(options):
        raise ValueError(f"{len(contexts)} contexts but {len(options)} option lists")
    if normalize not in ("sum", "mean"):
        raise ConfigError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
    flat_ctx = [c for c, opts in zip(contexts, options) for _ in opts]
    flat_opt = [o for opts in options for o in opts]
    scores = score_continuations(model, tokenizer, flat_ctx, flat_opt, **kwargs)
    out, k = [], 0
    for opts in options:
        vals = [s.logprob if normalize == "sum" else s.mean for s in scores[k : k + len(opts)]]
        k += len(opts)
        top = max(vals)
        z = math.fsum(math.exp(v - top) for v in vals)
        out.append([math.exp(v - top) / z for v in vals])
    return out


def score_masked_continuations(
    model: Any,
    tokenizer: Any | None,
    contexts: Sequence[str],
    continuations: Sequence[str],
    metric: str = "pll_word_l2r",
    *,
    separator: str = " ",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    truncate: bool = False,
    ids: Sequence[Any] | None = None,
    per_token: bool = False,
    progress: bool = False,
    cache: Any | None = None,
    identity: str | None = None,
) -> list[SentenceScore]:
    """Pseudo-log-likelihood of a continuation with its context present, under a masked LM.

    The text ``context + separator + continuation`` is encoded once; only the
    tokens whose characters lie in the continuation are scored, each masked
    (``pll``) or masked with the later pieces of its word (``pll_word_l2r``),
    while every context token stays visible.  StereoSet's inter-sentence
    candidates are scored this way when a model has no next-sentence head.
    """
    if metric not in ("pll", "pll_word_l2r"):
        raise ConfigError(f"masked continuation scoring supports pll and pll_word_l2r, not {metric!r}")
    if len(contexts) != len(continuations):
        raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("masked continuation scoring needs character offsets from a fast (Rust) tokenizer")
    row_ids = _row_ids(len(contexts), ids)
    limit = max_length(model, tokenizer)
    items = []
    for ctx, cont, rid in zip(contexts, continuations, row_ids):
        if not isinstance(ctx, str):  # an empty context is allowed: the continuation is then scored alone
            raise item_error(rid, f"context is not text ({type(ctx).__name__})")
        cont = check_text(cont, rid, "continuation")
        text = f"{ctx}{separator}{cont}" if ctx else cont
        start = len(text) - len(cont)
        enc = encode_masked(tokenizer, text, rid, limit=limit, truncate=truncate, word_ids=True, what="context + continuation")
        offsets = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)["offset_mapping"]
        offsets = offsets[: len(enc.ids)]
        scored = tuple(
            i for i, (s, (a, b)) in enumerate(zip(enc.special, offsets)) if not s and b > a and b > start
        )
        if not scored:
            raise item_error(rid, "continuation has no tokens to score after tokenisation")
        wids = enc.word_ids
        assert wids is not None
        last = scored[-1]
        mask_sets = []
        for p in scored:
            later = () if wids[p] is None else tuple(j for j in range(p + 1, last + 1) if wids[j] == wids[p])
            mask_sets.append((p, *later) if metric == "pll_word_l2r" else (p,))
        items.append(_masked.MaskedItem(enc, scored, tuple(mask_sets)))
    params = {"truncate": bool(truncate), "max_length": limit, "continuation": True, "separator": separator}
    return _masked_scores(
        model, tokenizer, items, metric, params, lambda i: {"context": contexts[i], "text": continuations[i]},
        batch_tokens=batch_tokens, cache=cache, identity=identity or backend_identity, per_token=per_token,
        progress=progress,
    )


# ---------------------------------------------------------------- lineage


def scoring_setup(model: Any, *, batch_tokens: int | None = None) -> dict[str, str]:
    """How this process scores with ``model`` (a loaded backend, an executor-backed model or a torch
    model), as the MLflow tags ``scoring.*`` of a scoring run: the backend, device and dtype the
    weights are in, the token budget per pass, the padding side, whether passes pad (mixed lengths)
    and how many passes run side by side.  Scores do not depend on these beyond float32 rounding
    (tests/scoring/test_scoring_batch_invariance.py); they are recorded so that two runs can be
    compared knowing how each was run.  ``batch_tokens`` None is the engine's default.
    """
    import torch

    from stereolens.scoring.batching import PADDING_SIDE, cpu_workers, pads_passes
    from stereolens.scoring.continuations import is_hf_model

    spec = getattr(model, "spec", None)
    setup = {"scoring.backend": str(getattr(spec, "backend", None) or getattr(type(model), "backend", None) or "hf"),
             "scoring.model_class": type(model).__name__}
    if not (isinstance(model, torch.nn.Module) or is_hf_model(model)):
        return setup  # a remote endpoint: how its server batches is not ours to know
    if _scatter_of(model) is not None:
        # the executor's workers load their own replicas; asking for ``model.model`` would load one here
        device = torch.device(str(getattr(spec, "device", None) or "cpu"))
        dtype = str(getattr(spec, "dtype", None) or "float32")
    else:
        weights = next((model.model if hasattr(model, "model") and not isinstance(model, torch.nn.Module)
                        else model).parameters())
        device, dtype = weights.device, str(weights.dtype).removeprefix("torch.")
    padded = pads_passes(device)
    return {
        **setup,
        "scoring.device": str(device),
        "scoring.dtype": dtype,
        "scoring.batch_tokens": str(batch_tokens or DEFAULT_BATCH_TOKENS),
        "scoring.padding_side": PADDING_SIDE,
        "scoring.padded_passes": str(padded).lower(),
        # masked passes run side by side, one per CPU thread; causal ones one at a time (causal.run_causal)
        "scoring.masked_workers": str(cpu_workers(device)),
        "scoring.torch_threads": str(torch.get_num_threads()),
    }
