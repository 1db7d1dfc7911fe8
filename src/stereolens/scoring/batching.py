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

On a CPU with several threads, whole forward passes also run side by side,
one single-threaded pass per thread (:func:`run_in_workers`): splitting each
pass's operations across threads leaves cores waiting at every operation's
end, and on the 2-core benchmark machine two passes side by side scored
masked copies 10-27% faster than one pass at a time on two threads
(interleaved runs).  Masked scoring does so by default; causal scoring does
not (see :func:`stereolens.scoring.causal.run_causal`).  Passes side by side
are taken most expensive first and the last ones are split
(:func:`longest_first`), so the workers finish together instead of one
waiting for the other's last long pass (ascending order left a worker idle
for about 7% of a 50-pair PLL run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")

# Logit rows are projected through the output head this many vocabulary entries
# at a time (32M floats = 128 MiB), so memory stays flat in batch size and vocabulary.
HEAD_CHUNK_ELEMENTS = 1 << 25
# Every pass puts a row's tokens first and its padding after them (an attention mask hides the padding;
# for a causal model right padding never changes an earlier position): the scorers' one padding side.
PADDING_SIDE = "right"


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


def batch_cost(batch: Sequence[Segment], lengths: Sequence[int]) -> int:
    """A pass's work in padded positions, plus one per row for its output-head projection.

    Attention's share (quadratic in the width) is left out: at sentence lengths it is a
    few percent of a layer, and the order only needs costs that rank passes rightly.
    """
    width = max(lengths[s.item] for s in batch)
    return sum(s.stop - s.start for s in batch) * (width + 1)


def _halve(batch: list[Segment]) -> tuple[list[Segment], list[Segment]]:
    """The batch's rows cut in two nearly equal passes (a segment may be cut at a row boundary)."""
    half = (sum(s.stop - s.start for s in batch) + 1) // 2
    first: list[Segment] = []
    second: list[Segment] = []
    taken = 0
    for s in batch:
        k = s.stop - s.start
        if taken >= half:
            second.append(s)
        elif taken + k <= half:
            first.append(s)
        else:
            cut = s.start + half - taken
            first.append(Segment(s.item, s.start, cut))
            second.append(Segment(s.item, cut, s.stop))
        taken += k
    return first, second


def longest_first(batches: Sequence[list[Segment]], lengths: Sequence[int], workers: int) -> list[list[Segment]]:
    """The passes in the order workers sharing one queue should take them, so they finish together.

    Most expensive first (:func:`batch_cost`), as a list scheduler needs to end evenly;
    then a pass that would still run while the passes after it cannot keep the other
    workers busy (the work left after it is less than ``workers - 1`` times its own) is
    cut in two, and again, down to single rows or a 64th of a worker's share.  Every row
    stays in exactly one pass, so every score is what it was; only the grouping of rows
    into passes changes, which moves a score by float rounding at most.
    """
    if workers <= 1:
        return list(batches)

    def cost(b: list[Segment]) -> int:
        return batch_cost(b, lengths)

    queue = sorted(batches, key=cost, reverse=True)  # stable: equal costs keep the plan's order
    total = sum(cost(b) for b in queue)
    finest = total / (workers * 64)
    out: list[list[Segment]] = []
    left = total
    while queue:
        batch = queue.pop(0)
        c = cost(batch)
        left -= c
        if left < (workers - 1) * c and c > finest and sum(s.stop - s.start for s in batch) > 1:
            queue = sorted([*_halve(batch), *queue], key=cost, reverse=True)
            left += c
            continue
        out.append(batch)
    return out


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


def pads_passes(device: torch.device) -> bool:
    """Whether rows of different lengths share a forward pass (padded) by default: not on a CPU, where a
    padded position costs as much as a real one (module docstring), everywhere else."""
    return device.type != "cpu"


def cpu_workers(device: torch.device) -> int:
    """Forward passes to run side by side: one per intra-op thread on a CPU, one elsewhere."""
    return max(1, torch.get_num_threads()) if device.type == "cpu" else 1


def run_in_workers(batches: Sequence[T], work: Callable[[Iterator[T]], None], workers: int) -> None:
    """Call ``work(batches)`` on ``workers`` threads that share one queue of batches.

    Each thread runs torch operations single-threaded while they run (the
    caller's thread count is restored afterwards) and pulls its next batch when
    it finishes one, so the threads finish within one batch of each other.
    ``work`` owns its thread's state; whatever it shares must be locked.  The
    first error stops the other threads after their current batch and is raised.
    """
    if workers <= 1 or len(batches) <= 1:
        work(iter(batches))
        return
    lock = threading.Lock()
    queue = iter(batches)
    stop = threading.Event()

    def pull() -> Iterator[T]:
        while not stop.is_set():
            with lock:
                batch = next(queue, None)
            if batch is None:
                return
            yield batch

    def guarded() -> None:
        try:
            work(pull())
        except BaseException:
            stop.set()
            raise

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stereolens-score") as pool:
            futures = [pool.submit(guarded) for _ in range(min(workers, len(batches)))]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()
                raise
    finally:
        torch.set_num_threads(threads)
