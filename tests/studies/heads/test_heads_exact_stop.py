"""The exact early stop: the bound contains every on/off setting of the remaining heads (checked
by enumerating them through the real model), it never changes the Shapley values, and on a
model whose remaining heads cannot matter it fires and saves evaluations."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stereolens.studies.heads.attribution import ShapleySettings, heads_of_layers, probe_and_attribute
from stereolens.studies.heads.bounds import AGREEMENT, ExactStop, UnimodalActivation
from stereolens.studies.heads.probe import GatedEncoder, LinearProbe, ProbeSettings
from stereolens.studies.heads.shapley import permutation_shapley, sample_permutations

from heads_data import make_instances

pytestmark = pytest.mark.slow  # trains probes and walks permutations on tiny models

TEXTS = ["The doctors were kind and rich. Doctors are lazy.", "The nurses were warm and cold. Nurses are smart.",
         "A short one.", "The farmers were poor and honest. Farmers are lazy."]


def _four_head_model(family: str, tokenizer_vocab: int):
    """A random two-layer model of ``family`` with 4 heads per layer, so 4 remaining heads can be enumerated."""
    torch.manual_seed(3)
    if family == "bert":
        from transformers import BertConfig, BertModel
        config = BertConfig(vocab_size=tokenizer_vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64)
        return BertModel(config).eval()
    if family == "llama":
        from transformers import LlamaConfig, LlamaModel
        config = LlamaConfig(vocab_size=tokenizer_vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        return LlamaModel(config).eval()
    from transformers import Gemma3TextConfig, Gemma3TextModel
    config = Gemma3TextConfig(vocab_size=tokenizer_vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128,
                              sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    model = Gemma3TextModel(config).eval()
    with torch.no_grad():  # Gemma initialises its norms at 0 (scale 1 + w): give them a shape
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.3)
    return model


def _probe_on(encoder: GatedEncoder, rows: torch.Tensor, seed: int = 0) -> LinearProbe:
    """A random linear probe, standardised on the ungated features so its logits are of order one."""
    with torch.no_grad():
        feats = encoder.features(rows)
    torch.manual_seed(seed)
    probe = LinearProbe(feats.shape[1])
    probe.mean.copy_(feats.mean(0))
    probe.scale.copy_(feats.std(0).clamp_min(1e-6))
    return probe.eval()


def _real_logit_difference(encoder, probe, rows, gate):
    with torch.no_grad():
        logits = probe(encoder.features(rows, gate.expand(len(rows), -1, -1).clone()))
    return (logits[:, 1] - logits[:, 0]).double()


@pytest.mark.parametrize("family", ["bert", "llama", "gemma3"])
@pytest.mark.parametrize("enumerate_heads", [0, 1, 4])
def test_the_bound_contains_every_setting_of_the_remaining_heads(family, enumerate_heads, mlm, clm):
    tok = mlm[1] if family == "bert" else clm[1]
    model = _four_head_model(family, len(tok))
    encoder = GatedEncoder(model, tok, pooling="first" if family == "bert" else "last", gated_layers=[0, 1],
                           reuse_prefix=False)
    try:
        encoder.encode(TEXTS)
        rows = torch.arange(len(TEXTS))
        probe = _probe_on(encoder, rows)
        players = heads_of_layers([0, 1], encoder.gate.n_heads)
        stop = ExactStop(encoder, probe, players, enumerate_heads=enumerate_heads)
        assert stop.active, stop.reason
        # coalition: every head of layer 0; the four heads of the top layer remain
        coalition = np.array([True] * 4 + [False] * 4)
        gate = encoder.gate.ones()
        gate[1, :] = 0.0
        with stop.recording(coalition[None, :]) as captured:
            at_coalition = _real_logit_difference(encoder, probe, rows, gate)
        positions = encoder.pooled_positions(rows)
        (lower, upper), replica = stop.logit_bounds(coalition, captured["residual"][rows, positions],
                                                    captured["heads"][rows, positions])
        rounding = AGREEMENT * stop.last_rounding_scale  # what the stop rule allows for float32 rounding
        assert ((replica - at_coalition).abs() <= rounding).all()
        settings = []
        for setting in itertools.product((0.0, 1.0), repeat=4):
            gate[1, :] = torch.tensor(setting)
            settings.append(_real_logit_difference(encoder, probe, rows, gate))
        real = torch.stack(settings)                 # (16 settings, examples)
    finally:
        encoder.gate.remove()
    assert real.std(0).min() > 1e-3                  # the remaining heads do move the logits
    assert (rounding < 1e-2 * (real.max(0).values - real.min(0).values)).all()  # so the check can fail
    assert (real >= lower - rounding).all() and (real <= upper + rounding).all()
    if enumerate_heads >= 4:                         # every setting enumerated: the bound is the exact range
        assert ((lower - real.min(0).values).abs() <= rounding).all()
        assert ((upper - real.max(0).values).abs() <= rounding).all()
    else:                                            # some heads as intervals: a strictly wider, still finite bound
        assert ((upper - lower) > (real.max(0).values - real.min(0).values) - 1e-9).all()
        assert torch.isfinite(lower).all() and torch.isfinite(upper).all()


def _estimates(model, tok, pooling, layers, *, exact_stop, seed=0, permutations=24, step=None, shapley_seed=None):
    encoder = GatedEncoder(model.base_model, tok, pooling=pooling, gated_layers=layers, reuse_prefix=True)
    players = heads_of_layers(layers, encoder.gate.n_heads)
    try:
        result, value_fn = probe_and_attribute(
            encoder, make_instances(16), players, country="all", test_fraction=0.5, split_seed=0,
            probe_settings=ProbeSettings(learning_rate=1e-2, epochs=40, batch_size=16, seed=seed),
            shapley=ShapleySettings(permutations=permutations, antithetic=True,
                                    seed=seed if shapley_seed is None else shapley_seed, step=step,
                                    exact_stop=exact_stop),
        )
    finally:
        encoder.gate.remove()
    return result


def _planted_below_with_a_quiet_top(tiny_masked_lm_dir):
    """The tiny BERT with the label carried by head (0, 0) and the top layer's heads writing almost
    nothing (their output weights and the projection bias times 1e-4): once a permutation's remaining
    heads are the top layer's, no prediction can flip."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_masked_lm_dir)
    n_heads = model.config.num_attention_heads
    head_dim = model.config.hidden_size // n_heads
    with torch.no_grad():
        first, top = model.bert.encoder.layer
        value = first.attention.self.value.weight
        value[head_dim:] = 0.0
        value[:head_dim] *= 4.0
        top.attention.output.dense.weight *= 1e-4
    return model, tok


ISOLATED = "STEREOLENS_TEST_QUIET_TOP_ISOLATED"


def test_exact_stop_fires_on_a_quiet_top_layer_and_changes_nothing(tiny_masked_lm_dir):
    if os.environ.get(ISOLATED) != "1":
        # In one full-suite run (1 of 3) the stop fired on none of these permutations, while the values stayed
        # identical; alone it passed 8 of 8 runs. Some state an earlier test leaves in the process moves this
        # model's margins (cause not found), so the same assertions run in a fresh interpreter.
        node = f"{Path(__file__).resolve()}::test_exact_stop_fires_on_a_quiet_top_layer_and_changes_nothing"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                              env={**os.environ, ISOLATED: "1"}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        return
    model, tok = _planted_below_with_a_quiet_top(tiny_masked_lm_dir)
    # 8 permutations of seed 2: two end in both top heads, and one of the coalitions they skip is on
    # no other walk (with 4 players and many permutations, other walks evaluate every skipped one)
    with_stop = _estimates(model, tok, "first", [0, 1], exact_stop=True, permutations=8, shapley_seed=2)
    without = _estimates(model, tok, "first", [0, 1], exact_stop=False, permutations=8, shapley_seed=2)
    summary = with_stop.probe_summary
    assert summary["test_value_all_heads"] >= 0.9
    np.testing.assert_array_equal(with_stop.estimate.values, without.estimate.values)
    np.testing.assert_array_equal(with_stop.estimate.marginals, without.estimate.marginals)
    np.testing.assert_array_equal(with_stop.estimate.standard_errors, without.estimate.standard_errors)
    # the permutations ending in both top heads are the ones that can stop, at position 2 of 4
    perms = with_stop.estimate.permutations
    can_stop = np.array([set(p[2:]) <= {2, 3} for p in perms])
    assert can_stop.any()
    np.testing.assert_array_equal(with_stop.estimate.exact_stop_at, np.where(can_stop, 2, 4))
    assert summary["n_exact_stops"] == int(can_stop.sum())
    assert with_stop.estimate.n_evaluations_saved == 1
    assert with_stop.estimate.n_evaluations == without.estimate.n_evaluations - with_stop.estimate.n_evaluations_saved
    assert summary["n_coalitions_saved_by_exact_stop"] == with_stop.estimate.n_evaluations_saved
    assert len(summary["exact_stop_positions"]) == len(perms)


@pytest.mark.parametrize("which", ["planted", "random_bert", "random_llama"])
def test_exact_stop_never_changes_the_values(which, planted_model, mlm, clm):
    model, tok = {"planted": planted_model, "random_bert": mlm, "random_llama": clm}[which]
    pooling = "last" if which == "random_llama" else "first"
    with_stop = _estimates(model, tok, pooling, [0, 1], exact_stop=True, step=1)
    without = _estimates(model, tok, pooling, [0, 1], exact_stop=False, step=1)
    np.testing.assert_array_equal(with_stop.estimate.values, without.estimate.values)
    np.testing.assert_array_equal(with_stop.estimate.marginals, without.estimate.marginals)
    assert with_stop.probe_summary["exact_stop_checks"] > 0  # the bound was tried, whether or not it fired
    assert with_stop.probe_summary["exact_stop_note"].startswith("tried")


def test_the_loss_value_turns_the_exact_stop_off_and_says_why(planted_model, instances):
    model, tok = planted_model
    encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=True)
    try:
        result, _ = probe_and_attribute(
            encoder, instances, heads_of_layers([0, 1], 2), country="all", test_fraction=0.5, split_seed=0,
            probe_settings=ProbeSettings(epochs=2), shapley=ShapleySettings(permutations=2, value="loss"))
    finally:
        encoder.gate.remove()
    assert result.probe_summary["exact_stop_note"].startswith("off: the bound proves that predictions cannot flip")
    assert result.probe_summary["n_exact_stops"] == 0 and result.probe_summary["early_stop"] == "none"


def test_a_stop_rule_only_skips_zero_marginals_in_the_sampler():
    """The sampler with a stop rule that settles every coalition containing player 0 in a game where
    only player 0 matters: identical values, the stops where the rule allows them, fewer evaluations."""
    def one_player(masks):
        return np.asarray(masks, dtype=float)[:, 0] * 0.5

    class OnlyPlayerZero:
        def possible_from(self, permutation):
            return 0

        def settled(self, coalition):
            return bool(coalition[0])

    perms = sample_permutations(5, 12, seed=2)
    stopped = permutation_shapley(one_player, perms, exact_stop=OnlyPlayerZero())
    plain = permutation_shapley(one_player, perms)
    np.testing.assert_array_equal(stopped.values, plain.values)
    where_zero = np.argmax(perms == 0, axis=1) + 1
    np.testing.assert_array_equal(stopped.exact_stop_at, np.where(where_zero <= 3, where_zero, 5))
    assert stopped.n_evaluations == plain.n_evaluations - stopped.n_evaluations_saved
    assert stopped.n_evaluations_saved > 0


@pytest.mark.parametrize("name", ["gelu", "gelu_pytorch_tanh", "silu", "relu"])
def test_activation_bounds_contain_the_activation_on_random_boxes(name):
    from transformers.activations import ACT2FN

    act = UnimodalActivation(ACT2FN[name])
    gen = torch.Generator().manual_seed(0)
    lo = torch.randn(2000, generator=gen, dtype=torch.float64) * 3
    hi = lo + torch.rand(2000, generator=gen, dtype=torch.float64) * 3
    bound_lo, bound_hi = act((lo, hi))
    inside = lo[:, None] + (hi - lo)[:, None] * torch.linspace(0, 1, 201, dtype=torch.float64)
    values = ACT2FN[name](inside)
    assert (values >= bound_lo[:, None] - 1e-12).all() and (values <= bound_hi[:, None] + 1e-12).all()
    assert (values.min(1).values - bound_lo).max() < 1e-3  # and tight up to the sampling of the boxes
