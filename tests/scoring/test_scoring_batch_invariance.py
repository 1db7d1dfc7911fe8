"""Scores do not depend on how sentences are batched (issue 33, part 6).

The same sentences scored at several ``batch_tokens`` budgets (one row per forward pass up
to everything in one pass), in several orders, with passes of one length (a CPU's) or padded
passes of mixed lengths with an attention mask (a GPU's), and on one or several workers,
give the same log-probabilities to a relative ``RTOL`` of each sentence's score (the bound
docs/reliability.md states; measured on the tiny models: at most 3.1e-8, float32 rounding).
"""

from __future__ import annotations

import copy
import math
import random

import pytest

from stereolens.scoring import causal, masked, score_sentences
from stereolens.scoring.access import split_head
from stereolens.scoring.encoding import encode_causal, encode_masked

# the bound docs/reliability.md states ("Scores do not depend on batch size or packing")
RTOL = 1e-6

SENTENCES = [
    "Women are kind.",
    "The poor are really ignorant about how to handle money.",
    "He couldn't figure out the issue with the rope.",
    "Unbelievably, everything worked out perfectly in the end.",
    "Люди из этой деревни очень добрые и трудолюбивые.",
    "医生们每天都工作很长时间。",
    "ये लोग बहुत मेहनती और ईमानदार हैं।",
    "یہ لوگ بہت محنتی اور ایماندار ہیں۔",
    "The doctors were kind.",
    "The nurses were kind.",  # the same length as the one above: they share a pass
    "Women are kind.",  # a duplicate is scored once and given to both rows
]
# one row per pass, a few rows, a pass per length, everything in one budget
BATCH_TOKENS = (1, 7, 64, 1 << 16)
ORDERS = {
    "given": SENTENCES,
    "reversed": SENTENCES[::-1],
    "shuffled": random.Random(0).sample(SENTENCES, len(SENTENCES)),
}


def _assert_same(got: dict[str, float], reference: dict[str, float], what: str) -> None:
    assert got.keys() == reference.keys()
    for sentence, value in got.items():
        assert value == pytest.approx(reference[sentence], rel=RTOL), f"{what}: {sentence!r}"


@pytest.mark.parametrize("metric", ["pll", "pll_word_l2r", "causal"])
def test_batch_budget_and_order_do_not_change_scores(mlm, clm, metric):
    model, tok = clm if metric == "causal" else mlm
    reference = {s: x.logprob for s, x in zip(SENTENCES, score_sentences(model, tok, SENTENCES, metric))}
    for batch_tokens in BATCH_TOKENS:
        for order, sentences in ORDERS.items():
            scores = score_sentences(model, tok, sentences, metric, batch_tokens=batch_tokens)
            got = {}
            for sentence, score in zip(sentences, scores):
                # a sentence given twice gets one score
                assert got.setdefault(sentence, score.logprob) == score.logprob
            _assert_same(got, reference, f"{metric}, batch_tokens={batch_tokens}, {order} order")


def _sums(per_target: list[list[float]]) -> dict[str, float]:
    return {s: math.fsum(lps) for s, lps in zip(SENTENCES, per_target)}


def _assert_packing_invariant(run) -> None:
    """``run(pad=, workers=, batch_tokens=)`` (per-target log-probabilities of SENTENCES) sums to the same
    scores padded or not, on one or two workers, at three budgets."""
    reference = _sums(run(pad=False, workers=1, batch_tokens=8192))
    for pad in (False, True):
        for workers in (1, 2):
            for batch_tokens in (16, 300, 1 << 16):
                got = _sums(run(pad=pad, workers=workers, batch_tokens=batch_tokens))
                _assert_same(got, reference, f"pad={pad}, workers={workers}, batch_tokens={batch_tokens}")


@pytest.mark.parametrize("word_l2r", [False, True], ids=["pll", "pll_word_l2r"])
def test_masked_padded_packing_and_workers_do_not_change_scores(mlm, word_l2r):
    model, tok = mlm
    build = masked.pll_word_l2r_item if word_l2r else masked.pll_item
    items = [build(encode_masked(tok, s, i, limit=64, truncate=False, word_ids=word_l2r)) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "masked", list(items[0].enc.ids))
    opts = dict(mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, vocab_size=len(tok))
    _assert_packing_invariant(lambda **packing: masked.run_masked(bh, items, **packing, **opts))


def test_causal_padded_packing_and_workers_do_not_change_scores(clm):
    model, tok = clm
    encs = [encode_causal(tok, "", s, i, limit=128, truncate=False) for i, s in enumerate(SENTENCES)]
    bh = split_head(model, "causal", list(encs[0].ids[:-1]))
    opts = dict(pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id, vocab_size=len(tok))
    _assert_packing_invariant(lambda **packing: causal.run_causal(bh, encs, **packing, **opts))


# ---------------------------------------------------------------- lineage


def test_scoring_setup_records_how_passes_are_packed(tiny_masked_lm_dir, mlm):
    import torch

    from stereolens.models import load_model, spec_from_config
    from stereolens.scoring import DEFAULT_BATCH_TOKENS, scoring_setup

    lm = load_model(spec_from_config({"name": str(tiny_masked_lm_dir), "kind": "masked", "backend": "hf",
                                      "dtype": "float32", "device": "cpu"}))
    setup = scoring_setup(lm, batch_tokens=1024)
    assert setup == {
        "scoring.backend": "hf", "scoring.model_class": type(lm).__name__, "scoring.device": "cpu",
        "scoring.dtype": "float32", "scoring.batch_tokens": "1024", "scoring.padding_side": "right",
        # on a CPU every pass holds one length; masked passes run one per thread side by side
        "scoring.padded_passes": "false", "scoring.masked_workers": str(torch.get_num_threads()),
        "scoring.torch_threads": str(torch.get_num_threads()),
    }
    # a bare torch model in bfloat16, at the engine's default budget
    bare = scoring_setup(copy.deepcopy(mlm[0]).to(torch.bfloat16))
    assert bare["scoring.dtype"] == "bfloat16" and bare["scoring.batch_tokens"] == str(DEFAULT_BATCH_TOKENS)
