"""Shapley values of players (heads) in a coalition game, exactly or by permutation sampling.

The value function takes a boolean array (coalitions x players) and returns one
value per coalition, so a caller can evaluate many coalitions in one batched
pass.  The sampler walks all its permutations side by side, ``step`` positions
at a time, and asks for every new coalition of that round in one call; a
coalition already seen (the empty set, shared prefixes) is looked up, not
re-evaluated, which changes nothing in the estimate.

Two ways to stop a permutation before its end: an exact stop (an object that
proves no remaining player can change the value, so every remaining marginal
is exactly 0: the estimate is unchanged, see ``bounds.ExactStop``) and truncated
Monte Carlo (stop once the value is near the full coalition's: an
approximation).  Both are recorded per permutation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

ValueFunction = Callable[[np.ndarray], np.ndarray]


class ExactStopRule(Protocol):
    """What the sampler asks of an exact stop.  ``possible_from(perm)``: the first position at which
    a stop can be proven (len(perm) for never); ``settled(coalition)``: True only if no set of the
    players outside the (already evaluated) coalition changes the value when added to it."""

    def possible_from(self, permutation: np.ndarray) -> int: ...

    def settled(self, coalition: np.ndarray) -> bool: ...


def exact_shapley(value_fn: ValueFunction, n: int) -> np.ndarray:
    """Shapley values by the subset formula: sum over S not containing i of
    |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S)).  For small n only (2^n coalitions)."""
    masks = np.array(list(itertools.product([False, True], repeat=n)), dtype=bool)
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


def sample_permutations(n: int, n_permutations: int, *, seed: int, antithetic: bool = False) -> np.ndarray:
    """``n_permutations`` permutations of range(n); with ``antithetic`` every second one is the
    reverse of the one before (an odd count gets a last unpaired permutation)."""
    rng = np.random.default_rng(seed)
    perms = []
    while len(perms) < n_permutations:
        perm = rng.permutation(n)
        perms.append(perm)
        if antithetic and len(perms) < n_permutations:
            perms.append(perm[::-1].copy())
    return np.array(perms, dtype=int).reshape(n_permutations, n)


@dataclass
class ShapleyEstimate:
    values: np.ndarray                 # (players,) mean marginal contribution
    standard_errors: np.ndarray        # (players,) over independent sampling units
    marginals: np.ndarray              # (permutations, players)
    permutations: np.ndarray           # (permutations, players)
    truncated_at: np.ndarray           # (permutations,) position where truncated MC stopped the walk; n = not
    n_evaluations: int                 # distinct coalitions evaluated
    n_value_calls: int                 # batched calls of the value function
    antithetic: bool = False
    empty_value: float = float("nan")
    full_value: float = float("nan")
    notes: list[str] = field(default_factory=list)
    exact_stop_at: np.ndarray | None = None      # (permutations,) position where the exact stop fired; n = not
    evaluations_saved: np.ndarray | None = None  # (permutations,) coalitions of the skipped rest never evaluated
    n_evaluations_saved: int = 0                 # distinct coalitions never evaluated because of exact stops


def permutation_shapley(
    value_fn: ValueFunction, permutations: np.ndarray, *, step: int | None = None,
    truncation_tolerance: float | None = None, antithetic: bool = False,
    exact_stop: ExactStopRule | None = None,
) -> ShapleyEstimate:
    """Monte Carlo Shapley values from the given permutations.

    A permutation is walked from the empty coalition, adding one player at a
    time; the marginal contribution of each player is the change in value.
    ``step`` (default: all) is how many positions every permutation advances
    per batched call.  With ``truncation_tolerance`` set, a permutation whose
    current coalition is within that tolerance of the full coalition's value
    stops there and its remaining players get marginal 0 (truncated Monte
    Carlo, Ghorbani and Zou 2019): the marginals of a permutation still sum to
    v(N) - v(empty) up to the tolerance, but single values can move, so it is
    off (None) unless asked for and every truncation is recorded.
    ``antithetic`` says permutations come in (perm, reversed perm) pairs: the
    standard error then treats each pair's average as one sample.
    ``exact_stop`` stops a permutation at a position where ``exact_stop.settled``
    proves that every remaining marginal is exactly 0; the marginals, hence the
    values, are the same as without it.  A permutation is walked in one batched
    round up to ``exact_stop.possible_from`` and one position per round after
    that, so the proof for a coalition comes before its successors are evaluated.
    """
    permutations = np.asarray(permutations, dtype=int)
    n_perm, n = permutations.shape
    step = n if step is None else max(1, int(step))
    known: dict[bytes, float] = {}
    calls = 0

    def evaluate(masks: list[np.ndarray]) -> None:
        nonlocal calls
        fresh = {}
        for m in masks:
            key = m.tobytes()
            if key not in known and key not in fresh:
                fresh[key] = m
        if fresh:
            keys = list(fresh)
            values = np.asarray(value_fn(np.stack([fresh[k] for k in keys])), dtype=float)
            if values.shape != (len(keys),):
                raise ValueError(f"value function returned shape {values.shape} for {len(keys)} coalitions")
            known.update(zip(keys, values.tolist()))
            calls += 1

    empty, full = np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    evaluate([empty, full])
    v_empty, v_full = known[empty.tobytes()], known[full.tobytes()]

    marginals = np.zeros((n_perm, n))
    truncated_at = np.full(n_perm, n)
    exact_stop_at = np.full(n_perm, n)
    stop_from = np.array([exact_stop.possible_from(perm) if exact_stop is not None else n for perm in permutations],
                         dtype=int).reshape(n_perm)
    current = np.zeros((n_perm, n), dtype=bool)
    current_value = np.full(n_perm, v_empty)
    position = np.zeros(n_perm, dtype=int)
    active = np.ones(n_perm, dtype=bool)

    def round_end(p: int) -> int:
        """Where permutation p's walk gets to in this round."""
        if position[p] >= stop_from[p]:
            return position[p] + 1  # past the first provable position: one step, then a check
        return min(position[p] + step, stop_from[p])

    while active.any():
        if truncation_tolerance is not None:
            stop = active & (np.abs(v_full - current_value) <= truncation_tolerance) & (position < n)
            truncated_at[stop] = position[stop]
            active &= ~stop
            if not active.any():
                break
        if exact_stop is not None:
            for p in np.flatnonzero(active & (position >= stop_from) & (position <= n - 2)):
                if exact_stop.settled(current[p]):
                    exact_stop_at[p] = position[p]
                    active[p] = False
            if not active.any():
                break
        # the coalitions each active permutation reaches in this round
        round_masks, plan = [], []
        for p in np.flatnonzero(active):
            mask = current[p].copy()
            for pos in range(position[p], round_end(p)):
                mask[permutations[p, pos]] = True
                round_masks.append(mask.copy())
            plan.append(p)
        evaluate(round_masks)
        for p in plan:
            end = round_end(p)
            for pos in range(position[p], end):
                player = permutations[p, pos]
                if truncation_tolerance is not None and np.abs(v_full - current_value[p]) <= truncation_tolerance:
                    truncated_at[p] = pos
                    break
                current[p, player] = True
                value = known[current[p].tobytes()]
                marginals[p, player] = value - current_value[p]
                current_value[p] = value
                position[p] = pos + 1
            else:
                position[p] = end
            if position[p] >= n or truncated_at[p] < n:
                active[p] = False

    # what the exact stops saved: coalitions on a stopped permutation's rest that were never evaluated
    evaluations_saved = np.zeros(n_perm, dtype=int)
    never_evaluated: set[bytes] = set()
    for p in np.flatnonzero(exact_stop_at < n):
        mask = current[p].copy()
        for pos in range(exact_stop_at[p], n):
            mask[permutations[p, pos]] = True
            key = mask.tobytes()
            if key not in known:
                evaluations_saved[p] += 1
                never_evaluated.add(key)

    units = marginals
    if antithetic and n_perm >= 2:
        paired = n_perm // 2 * 2
        units = (marginals[0:paired:2] + marginals[1:paired:2]) / 2.0
        if paired < n_perm:
            units = np.vstack([units, marginals[paired:]])
    values = marginals.mean(axis=0)
    se = units.std(axis=0, ddof=1) / np.sqrt(len(units)) if len(units) > 1 else np.full(n, np.nan)
    return ShapleyEstimate(values=values, standard_errors=se, marginals=marginals, permutations=permutations,
                           truncated_at=truncated_at, n_evaluations=len(known), n_value_calls=calls,
                           antithetic=antithetic, empty_value=v_empty, full_value=v_full,
                           exact_stop_at=exact_stop_at, evaluations_saved=evaluations_saved,
                           n_evaluations_saved=len(never_evaluated))
