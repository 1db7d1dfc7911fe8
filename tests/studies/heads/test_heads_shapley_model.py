"""Known answer on a real model: the batched, deduplicated walk with the frozen prefix replayed gives
the Shapley values of a brute-force computation (every coalition in its own full forward pass, then
the subset formula written out here)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from stereolens.studies.heads.attribution import heads_of_layers
from stereolens.studies.heads.probe import GatedEncoder, LinearProbe, ProbeValue
from stereolens.studies.heads.shapley import permutation_shapley

TEXTS = ["The doctors were kind and rich. Doctors are lazy.", "The nurses were warm and cold. Nurses are smart.",
         "The farmers were poor and honest. Farmers are lazy.", "The artists were brave and boring. Artists are smart.",
         "A short one.", "The teachers were strong and warm. Teachers are lazy."]


def _three_layer_model(family: str, vocab: int):
    """A random three-layer model with 2 heads per layer: heads of layers 1 and 2 are the players,
    so layer 0 is the frozen prefix the walk replays."""
    torch.manual_seed(7)
    if family == "bert":
        from transformers import BertConfig, BertModel
        return BertModel(BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=64)).eval()
    from transformers import LlamaConfig, LlamaModel
    return LlamaModel(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128)).eval()


def _value_function(model, tok, pooling: str, players, *, reuse_prefix: bool, max_rows: int):
    encoder = GatedEncoder(model, tok, pooling=pooling, gated_layers=[1, 2], reuse_prefix=reuse_prefix)
    encoder.encode(TEXTS)
    rows = list(range(len(TEXTS)))
    with torch.no_grad():
        feats = encoder.features(rows)
    torch.manual_seed(0)
    probe = LinearProbe(feats.shape[1])
    probe.mean.copy_(feats.mean(0))
    probe.scale.copy_(feats.std(0).clamp_min(1e-6))
    labels = torch.tensor([1, 0] * (len(TEXTS) // 2))
    # minus the cross-entropy: a continuous value, so every head's marginal is non-zero somewhere
    return encoder, ProbeValue(encoder, probe.eval(), rows, labels, players, metric="loss", max_rows=max_rows)


def _brute_force_shapley(value_fn, n: int) -> np.ndarray:
    """phi_i = sum over S without i of |S|! (n - |S| - 1)! / n! (v(S + i) - v(S)), one coalition per pass."""
    value = {}
    for bits in itertools.product([False, True], repeat=n):
        value[bits] = float(value_fn(np.array([bits]))[0])
    phi = np.zeros(n)
    for bits, v in value.items():
        for i in range(n):
            if not bits[i]:
                with_i = bits[:i] + (True,) + bits[i + 1:]
                phi[i] += math.factorial(sum(bits)) * math.factorial(n - sum(bits) - 1) / math.factorial(n) * (value[with_i] - v)
    return phi


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_walk_over_every_permutation_equals_brute_force_on_a_tiny_model(family, mlm, clm):
    tok = mlm[1] if family == "bert" else clm[1]
    model = _three_layer_model(family, len(tok))
    pooling = "first" if family == "bert" else "last"
    players = heads_of_layers([1, 2], 2)
    fast, value_fn = _value_function(model, tok, pooling, players, reuse_prefix=True, max_rows=64)
    try:
        assert fast.prefix.first_gated == 1  # layer 0 is replayed, not recomputed
        perms = np.array(list(itertools.permutations(range(len(players)))))
        estimate = permutation_shapley(value_fn, perms, step=2)
    finally:
        fast.gate.remove()
    plain, one_at_a_time = _value_function(model, tok, pooling, players, reuse_prefix=False, max_rows=len(TEXTS))
    try:
        truth = _brute_force_shapley(one_at_a_time, len(players))
    finally:
        plain.gate.remove()
    assert np.abs(truth).min() > 1e-4  # every head matters, so the comparison is not 0 == 0
    np.testing.assert_allclose(estimate.values, truth, rtol=0, atol=1e-6)
    assert estimate.n_evaluations == 2 ** len(players)  # each distinct coalition evaluated once
