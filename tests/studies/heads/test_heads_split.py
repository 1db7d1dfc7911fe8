"""The three-way split of a country's instances: probe training, Shapley valuation, pruning evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from stereolens.errors import DataError
from stereolens.studies.heads.probe import probe_examples, split_instances

from heads_data import make_instances


def test_the_three_sets_are_disjoint_cover_every_instance_and_have_the_configured_sizes():
    ids = [f"MX-{i:03d}" for i in range(20)]
    split = split_instances(ids, shapley_fraction=0.3, pruning_fraction=0.2, seed=0)
    train, shapley, pruning = set(split.train), set(split.shapley), set(split.pruning)
    assert not (train & shapley) and not (train & pruning) and not (shapley & pruning)
    assert train | shapley | pruning == set(ids)
    assert (len(train), len(shapley), len(pruning)) == (10, 6, 4)


def test_the_split_is_deterministic_recorded_and_independent_of_row_order():
    ids = [f"ES-{i:03d}" for i in range(12)]
    split = split_instances(ids, shapley_fraction=0.3, pruning_fraction=0.2, seed=3)
    again = split_instances(list(reversed(ids)) * 2, shapley_fraction=0.3, pruning_fraction=0.2, seed=3)
    assert again == split
    assert split.record() == {"seed": 3, "probe_train": list(split.train), "shapley": list(split.shapley),
                              "pruning": list(split.pruning)}
    # by hand: the seeded shuffle of the sorted ids, first 4 (round 3.6) Shapley, next 2 (round 2.4) pruning
    order = [sorted(ids)[i] for i in np.random.default_rng(3).permutation(12)]
    assert set(split.shapley) == set(order[:4]) and set(split.pruning) == set(order[4:6])
    assert split_instances(ids, shapley_fraction=0.3, pruning_fraction=0.2, seed=4) != split


def test_both_sentences_of_an_instance_land_in_one_set():
    examples = probe_examples(make_instances(10, countries=("MX",)))
    split = split_instances(examples["id"], shapley_fraction=0.3, pruning_fraction=0.2, seed=0)
    for name, ids in (("train", split.train), ("shapley", split.shapley), ("pruning", split.pruning)):
        rows = examples[examples["id"].isin(ids)]
        assert sorted(rows["label"].tolist()) == [0] * len(ids) + [1] * len(ids), name


def test_too_few_instances_for_three_sets_is_refused():
    split_instances(["a", "b", "c"], shapley_fraction=0.3, pruning_fraction=0.2, seed=0)  # 1 / 1 / 1
    with pytest.raises(DataError, match="2 instances cannot be split into 1 for Shapley valuation, 1 for pruning"):
        split_instances(["a", "b"], shapley_fraction=0.3, pruning_fraction=0.2, seed=0)
    # a fraction outside its range is an error, not clamped (the old two-way split clamped 1.5 to n - 1)
    with pytest.raises(ValueError, match="split fractions must lie in"):
        split_instances([str(i) for i in range(20)], shapley_fraction=1.5, pruning_fraction=0.0, seed=0)
    with pytest.raises(ValueError, match="split fractions must lie in"):
        split_instances([str(i) for i in range(20)], shapley_fraction=0.3, pruning_fraction=-0.2, seed=0)
