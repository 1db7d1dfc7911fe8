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


# how an estimate's unit is shown: a share (0-1) and a percentage (0-100) both as "57.6%", a
# difference of shares in percentage points, anything else as a plain number
_PERCENT_SCALE = {"share": 100.0, "percent": 1.0, "share_points": 100.0}


def format_estimate(value: Any, low: Any = None, high: Any = None, *, unit: str = "", digits: int = 3) -> str:
    """An estimate and its interval as a person reads them: ``57.6% [55.0, 60.0]`` for a share,
    ``-26.7 pp`` for a difference of shares, ``29.7 [16.4, 46.0]`` for a plain score, :data:`MISSING`
    for no value.  Non-numeric values (a head name) are shown as :func:`format_cell` shows them."""
    if format_cell(value) == MISSING:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, Real):
        return format_cell(value, digits)
    interval = all(isinstance(b, Real) and not math.isnan(float(b)) for b in (low, high))
    if unit in _PERCENT_SCALE:
        scale = _PERCENT_SCALE[unit]
        suffix = " pp" if unit == "share_points" else "%"
        text = f"{float(value) * scale:.1f}{suffix}"
        return text + (f" [{float(low) * scale:.1f}, {float(high) * scale:.1f}]" if interval else "")
    text = format_cell(value, digits)
    return text + (f" [{format_cell(float(low), digits)}, {format_cell(float(high), digits)}]" if interval else "")
