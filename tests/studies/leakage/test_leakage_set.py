"""SeT (Cao et al. 2022): the closed-form multiclass update against direct numerical solutions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from stereolens.studies.leakage.items import AssociationItem
from stereolens.studies.leakage.set_score import (
    guarded_log1m,
    masked_head_inputs,
    multiclass_update_norm,
    set_item_scores,
)


def _direct_frobenius(W: np.ndarray, x: np.ndarray, j: int, margin: float = 1.0) -> float:
    """min ||B - W||_F s.t. (Bx)_j >= (Bx)_i + margin, solved over all entries of B with SLSQP."""
    V, D = W.shape

    def unpack(v):
        return v.reshape(V, D)

    def grad(i):
        g = np.zeros((V, D))
        g[j] += x
        g[i] -= x
        return g.ravel()

    cons = [
        {"type": "ineq", "fun": (lambda v, i=i: (unpack(v) @ x)[j] - (unpack(v) @ x)[i] - margin),
         "jac": (lambda v, i=i: grad(i))}
        for i in range(V) if i != j
    ]
    w0 = W.ravel()
    res = minimize(lambda v: float(np.sum((v - w0) ** 2)), w0, jac=lambda v: 2 * (v - w0), method="SLSQP",
                   constraints=cons, options={"maxiter": 1000, "ftol": 1e-12})
    assert res.success, res.message
    return math.sqrt(float(np.sum((res.x - W.ravel()) ** 2)))


def _direct_logit_qp(a: np.ndarray, j: int, x_norm: float, margin: float = 1.0) -> float:
    """The same optimisation over the logit change u (B = W + u x^T / ||x||^2), solved with SLSQP."""
    V = len(a)
    others = [i for i in range(V) if i != j]
    A = np.zeros((len(others), V))
    for r, i in enumerate(others):
        A[r, j], A[r, i] = 1.0, -1.0
    b = np.array([a[i] - a[j] + margin for i in others])
    res = minimize(lambda u: float(u @ u), np.zeros(V), jac=lambda u: 2 * u, method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda u: A @ u - b, "jac": lambda u: A}],
                   options={"maxiter": 1000, "ftol": 1e-14})
    assert res.success, res.message
    return math.sqrt(float(res.x @ res.x)) / x_norm


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_equals_direct_frobenius_solution(seed):
    rng = np.random.default_rng(seed)
    V, H = 9, 4
    W = rng.normal(size=(V, H + 1))
    x = np.append(rng.normal(size=H), 1.0)
    a = W @ x
    j = int(np.argsort(a)[2])  # a low-ranked target: several competitors must move
    closed = multiclass_update_norm(a, j, float(np.linalg.norm(x)))
    assert closed == pytest.approx(_direct_frobenius(W, x, j), rel=1e-4, abs=1e-6)


def test_already_top_with_margin_needs_no_change():
    a = np.array([0.0, 5.0, 1.0])
    assert multiclass_update_norm(a, 1, 2.0) == 0.0
    assert guarded_log1m(0.0) == 0.0


def test_guard_of_log_one_minus_norm():
    assert guarded_log1m(0.5) == pytest.approx(math.log(0.5))
    assert math.isnan(guarded_log1m(1.5, "nan"))
    assert guarded_log1m(1.5, "clip") == pytest.approx(math.log(1e-6))
    assert guarded_log1m(1.5, "neg_norm") == -1.5


def test_set_on_tiny_masked_lm_equals_numerical_solution(tiny_masked_lm_dir):
    """At a real mask position of the tiny model: closed form == SLSQP on the same problem."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    enc = tok(f"the women are {tok.mask_token} .", return_tensors="pt")
    pos = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0])
    x, logits = masked_head_inputs(model, enc["input_ids"], enc["attention_mask"])
    x = x[0, pos].double().numpy()
    a = logits[0, pos].double().numpy()
    decoder = model.get_output_embeddings()
    W = torch.cat([decoder.weight.detach(), decoder.bias.detach().unsqueeze(1)], dim=1).double().numpy()
    x_tilde = np.append(x, 1.0)
    np.testing.assert_allclose(W @ x_tilde, a, rtol=1e-4, atol=1e-4)  # the hook captured the head's input/output
    j = int(np.argsort(a)[len(a) // 2])  # a mid-ranked token: about half the vocabulary competes
    closed = multiclass_update_norm(a, j, float(np.linalg.norm(x_tilde)))
    direct = _direct_logit_qp(a, j, float(np.linalg.norm(x_tilde)))
    assert closed > 0
    assert closed == pytest.approx(direct, rel=1e-3)


def test_set_item_scores_sum_and_min_over_pieces(tiny_masked_lm_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    # a word the tiny WordPiece vocabulary splits into several pieces
    word = next(w for w in ("unconfident", "untrustworthy", "benevolent", "altruistic", "egoistic")
                if len(tok(w, add_special_tokens=False)["input_ids"]) > 1)
    item = AssociationItem("en", "t", "woman", word, word, "Women are ", ".")
    s_sum = set_item_scores(model, tok, [item], piece_aggregation="sum")[0]
    s_min = set_item_scores(model, tok, [item], piece_aggregation="min")[0]
    assert s_sum <= s_min <= 0
    single = AssociationItem("en", "t", "woman", "the", "the", "Women are ", ".")
    assert set_item_scores(model, tok, [single], piece_aggregation="sum")[0] == pytest.approx(
        set_item_scores(model, tok, [single], piece_aggregation="min")[0])


def _head_input_without_hook(model, enc, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """(x~, logits) at ``pos`` from the hidden states and the MLM head's own modules (no forward hook)."""
    import torch

    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
        x = model.cls.predictions.transform(out.hidden_states[-1][0, pos]).double().numpy()
        logits = out.logits[0, pos].double().numpy()
    return np.append(x, 1.0), logits


def test_set_item_scores_equals_guarded_log_of_direct_solution(tiny_masked_lm_dir):
    """The public path for a single-piece trait == log(1 - ||B - W'||_F) with the norm solved numerically.

    The norm comes from SLSQP over the logit change u over the whole vocabulary (every token
    competes in the untrained model); that ||B - W'||_F = ||u|| / ||x~|| is verified separately by
    SLSQP over the full weight matrix (bias column included) on a 20-token slice of the vocabulary.
    """
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    word = "cold"
    assert len(tok(word, add_special_tokens=False)["input_ids"]) == 1
    j = tok.convert_tokens_to_ids(word)
    enc = tok(f"Women are {tok.mask_token}.", return_tensors="pt")
    pos = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0])
    x_tilde, a = _head_input_without_hook(model, enc, pos)
    decoder = model.get_output_embeddings()
    W = torch.cat([decoder.weight.detach(), decoder.bias.detach().unsqueeze(1)], dim=1).double().numpy()
    np.testing.assert_allclose(W @ x_tilde, a, rtol=1e-5, atol=1e-5)
    x_norm = float(np.linalg.norm(x_tilde))

    # the identity on a vocabulary slice: the target and 19 tokens around it in logit order
    order = list(np.argsort(-a))
    rank = order.index(j)
    slice_ids = sorted(order[max(0, rank - 10) : rank + 10])
    assert j in slice_ids and len(slice_ids) == 20
    j_slice = slice_ids.index(j)
    over_weights = _direct_frobenius(W[slice_ids], x_tilde, j_slice)
    over_logits = _direct_logit_qp(a[slice_ids], j_slice, x_norm)
    assert over_weights > 0
    assert over_weights == pytest.approx(over_logits, rel=1e-4)

    norm = _direct_logit_qp(a, j, x_norm)
    assert 0 < norm < 1  # log(1 - norm) is defined, so every guard must give exactly it
    item = AssociationItem("en", "t", "woman", word, word, "Women are ", ".")
    for guard in ("clip", "nan"):
        score = set_item_scores(model, tok, [item], guard=guard)[0]
        assert score == pytest.approx(math.log(1.0 - norm), rel=1e-4)
    # a different trait token gives a different score: the public path really scores the gold token
    other = AssociationItem("en", "t", "woman", "warm", "warm", "Women are ", ".")
    assert set_item_scores(model, tok, [other])[0] != pytest.approx(math.log(1.0 - norm), rel=1e-4)
