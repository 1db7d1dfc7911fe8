"""Position bias of the generative choice task (Cao et al. 2024 section 3.3).

A model that prefers whichever trait is listed first in "choose either '{TRAIT1}' or
'{TRAIT2}'" puts its order preference into every group-trait score when each pair is asked
in one order only.  Asking both orders and averaging (``choice.both_orders``) cancels a
constant order preference; :func:`first_listed_wins` measures how strong it was.
"""

from __future__ import annotations

import pandas as pd

from stereolens.errors import DataError

QUERY_KEYS = ["language", "group", "trait1", "trait2"]


def query_shares(table: pd.DataFrame) -> pd.DataFrame:
    """Per query, the share of trait1 and of trait2: the log-probability table as it is, the
    sampled generations (one row per sample with a ``match`` column) counted per query."""
    if {"p_trait1", "p_trait2"} <= set(table.columns):
        return table[[*QUERY_KEYS, "p_trait1", "p_trait2"]]
    if "match" in table.columns:
        counts = table.assign(t1=table["match"] == "trait1", t2=table["match"] == "trait2")
        return counts.groupby(QUERY_KEYS, sort=False).agg(p_trait1=("t1", "mean"), p_trait2=("t2", "mean")).reset_index()
    raise DataError("choice query table has neither p_trait1/p_trait2 (log-probabilities) nor match (samples)")


def first_listed_wins(table: pd.DataFrame) -> float | None:
    """Share of queries in which the first-listed trait beats the second (a tie counts one half).

    0.5 is no position preference; 1.0 is a model that always picks the first option.  None for an
    empty table.
    """
    shares = query_shares(table)
    if shares.empty:
        return None
    p1, p2 = shares["p_trait1"].to_numpy(float), shares["p_trait2"].to_numpy(float)
    wins = (p1 > p2).astype(float) + 0.5 * (p1 == p2)
    return float(wins.mean())
