"""Pseudo-log-likelihood scoring with masked language models.

Every scored token costs one encoder pass over a copy of its sentence with
that token (and, for PLL-word-l2r, the rest of its word) masked.  The copies
of many sentences go through the encoder together, packed by a token budget;
only the hidden state at the masked position of each copy goes through the
MLM head.  Definitions follow docs/methods.md:

- ``pll``: Salazar et al. 2020, every non-special token masked alone.
- ``pll_word_l2r``: Kauf & Ivanova 2023 (minicons ``within_word_l2r``): also
  mask the later pieces of the same word.
- ``crows``: Nangia et al. 2020 (nyu-mll/crows-pairs ``metric.py``): only the
  tokens the two sentences of a pair share, found by difflib on token ids.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from stereolens.scoring.access import BodyHead, device_of
from stereolens.scoring.batching import Segment, cpu_workers, longest_first, pads_passes, plan_batches, run_in_workers, target_logprobs
from stereolens.scoring.encoding import MaskedEncoding
from stereolens.scoring.projection import DeferredLogprobs


@dataclass(frozen=True)
class MaskedItem:
    """One sentence to score: its encoding, the positions scored and what is masked for each."""

    enc: MaskedEncoding
    targets: tuple[int, ...]
    mask_sets: tuple[tuple[int, ...], ...]

    def key(self) -> tuple:
        return (self.enc.ids, self.targets, self.mask_sets)


def pll_item(enc: MaskedEncoding) -> MaskedItem:
    targets = tuple(i for i, s in enumerate(enc.special) if not s)
    return MaskedItem(enc, targets, tuple((p,) for p in targets))


def pll_word_l2r_item(enc: MaskedEncoding) -> MaskedItem:
    targets = tuple(i for i, s in enumerate(enc.special) if not s)
    wids = enc.word_ids
    assert wids is not None
    last = targets[-1]
    mask_sets = []
    for p in targets:
        if wids[p] is None:
            mask_sets.append((p,))
        else:
            mask_sets.append((p, *(j for j in range(p + 1, last + 1) if wids[j] == wids[p])))
    return MaskedItem(enc, targets, tuple(mask_sets))


def shared_positions(a: Sequence[int], b: Sequence[int]) -> tuple[list[int], list[int]]:
    """Positions of the tokens two sequences share (difflib 'equal' opcodes), as in CrowS-Pairs."""
    matcher = difflib.SequenceMatcher(None, [str(x) for x in a], [str(x) for x in b], autojunk=True)
    pa: list[int] = []
    pb: list[int] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            pa.extend(range(a0, a1))
            pb.extend(range(b0, b1))
    return pa, pb


def crows_items(enc_a: MaskedEncoding, enc_b: MaskedEncoding) -> tuple[MaskedItem, MaskedItem]:
    """The CrowS-Pairs items of a pair: shared tokens, each masked alone; special tokens never scored.

    The reference drops the first and last shared positions, which are [CLS]
    and [SEP] for the tokenizers it was written for; dropping special tokens is
    the same there and stays right for tokenizers without them.
    """
    pa, pb = shared_positions(enc_a.ids, enc_b.ids)
    keep = [(x, y) for x, y in zip(pa, pb) if not enc_a.special[x] and not enc_b.special[y]]
    ta = tuple(x for x, _ in keep)
    tb = tuple(y for _, y in keep)
    return MaskedItem(enc_a, ta, tuple((p,) for p in ta)), MaskedItem(enc_b, tb, tuple((p,) for p in tb))


def run_masked(
    bh: BodyHead,
    items: Sequence[MaskedItem],
    *,
    mask_token_id: int,
    pad_token_id: int,
    vocab_size: int,
    batch_tokens: int,
    on_item: Callable[[int, list[float]], None] | None = None,
    progress: bool = False,
    pad: bool | None = None,
    workers: int | None = None,
) -> list[list[float]]:
    """Per-target log-probabilities for every item, in the order of ``item.targets``.

    ``pad``: whether sentences of different lengths may share a forward pass
    (default: not on a CPU, where padding costs more than an extra pass; see
    :mod:`stereolens.scoring.batching`).  ``workers``: forward passes run side
    by side (default: one per CPU thread on a CPU, one on a GPU); they share
    the ``batch_tokens`` budget, so their activations together stay within it.
    """
    device = device_of(bh.model)
    results: list[list[float]] = [[0.0] * len(it.targets) for it in items]
    remaining = [len(it.targets) for it in items]
    for i, n in enumerate(remaining):
        if n == 0 and on_item is not None:
            on_item(i, results[i])
    lengths = [len(it.enc.ids) for it in items]
    if pad is None:
        pad = pads_passes(device)
    if workers is None:
        workers = cpu_workers(device)
    batches = longest_first(list(plan_batches(lengths, remaining, max(1, batch_tokens // max(1, workers)), pad=pad)),
                            lengths, workers)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(remaining), unit="tok", desc="masked copies", disable=None)  # None: quiet off a terminal
    id_rows = [torch.tensor(it.enc.ids, dtype=torch.long) for it in items]
    lock = threading.Lock()

    def ready(tag: object, lp: list[float]) -> None:
        with lock:
            r = 0
            for item, start, stop in tag:  # type: ignore[attr-defined]
                results[item][start:stop] = lp[r : r + stop - start]
                r += stop - start
                remaining[item] -= stop - start
                if remaining[item] == 0 and on_item is not None:
                    on_item(item, results[item])
                if bar is not None:
                    bar.update(stop - start)

    # one for all workers: rows are grouped by their pass's place in the plan, so timing never moves a bit
    deferred = DeferredLogprobs(bh.projection, ready) if bh.projection is not None else None

    def work(my_batches: Iterator[tuple[int, list[Segment]]]) -> None:
        with torch.inference_mode():  # per thread: grad mode is thread-local
            for index, batch in my_batches:
                inputs, attention, positions, targets = _copies(items, batch, lengths, id_rows, mask_token_id, pad_token_id)
                inputs, positions, targets = inputs.to(device), positions.to(device), targets.to(device)
                if attention is not None:
                    attention = attention.to(device)
                rows = bh.rows(inputs, attention, positions)
                tag = [(s.item, s.start, s.stop) for s in batch]
                if deferred is None:
                    ready(tag, target_logprobs(bh.head, rows, targets, vocab_size).tolist())
                else:
                    deferred.add(tag, rows, targets, index=index)

    try:
        run_in_workers(list(enumerate(batches)), work, workers)
        if deferred is not None:
            with torch.inference_mode():
                deferred.flush()
    finally:
        if bar is not None:
            bar.close()
    return results


def _copies(
    items: Sequence[MaskedItem],
    batch: list[Segment],
    lengths: list[int],
    id_rows: list[torch.Tensor],
    mask_token_id: int,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """A batch's masked copies: input ids, attention mask (None when unpadded), scored positions, targets."""
    width = max(lengths[s.item] for s in batch)
    n_rows = sum(s.stop - s.start for s in batch)
    inputs = torch.full((n_rows, width), pad_token_id, dtype=torch.long)
    ragged = any(lengths[s.item] != width for s in batch)
    attention = torch.zeros((n_rows, width), dtype=torch.long) if ragged else None
    positions = torch.empty(n_rows, dtype=torch.long)
    targets = torch.empty(n_rows, dtype=torch.long)
    r = 0
    for s in batch:
        it, length, k = items[s.item], lengths[s.item], s.stop - s.start
        block = id_rows[s.item].expand(k, length).clone()
        for j in range(k):
            block[j, list(it.mask_sets[s.start + j])] = mask_token_id
        inputs[r : r + k, :length] = block
        if attention is not None:
            attention[r : r + k, :length] = 1
        pos = torch.tensor(it.targets[s.start : s.stop], dtype=torch.long)
        positions[r : r + k] = pos
        targets[r : r + k] = id_rows[s.item][pos]
        r += k
    return inputs, attention, positions, targets
