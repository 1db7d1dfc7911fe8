"""Known answers for the Shapley estimator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stereolens.studies.heads.shapley import exact_shapley, permutation_shapley, sample_permutations


def glove_game(masks: np.ndarray) -> np.ndarray:
    """Players 0 and 1 hold left gloves, player 2 a right glove; a pair is worth 1.
    Textbook Shapley values: (1/6, 1/6, 2/3)."""
    masks = np.asarray(masks, dtype=bool)
    return np.minimum(masks[:, 0].astype(int) + masks[:, 1], masks[:, 2].astype(int)).astype(float)


def weighted_game(masks: np.ndarray) -> np.ndarray:
    """A non-additive game on 4 players: weights plus a bonus when players 0 and 3 are together."""
    masks = np.asarray(masks, dtype=float)
    return masks @ np.array([0.5, -0.2, 0.1, 0.3]) + 0.4 * masks[:, 0] * masks[:, 3] - 0.25 * masks[:, 1] * masks[:, 2]


def test_exact_glove_game_matches_the_textbook_values():
    np.testing.assert_allclose(exact_shapley(glove_game, 3), [1 / 6, 1 / 6, 2 / 3])


@pytest.mark.parametrize("step", [None, 1, 3])
def test_every_permutation_enumerated_equals_the_exact_values(step):
    perms = np.array(list(itertools.permutations(range(4))))
    estimate = permutation_shapley(weighted_game, perms, step=step)
    np.testing.assert_allclose(estimate.values, exact_shapley(weighted_game, 4), atol=1e-12)
    # efficiency: the values sum to v(N) - v(empty) on every permutation
    np.testing.assert_allclose(estimate.marginals.sum(1), weighted_game(np.ones((1, 4)))[0])
    # 2^4 distinct coalitions, each evaluated once however many permutations pass through it
    assert estimate.n_evaluations == 16


def test_sampling_converges_with_a_standard_error_that_covers_the_truth():
    perms = sample_permutations(4, 400, seed=3)
    estimate = permutation_shapley(weighted_game, perms)
    truth = exact_shapley(weighted_game, 4)
    assert np.all(np.abs(estimate.values - truth) <= 4 * estimate.standard_errors + 1e-12)
    assert np.all(estimate.standard_errors > 0)


def test_antithetic_pairs_are_reversed_permutations_and_reduce_the_error():
    perms = sample_permutations(5, 6, seed=1, antithetic=True)
    assert all((perms[i + 1] == perms[i][::-1]).all() for i in range(0, 6, 2))
    truth = exact_shapley(weighted_game, 4)
    plain = permutation_shapley(weighted_game, sample_permutations(4, 200, seed=0))
    anti = permutation_shapley(weighted_game, sample_permutations(4, 200, seed=0, antithetic=True), antithetic=True)
    assert np.abs(anti.values - truth).max() <= 4 * anti.standard_errors.max() + 1e-12
    # for a game with only pairwise interactions, a permutation and its reverse average to the exact value
    np.testing.assert_allclose(anti.values, truth, atol=1e-12)
    assert plain.standard_errors.max() > 0


def test_an_odd_number_of_antithetic_permutations_is_refused():
    # a permutation without its reverse is not a sample of the same kind as a pair's mean
    with pytest.raises(ValueError, match="even number of permutations"):
        sample_permutations(4, 7, seed=0, antithetic=True)
    perms = sample_permutations(4, 6, seed=0, antithetic=True)
    with pytest.raises(ValueError, match="even number of permutations"):
        permutation_shapley(weighted_game, perms[:5], antithetic=True)


def test_standard_errors_equal_a_hand_computation():
    # one player who adds 1 on its own and 3 with player 1 before it: marginal 1 or 3 by position
    def game(masks):
        masks = np.asarray(masks, dtype=float)
        return masks[:, 0] * (1.0 + 2.0 * masks[:, 1])

    perms = np.array([[0, 1], [1, 0], [0, 1], [1, 0]])
    # player 0's marginals: 1, 3, 1, 3; player 1's: 2, 0, 2, 0
    plain = permutation_shapley(game, perms)
    np.testing.assert_allclose(plain.values, [2.0, 1.0])
    # independent permutations: sample sd of (1, 3, 1, 3) is sqrt(4/3), over sqrt(4)
    np.testing.assert_allclose(plain.standard_errors, [np.sqrt(4 / 3) / 2, np.sqrt(4 / 3) / 2])
    # antithetic pairs (0 1)+(1 0): each pair's mean is (2, 1) exactly, so the error is 0
    anti = permutation_shapley(game, perms, antithetic=True)
    np.testing.assert_allclose(anti.values, [2.0, 1.0])
    np.testing.assert_allclose(anti.standard_errors, [0.0, 0.0], atol=1e-15)
    # pairs whose means differ: (0 1)(1 0) -> player 0 means 2, then (0 1)(0 1) -> 1; sd of (2, 1) over sqrt(2)
    mixed = permutation_shapley(game, np.array([[0, 1], [1, 0], [0, 1], [0, 1]]), antithetic=True)
    np.testing.assert_allclose(mixed.standard_errors, [np.sqrt(0.5) / np.sqrt(2)] * 2)
