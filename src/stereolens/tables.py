"""One schema per table kind, checked the same way at every entry point.

The schemas are pandera ``DataFrameSchema`` objects: columns, types, allowed values
and ranges, uniqueness, non-empty.  :func:`validate_table` runs one lazily (every
failure collected) and turns the *first* failure, in file order, into one
:class:`~stereolens.errors.DataError` line that names the place the way a person
reading the file counts it::

    data/pairs.csv line 4, column sent_anti: empty text (every pair needs both sentences)

``line`` counts the header as line 1, so the first data row is line 2 (a quoted
field spanning several lines shifts this; such files are rare in our inputs).

The engine tables (pairs, scored pairs, sentences, judgements) are defined here; a
study defines its own tables (PCS judged scores, a scenario bank, H matrices) with
:func:`text_column` and friends in its own package, and checks them with
:func:`validate_table` too.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import pandera.pandas as pa

from stereolens.errors import DataError
from stereolens.io import missing_columns_message, read_csv_checked

HEADER_LINES = 1  # a CSV's data row i (0-based) is on line i + 2


def _nonblank(series: pd.Series) -> pd.Series:
    return series.notna() & (series.astype(str).str.strip() != "")


def text_column(*, unique: bool = False, required: bool = True, what: str = "text") -> pa.Column:
    """A column of non-empty strings (``NA`` or ``None`` stay text: read with ``dtype=str``)."""
    return pa.Column(
        None,  # any dtype: pandas 3 reads text as "str", older pandas as object
        checks=pa.Check(_nonblank, error=f"empty {what}", ignore_na=False),
        nullable=True,  # blank cells are reported by the check above, with a clearer message
        unique=unique,
        required=required,
    )


def number_column(
    *, minimum: float | None = None, maximum: float | None = None, nullable: bool = False, required: bool = True,
    what: str = "number",
) -> pa.Column:
    """A finite number, optionally within ``[minimum, maximum]``; blank only when ``nullable``."""
    checks = [pa.Check(lambda s: s.isna() | s.apply(lambda v: math.isfinite(v)), error=f"{what} is not finite")]
    if minimum is not None or maximum is not None:
        lo = -math.inf if minimum is None else minimum
        hi = math.inf if maximum is None else maximum
        checks.append(pa.Check(lambda s: s.isna() | s.between(lo, hi), error=f"{what} outside {lo:g}..{hi:g}"))
    return pa.Column(float, checks=checks, nullable=nullable, coerce=True, required=required)


def count_column(*, minimum: int = 0, maximum: int | None = None, what: str = "count") -> pa.Column:
    """A whole number (a count of votes, of annotators) within ``[minimum, maximum]``, read as text: ``2.5``,
    ``two`` and a blank are refused where they stand, never rounded or coerced."""
    def whole(series: pd.Series) -> pd.Series:
        text = series.astype(str).str.strip()
        ok = text.str.fullmatch(r"[+-]?\d+")
        values = pd.to_numeric(text.where(ok), errors="coerce")
        within = values.ge(minimum) & (values.le(maximum) if maximum is not None else True)
        return ok & within

    shown = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
    return pa.Column(None, checks=pa.Check(whole, error=f"{what} is not a whole number in {shown}", ignore_na=False),
                     nullable=True, required=True)


def choice_column(allowed: Iterable[Any], *, what: str = "value", required: bool = True) -> pa.Column:
    allowed = list(allowed)
    shown = ", ".join(map(str, allowed))
    return pa.Column(
        None,  # any dtype: pandas 3 reads text as "str", older pandas as object
        checks=pa.Check(lambda s: s.astype(str).str.strip().isin([str(a) for a in allowed]),
                        error=f"{what} is not one of {shown}", ignore_na=False),
        nullable=True,
        required=required,
    )


# --- the engine tables ------------------------------------------------------------------


def pairs_schema(id_column: str = "id", stereo: str = "sent_stereo", anti: str = "sent_anti") -> pa.DataFrameSchema:
    """Minimal pairs: a unique id and two different, non-empty sentences."""
    return pa.DataFrameSchema(
        {
            id_column: text_column(unique=True, what="id"),
            stereo: text_column(what="sentence (every pair needs both sentences)"),
            anti: text_column(what="sentence (every pair needs both sentences)"),
        },
        checks=pa.Check(
            lambda df: ~(_nonblank(df[stereo]) & (df[stereo].astype(str).str.strip() == df[anti].astype(str).str.strip())),
            error=f"the two sentences are identical (a pair must differ; column {anti})",
        ),
        name="pairs",
    )


def scored_pairs_schema(stereo: str = "score_stereo", anti: str = "score_anti") -> pa.DataFrameSchema:
    """What ``score pairs`` writes: both scores finite log-probabilities (<= 0)."""
    return pa.DataFrameSchema(
        {
            stereo: number_column(maximum=0.0, what="log-probability"),
            anti: number_column(maximum=0.0, what="log-probability"),
        },
        name="scored pairs",
    )


def sentences_schema(column: str = "sentence", id_column: str | None = "id") -> pa.DataFrameSchema:
    columns = {column: text_column(what="sentence")}
    if id_column:
        columns[id_column] = text_column(unique=True, required=False, what="id")
    return pa.DataFrameSchema(columns, name="sentences")


def judgements_schema(labels: Sequence[Any] | None = None) -> pa.DataFrameSchema:
    """Long-format judgements: one label per (item, annotator[, repeat]); labels on the scale when given."""
    columns = {
        "item_id": text_column(what="item_id"),
        "annotator_id": text_column(what="annotator_id (every judgement needs its annotator)"),
        "label": text_column(what="label") if labels is None else choice_column(labels, what="label"),
    }
    return pa.DataFrameSchema(columns, unique=["item_id", "annotator_id", "repeat"], name="judgements",
                              report_duplicates="exclude_first")


# --- checking -----------------------------------------------------------------------------


def read_table(
    path: str | os.PathLike, schema: pa.DataFrameSchema, *, what: str, allow_empty: bool = False, text: bool = True
) -> pd.DataFrame:
    """Read a CSV (text stays text when ``text``: "NA" is a word) and validate it against ``schema``."""
    required = [name for name, column in schema.columns.items() if column.required]
    df = read_csv_checked(path, required, what=what, dtype=str if text else None, keep_default_na=not text,
                          allow_empty=allow_empty)
    return validate_table(df, schema, f"{what} {path}")


_BUILTIN = {
    "not_nullable": "empty cell",
    "field_uniqueness": "duplicate value (each must be unique)",
    "multiple_fields_uniqueness": "duplicate row for the same keys",
}


def validate_table(df: pd.DataFrame, schema: pa.DataFrameSchema, where: str, *, first_line: int = 2) -> pd.DataFrame:
    """Validate ``df``; raise one DataError line naming ``where``, the line and the column of the first failure.

    ``first_line`` is the line of ``df``'s first row in the file (2 under one header line).
    """
    df = df.reset_index(drop=True)
    if isinstance(schema.unique, list):
        # a uniqueness key that the table lacks (an optional ``repeat``) is not part of the key
        present = [c for c in schema.unique if c in df.columns]
        if present != schema.unique:
            schema = copy.deepcopy(schema)
            schema.unique = present or None
    try:
        return schema.validate(df, lazy=True)
    except pa.errors.SchemaErrors as exc:
        keys = schema.unique if isinstance(schema.unique, list) else []
        raise DataError(_describe(exc.failure_cases, df, where, first_line, keys)) from None
    except pa.errors.SchemaError as exc:  # pragma: no cover - lazy validation collects instead
        raise DataError(f"{where}: {str(exc).splitlines()[0]}") from None


def _describe(cases: pd.DataFrame, df: pd.DataFrame, where: str, first_line: int, keys: list[str]) -> str:
    cases = cases.copy()
    if "column_in_dataframe" in set(cases["check"].astype(str)):
        missing = cases.loc[cases["check"].astype(str) == "column_in_dataframe", "failure_case"].astype(str).tolist()
        return missing_columns_message(where, missing, df.columns)
    cases["row"] = pd.to_numeric(cases["index"], errors="coerce")
    # a wrong type reported twice (coercion and dtype) names the same cell: keep the clearer one
    cases = cases.loc[~cases["check"].astype(str).str.startswith("dtype(")]
    order = {str(c): i for i, c in enumerate(df.columns)}
    cases["col_order"] = [len(order) if str(ctx) == "DataFrameSchema" else order.get(str(c), len(order))
                          for c, ctx in zip(cases["column"], cases["schema_context"])]
    cases = cases.sort_values(["row", "col_order"], na_position="last", kind="stable")
    case = cases.iloc[0]
    check = str(case["check"])
    column = None if pd.isna(case["column"]) or case["column"] is None else str(case["column"])
    if str(case.get("schema_context")) == "DataFrameSchema":
        column = None  # a check across columns: its message names the column it is about
    if pd.isna(case["row"]):
        return f"{where}: {check}"
    row = int(case["row"])
    line = row + first_line
    value = df.iloc[row][column] if column in df.columns else None
    if check.startswith("coerce_dtype"):
        text = f"{value!r} is not a number"
    elif check == "multiple_fields_uniqueness":
        return _duplicate_message(df, where, first_line, keys)
    elif check == "field_uniqueness":
        # name the repeat, not the first occurrence
        repeats = df[column].astype(str).duplicated(keep="first")
        row = int(repeats.to_numpy().nonzero()[0][0])
        line, value = row + first_line, df.iloc[row][column]
        first = int((df[column].astype(str) == str(value)).to_numpy().nonzero()[0][0]) + first_line
        text = f"duplicate value {value!r} (first at line {first}; each must be unique)"
    else:
        text = _BUILTIN.get(check, check)
        if value is not None and not pd.isna(value) and str(value).strip():
            shown = value.item() if hasattr(value, "item") else value
            text += f", got {shown!r}"
    place = f"{where} line {line}" + (f", column {column}" if column else "")
    return f"{place}: {text}"


def _duplicate_message(df: pd.DataFrame, where: str, first_line: int, keys: list[str]) -> str:
    """The first repeated row for the schema's unique ``keys`` and the line it repeats."""
    dup = df[keys].astype(str).duplicated(keep="first")
    row = int(dup.to_numpy().nonzero()[0][0])
    same = (df[keys].astype(str) == df.loc[row, keys].astype(str)).all(axis=1)
    first = int(same.to_numpy().nonzero()[0][0]) + first_line
    shown = ", ".join(f"{k} {df.at[row, k]!r}" for k in keys)
    return f"{where} line {row + first_line}: duplicate row for {shown} (first at line {first})"


__all__ = [
    "choice_column",
    "count_column",
    "judgements_schema",
    "number_column",
    "pairs_schema",
    "read_table",
    "scored_pairs_schema",
    "sentences_schema",
    "text_column",
    "validate_table",
]
