"""Pruning sweeps: remove heads in Shapley order and measure the probe and StereoSet after each step."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

DIRECTIONS = ("top_down", "bottom_up")


def pruning_order(values: Sequence[float], direction: str) -> list[int]:
    """Player indices in removal order: most contributive first (top-down) or least first (bottom-up).
    Ties keep the players' order, so the sweep is reproducible."""
    values = np.asarray(values, dtype=float)
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    keys = -values if direction == "top_down" else values
    return [int(i) for i in np.argsort(keys, kind="stable")]


def sweep_coalitions(order: Sequence[int], n_players: int, step: int) -> list[np.ndarray]:
    """Coalitions (active heads) after removing 0, step, 2 step, ... heads in ``order``; the last removes all."""
    counts = list(range(0, n_players, max(1, step))) + [n_players]
    out = []
    for k in counts:
        mask = np.ones(n_players, dtype=bool)
        mask[list(order[:k])] = False
        out.append(mask)
    return out


def run_sweep(value_fn: Callable[[np.ndarray], np.ndarray], values: Sequence[float], direction: str, step: int,
              players: Sequence[tuple[int, int]],
              stereoset_fn: Callable[[np.ndarray], dict] | None = None) -> pd.DataFrame:
    """One row per step: heads removed so far, probe value, and StereoSet scores where asked."""
    order = pruning_order(values, direction)
    coalitions = sweep_coalitions(order, len(players), step)
    probe_values = value_fn(np.stack(coalitions))
    rows = []
    for k, (mask, value) in enumerate(zip(coalitions, probe_values)):
        n_removed = int((~mask).sum())
        previous = int((~coalitions[k - 1]).sum()) if k else 0
        newly = [players[i] for i in order[previous:n_removed]]
        row = {"direction": direction, "step": k, "n_removed": n_removed, "probe_value": float(value),
               "removed_this_step": ";".join(f"L{layer}H{head}" for layer, head in newly)}
        if stereoset_fn is not None:
            row.update(stereoset_fn(mask))
        rows.append(row)
    return pd.DataFrame(rows)
