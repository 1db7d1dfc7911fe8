"""log P(continuation | context) on a causal LM's key-value cache, each distinct context computed once.

Association templates share contexts massively (32 traits per group sentence, 3 options per choice
prompt), so running a context once and every continuation on its expanded key-value cache does a
fraction of the work of :func:`stereolens.scoring.continuations.causal_continuation_logprobs`.
:func:`shared_context_logprobs` shares whole contexts; :func:`prefixed_context_logprobs` adds a second
level, a prefix common to many contexts (a choice prompt up to its first trait).  Both write the same
cache entries (the numbers agree to float error).  Tokenisation is lm-eval's (BOS + context,
continuation split off the encoding of the whole string); a request that does not split cleanly, and
any non-HF backend, goes through the plain scorer instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from stereolens.errors import ConfigError
from stereolens.scoring.continuations import causal_continuation_logprobs, is_hf_model, split_context

# the cache entries of both scorers
CACHE_SCORER = "causal_shared_context"

Scored = tuple[float, int]  # (sum log P(continuation | context), n_tokens)
Member = tuple[int, int, list[int]]  # (row of the key-value cache, request index, continuation ids)


def shared_context_logprobs(
    model: Any, contexts: Sequence[str], continuations: Sequence[str], *, cache: Any | None = None,
    max_rows: int = 256,
) -> list[Scored]:
    """log P(continuation | context) like :func:`causal_continuation_logprobs`, computing each distinct
    context once (key-value cache reused by all its continuations).  Results are cached per request."""
    import torch

    from stereolens.models.executor import flat_map_shards

    # executor=ray: each actor runs this function on its shard (shared contexts stay together
    # except at shard edges)
    sharded = flat_map_shards(model, shared_context_logprobs, {"contexts": contexts, "continuations": continuations},
                              {"cache": cache, "max_rows": max_rows})
    if sharded is not None or not _runs_on_kv_cache(model):
        return sharded if sharded is not None else causal_continuation_logprobs(model, contexts, continuations, cache=cache)
    store = _RequestCache.of(model, cache, contexts, continuations)
    results, todo = store.lookup()
    by_context, fallback = _group_by_context(store.tokenizer, contexts, continuations, todo)
    results.update(store.score_with(causal_continuation_logprobs, model, fallback))
    if by_context:
        body = _SeparableBody.of(store.torch_model, store.tokenizer, next(iter(by_context)))
        with torch.inference_mode():
            for chunk in _same_length_chunks(by_context, max_rows):
                for i, scored in _score_context_chunk(body, chunk, by_context):
                    results[i] = store.put(i, scored)
    return [results[i] for i in range(len(contexts))]


def prefixed_context_logprobs(
    model: Any, prefixes: Sequence[str], contexts: Sequence[str], continuations: Sequence[str], *,
    cache: Any | None = None, max_rows: int = 96,
) -> list[Scored]:
    """As :func:`shared_context_logprobs`, with a second level of sharing: contexts that start with the
    same ``prefix`` run that prefix once, then their remainders as one padded batch, then every
    continuation on the expanded key-value cache.

    Requests whose tokenisation does not split cleanly at the prefix go through
    :func:`shared_context_logprobs`.
    """
    import torch

    from stereolens.models.executor import flat_map_shards

    sharded = flat_map_shards(
        model, prefixed_context_logprobs, {"prefixes": prefixes, "contexts": contexts, "continuations": continuations},
        {"cache": cache, "max_rows": max_rows})
    if sharded is not None or not _runs_on_kv_cache(model):
        return sharded if sharded is not None else causal_continuation_logprobs(model, contexts, continuations, cache=cache)
    store = _RequestCache.of(model, cache, contexts, continuations)
    results, todo = store.lookup()
    tree, fallback = _group_by_prefix(store.tokenizer, prefixes, contexts, continuations, todo)
    results.update(store.score_with(shared_context_logprobs, model, fallback))
    if tree:
        body = _SeparableBody.of(store.torch_model, store.tokenizer, next(iter(tree)))
        with torch.inference_mode():
            for prefix_ids, remainders in tree.items():
                for chunk in _row_bounded_chunks(list(remainders), lambda r: len(remainders[r]), max_rows):
                    for i, scored in _score_remainder_chunk(body, prefix_ids, chunk, remainders):
                        results[i] = store.put(i, scored)
    return [results[i] for i in range(len(contexts))]


# --------------------------------------------------------------------------- requests and the response cache


def _runs_on_kv_cache(model: Any) -> bool:
    return is_hf_model(model) and getattr(getattr(model, "spec", None), "kind", "causal") == "causal"


@dataclass
class _RequestCache:
    """The requests of one call and their entries in the response cache."""

    torch_model: Any
    tokenizer: Any
    cache: Any | None
    base: dict[str, Any]
    contexts: Sequence[str]
    continuations: Sequence[str]

    @classmethod
    def of(cls, model: Any, cache: Any | None, contexts: Sequence[str], continuations: Sequence[str]) -> _RequestCache:
        from stereolens.scoring.access import unwrap

        cache = cache if cache is not None else getattr(model, "cache", None)
        torch_model, tok, identity = unwrap(model, None)
        identity = identity or getattr(model, "identity", None)
        return cls(torch_model, tok, cache, {"scorer": CACHE_SCORER, "model": identity}, contexts, continuations)

    def _key(self, i: int) -> dict[str, Any]:
        return {**self.base, "context": self.contexts[i], "continuation": self.continuations[i]}

    def lookup(self) -> tuple[dict[int, Scored], list[int]]:
        """(cached results by request index, the indices still to score)."""
        results: dict[int, Scored] = {}
        todo: list[int] = []
        for i in range(len(self.contexts)):
            hit = self.cache.get(self._key(i)) if self.cache is not None else None
            if hit is not None:
                results[i] = (float(hit[0]), int(hit[1]))
            else:
                todo.append(i)
        return results, todo

    def score_with(self, scorer: Callable[..., list[Scored]], model: Any, indices: Sequence[int]) -> dict[int, Scored]:
        """The requests ``indices`` scored by another scorer (those whose tokenisation does not split cleanly)."""
        if not indices:
            return {}
        scored = scorer(model, [self.contexts[i] for i in indices], [self.continuations[i] for i in indices], cache=self.cache)
        return dict(zip(indices, scored))

    def put(self, i: int, scored: Scored) -> Scored:
        if self.cache is not None:
            self.cache.put(self._key(i), list(scored))
        return scored


def _bos(tok: Any) -> int:
    return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def _memo_encoder(tok: Any) -> Callable[[str], list[int]]:
    memo: dict[str, list[int]] = {}

    def ids(text: str) -> list[int]:
        if text not in memo:
            memo[text] = tok(text, add_special_tokens=False)["input_ids"] if text else []
        return memo[text]

    return ids


def _group_by_context(
    tok: Any, contexts: Sequence[str], continuations: Sequence[str], todo: Sequence[int],
) -> tuple[dict[tuple[int, ...], list[tuple[int, list[int]]]], list[int]]:
    """(BOS + context ids -> [(request, continuation ids)], requests that do not split cleanly)."""
    bos, ids = _bos(tok), _memo_encoder(tok)
    by_context: dict[tuple[int, ...], list[tuple[int, list[int]]]] = {}
    fallback: list[int] = []
    for i in todo:
        ctx, cont = split_context(contexts[i], continuations[i])
        ctx_ids = ids(ctx)
        whole = tok(ctx + cont, add_special_tokens=False)["input_ids"]
        if whole[: len(ctx_ids)] != ctx_ids or len(whole) == len(ctx_ids):
            fallback.append(i)
            continue
        by_context.setdefault(tuple([bos] + ctx_ids), []).append((i, whole[len(ctx_ids):]))
    return by_context, fallback


def _group_by_prefix(
    tok: Any, prefixes: Sequence[str], contexts: Sequence[str], continuations: Sequence[str], todo: Sequence[int],
) -> tuple[dict[tuple[int, ...], dict[tuple[int, ...], list[tuple[int, list[int]]]]], list[int]]:
    """(BOS + prefix ids -> remainder ids -> [(request, continuation ids)], requests that do not split cleanly)."""
    bos, ids = _bos(tok), _memo_encoder(tok)
    tree: dict[tuple[int, ...], dict[tuple[int, ...], list[tuple[int, list[int]]]]] = {}
    fallback: list[int] = []
    for i in todo:
        ctx, cont = split_context(contexts[i], continuations[i])
        pre, ctx_ids = ids(prefixes[i]), ids(ctx)
        whole = tok(ctx + cont, add_special_tokens=False)["input_ids"] if ctx + cont else []
        if (not contexts[i].startswith(prefixes[i]) or ctx_ids[: len(pre)] != pre or len(ctx_ids) == len(pre)
                or whole[: len(ctx_ids)] != ctx_ids or len(whole) == len(ctx_ids)):
            fallback.append(i)
            continue
        node = tree.setdefault(tuple([bos] + pre), {})
        node.setdefault(tuple(ctx_ids[len(pre):]), []).append((i, whole[len(ctx_ids):]))
    return tree, fallback


def _row_bounded_chunks(keys: Sequence[Hashable], rows_of: Callable[[Any], int], max_rows: int) -> Iterator[list[Any]]:
    """Consecutive runs of ``keys`` whose continuation rows stay under ``max_rows`` (at least one key each)."""
    start = 0
    while start < len(keys):
        chunk, rows = [], 0
        while start < len(keys) and (not chunk or rows + rows_of(keys[start]) <= max_rows):
            chunk.append(keys[start])
            rows += rows_of(keys[start])
            start += 1
        yield chunk


def _same_length_chunks(by_context: dict[tuple[int, ...], list], max_rows: int) -> Iterator[list[tuple[int, ...]]]:
    """Contexts of one length run together (no padding before their continuations), shortest first."""
    by_length: dict[int, list[tuple[int, ...]]] = {}
    for ctx_ids in by_context:
        by_length.setdefault(len(ctx_ids), []).append(ctx_ids)
    for _length, ctx_list in sorted(by_length.items()):
        yield from _row_bounded_chunks(ctx_list, lambda c: len(by_context[c]), max_rows)


# --------------------------------------------------------------------------- forward passes


@dataclass(frozen=True)
class _SeparableBody:
    """The causal LM's body (hidden states, key-value cache) and its separate output head."""

    inner: Any
    body_head: Any  # stereolens.scoring.access.BodyHead: .head projects hidden states to logits
    device: Any
    pad: int

    @classmethod
    def of(cls, torch_model: Any, tok: Any, first_ids: Sequence[int]) -> _SeparableBody:
        from stereolens.scoring.access import device_of, split_head

        bh = split_head(torch_model, "causal", list(first_ids)[:8])
        inner = getattr(torch_model, "model", None)
        if inner is None or not bh.split:
            raise ConfigError(f"shared-context scoring needs a causal LM with a separable output head ({type(torch_model).__name__})")
        return cls(inner, bh, device_of(torch_model), tok.pad_token_id if tok.pad_token_id is not None else 0)

    def first_logprobs(self, last_hidden: Any) -> Any:
        import torch

        return torch.log_softmax(self.body_head.head(last_hidden).float(), dim=-1)


def _score_context_chunk(
    body: _SeparableBody, chunk: list[tuple[int, ...]], by_context: dict[tuple[int, ...], list[tuple[int, list[int]]]],
) -> list[tuple[int, Scored]]:
    """Contexts of one length in one pass, then every continuation of theirs on the expanded cache."""
    import torch

    length = len(chunk[0])
    out = body.inner(input_ids=torch.tensor(chunk, dtype=torch.long, device=body.device), use_cache=True)
    first_lp = body.first_logprobs(out.last_hidden_state[:, -1])
    members = [(c, i, cont) for c, ctx_ids in enumerate(chunk) for i, cont in by_context[ctx_ids]]
    rest = _continue_on_cache(body, out.past_key_values, members, torch.ones((len(chunk), length), dtype=torch.long),
                              [length] * len(chunk))
    return _totals(members, first_lp, rest)


def _score_remainder_chunk(
    body: _SeparableBody, prefix_ids: tuple[int, ...], chunk: list[tuple[int, ...]],
    remainders: dict[tuple[int, ...], list[tuple[int, list[int]]]],
) -> list[tuple[int, Scored]]:
    """The prefix once, its remainders as one right-padded batch on its cache, then every continuation."""
    import torch

    device, lp_len = body.device, len(prefix_ids)
    kv = body.inner(input_ids=torch.tensor([prefix_ids], device=device), use_cache=True).past_key_values
    kv.batch_select_indices(torch.zeros(len(chunk), dtype=torch.long, device=device))
    r_max = max(len(r) for r in chunk)
    r_ids = torch.full((len(chunk), r_max), body.pad, dtype=torch.long)
    r_mask = torch.zeros((len(chunk), lp_len + r_max), dtype=torch.long)
    r_mask[:, :lp_len] = 1
    for k, r in enumerate(chunk):
        r_ids[k, : len(r)] = torch.tensor(r)
        r_mask[k, lp_len : lp_len + len(r)] = 1
    r_pos = torch.arange(lp_len, lp_len + r_max).unsqueeze(0).expand(len(chunk), -1)
    hidden = body.inner(input_ids=r_ids.to(device), attention_mask=r_mask.to(device), past_key_values=kv,
                        position_ids=r_pos.to(device), use_cache=True).last_hidden_state
    first_lp = body.first_logprobs(torch.stack([hidden[k, len(r) - 1] for k, r in enumerate(chunk)]))
    members = [(k, i, cont) for k, r in enumerate(chunk) for i, cont in remainders[r]]
    rest = _continue_on_cache(body, kv, members, r_mask, [lp_len + len(r) for r in chunk])
    return _totals(members, first_lp, rest)


def _continue_on_cache(
    body: _SeparableBody, kv: Any, members: Sequence[Member], prior_mask: Any, starts: Sequence[int],
) -> list[list[float]]:
    """log P of every member's continuation tokens after the first, on ``kv`` expanded to one row per member.

    ``prior_mask`` (one row per cache row) marks the cached positions that are real tokens; ``starts``
    gives each cache row's next position.
    """
    import torch

    width = max(len(cont) for _row, _i, cont in members)
    if width <= 1:
        return [[] for _ in members]
    device, n_prior = body.device, prior_mask.shape[1]
    kv.batch_select_indices(torch.tensor([row for row, _i, _cont in members], device=device))
    ids = torch.full((len(members), width - 1), body.pad, dtype=torch.long)
    mask = torch.zeros((len(members), n_prior + width - 1), dtype=torch.long)
    positions = torch.zeros((len(members), width - 1), dtype=torch.long)
    for m, (row, _i, cont) in enumerate(members):
        ids[m, : len(cont) - 1] = torch.tensor(cont[:-1])
        mask[m, :n_prior] = prior_mask[row]
        mask[m, n_prior : n_prior + len(cont) - 1] = 1
        positions[m] = torch.arange(starts[row], starts[row] + width - 1)
    hidden = body.inner(input_ids=ids.to(device), attention_mask=mask.to(device), past_key_values=kv,
                        position_ids=positions.to(device), use_cache=True).last_hidden_state
    return _continuation_logprobs(body.body_head, hidden, [cont for _row, _i, cont in members])


def _totals(members: Sequence[Member], first_lp: Any, rest: Sequence[list[float]]) -> list[tuple[int, Scored]]:
    """(request, (sum of its token log-probabilities, n_tokens)) per member, first token first."""
    out = []
    for (row, i, cont), later in zip(members, rest):
        logps = [float(first_lp[row, cont[0]]), *later]
        out.append((i, (float(sum(logps)), len(cont))))
    return out


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
