"""Seeded simulated annotators: a latent truth per item, per-annotator reliability and bias.

For demonstrations and tests only.  Every row carries ``source="simulated"`` so
that tables, figures and MLflow runs downstream can say so.

Model, per annotator a with reliability rho_a in [0, 1] and bias b_a:
- nominal scales: with probability rho_a the annotator reports the item's true
  label; otherwise, with probability |b_a| the first option (b_a > 0, a yes-sayer)
  or the last option (b_a < 0), else an option uniformly at random;
- ordinal / interval scales: label = truth + b_a + e, e ~ Normal(0, sd_a) with
  sd_a = (1 - rho_a) * (range / 2), rounded to the nearest option (ordinal) and
  clipped to the scale.
So rho = 1, b = 0 reproduces the truth and rho = 0 is pure noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError

SOURCE = "simulated"


def _per_annotator(value: float | Sequence[float], n: int, what: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.size == 1:
        return np.repeat(arr, n)
    if arr.size != n:
        raise DataError(f"{what} has {arr.size} values for {n} annotators")
    return arr


def simulate_annotations(
    items: pd.DataFrame | Sequence[Any],
    n_annotators: int,
    scale: Scale,
    reliability: float | Sequence[float] = 0.8,
    bias: float | Sequence[float] = 0.0,
    seed: int = 0,
    *,
    per_item: int | None = None,
    truth_col: str = "truth",
) -> pd.DataFrame:
    """Judgements in long format (``item_id, annotator_id, label, truth, source``).

    ``items`` is a DataFrame with ``item_id`` and optionally ``truth`` (else a truth
    is drawn per item), or a sequence of item ids.  ``per_item`` limits each item
    to that many randomly chosen annotators (default: everyone annotates everything).
    """
    if n_annotators < 1:
        raise DataError("simulate_annotations needs at least one annotator")
    rng = np.random.default_rng(seed)
    if isinstance(items, pd.DataFrame):
        if "item_id" not in items.columns:
            raise DataError("items to simulate lack column 'item_id'")
        ids = items["item_id"].tolist()
        truth = items[truth_col].tolist() if truth_col in items.columns else None
    else:
        ids = list(items)
        truth = None
    if truth is None:
        if scale.is_closed:
            truth = [scale.options[i] for i in rng.integers(0, len(scale.options), len(ids))]
        else:
            truth = rng.uniform(scale.minimum, scale.maximum, len(ids)).tolist()
    rho = np.clip(_per_annotator(reliability, n_annotators, "reliability"), 0.0, 1.0)
    b = _per_annotator(bias, n_annotators, "bias")
    width = len(str(n_annotators - 1))
    annotators = [f"sim{a:0{width}d}" for a in range(n_annotators)]
    numeric = scale.level in ("ordinal", "interval")
    if numeric and scale.is_closed:
        option_values = np.array([float(o) for o in scale.options])
        lo, hi = option_values.min(), option_values.max()
    else:
        lo, hi = (scale.minimum, scale.maximum) if not scale.is_closed else (None, None)

    rows = []
    for i, (item, t) in enumerate(zip(ids, truth)):
        who = range(n_annotators)
        if per_item is not None and per_item < n_annotators:
            who = sorted(rng.choice(n_annotators, size=per_item, replace=False))
        for a in who:
            if numeric:
                sd = (1.0 - rho[a]) * (hi - lo) / 2.0
                value = float(t) + b[a] + rng.normal(0.0, sd) if sd > 0 else float(t) + b[a]
                value = float(np.clip(value, lo, hi))
                if scale.is_closed:
                    label = scale.options[int(np.argmin(np.abs(option_values - value)))]
                else:
                    label = value
            else:
                if rng.random() < rho[a]:
                    label = t
                elif rng.random() < abs(b[a]):
                    label = scale.options[0] if b[a] > 0 else scale.options[-1]
                else:
                    label = scale.options[int(rng.integers(0, len(scale.options)))]
            rows.append((item, annotators[a], label, t))
    df = pd.DataFrame(rows, columns=["item_id", "annotator_id", "label", "truth"])
    df["source"] = SOURCE
    return df
