"""The key-value-cache scorers (one and two levels of shared context) against a plain full forward pass."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stereolens.models import ModelSpec, load_model
from stereolens.models.cache import ResponseCache
from stereolens.scoring.continuations import split_context
from stereolens.scoring.shared_context import prefixed_context_logprobs, shared_context_logprobs

PREFIX = "You are a writer. Pick the word that describes"
CONTEXTS = [f"{PREFIX} {who} best: warm or cold? Answer:" for who in ("nurses", "the people of Texas", "teachers")]
CONTINUATIONS = [" warm", " cold", " neither of the two words"]


def _requests() -> tuple[list[str], list[str], list[str]]:
    contexts = [c for c in CONTEXTS for _ in CONTINUATIONS]
    continuations = [o for _ in CONTEXTS for o in CONTINUATIONS]
    return [PREFIX] * len(contexts), contexts, continuations


def _reference(model_dir, contexts, continuations) -> list[tuple[float, int]]:
    """sum log P(continuation tokens | BOS + context) from one full forward pass per request."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = []
    for context, continuation in zip(contexts, continuations):
        ctx, cont = split_context(context, continuation)
        ctx_ids = tok(ctx, add_special_tokens=False)["input_ids"]
        whole = tok(ctx + cont, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([[bos] + whole])
        with torch.inference_mode():
            logp = torch.log_softmax(lm(input_ids=ids).logits[0].double(), dim=-1)
        n_ctx = 1 + len(ctx_ids)
        targets = ids[0, n_ctx:]
        out.append((float(logp[n_ctx - 1 : -1].gather(1, targets.unsqueeze(1)).sum()), len(targets)))
    return out


@pytest.fixture(scope="module")
def causal_dir(tiny_causal_lm_dir):
    return tiny_causal_lm_dir


@pytest.mark.parametrize("max_rows", [2, 256])
def test_shared_context_equals_a_full_forward_pass(causal_dir, max_rows):
    _prefixes, contexts, continuations = _requests()
    lm = load_model(ModelSpec(name=str(causal_dir), kind="causal"), cache=ResponseCache(enabled=False))
    got = shared_context_logprobs(lm, contexts, continuations, max_rows=max_rows)
    want = _reference(causal_dir, contexts, continuations)
    assert [n for _lp, n in got] == [n for _lp, n in want]
    assert max(n for _lp, n in want) > 1  # multi-token continuations exercise the expanded cache
    assert [lp for lp, _n in got] == pytest.approx([lp for lp, _n in want], abs=1e-4)


@pytest.mark.parametrize("max_rows", [2, 96])
def test_prefixed_context_equals_a_full_forward_pass_and_fills_the_same_cache(causal_dir, tmp_path, max_rows):
    prefixes, contexts, continuations = _requests()
    lm = load_model(ModelSpec(name=str(causal_dir), kind="causal"), cache=ResponseCache(tmp_path / "cache"))
    got = prefixed_context_logprobs(lm, prefixes, contexts, continuations, max_rows=max_rows)
    want = _reference(causal_dir, contexts, continuations)
    assert [n for _lp, n in got] == [n for _lp, n in want]
    assert [lp for lp, _n in got] == pytest.approx([lp for lp, _n in want], abs=1e-4)
    # the one-level scorer now answers every request from the entries the two-level one wrote
    before = lm.cache.hits
    again = shared_context_logprobs(lm, contexts, continuations)
    assert lm.cache.hits - before == len(contexts)
    assert again == got
