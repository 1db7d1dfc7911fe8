"""Forward passes side by side on a CPU: same numbers, every batch once, errors surface, threads restored."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from stereolens.scoring import causal, masked
from stereolens.scoring.access import split_head
from stereolens.scoring.batching import run_in_workers
from stereolens.scoring.encoding import encode_causal, encode_masked

SENTENCES = [
    "Women are kind.",
    "The poor are really ignorant about how to handle money.",
    "Unbelievably, everything worked out perfectly in the end.",
    "Люди из этой деревни очень добрые и трудолюбивые.",
    "ये लोग बहुत मेहनती और ईमानदार हैं।",
    "Men are kind.",
    "The rich are really ignorant about how to handle money.",
]


def test_every_batch_runs_once_on_single_threaded_workers():
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def work(batches):
        for b in batches:
            time.sleep(0.002)  # let the other thread take some
            with lock:
                seen.append((b, torch.get_num_threads(), threading.current_thread().name))

    before = torch.get_num_threads()
    run_in_workers(list(range(40)), work, workers=2)
    assert sorted(b for b, _, _ in seen) == list(range(40))
    assert {n for _, n, _ in seen} == {1}
    assert len({name for _, _, name in seen}) == 2
    assert torch.get_num_threads() == before


def test_first_error_stops_the_others_and_restores_threads():
    done: list[int] = []

    def work(batches):
        for b in batches:
            if b == 3:
                raise ValueError("batch 3 is broken")
            time.sleep(0.01)
            done.append(b)

    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="batch 3 is broken"):
        run_in_workers(list(range(200)), work, workers=2)
    assert torch.get_num_threads() == before
    assert len(done) < 20  # the healthy thread stopped after its current batch


def test_one_worker_runs_in_the_calling_thread():
    names = []
    run_in_workers([1, 2], lambda batches: names.extend(threading.current_thread().name for _ in batches), workers=1)
    assert names == [threading.current_thread().name] * 2


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r"])
@pytest.mark.parametrize("projection", [True, False])
def test_workers_give_the_sequential_numbers(mlm, metric, projection):
    model, tok = mlm
    make = masked.pll_item if metric == "pll" else masked.pll_word_l2r_item
    items = [make(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=True)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    saved = bh.projection
    if not projection:
        bh.projection = None
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok), pad=False)
    try:
        # a small budget makes many passes, so both workers (and the shared stop hooks) are busy at once
        one = masked.run_masked(bh, items, batch_tokens=64, workers=1, **opts)
        finished: list[int] = []
        two = masked.run_masked(bh, items, batch_tokens=64, workers=2, on_item=lambda i, lps: finished.append(i), **opts)
        three = masked.run_masked(bh, items, batch_tokens=1 << 14, workers=3, **opts)
    finally:
        bh.projection = saved
    assert sorted(finished) == list(range(len(items)))
    for a, b, c, it in zip(one, two, three, items):
        assert len(a) == len(it.targets)
        assert b == pytest.approx(a, abs=1e-5)
        assert c == pytest.approx(a, abs=1e-5)
    # no stop hook is left behind on the model
    assert not any(m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("projection", [True, False])
def test_causal_workers_give_the_sequential_numbers(clm, projection):
    model, tok = clm
    # pairs share prefixes, so workers meet the same prefix normalisers
    items = [encode_causal(tok, "", s, i, limit=64, truncate=False) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "causal", list(items[0].ids))
    saved = bh.projection
    if not projection:
        bh.projection = None
    opts = dict(pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0, vocab_size=len(tok), pad=False)
    try:
        one = causal.run_causal(bh, items, batch_tokens=16, workers=1, **opts)
        finished: list[int] = []
        two = causal.run_causal(bh, items, batch_tokens=16, workers=2, on_item=lambda i, lps: finished.append(i), **opts)
    finally:
        bh.projection = saved
    assert sorted(finished) == list(range(len(items)))
    for a, b, it in zip(one, two, items):
        assert len(a) == len(it.ids) - it.start
        assert b == pytest.approx(a, abs=1e-5)
    assert not any(m._forward_pre_hooks for m in model.modules())
