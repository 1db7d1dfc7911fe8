"""From many judgements to one label per item (or one score per group and trait).

- :func:`majority_vote`: nominal labels, a label wins with at least ``quorum`` votes
  (AmchiBias: 2 of 3 annotators said "yes").
- :func:`median_likert`: ordinal labels, items whose median is at or below
  ``discard_at_or_below`` are discarded (EspanStereo: median <= 2).
- :func:`pole_split_mean`: slider ratings r in [-50, 50] on "left - right" trait
  pairs; the left trait gets max(-r, 0), the right max(r, 0), averaged over
  annotators (Cao et al. 2024).

The Cao et al. 2024 survey files and the H matrices built from them are the leakage
study's (:mod:`stereolens.studies.leakage.matrices`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from stereolens.errors import DataError

# ---------------------------------------------------------------- majority vote / median


def majority_vote(
    data: pd.DataFrame,
    *,
    quorum: int | float = 0.5,
    item_col: str = "item_id",
    label_col: str = "label",
) -> pd.DataFrame:
    """One row per item: ``label`` (the winner or NaN), ``votes``, ``n``, ``decided``.

    ``quorum`` as an int is the number of votes the winner needs (2 for 2-of-3);
    as a float in (0, 1) the winner needs strictly more than that share of the
    item's votes (0.5 = simple majority).  Ties for first place are never decided.
    """
    df = data.dropna(subset=[label_col])
    counts = df.groupby([item_col, label_col], sort=False).size().rename("votes").reset_index()
    n = df.groupby(item_col, sort=False).size().rename("n")
    counts = counts.sort_values([item_col, "votes"], ascending=[True, False], kind="stable")
    top = counts.groupby(item_col, sort=False).head(2)
    rows = []
    for item, grp in top.groupby(item_col, sort=False):
        votes = grp["votes"].to_numpy()
        n_item = int(n[item])
        tie = len(votes) > 1 and votes[0] == votes[1]
        if isinstance(quorum, float) and 0 < quorum < 1:
            enough = votes[0] > quorum * n_item
        else:
            enough = votes[0] >= int(quorum)
        decided = bool(enough and not tie)
        rows.append({
            item_col: item,
            "label": grp[label_col].iloc[0] if decided else np.nan,
            "votes": int(votes[0]),
            "n": n_item,
            "decided": decided,
        })
    return pd.DataFrame(rows, columns=[item_col, "label", "votes", "n", "decided"])


def median_likert(
    data: pd.DataFrame,
    *,
    discard_at_or_below: float = 2,
    item_col: str = "item_id",
    label_col: str = "label",
) -> pd.DataFrame:
    """One row per item: ``median``, ``n`` and ``keep`` (median above the discard bound)."""
    df = data.dropna(subset=[label_col])
    values = pd.to_numeric(df[label_col], errors="coerce")
    if values.isna().any():
        bad = values[values.isna()].index[0]
        raise DataError(f"judgements line {bad + 2}, column {label_col}: median_likert needs numeric labels, "
                        f"got {df.loc[bad, label_col]!r}")
    grouped = values.groupby(df[item_col], sort=False)
    out = pd.DataFrame({"median": grouped.median(), "n": grouped.size()})
    out["keep"] = out["median"] > discard_at_or_below
    return out.reset_index().rename(columns={"index": item_col})


# ---------------------------------------------------------------- pole-split slider ratings


def split_pair(pair: str) -> tuple[str, str]:
    """``"powerless - powerful"`` -> ``("powerless", "powerful")``."""
    parts = [p.strip() for p in pair.split(" - ")]
    if len(parts) != 2 or not all(parts):
        raise DataError(f"trait pair {pair!r} is not of the form 'left - right'")
    return parts[0], parts[1]


def pole_split(ratings: pd.DataFrame, *, pair_col: str = "trait_pair", rating_col: str = "rating") -> pd.DataFrame:
    """Each slider rating as two rows, one per pole: ``trait`` and ``score`` (>= 0)."""
    left_right = [split_pair(p) for p in ratings[pair_col]]
    r = ratings[rating_col].astype(float).to_numpy()
    base = ratings.drop(columns=[pair_col, rating_col])
    left = base.assign(trait=[lr[0] for lr in left_right], score=np.maximum(-r, 0.0))
    right = base.assign(trait=[lr[1] for lr in left_right], score=np.maximum(r, 0.0))
    return pd.concat([left, right], ignore_index=True)


def pole_split_mean(
    ratings: pd.DataFrame,
    *,
    group_col: str = "group",
    pair_col: str = "trait_pair",
    rating_col: str = "rating",
    trait_order: Sequence[str] | None = None,
    group_order: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Traits x groups matrix of mean pole scores over annotators (NaN where nobody rated)."""
    poles = pole_split(ratings, pair_col=pair_col, rating_col=rating_col)
    matrix = poles.groupby(["trait", group_col])["score"].mean().unstack(group_col)
    if trait_order is None:
        # pair order as first seen, each pair's left pole then its right (the published layout)
        trait_order = [t for pair in dict.fromkeys(ratings[pair_col]) for t in split_pair(pair)]
    matrix = matrix.reindex(index=list(trait_order), columns=list(group_order) if group_order else None)
    matrix.index.name = "Traits"
    matrix.columns.name = None
    return matrix
