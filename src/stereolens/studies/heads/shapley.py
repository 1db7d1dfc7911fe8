"""Shapley values of players (heads) in a coalition game, exactly or by permutation sampling.

The value function takes a boolean array (coalitions x players) and returns one
value per coalition, so a caller can evaluate many coalitions in one batched
pass.  The sampler walks all its permutations side by side, ``step`` positions
at a time, and asks for every new coalition of that round in one call; a
coalition already seen (the empty set, shared prefixes) is looked up, not
re-evaluated, which changes nothing in the estimate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

ValueFunction = Callable[[np.ndarray], np.ndarray]
# up to this many players the exact values (all 2^n coalitions) are cheap enough to compute beside sampled ones
EXACT_PLAYER_LIMIT = 10


def every_coalition(n: int) -> np.ndarray:
    """All 2^n coalitions of n players, one boolean row each."""
    return np.array(list(itertools.product([False, True], repeat=n)), dtype=bool).reshape(2**n, n)


def exact_shapley(value_fn: ValueFunction, n: int) -> np.ndarray:
    """Shapley values by the subset formula: sum over S not containing i of
    |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S)).  For small n only (2^n coalitions)."""
    masks = every_coalition(n)
    values = np.asarray(value_fn(masks), dtype=float)
    index = {tuple(m): v for m, v in zip(map(tuple, masks), values)}
    phi = np.zeros(n)
    for mask, v in index.items():
        size = sum(mask)
        for i in range(n):
            if mask[i]:
                continue
            with_i = list(mask)
            with_i[i] = True
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            phi[i] += weight * (index[tuple(with_i)] - v)
    return phi


def check_antithetic_count(n_permutations: int, antithetic: bool) -> None:
    """Antithetic permutations come in (permutation, reverse) pairs and a pair's mean is one sample of the
    standard error: an odd count would leave one permutation that is not a sample of the same kind."""
    if antithetic and n_permutations % 2:
        raise ValueError(f"antithetic sampling needs an even number of permutations (pairs), got {n_permutations}")


def sample_permutations(n: int, n_permutations: int, *, seed: int, antithetic: bool = False) -> np.ndarray:
    """``n_permutations`` permutations of range(n); with ``antithetic`` every second one is the
    reverse of the one before (the count must then be even)."""
    check_antithetic_count(n_permutations, antithetic)
    rng = np.random.default_rng(seed)
    perms = []
    while len(perms) < n_permutations:
        perm = rng.permutation(n)
        perms.append(perm)
        if antithetic:
            perms.append(perm[::-1].copy())
    return np.array(perms, dtype=int).reshape(n_permutations, n)


@dataclass
class ShapleyEstimate:
    values: np.ndarray                 # (players,) mean marginal contribution
    standard_errors: np.ndarray        # (players,) over independent sampling units
    marginals: np.ndarray              # (permutations, players)
    permutations: np.ndarray           # (permutations, players)
    n_evaluations: int                 # distinct coalitions evaluated
    n_value_calls: int                 # batched calls of the value function
    antithetic: bool = False
    empty_value: float = float("nan")
    full_value: float = float("nan")


class CoalitionValues:
    """The values of the coalitions seen so far: each distinct coalition is evaluated once, and the
    new coalitions of one request go to the value function in one batched call."""

    def __init__(self, value_fn: ValueFunction) -> None:
        self.value_fn = value_fn
        self.known: dict[bytes, float] = {}
        self.n_calls = 0

    def evaluate(self, coalitions: Iterable[np.ndarray]) -> None:
        fresh: dict[bytes, np.ndarray] = {}
        for mask in coalitions:
            key = mask.tobytes()
            if key not in self.known and key not in fresh:
                fresh[key] = mask
        if not fresh:
            return
        values = np.asarray(self.value_fn(np.stack(list(fresh.values()))), dtype=float)
        if values.shape != (len(fresh),):
            raise ValueError(f"value function returned shape {values.shape} for {len(fresh)} coalitions")
        self.known.update(zip(fresh, values.tolist()))
        self.n_calls += 1

    def __getitem__(self, mask: np.ndarray) -> float:
        return self.known[mask.tobytes()]

    def __len__(self) -> int:
        return len(self.known)


def prefix_coalitions(permutation: np.ndarray, start: int, stop: int) -> list[np.ndarray]:
    """The coalitions of the first ``start + 1`` ... ``stop`` players of ``permutation``."""
    mask = np.zeros(len(permutation), dtype=bool)
    mask[permutation[:start]] = True
    out = []
    for player in permutation[start:stop]:
        mask[player] = True
        out.append(mask.copy())
    return out


def walk_permutations(values: CoalitionValues, permutations: np.ndarray, step: int) -> None:
    """Evaluate every prefix of every permutation, all permutations advancing ``step`` positions per
    batched call (permutation by permutation within a call, so the batches do not depend on ``step``'s
    bookkeeping)."""
    n = permutations.shape[1]
    for start in range(0, n, step):
        stop = min(start + step, n)
        values.evaluate(mask for perm in permutations for mask in prefix_coalitions(perm, start, stop))


def marginal_contributions(values: CoalitionValues, permutations: np.ndarray) -> np.ndarray:
    """(permutations x players): v(prefix with the player) - v(prefix before it), from evaluated prefixes."""
    n_perm, n = permutations.shape
    marginals = np.zeros((n_perm, n))
    for p, perm in enumerate(permutations):
        before = values[np.zeros(n, dtype=bool)]
        for mask, player in zip(prefix_coalitions(perm, 0, n), perm):
            after = values[mask]
            marginals[p, player] = after - before
            before = after
    return marginals


def sampling_units(marginals: np.ndarray, antithetic: bool) -> np.ndarray:
    """The independent samples of the standard error: each permutation, or each antithetic pair's mean
    (a permutation and its reverse are correlated by construction, so they are one sample)."""
    if not antithetic:
        return marginals
    check_antithetic_count(len(marginals), antithetic)
    return (marginals[0::2] + marginals[1::2]) / 2.0


def standard_errors(units: np.ndarray) -> np.ndarray:
    """Standard error of the mean per player over ``units`` (NaN with fewer than two)."""
    if len(units) < 2:
        return np.full(units.shape[1], np.nan)
    return units.std(axis=0, ddof=1) / np.sqrt(len(units))


def permutation_shapley(value_fn: ValueFunction, permutations: np.ndarray, *, step: int | None = None,
                        antithetic: bool = False, values: CoalitionValues | None = None) -> ShapleyEstimate:
    """Monte Carlo Shapley values from the given permutations.

    A permutation is walked from the empty coalition, adding one player at a
    time; the marginal contribution of each player is the change in value.
    ``step`` (default: all) is how many positions every permutation advances
    per batched call.  ``antithetic`` says permutations come in (perm, reversed
    perm) pairs: the standard error then treats each pair's mean as one sample,
    and an odd count is refused.  ``values`` (default: a new, empty one) holds
    the coalitions evaluated so far and receives the new ones: an estimate from
    other permutations of the same game then evaluates only the coalitions no
    earlier estimate met (``n_evaluations`` counts every coalition it holds).
    """
    permutations = np.asarray(permutations, dtype=int)
    check_antithetic_count(len(permutations), antithetic)
    n = permutations.shape[1]
    step = n if step is None else max(1, int(step))
    empty, full = np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    values = CoalitionValues(value_fn) if values is None else values
    values.evaluate([empty, full])
    walk_permutations(values, permutations, step)
    marginals = marginal_contributions(values, permutations)
    return ShapleyEstimate(values=marginals.mean(axis=0),
                           standard_errors=standard_errors(sampling_units(marginals, antithetic)),
                           marginals=marginals, permutations=permutations, n_evaluations=len(values),
                           n_value_calls=values.n_calls, antithetic=antithetic,
                           empty_value=values[empty], full_value=values[full])


def exact_from(values: CoalitionValues, n: int) -> np.ndarray:
    """The exact Shapley values of the game ``values`` holds, evaluating only the coalitions it has not met
    (in one batched call), then the subset formula over all 2^n of them."""
    masks = every_coalition(n)
    values.evaluate(masks)
    return exact_shapley(lambda batch: np.array([values[m] for m in batch]), n)
