"""The per-head gate: exact when all heads are on, equal to zeroing a head's slice by hand,
the same per example as one gate at a time, and the replayed frozen prefix changes nothing."""

from __future__ import annotations

import pytest
import torch

from stereolens.studies.heads.gates import FrozenPrefix, HeadGate
from stereolens.studies.heads.probe import GatedEncoder

TEXTS = ["The nurse was kind to everyone.", "Los ingenieros son muy precisos.", "A short one."]


@pytest.fixture(params=["masked", "causal"])
def base_model(request, mlm, clm):
    model, tok = mlm if request.param == "masked" else clm
    return model.base_model, tok


def _batch(tok):
    tok.padding_side = "right"
    return tok(TEXTS, padding=True, return_tensors="pt")


def test_all_heads_on_equals_the_ungated_model_exactly(base_model):
    model, tok = base_model
    enc = _batch(tok)
    with torch.no_grad():
        plain = model(**enc).last_hidden_state
        gate = HeadGate(model)
        try:
            with gate.applied(gate.ones()):
                gated = model(**enc).last_hidden_state
            with gate.applied(torch.ones(len(TEXTS), gate.n_layers, gate.n_heads)):
                per_example = model(**enc).last_hidden_state
        finally:
            gate.remove()
    assert torch.equal(plain, gated) and torch.equal(plain, per_example)


def test_a_gated_head_equals_zeroing_its_slice_by_hand(base_model):
    model, tok = base_model
    enc = _batch(tok)
    layer, head = 1, 1
    gate = HeadGate(model)
    projection = gate.projections[layer]
    head_dim = projection.in_features // gate.n_heads

    def zero_slice(module, args):
        x = args[0].clone()
        x[..., head * head_dim:(head + 1) * head_dim] = 0.0
        return (x,)

    try:
        with torch.no_grad():
            g = gate.ones()
            g[layer, head] = 0.0
            with gate.applied(g):
                gated = model(**enc).last_hidden_state
            handle = projection.register_forward_pre_hook(zero_slice)
            by_hand = model(**enc).last_hidden_state
            handle.remove()
            plain = model(**enc).last_hidden_state
    finally:
        gate.remove()
    assert torch.equal(gated, by_hand)
    assert not torch.allclose(gated, plain)  # the head mattered, so the check can fail


def test_per_example_gates_equal_one_gate_at_a_time(base_model):
    model, tok = base_model
    enc = _batch(tok)
    gate = HeadGate(model)
    gates = torch.ones(len(TEXTS), gate.n_layers, gate.n_heads)
    gates[0, 0, 0] = 0.0
    gates[1, 1, 1] = 0.0
    gates[2, :, :] = 0.0
    try:
        with torch.no_grad():
            with gate.applied(gates):
                together = model(**enc).last_hidden_state
            alone = []
            for i in range(len(TEXTS)):
                with gate.applied(gates[i]):
                    alone.append(model(**enc).last_hidden_state[i])
    finally:
        gate.remove()
    torch.testing.assert_close(together, torch.stack(alone), rtol=1e-5, atol=1e-6)


def test_replayed_prefix_gives_the_full_pass_result(base_model):
    model, tok = base_model
    full = GatedEncoder(model, tok, pooling="mean", gated_layers=[1], reuse_prefix=False)
    reused = GatedEncoder(model, tok, pooling="mean", gated_layers=[1], reuse_prefix=True)
    try:
        full.encode(TEXTS)
        reused.encode(TEXTS)
        rows = torch.tensor([2, 0, 0, 1])
        gates = torch.ones(4, full.gate.n_layers, full.gate.n_heads)
        gates[1, 1, 0] = 0.0
        with torch.no_grad():
            a = full.features(rows, gates)
            b = reused.features(rows, gates)
    finally:
        full.gate.remove()
        reused.gate.remove()
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert isinstance(reused.prefix, FrozenPrefix) and reused.prefix.first_gated == 1
