"""Multiple-comparison corrections for tables that test many cells at once.

Every table that stars cells (pairs by dimension x model x language, CrowS per bias
type, the leakage edges) runs one test per cell. The papers' own rule (p < 0.05 or a
BCa bound past 0.5, cell by cell) stays; beside it each table carries Holm's
family-wise correction and Benjamini-Hochberg's false-discovery-rate correction over
the table's family of cells, computed by statsmodels so the numbers match the
reference implementation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

# Named in every legend and summary that uses them.
CORRECTIONS = {
    "holm": "Holm (family-wise error rate)",
    "fdr_bh": "Benjamini-Hochberg (false discovery rate)",
}


def adjusted_p_values(p_values, method: str) -> np.ndarray:
    """Adjusted p-values of one family; NaN entries (cells without a test) stay NaN and are
    not counted in the family's size."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}: use one of {sorted(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = ~np.isnan(p)
    if tested.any():
        out[tested] = multipletests(p[tested], method=method)[1]
    return out


def add_corrections(
    table: pd.DataFrame, *, p_col: str = "p_value", alpha: float = 0.05, family: pd.Series | None = None
) -> pd.DataFrame:
    """Return ``table`` with ``p_holm``, ``p_bh``, ``significant_holm`` and ``significant_bh``.

    ``family`` (aligned with ``table``) splits the rows into families corrected
    separately; by default the whole table is one family."""
    out = table.copy()
    keys = family if family is not None else pd.Series("all", index=table.index)
    for name, method in (("holm", "holm"), ("bh", "fdr_bh")):
        adjusted = pd.Series(np.nan, index=table.index, dtype=float)
        for _, index in keys.groupby(keys, sort=False).groups.items():
            adjusted.loc[index] = adjusted_p_values(table.loc[index, p_col].to_numpy(dtype=float), method)
        out[f"p_{name}"] = adjusted
        out[f"significant_{name}"] = adjusted < alpha
    return out


def family_description(n_tests: int, alpha: float = 0.05) -> str:
    """One legend line naming the corrections and the family they ran over."""
    return (
        f"Corrections over the table's family of {n_tests} tests at alpha = {alpha:g}: "
        f"p_holm = {CORRECTIONS['holm']}, p_bh = {CORRECTIONS['fdr_bh']}."
    )
