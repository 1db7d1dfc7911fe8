"""SeT (Cao et al. 2022) association scores for masked LMs: the closed-form smallest change of the output
layer that makes the trait word the top prediction, group item minus generic prior.

The piece aggregation ``min`` (Cao et al.) or ``sum`` (the leakage code's ``quick_sens_v2.py``; default)
and the guard of ``log(1 - norm)`` are parameters: the public implementations differ there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.studies.leakage.items import AssociationItem, TemplateAggregation, aggregate_scores, build_items
from stereolens.studies.leakage.lexicon import Lexicon, select_groups

PieceAggregation = Literal["min", "sum"]
SetGuard = Literal["clip", "nan", "neg_norm"]


def multiclass_update_norm(logits: np.ndarray, target: int, x_norm: float, margin: float = 1.0) -> float:
    """||B - W'||_F of the smallest change of W' making ``target`` the top logit by ``margin``.

    Closed form (docs/methods.md): raise logit j to T and lower every competitor above
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
    from stereolens.scoring.access import unwrap

    if piece_aggregation not in ("min", "sum"):
        raise ConfigError(f"SeT piece aggregation must be min or sum, got {piece_aggregation!r}")
    model, tokenizer, backend_identity = unwrap(model, tokenizer)
    identity = identity or backend_identity
    if tokenizer.mask_token_id is None:
        raise ConfigError("SeT needs a masked LM tokenizer with a mask token")
    jobs = _piece_jobs(tokenizer, items)
    payloads: list[dict[str, Any] | None] = [None] * len(jobs)
    if cache is not None:
        from stereolens.scoring.access import model_identity

        base = {"scorer": "set", "model": identity or model_identity(model), "margin": margin}
        payloads = [{**base, "ids": ids, "pos": pos, "gold": gold} for _n, ids, pos, gold in jobs]
    results: dict[int, float] = {}
    todo = []
    for j, payload in enumerate(payloads):
        hit = cache.get(payload) if payload is not None else None
        if hit is not None:
            results[j] = float(hit)
        else:
            todo.append(j)
    for j, norm in _update_norms(model, tokenizer, jobs, todo, margin=margin, batch_size=batch_size):
        results[j] = norm
        if cache is not None:
            cache.put(payloads[j], norm)
    piece_scores: list[list[float]] = [[] for _ in items]
    for j, (n, _ids, _pos, _gold) in enumerate(jobs):
        piece_scores[n].append(guarded_log1m(results[j], guard))
    agg = min if piece_aggregation == "min" else sum
    return [float(agg(s)) for s in piece_scores]


def _piece_jobs(tokenizer: Any, items: Sequence[AssociationItem]) -> list[tuple[int, list[int], int, int]]:
    """(item, input ids with pieces >= k masked, the position of piece k, its gold id) per trait piece."""
    jobs: list[tuple[int, list[int], int, int]] = []
    for n, it in enumerate(items):
        enc = tokenizer(it.sentence, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
        start = len(it.prefix)
        positions = _trait_span_positions(offsets, start, start + len(it.trait_word))
        if not positions:
            raise DataError(f"SeT: trait word {it.trait_word!r} has no tokens in {it.sentence!r}")
        gold = [ids[p] for p in positions]
        for k, pos in enumerate(positions):
            masked = list(ids)
            for later in positions[k:]:
                masked[later] = tokenizer.mask_token_id
            jobs.append((n, masked, pos, gold[k]))
    return jobs


def _update_norms(
    model: Any, tokenizer: Any, jobs: Sequence[tuple[int, list[int], int, int]], todo: list[int], *, margin: float,
    batch_size: int,
) -> list[tuple[int, float]]:
    """(job, ||B - W'||_F) for the jobs in ``todo``, in right-padded batches of similar length."""
    import torch

    bias = getattr(model.get_output_embeddings(), "bias", None)
    # ||x~||^2 = ||x||^2 + 1: the appended 1 multiplies the bias column of W'
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    todo = sorted(todo, key=lambda j: len(jobs[j][1]))
    out = []
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
            out.append((j, multiclass_update_norm(logits, gold, x_norm, margin)))
    return out


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
