"""The known answer of the whole method: a head built to carry the label ranks first and
pruning it hurts the probe most; batched coalitions give the values of one-at-a-time passes."""

from __future__ import annotations

import numpy as np
import pytest

from stereolens.studies.heads.attribution import (
    ShapleySettings, SplitSettings, heads_of_layers, probe_and_attribute, pruning_inputs, shapley_table, sweeps,
)
from stereolens.studies.heads.probe import GatedEncoder, ProbeSettings, probe_examples

from heads_data import PLANTED

pytestmark = pytest.mark.slow  # trains a probe and runs Shapley sampling and sweeps on a tiny BERT


@pytest.fixture(scope="module")
def planted_result(planted_model, instances):
    model, tok = planted_model
    encoder = GatedEncoder(model.base_model, tok, pooling="first", gated_layers=[0, 1], reuse_prefix=True)
    players = heads_of_layers([0, 1], encoder.gate.n_heads)
    result, value_fn = probe_and_attribute(
        encoder, instances, players, country="all", split=SplitSettings(shapley_fraction=0.4, pruning_fraction=0.1),
        probe_settings=ProbeSettings(learning_rate=1e-2, epochs=60, batch_size=16),
        shapley=ShapleySettings(permutations=24, antithetic=False, seed=0, step=2),
    )
    yield result, value_fn, encoder, model, tok
    encoder.gate.remove()


def test_the_planted_head_ranks_first_with_an_interval_clear_of_the_others(planted_result):
    result, *_ = planted_result
    table = shapley_table(result)
    assert result.probe_summary["test_value_all_heads"] >= 0.9
    first = table.sort_values("rank").iloc[0]
    assert (int(first["layer"]), int(first["head"])) == PLANTED
    others = table[table["rank"] > 1]
    assert first["shapley"] - 2 * first["se"] > (others["shapley"] + 2 * others["se"]).max()


def test_pruning_the_planted_head_drops_accuracy_the_most(planted_result, instances):
    result, value_fn, encoder, model, tok = planted_result
    players = result.players
    singles = ~np.eye(len(players), dtype=bool)
    drops = value_fn(np.ones((1, len(players)), dtype=bool))[0] - value_fn(singles)
    assert players[int(np.argmax(drops))] == PLANTED
    table = sweeps(value_fn, result, step=1, lm=model, tokenizer=tok, kind="masked",
                   stereoset_items=instances.head(6))
    top = table[table["direction"] == "top_down"].reset_index(drop=True)
    assert top.loc[1, "removed_this_step"] == f"L{PLANTED[0]}H{PLANTED[1]}"
    step_drops = -np.diff(top["probe_value"].to_numpy())
    assert step_drops[0] == step_drops.max()
    assert {"ss", "lms", "icat"} <= set(top.columns) and top["ss"].notna().all()
    bottom = table[table["direction"] == "bottom_up"]
    assert bottom["ss"].isna().all() if "ss" in bottom else True


def test_the_probe_shapley_and_pruning_sets_are_disjoint_and_each_used_for_its_own_job(planted_result, instances):
    result, value_fn, encoder, *_ = planted_result
    split = result.split
    train, shapley, pruning = set(split.train), set(split.shapley), set(split.pruning)
    assert not (train & shapley) and not (train & pruning) and not (shapley & pruning)
    assert train | shapley | pruning == set(instances["id"])
    assert result.probe_summary["split"] == split.record()  # written to probe.json
    example_ids = probe_examples(instances)["id"]

    def ids_of(rows) -> set:
        return set(example_ids.iloc[list(rows)])

    assert ids_of(result.rows["train"]) == train
    assert ids_of(value_fn.eval_rows.tolist()) == shapley  # the ranking is measured on the Shapley set only
    pruning_value, items = pruning_inputs(encoder, result, instances, metric="accuracy", max_rows=256,
                                          stereoset_items=None)
    assert ids_of(pruning_value.eval_rows.tolist()) == pruning
    assert set(items["id"]) == pruning
    _, first_three = pruning_inputs(encoder, result, instances, metric="accuracy", max_rows=256, stereoset_items=3)
    assert list(first_three["id"]) == list(items["id"])[:3]


def test_batched_coalitions_equal_one_coalition_at_a_time(planted_result):
    result, value_fn, *_ = planted_result
    rng = np.random.default_rng(5)
    coalitions = rng.random((9, len(result.players))) < 0.5
    saved = value_fn.max_rows
    try:
        together = value_fn(coalitions)
        value_fn.max_rows = len(value_fn.eval_rows)  # one coalition per forward pass
        alone = np.concatenate([value_fn(c[None, :]) for c in coalitions])
    finally:
        value_fn.max_rows = saved
    np.testing.assert_array_equal(together, alone)


def captum_permutations(n_players: int, n_permutations: int, seed: int) -> np.ndarray:
    """The permutations Captum's ShapleyValueSampling draws after ``torch.manual_seed(seed)``."""
    import torch

    torch.manual_seed(seed)
    return np.array([torch.randperm(n_players).tolist() for _ in range(n_permutations)])


def test_agrees_with_captum_shapley_value_sampling_on_the_same_permutations(planted_result):
    import torch
    from captum.attr import ShapleyValueSampling

    from stereolens.studies.heads.shapley import permutation_shapley

    result, value_fn, *_ = planted_result
    n = len(result.players)

    def forward(mask: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(value_fn(mask.detach().numpy() > 0.5))

    torch.manual_seed(11)
    theirs = ShapleyValueSampling(forward).attribute(
        torch.ones(1, n), baselines=torch.zeros(1, n), n_samples=6, perturbations_per_eval=1)[0].double().numpy()
    ours = permutation_shapley(value_fn, captum_permutations(n, 6, 11), step=None)
    np.testing.assert_allclose(ours.values, theirs, atol=1e-9)
