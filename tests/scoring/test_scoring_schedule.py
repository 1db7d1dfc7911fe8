"""The order passes run in when workers share a queue: longest first, the tail split, no score moved."""

from __future__ import annotations

import heapq

import pytest
from tiny_models import EXTRA

from stereolens.scoring import causal, masked
from stereolens.scoring.access import split_head
from stereolens.scoring.batching import Segment, batch_cost, longest_first, plan_batches
from stereolens.scoring.encoding import encode_causal, encode_masked

# sentences of many lengths and scripts (several pieces per word in some)
SENTENCES = [*EXTRA, "Women are kind.", "Men are kind."]


def _rows(batches: list[list[Segment]]) -> list[tuple[int, int]]:
    return sorted((s.item, r) for b in batches for s in b for r in range(s.start, s.stop))


def _finish_times(batches: list[list[Segment]], lengths: list[int], workers: int) -> list[int]:
    """When each worker finishes if each takes the next pass as soon as it is free (cost = work)."""
    free = [(0, w) for w in range(workers)]
    for b in batches:
        t, w = heapq.heappop(free)
        heapq.heappush(free, (t + batch_cost(b, lengths), w))
    return sorted(t for t, _ in free)


def test_ascending_order_leaves_a_worker_idle_and_longest_first_ends_together():
    # a known answer: five short sentences then two long ones, one sentence per pass
    lengths = [4, 4, 4, 4, 4, 40, 40]
    rows = [2, 2, 2, 2, 2, 38, 38]
    batches = list(plan_batches(lengths, rows, 40 * 38, pad=False))
    # ascending: the short passes first, then the two long ones, which start at different times
    # and so end apart; longest first starts them together and fills in with the short ones
    old = _finish_times(batches, lengths, 2)
    ordered = longest_first(batches, lengths, 2)
    new = _finish_times(ordered, lengths, 2)
    assert _rows(ordered) == _rows(batches)  # every row once, none lost or repeated
    assert old[1] - old[0] > 40  # ascending order: one worker idles at the end
    assert new[1] - new[0] < old[1] - old[0]
    assert max(new) <= max(old)
    # most expensive first: the long passes lead
    assert {lengths[ordered[0][0].item], lengths[ordered[1][0].item]} == {40}


def test_the_tail_is_split_until_the_last_passes_are_small():
    lengths = [30] * 6
    rows = [28] * 6
    batches = list(plan_batches(lengths, rows, 30 * 56, pad=False))  # three passes of 56 rows: one worker idles
    assert len(batches) == 3
    ordered = longest_first(batches, lengths, 2)
    assert _rows(ordered) == _rows(batches)
    assert len(ordered) > 3  # the third pass was cut
    finish = _finish_times(ordered, lengths, 2)
    assert finish[1] - finish[0] <= batch_cost(ordered[-1], lengths)
    assert finish[1] - finish[0] < batch_cost(batches[-1], lengths)
    # one worker: the plan's own order, untouched
    assert longest_first(batches, lengths, 1) == batches


def _budget_that_splits(lengths: list[int], rows: list[int]) -> int:
    """A token budget whose plan has passes that longest_first splits for two workers.

    The tiny models' tokenizers are trained per test session and their lengths vary a
    little between sessions, so the budget is found rather than fixed.
    """
    for budget in (512, 384, 640, 768, 1024, 256, 40, 48, 64, 80, 96, 128):
        plan = list(plan_batches(lengths, rows, budget, pad=False))
        if len(longest_first(plan, lengths, 2)) > len(plan):
            return budget
    raise AssertionError("no budget makes longest_first split a pass: the case would not be exercised")


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r"])
def test_longest_first_with_split_passes_gives_the_ascending_order_numbers(mlm, metric):
    model, tok = mlm
    make = masked.pll_item if metric == "pll" else masked.pll_word_l2r_item
    items = [make(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=True)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok), pad=False)
    lengths = [len(it.enc.ids) for it in items]
    budget = _budget_that_splits(lengths, [len(it.targets) for it in items])
    # one worker with half the budget plans the very passes two workers plan, in ascending order
    ascending = masked.run_masked(bh, items, batch_tokens=budget, workers=1, **opts)
    scheduled = masked.run_masked(bh, items, batch_tokens=2 * budget, workers=2, **opts)
    for a, b in zip(ascending, scheduled):
        assert b == pytest.approx(a, abs=1e-6)


def test_causal_longest_first_gives_the_ascending_order_numbers(clm):
    model, tok = clm
    items = [encode_causal(tok, "", s, i, limit=64, truncate=False) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "causal", list(items[0].ids))
    opts = dict(pad_token_id=tok.pad_token_id, vocab_size=len(tok), pad=False)
    lengths = [len(it.ids) - 1 for it in items]
    budget = _budget_that_splits(lengths, [1] * len(items))
    ascending = causal.run_causal(bh, items, batch_tokens=budget, workers=1, **opts)
    scheduled = causal.run_causal(bh, items, batch_tokens=2 * budget, workers=2, **opts)
    for a, b in zip(ascending, scheduled):
        assert b == pytest.approx(a, abs=1e-6)
