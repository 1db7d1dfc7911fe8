"""The fine-tuning option: it trains the model's weights (and only then), refuses a replayed
frozen prefix, and the gated Shapley pipeline runs on the fine-tuned model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from stereolens.errors import ConfigError
from stereolens.studies.heads.attribution import (
    ShapleySettings, SplitSettings, heads_of_layers, probe_and_attribute, shapley_table,
)
from stereolens.studies.heads.probe import GatedEncoder, ProbeSettings, probe_examples, train_probe

pytestmark = pytest.mark.slow  # trains probes (and the tiny BERT) and walks permutations

SETTINGS = dict(learning_rate=3e-3, epochs=15, batch_size=16, seed=0)


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _train(model, tok, instances, *, finetune: bool):
    encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=False)
    examples = probe_examples(instances)
    encoder.encode(examples["text"].tolist())
    labels = torch.tensor(examples["label"].to_numpy())
    try:
        train_probe(encoder, list(range(0, len(examples), 2)) + list(range(1, len(examples), 2)), labels,
                    ProbeSettings(finetune=finetune, **SETTINGS))
    finally:
        encoder.gate.remove()


def test_frozen_probe_leaves_every_weight_and_fine_tuning_changes_them(planted_model, instances):
    model, tok = planted_model
    frozen_model, tuned_model = copy.deepcopy(model), copy.deepcopy(model)
    before = _weights(model)
    _train(frozen_model, tok, instances.head(12), finetune=False)
    assert all(torch.equal(before[name], p) for name, p in frozen_model.named_parameters())
    _train(tuned_model, tok, instances.head(12), finetune=True)
    changed = [name for name, p in tuned_model.named_parameters() if not torch.equal(before[name], p)]
    # the encoder's attention and MLP weights move, in both layers (the MLM head is not on the probe's path)
    assert any("encoder.layer.0.attention" in name for name in changed)
    assert any("encoder.layer.1.output.dense" in name for name in changed)
    assert not any(name.startswith("cls.") for name in changed)
    assert not tuned_model.training  # back in eval mode for the Shapley passes


def test_fine_tuning_refuses_a_replayed_frozen_prefix(planted_model, instances):
    model, tok = planted_model
    encoder = GatedEncoder(copy.deepcopy(model).base_model, tok, pooling="first", gated_layers=[1], reuse_prefix=True)
    examples = probe_examples(instances.head(4))
    encoder.encode(examples["text"].tolist())
    try:
        with pytest.raises(ConfigError, match="set reuse_prefix false"):
            train_probe(encoder, [0, 1, 2, 3], torch.tensor(examples["label"].to_numpy()),
                        ProbeSettings(finetune=True, epochs=1))
    finally:
        encoder.gate.remove()


def _attribute(model, tok, instances, *, finetune: bool):
    encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=not finetune)
    try:
        return probe_and_attribute(
            encoder, instances, heads_of_layers([0, 1], encoder.gate.n_heads), country="all",
            split=SplitSettings(shapley_fraction=0.4, pruning_fraction=0.1, seed=0),
            probe_settings=ProbeSettings(finetune=finetune, **SETTINGS),
            shapley=ShapleySettings(permutations=12, antithetic=True, seed=0))[0]
    finally:
        encoder.gate.remove()


def test_shapley_values_on_the_fine_tuned_model(planted_model, instances):
    model, tok = planted_model
    frozen = _attribute(copy.deepcopy(model), tok, instances, finetune=False)
    tuned_model = copy.deepcopy(model)
    tuned = _attribute(tuned_model, tok, instances, finetune=True)
    before = _weights(model)
    assert any(not torch.equal(before[name], p) for name, p in tuned_model.named_parameters())
    # known answer: training the encoder too cannot do worse on the planted task than the frozen one
    assert tuned.probe_summary["test_value_all_heads"] >= frozen.probe_summary["test_value_all_heads"] >= 0.9
    est = tuned.estimate
    # the gates act on the fine-tuned model: efficiency holds on every permutation
    np.testing.assert_allclose(est.marginals.sum(1), est.full_value - est.empty_value, atol=1e-12)
    assert est.empty_value < est.full_value
    table = shapley_table(tuned)
    assert np.isfinite(table["shapley"]).all() and np.isfinite(table["se"]).all()
    # (no planted ranking here: fine-tuning un-zeroes the other heads' value projections)
    assert not np.array_equal(est.values, frozen.estimate.values)  # the values are the tuned model's
