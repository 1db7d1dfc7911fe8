"""The one markdown table renderer every study report uses.

Numbers are shown to a person: a fixed number of significant digits, no
``np.float64(...)`` reprs, and one spelling for a missing value (``n/a``) across
every report, so a reader never has to guess whether a blank cell, ``nan`` and
``None`` mean different things.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import pandas as pd

MISSING = "n/a"


def format_cell(value: Any, digits: int = 3) -> str:
    """``value`` as a person reads it: integers as they are, other numbers to ``digits``
    significant digits, missing values as :data:`MISSING`."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Integral):
        return str(int(value))
    if isinstance(value, Real):
        number = float(value)
        if math.isnan(number):
            return MISSING
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        return f"{number:.{digits}g}"
    # pipes would end the cell early
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame | None, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table of ``df`` (an ``_(empty)_`` line when it has no rows)."""
    if df is None or df.empty:
        return "_(empty)_\n"
    header = "| " + " | ".join(format_cell(c, digits) for c in df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(format_cell(v, digits) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"
