"""Forward passes side by side on a CPU: same numbers, every batch once, errors surface, threads restored."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

from stereolens.scoring import batching, causal, masked
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


# Guards against a hang, never part of an assertion: the tests below order the threads with
# a barrier and events and assert on what each thread recorded, not on how long anything took.
WAIT_S = 10


def _running_batching_code(thread_id: int) -> bool:
    """Whether the thread is still inside run_in_workers' own code (not yet back in the pool)."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_filename == batching.__file__:
            return True
        frame = frame.f_back
    return False


def test_every_batch_runs_once_on_concurrent_single_threaded_workers():
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()
    # each worker waits at the barrier with its first batch: it is passed only when both
    # workers hold a batch at the same time (one worker alone breaks it)
    both_working = threading.Barrier(2, timeout=WAIT_S)

    def work(batches):
        for i, b in enumerate(batches):
            if i == 0:
                both_working.wait()
            with lock:
                seen.append((b, torch.get_num_threads(), threading.current_thread().name))

    before = torch.get_num_threads()
    run_in_workers(list(range(40)), work, workers=2)
    assert sorted(b for b, _, _ in seen) == list(range(40))
    assert {n for _, n, _ in seen} == {1}
    assert len({name for _, _, name in seen}) == 2
    assert torch.get_num_threads() == before


def test_first_error_stops_the_others_after_their_current_batch_and_restores_threads():
    started: list[tuple[int, str]] = []
    lock = threading.Lock()
    both_working = threading.Barrier(2, timeout=WAIT_S)
    failed = threading.Event()
    failing_thread: list[int] = []

    def work(batches):
        for i, b in enumerate(batches):
            with lock:
                started.append((b, threading.current_thread().name))
            if i == 0:
                both_working.wait()
            if b == 0:
                failing_thread.append(threading.get_ident())
                failed.set()
                raise ValueError("batch 0 is broken")
            if i == 0:
                # the healthy worker finishes its batch only once the error has left the failing worker
                assert failed.wait(WAIT_S)
                deadline = time.monotonic() + WAIT_S
                while _running_batching_code(failing_thread[0]):
                    assert time.monotonic() < deadline, "the failing worker never finished"
                    time.sleep(0.001)

    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="batch 0 is broken"):
        run_in_workers(list(range(200)), work, workers=2)
    assert torch.get_num_threads() == before
    # one batch each: the failing one, and the one the healthy worker held; it took no other
    assert sorted(b for b, _ in started) == [0, 1]
    assert len({name for _, name in started}) == 2


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


def _with_each_worker_slowed(model, run) -> dict[str, object]:
    """``run()`` as the passes fall to the workers, then with worker 0's and worker 1's passes held back in turn
    (the other worker takes the passes it would have)."""
    runs = {"none": run()}
    for slow in ("_0", "_1"):
        def hook(module, args, output, slow=slow):
            if threading.current_thread().name.endswith(slow):
                time.sleep(0.02)

        handle = model.get_input_embeddings().register_forward_hook(hook)
        try:
            runs[slow] = run()
        finally:
            handle.remove()
    return runs


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r"])
def test_workers_give_the_same_bits_however_the_passes_fall_to_them(mlm, metric):
    """A row's normaliser can move in its last bits with the rows projected beside it, so the groups follow
    the plan: which worker ran which pass (timing) must not move a score.  Before the groups followed the
    plan, 4 to 6 of 200 repeated two-sentence calls gave another last digit (CI failed on one)."""
    model, tok = mlm
    make = masked.pll_item if metric == "pll" else masked.pll_word_l2r_item
    items = [make(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=True)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    assert bh.projection is not None
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok), pad=False,
                batch_tokens=64, workers=2)
    runs = _with_each_worker_slowed(model, lambda: masked.run_masked(bh, items, **opts))
    assert runs["_0"] == runs["none"]
    assert runs["_1"] == runs["none"]


def test_causal_workers_give_the_same_bits_however_the_passes_fall_to_them(clm):
    model, tok = clm
    items = [encode_causal(tok, "", s, i, limit=64, truncate=False) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "causal", list(items[0].ids))
    assert bh.projection is not None
    opts = dict(pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0, vocab_size=len(tok), pad=False,
                batch_tokens=16, workers=2)
    runs = _with_each_worker_slowed(model, lambda: causal.run_causal(bh, items, **opts))
    assert runs["_0"] == runs["none"]
    assert runs["_1"] == runs["none"]
