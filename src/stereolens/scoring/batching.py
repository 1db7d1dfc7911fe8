"""Packing variable-length rows into forward passes bounded by a token budget.

Rows are sorted by length so that a batch pads little (rows of one length pad
not at all), and a batch holds at most ``batch_tokens`` padded tokens: a long
sentence gets few rows per pass, never one pass per sentence.

Whether rows of different lengths may share a pass is the caller's choice
(``pad``).  On a CPU a padded position costs as much as a real one while a
forward pass costs only a few positions' worth of overhead, so there every
pass holds one length (no padding and no attention mask; with 16 CrowS-Pairs
sentences a shared pass wasted 15% of the work on padding).  On a GPU extra
passes cost more than padding, so rows of nearby lengths share a pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

# Logit rows are projected through the output head this many vocabulary entries
# at a time (32M floats = 128 MiB), so memory stays flat in batch size and vocabulary.
HEAD_CHUNK_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class Segment:
    item: int  # index of the item (sentence) in the caller's list
    start: int  # first row of that item in this batch
    stop: int


def plan_batches(lengths: Sequence[int], rows: Sequence[int], batch_tokens: int, *, pad: bool = True) -> Iterator[list[Segment]]:
    """Yield batches of row ranges; item ``i`` has ``rows[i]`` rows of ``lengths[i]`` tokens.

    With ``pad=False`` every batch holds rows of a single length.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batch: list[Segment] = []
    used_rows = 0
    width = None
    for i in order:
        length, n, r = lengths[i], rows[i], 0
        if n == 0:
            continue
        if not pad and batch and length != width:
            yield batch
            batch, used_rows = [], 0
        width = length
        cap = max(1, batch_tokens // max(1, length))
        while r < n:
            # ascending order: this item's length is the batch's padded length from now on
            room = cap - used_rows
            if room <= 0:
                yield batch
                batch, used_rows = [], 0
                room = cap
            take = min(room, n - r)
            batch.append(Segment(i, r, r + take))
            used_rows += take
            r += take
    if batch:
        yield batch


def target_logprobs(logits_fn, rows: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """log softmax(head(rows))[target] per row, projecting a bounded number of rows at a time.

    Computed as the target logit minus logsumexp, in float32, without
    materialising the full log-probability matrix.
    """
    chunk = max(1, HEAD_CHUNK_ELEMENTS // max(1, vocab_size))
    out = []
    for s in range(0, rows.shape[0], chunk):
        logits = logits_fn(rows[s : s + chunk]).float()
        tgt = targets[s : s + chunk].unsqueeze(1)
        out.append(logits.gather(1, tgt).squeeze(1) - torch.logsumexp(logits, dim=-1))
    if not out:
        return rows.new_zeros(0, dtype=torch.float32)
    return torch.cat(out)
