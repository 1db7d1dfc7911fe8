"""StereoSet candidate scores under a head gate equal direct forward passes computed by hand (sum and per-token mean)."""

from __future__ import annotations

import numpy as np
import torch

from stereolens.studies.heads.candidates import candidate_scores, causal_scores, masked_scores
from stereolens.studies.heads.gates import HeadGate

CONTEXT, CANDIDATE = "The doctors were kind and smart.", "Doctors are lazy."


def _zero_head(gate: HeadGate, layer: int, head: int):
    projection = gate.projections[layer]
    head_dim = projection.in_features // gate.n_heads

    def hook(module, args):
        x = args[0].clone()
        x[..., head * head_dim:(head + 1) * head_dim] = 0.0
        return (x,)

    return projection.register_forward_pre_hook(hook)


def _gated(gate: HeadGate, layer: int, head: int) -> torch.Tensor:
    g = gate.ones()
    g[layer, head] = 0.0
    return g


def test_causal_score_with_a_pruned_head_equals_a_direct_forward_pass(clm):
    model, tok = clm
    gate = HeadGate(model)
    try:
        with gate.applied(_gated(gate, 1, 0)):
            ours = causal_scores(model, tok, [CONTEXT], [CANDIDATE], score="sum")[0]
            mean = candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE])[0]  # the default
        ungated = causal_scores(model, tok, [CONTEXT], [CANDIDATE], score="sum")[0]
        handle = _zero_head(gate, 1, 0)
        ctx = tok(CONTEXT)["input_ids"]
        cand = tok(" " + CANDIDATE, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ctx + cand])).logits[0].log_softmax(-1)
        handle.remove()
    finally:
        gate.remove()
    direct = sum(float(logp[len(ctx) + k - 1, t]) for k, t in enumerate(cand))
    assert abs(ours - direct) < 1e-4
    assert len(cand) > 1 and abs(mean - direct / len(cand)) < 1e-5
    assert abs(ours - ungated) > 1e-3  # the pruned head changes the score


def test_masked_pll_word_l2r_with_a_pruned_head_equals_a_direct_loop(mlm):
    model, tok = mlm
    gate = HeadGate(model)
    try:
        with gate.applied(_gated(gate, 0, 1)):
            ours = masked_scores(model, tok, [CONTEXT], [CANDIDATE], score="sum")[0]
            mean = candidate_scores(model, tok, "masked", [CONTEXT], [CANDIDATE])[0]  # the default
        ungated = masked_scores(model, tok, [CONTEXT], [CANDIDATE], score="sum")[0]
        handle = _zero_head(gate, 0, 1)
        enc = tok(CONTEXT + " " + CANDIDATE, return_offsets_mapping=True)
        ids, words = enc["input_ids"], enc.word_ids()
        scored = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if s >= len(CONTEXT) and e > s]
        direct = 0.0
        with torch.no_grad():
            for i in scored:
                copy = list(ids)
                for j in scored:
                    if j >= i and words[j] == words[i]:
                        copy[j] = tok.mask_token_id
                logp = model(input_ids=torch.tensor([copy])).logits[0, i].log_softmax(-1)
                direct += float(logp[ids[i]])
        handle.remove()
    finally:
        gate.remove()
    assert len(scored) >= 3
    np.testing.assert_allclose(ours, direct, atol=1e-5)
    np.testing.assert_allclose(mean, direct / len(scored), atol=1e-6)
    assert abs(ours - ungated) > 1e-4  # the pruned head changes the score by more than the tolerance


def test_candidates_of_different_lengths_follow_the_configured_score(clm):
    model, tok = clm
    contexts, candidates = [CONTEXT, CONTEXT], ["Doctors are lazy and boring and cold and poor.", "Lazy."]
    summed = candidate_scores(model, tok, "causal", contexts, candidates, score="sum")
    mean = candidate_scores(model, tok, "causal", contexts, candidates, score="mean")
    counts = [len(tok(" " + c, add_special_tokens=False)["input_ids"]) for c in candidates]
    np.testing.assert_allclose(mean, summed / np.asarray(counts), atol=1e-9)
    assert counts[0] >= 2 * counts[1]


def test_stereosets_own_generative_score_is_not_offered_under_a_gate(clm):
    import pytest

    from stereolens.errors import ConfigError

    model, tok = clm
    with pytest.raises(ConfigError, match="mean or sum, not 'stereoset_generative'"):
        candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE], score="stereoset_generative")
