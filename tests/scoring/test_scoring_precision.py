"""bfloat16, the opt-in reduced precision: same pair decisions as float32, bounded score differences.

A model loaded with ``dtype: bfloat16`` runs its network in bfloat16 and the vocabulary
normaliser in float32 (projection.float32_normaliser).  On the tiny test models the
largest score difference to float32 was 0.006 nats on sentence scores of about -25
(measured 2026-11-27), so the bound below leaves a factor of three.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tiny_models import EXTRA, SUBJECTS, TRAITS

from stereolens.scoring import score_pair_lists
from stereolens.scoring.access import split_head
from stereolens.scoring.engine import _base_payload
from stereolens.scoring.projection import VocabProjection, float32_normaliser

# the largest |bf16 - fp32| score allowed, in nats, for sentences of 4-15 tokens
BOUND = 0.02
# a float32 margin this small is a tie for this comparison: a quarter of BOUND, below the
# 2 x BOUND by which a margin could move, so agreement above it is measured, not implied
NEAR_TIE = BOUND / 4

FIRST = [f"{s.capitalize()} are {t}." for s in SUBJECTS for t in TRAITS[:6]] + EXTRA[:6]
SECOND = [f"{s.capitalize()} are {u}." for s in SUBJECTS for u in TRAITS[6:12]] + EXTRA[6:12]


@pytest.fixture(scope="module")
def masked_pair(tiny_masked_lm_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    return (AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval(),
            AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir, dtype=torch.bfloat16).eval(), tok)


@pytest.fixture(scope="module")
def causal_pair(tiny_causal_lm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_causal_lm_dir)
    return (AutoModelForCausalLM.from_pretrained(tiny_causal_lm_dir).eval(),
            AutoModelForCausalLM.from_pretrained(tiny_causal_lm_dir, dtype=torch.bfloat16).eval(), tok)


def _margins(model, tok, metric: str) -> tuple[list[float], list[float]]:
    a, b = score_pair_lists(model, tok, FIRST, SECOND, metric)
    return [x.logprob - y.logprob for x, y in zip(a, b)], [s.logprob for s in (*a, *b)]


@pytest.mark.parametrize("kind,metric", [("masked", "pll"), ("masked", "pll_word_l2r"), ("causal", "causal")])
def test_bf16_and_fp32_pair_decisions_agree_and_scores_stay_within_the_bound(masked_pair, causal_pair, kind, metric):
    full, half, tok = masked_pair if kind == "masked" else causal_pair
    assert next(half.parameters()).dtype == torch.bfloat16
    margins32, scores32 = _margins(full, tok, metric)
    margins16, scores16 = _margins(half, tok, metric)
    largest = max(abs(x - y) for x, y in zip(scores16, scores32))
    assert 0 < largest <= BOUND  # bfloat16 did run (the scores moved), and not far
    # every decision agrees except where float32 itself is within a few thousandths of a tie
    # (the tokenizers are trained per session, so a near-tie can come and go between sessions)
    decided = [i for i, x in enumerate(margins32) if abs(x) > NEAR_TIE]
    assert len(decided) >= 0.75 * len(margins32)  # most pairs are decided: the check has something to check
    flipped = [i for i in decided if (margins32[i] > 0) != (margins16[i] > 0)]
    assert flipped == [], f"pairs whose decision flipped in bfloat16: {flipped}"


def test_crows_decisions_agree_wherever_the_margin_exceeds_the_error(masked_pair):
    # the CrowS metric scores only a pair's shared tokens; on a random tiny model most margins are
    # near zero, where no precision decides anything: only margins the error cannot reach must agree
    full, half, tok = masked_pair
    margins32, scores32 = _margins(full, tok, "crows")
    margins16, scores16 = _margins(half, tok, "crows")
    assert max(abs(x - y) for x, y in zip(scores16, scores32)) <= BOUND
    for x, y in zip(margins32, margins16):
        if abs(x) > 2 * BOUND:
            assert (x > 0) == (y > 0)


def test_a_half_precision_split_widens_its_normaliser_and_fp32_keeps_its_own(masked_pair, causal_pair):
    for full, half, tok in (masked_pair, causal_pair):
        ids = tok("Women are kind.")["input_ids"]
        kind = "masked" if tok.mask_token_id is not None else "causal"
        assert split_head(half, kind, ids).projection.widen is True
        assert split_head(full, kind, ids).projection.widen is False


def test_the_widened_normaliser_is_float32_arithmetic_on_the_half_precision_weights():
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(5000, 64, generator=g) * 0.5).to(torch.bfloat16)
    bias = (torch.randn(5000, generator=g) * 0.1).to(torch.bfloat16)
    rows = torch.randn(40, 64, generator=g).to(torch.bfloat16)
    exact = torch.logsumexp(rows.float() @ weight.float().T + bias.float(), dim=-1)
    narrow = VocabProjection(weight, bias)
    wide = float32_normaliser(narrow)
    assert wide.widen and not narrow.widen
    # blocks of 512 words: the running maximum and sum are exercised across blocks
    assert torch.allclose(wide.logsumexp(rows, block=512), exact, atol=1e-5, rtol=0)
    # the bfloat16 product rounds each logit to 8 significant bits: visibly further off
    assert (narrow.logsumexp(rows, block=512) - exact).abs().max() > 10 * (wide.logsumexp(rows, block=512) - exact).abs().max()
    # a float32 projection is left as it is
    plain = VocabProjection(weight.float(), bias.float())
    assert float32_normaliser(plain) is plain
    assert replace(wide, widen=False) == narrow


def test_precision_is_in_the_cache_key_and_fp32_keys_are_unchanged(masked_pair):
    full, half, tok = masked_pair
    key32 = _base_payload(object(), full, "m", "pll", {"truncate": False})
    key16 = _base_payload(object(), half, "m", "pll", {"truncate": False})
    assert key32["params"] == {"truncate": False, "dtype": "float32"}  # what every cached fp32 score was stored under
    assert key16["params"] == {"truncate": False, "dtype": "bfloat16", "normaliser": "float32"}
