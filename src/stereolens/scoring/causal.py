"""Log-likelihood of token sequences under a causal language model.

Sequences are sorted by length and packed into forward passes bounded by a
token budget (right padding never changes earlier positions of a causal
model).  Only the positions that are scored go through the output head, a few
rows at a time, and log P(target) is the target logit minus logsumexp: with a
262k vocabulary the full float32 log-probability tensor of a batch would not
fit in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from stereolens.scoring.access import BodyHead, device_of
from stereolens.scoring.batching import plan_batches, target_logprobs
from stereolens.scoring.encoding import CausalEncoding


def run_causal(
    bh: BodyHead,
    items: Sequence[CausalEncoding],
    *,
    pad_token_id: int,
    vocab_size: int,
    batch_tokens: int,
    on_item: Callable[[int, list[float]], None] | None = None,
    progress: bool = False,
) -> list[list[float]]:
    """Per-token log P(ids[t] | ids[:t]) for t in [start, len(ids)) of every item."""
    device = device_of(bh.model)
    lengths = [len(it.ids) - 1 for it in items]  # the last token is a target only
    results: list[list[float]] = [[] for _ in items]
    batches = list(plan_batches(lengths, [1] * len(items), batch_tokens))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), unit="seq", desc="causal")
    with torch.inference_mode():
        for batch in batches:
            members = [s.item for s in batch]
            width = max(lengths[i] for i in members)
            inputs = torch.full((len(members), width), pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(members), width), dtype=torch.long)
            scored = torch.zeros((len(members), width), dtype=torch.bool)
            targets: list[int] = []
            for b, i in enumerate(members):
                ids, start = items[i].ids, items[i].start
                inputs[b, : lengths[i]] = torch.tensor(ids[:-1], dtype=torch.long)
                attention[b, : lengths[i]] = 1
                # input position t-1 predicts token t
                scored[b, start - 1 : lengths[i]] = True
                targets.extend(ids[start:])
            ragged = any(lengths[i] != width for i in members)
            hidden = bh.body(inputs.to(device), attention.to(device) if ragged else None)
            rows = hidden[scored.to(device)]  # row-major: item by item, left to right
            lp = target_logprobs(bh.head, rows, torch.tensor(targets, device=device), vocab_size).tolist()
            r = 0
            for i in members:
                n = len(items[i].ids) - items[i].start
                results[i] = lp[r : r + n]
                r += n
                if on_item is not None:
                    on_item(i, results[i])
            if bar is not None:
                bar.update(len(members))
    if bar is not None:
        bar.close()
    return results
