"""StereoSet candidate scores under a head gate: direct forward passes computed by hand agree (sum and per-token
mean, [UNK] scored), and with every head on they are `stereolens stereo score`'s (one scorer for both studies)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from stereolens.cli import main
from stereolens.studies.heads.candidates import candidate_scores
from stereolens.studies.heads.gates import HeadGate

CONTEXT, CANDIDATE = "The doctors were kind and smart.", "Doctors are lazy."
# "ø" is not in the tiny WordPiece vocabulary: the candidate holds an [UNK] token
UNK_CANDIDATE = "Doctors are ø lazy."


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
        ours = candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE], gate, _gated(gate, 1, 0), score="sum")[0]
        mean = candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE], gate, _gated(gate, 1, 0))[0]  # default
        ungated = candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE], score="sum")[0]
        handle = _zero_head(gate, 1, 0)
        # lm-evaluation-harness' encoding: BOS + context, the candidate's tokens split off the whole text's
        ctx = tok(CONTEXT, add_special_tokens=False)["input_ids"]
        cand = tok(CONTEXT + " " + CANDIDATE, add_special_tokens=False)["input_ids"][len(ctx):]
        row = [tok.bos_token_id, *ctx, *cand]
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([row])).logits[0].log_softmax(-1)
        handle.remove()
    finally:
        gate.remove()
    direct = sum(float(logp[len(ctx) + k, t]) for k, t in enumerate(cand))
    assert abs(ours - direct) < 1e-4
    assert len(cand) > 1 and abs(mean - direct / len(cand)) < 1e-5
    assert abs(ours - ungated) > 1e-3  # the pruned head changes the score


def test_masked_pll_word_l2r_with_a_pruned_head_equals_a_direct_loop_unk_included(mlm):
    model, tok = mlm
    gate = HeadGate(model)
    try:
        ours = candidate_scores(model, tok, "masked", [CONTEXT], [UNK_CANDIDATE], gate, _gated(gate, 0, 1),
                                score="sum")[0]
        mean = candidate_scores(model, tok, "masked", [CONTEXT], [UNK_CANDIDATE], gate, _gated(gate, 0, 1))[0]
        ungated = candidate_scores(model, tok, "masked", [CONTEXT], [UNK_CANDIDATE], score="sum")[0]
        handle = _zero_head(gate, 0, 1)
        enc = tok(CONTEXT + " " + UNK_CANDIDATE, return_offsets_mapping=True, return_special_tokens_mask=True)
        ids, words = enc["input_ids"], enc.word_ids()
        # every token of the candidate but the added [CLS]/[SEP], [UNK] included
        scored = [i for i, ((s, e), special) in enumerate(zip(enc["offset_mapping"], enc["special_tokens_mask"]))
                  if s >= len(CONTEXT) and e > s and not special]
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
    assert tok.unk_token_id in [ids[i] for i in scored] and len(scored) >= 4
    np.testing.assert_allclose(ours, direct, atol=1e-5)
    np.testing.assert_allclose(mean, direct / len(scored), atol=1e-6)
    assert abs(ours - ungated) > 1e-4  # the pruned head changes the score by more than the tolerance


def test_candidates_of_different_lengths_follow_the_configured_score(clm):
    model, tok = clm
    contexts, candidates = [CONTEXT, CONTEXT], ["Doctors are lazy and boring and cold and poor.", "Lazy."]
    summed = candidate_scores(model, tok, "causal", contexts, candidates, score="sum")
    mean = candidate_scores(model, tok, "causal", contexts, candidates, score="mean")
    ctx = len(tok(CONTEXT, add_special_tokens=False)["input_ids"])
    counts = [len(tok(CONTEXT + " " + c, add_special_tokens=False)["input_ids"]) - ctx for c in candidates]
    np.testing.assert_allclose(mean, summed / np.asarray(counts), atol=1e-9)
    assert counts[0] >= 2 * counts[1]


def test_stereosets_own_generative_score_is_not_offered_under_a_gate(clm):
    from stereolens.errors import ConfigError

    model, tok = clm
    with pytest.raises(ConfigError, match="mean or sum, not 'stereoset_generative'"):
        candidate_scores(model, tok, "causal", [CONTEXT], [CANDIDATE], score="stereoset_generative")


# Characters the tiny WordPiece vocabulary lacks: each becomes [UNK] (a whole word, "Doctorsø", too).
UNK_INSTANCES = pd.DataFrame([
    {"id": "u1", "country": "Mexico", "category": "profession", "target": "doctors",
     "context": "The doctors were kind ø and smart.", "sent_stereo": "Doctors are lazy ☃.",
     "sent_anti": "Doctorsø are smart.", "sent_unrelated": "Cold ŋ."},
    {"id": "u2", "country": "Mexico", "category": "profession", "target": "nurses",
     "context": "The nurses were warm.", "sent_stereo": "Nurses are ø lazy.", "sent_anti": "Nurses are smart.",
     "sent_unrelated": "Nurses are cold."},
])
COLUMNS = {"stereo": "sent_stereo", "anti": "sent_anti", "unrelated": "sent_unrelated"}


@pytest.mark.parametrize("score", ["sum", "mean"])
@pytest.mark.parametrize("kind", ["masked", "causal"])
def test_all_heads_on_scores_equal_stereo_score_on_a_tokenizer_with_unk(request, tmp_path, kind, score):
    """The heads study's "before pruning" StereoSet scores are the stereo study's for the same model and items:
    one scorer, [UNK] scored (the tiny masked LM's WordPiece has [UNK]; the causal one's byte-level BPE has none)."""
    model_dir = request.getfixturevalue(f"tiny_{kind}_lm_dir")
    model, tok = request.getfixturevalue("mlm" if kind == "masked" else "clm")
    if kind == "masked":
        unk_candidates = [c for c in UNK_INSTANCES[list(COLUMNS.values())].to_numpy().ravel()
                          if tok.unk_token_id in tok(c, add_special_tokens=False)["input_ids"]]
        assert len(unk_candidates) >= 4  # the comparison covers [UNK] in every candidate column
    UNK_INSTANCES.to_csv(tmp_path / "instances.csv", index=False)
    out = tmp_path / "scores.csv"
    assert main(["stereo", "score", "--model", str(model_dir), "--instances", str(tmp_path / "instances.csv"),
                 "--output", str(out), "--score", score, "--no-cache"]) == 0
    stereo = pd.read_csv(out)
    gate = HeadGate(model)
    try:
        for name, column in COLUMNS.items():
            heads = candidate_scores(model, tok, kind, UNK_INSTANCES["context"].tolist(),
                                     UNK_INSTANCES[column].tolist(), gate, gate.ones(), score=score)
            np.testing.assert_allclose(heads, stereo[f"score_{name}"].to_numpy(), rtol=0, atol=1e-5)
    finally:
        gate.remove()
