"""The one number formatter (and markdown table renderer) for everything a person reads.

Every number a person reads goes through here: the report site (index, study pages, model
profile, comparison blocks), the study reports' ``report.md``, ``stereolens profile`` and
``stereolens compare`` in the terminal, and the one-line summaries stages print.  So a number is
written the same way wherever it appears:

* :func:`format_cell`: a table cell; integers as they are, other numbers to three significant
  digits (a number of a thousand or more to the unit: ``1235``, not ``1.23e+03``), one spelling
  for a missing value (``n/a``), never ``np.float64(...)``.
* :func:`format_estimate`: an estimate and its interval.  A share (0-1, a bias score) and a
  percentage (0-100, stereo's ss) both read ``59.0% [54.6, 63.2]``; a difference of shares reads
  ``-26.7 pp``; anything else, ratios such as PCS included, is a plain number, never a percentage
  (``-1.28``), with its bounds at the same number of decimals as the estimate
  (``0.576 [0.551, 0.600]``, ``27.2 [15.2, 39.4]``).
* :func:`format_n`: the n behind a cell (``n=1508``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
        text = f"{number:.{digits}g}"
        if "e+" in text and abs(number) < 1e15:
            return f"{number:.0f}"  # 1235, not 1.24e+03: the integer part is never cut
        return text
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
# difference of shares (or of percentages) in percentage points, anything else (ratios such as PCS, "ratio" or "") as a plain number
_PERCENT_SCALE = {"share": 100.0, "percent": 1.0, "share_points": 100.0, "percent_points": 1.0}
PLAIN_UNITS = ("", "ratio", "plain")
UNITS = (*_PERCENT_SCALE, *PLAIN_UNITS)


def _finite(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


def _fixed(value: float, decimals: int) -> str:
    """``value`` at ``decimals`` decimals, without the ``-0.0`` a tiny negative rounds to."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def shared_decimals(*values: Any, digits: int = 3) -> int | None:
    """The decimals that show the largest of ``values`` to ``digits`` significant digits: the one
    precision an estimate and its bounds share.  None where that largest is below 1e-4 or not below
    1e6 (those are shown in scientific notation, each on its own)."""
    sizes = [abs(float(v)) for v in values if _finite(v)]
    largest = max(sizes, default=0.0)
    if largest == 0.0:
        return digits - 1
    if largest < 1e-4 or largest >= 1e6:
        return None
    return max(0, digits - 1 - math.floor(math.log10(largest)))


def format_estimate(value: Any, low: Any = None, high: Any = None, *, unit: str = "", digits: int = 3) -> str:
    """An estimate and its interval as a person reads them: ``57.6% [55.0, 60.0]`` for a share or a
    percentage, ``-26.7 pp`` for a difference of shares, ``0.576 [0.551, 0.600]`` for a plain number
    or a ratio (bounds at the estimate's decimals), :data:`MISSING` for no value.  Non-numeric values
    (a head name) are shown as :func:`format_cell` shows them."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r} (known: {', '.join(repr(u) for u in UNITS)})")
    if format_cell(value) == MISSING:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, Real):
        return format_cell(value, digits)
    interval = _finite(low) and _finite(high)
    if unit in _PERCENT_SCALE:
        scale = _PERCENT_SCALE[unit]
        suffix = " pp" if unit.endswith("_points") else "%"
        text = f"{_fixed(float(value) * scale, 1)}{suffix}"
        return text + (f" [{_fixed(float(low) * scale, 1)}, {_fixed(float(high) * scale, 1)}]" if interval else "")
    if not interval:
        return format_cell(value, digits)
    decimals = shared_decimals(value, low, high, digits=digits)
    if decimals is None or not _finite(value):
        return f"{format_cell(value, digits)} [{format_cell(float(low), digits)}, {format_cell(float(high), digits)}]"
    return f"{_fixed(float(value), decimals)} [{_fixed(float(low), decimals)}, {_fixed(float(high), decimals)}]"


def format_n(n: Any) -> str:
    """The n behind a cell, ``n=1508``; empty where there is none."""
    return "" if format_cell(n) == MISSING else f"n={format_cell(n)}"


def format_value(value: Any, digits: int = 3) -> str:
    """Any value a summary holds, in words for prose: numbers through :func:`format_cell`, true / false as
    yes / no, a list as its items joined by commas, a mapping through :func:`format_mapping`; never a
    Python, YAML or JSON repr."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return format_mapping(value, digits)
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v, digits) for v in value) if value else "none"
    return MISSING if value is None else format_cell(value, digits).replace("\\|", "|")


def format_mapping(mapping: Mapping[Any, Any], digits: int = 3) -> str:
    """A mapping in words: ``Mexico 2, Spain 3``; one level down with its key before a colon and a
    semicolon between entries: ``ru: authored 416, original 92; zh: authored 410``."""
    if not mapping:
        return "none"
    nested = any(isinstance(v, Mapping) for v in mapping.values())
    if nested:
        return "; ".join(f"{k}: {format_value(v, digits)}" for k, v in mapping.items())
    return ", ".join(f"{k} {format_value(v, digits)}" for k, v in mapping.items())


def settings(mapping: Mapping[Any, Any], prefix: str = "") -> list[tuple[str, str]]:
    """A nested configuration as (dotted key, value in words) rows: ``study.crows.sample`` -> ``500``; a list of
    settings mappings (a judge panel) numbers its entries (``panel.1.id``)."""
    rows: list[tuple[str, str]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows += settings(value, f"{name}.")
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
            for i, entry in enumerate(value, 1):
                rows += settings(entry, f"{name}.{i}.")
        else:
            rows.append((name, format_value(value)))
    return rows


# the marks a table puts after a value: the paper's significance rule, and a borderline cell (never starred)
SIGNIFICANT_MARK, BORDERLINE_MARK = "*", "~"


def significance_mark(significant: Any, borderline: Any = False) -> str:
    """``*`` for a significant cell, ``~`` for a borderline one, nothing otherwise (AmchiBias' marks, used by
    every study table that stars its cells)."""
    if bool(significant):
        return SIGNIFICANT_MARK
    return BORDERLINE_MARK if bool(borderline) else ""
