"""StereoSet candidate scores under a head gate equal direct forward passes computed by hand."""

from __future__ import annotations

import numpy as np
import torch

from stereolens.studies.heads.candidates import causal_scores, masked_scores
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
            ours = causal_scores(model, tok, [CONTEXT], [CANDIDATE])[0]
        ungated = causal_scores(model, tok, [CONTEXT], [CANDIDATE])[0]
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
    assert abs(ours - ungated) > 1e-3  # the pruned head changes the score


def test_masked_pll_word_l2r_with_a_pruned_head_equals_a_direct_loop(mlm):
    model, tok = mlm
    gate = HeadGate(model)
    try:
        with gate.applied(_gated(gate, 0, 1)):
            ours = masked_scores(model, tok, [CONTEXT], [CANDIDATE])[0]
        ungated = masked_scores(model, tok, [CONTEXT], [CANDIDATE])[0]
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
    assert abs(ours - ungated) > 1e-4  # the pruned head changes the score by more than the tolerance
