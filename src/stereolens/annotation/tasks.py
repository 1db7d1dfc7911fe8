"""Annotation tasks out (CSV and Label Studio JSON) and judgements in, with schema validation.

Judgements come back in long format, one row per (item, annotator):
``item_id, annotator_id, label`` plus optional ``timestamp``, ``repeat`` (1 for
the second answer to a repeated item), ``language``, ``group`` and demographic
columns.  Anything wrong is refused with one line naming the file row
(the CSV line number, header = line 1).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError
from stereolens.io import atomic_path, read_csv_checked, write_json, write_text

REQUIRED = ("item_id", "annotator_id", "label")


def export_tasks(
    items: pd.DataFrame,
    scale: Scale,
    instructions: str,
    out_dir: str | os.PathLike,
    *,
    name: str = "tasks",
    text_col: str = "text",
) -> dict[str, Path]:
    """Write ``<name>.csv`` (one row per item with instructions and answer options),
    ``<name>.label_studio.json`` (tasks Label Studio imports) and
    ``<name>.label_config.xml`` (the matching labelling interface)."""
    for col in ("item_id", text_col):
        if col not in items.columns:
            raise DataError(f"items to export lack column {col!r} (have: {', '.join(map(str, items.columns))})")
    dup = items["item_id"].duplicated()
    if dup.any():
        raise DataError(f"items to export line {dup.idxmax() + 2}, column item_id: repeated item_id "
                        f"{items.loc[dup, 'item_id'].iloc[0]!r}")
    out_dir = Path(out_dir)
    options = " | ".join(scale.texts()) if scale.is_closed else f"{scale.minimum:g} .. {scale.maximum:g}"
    table = items.copy()
    table["instructions"] = instructions
    table["scale"] = scale.name
    table["options"] = options
    csv_path = out_dir / f"{name}.csv"
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, encoding="utf-8")

    records = []
    for row in items.to_dict(orient="records"):
        data = {k: _jsonable(v) for k, v in row.items()}
        data["item_id"] = str(row["item_id"])
        records.append({"data": data})
    json_path = write_json(out_dir / f"{name}.label_studio.json", records)
    xml_path = write_text(out_dir / f"{name}.label_config.xml", label_studio_config(scale, instructions, text_col))
    return {"csv": csv_path, "label_studio": json_path, "label_config": xml_path}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def label_studio_config(scale: Scale, instructions: str, text_col: str = "text") -> str:
    """A Label Studio labelling config: single choice for closed scales, a number for ranges."""
    head = f'<View>\n  <Header value="{escape(instructions, {chr(34): "&quot;"})}"/>\n  <Text name="text" value="${text_col}"/>\n'
    if scale.is_closed:
        choices = "\n".join(
            f'    <Choice value="{escape(str(t), {chr(34): "&quot;"})}"/>' for t in scale.texts()
        )
        body = f'  <Choices name="label" toName="text" choice="single" required="true">\n{choices}\n  </Choices>\n'
    else:
        body = (
            f'  <Number name="label" toName="text" min="{scale.minimum:g}" max="{scale.maximum:g}" required="true"/>\n'
        )
    return head + body + "</View>\n"


def validate_judgements(
    df: pd.DataFrame,
    scale: Scale,
    *,
    known_items: Iterable[Any] | None = None,
    where: str = "judgements",
    row_offset: int = 2,
) -> pd.DataFrame:
    """Check columns, labels, duplicates and item ids; return the table with labels coerced to the scale.

    ``row_offset`` turns a DataFrame position into the row number a person sees
    (2 for a CSV with a header line).
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(f"{where} lack column(s) {', '.join(missing)} (have: {', '.join(map(str, df.columns))})")
    df = df.reset_index(drop=True).copy()
    for col in ("item_id", "annotator_id"):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise DataError(f"{where} line {int(empty.idxmax()) + row_offset}: empty {col}")
        df[col] = df[col].astype(str).str.strip()
    labels = []
    for pos, value in enumerate(df["label"].tolist()):
        try:
            labels.append(scale.coerce(value))
        except (TypeError, ValueError) as exc:
            raise DataError(
                f"{where} line {pos + row_offset}, column label (item {df.at[pos, 'item_id']!r}, annotator "
                f"{df.at[pos, 'annotator_id']!r}): {exc} on scale {scale.name!r}"
            ) from None
    df["label"] = pd.Series(labels, index=df.index, dtype=object if scale.is_closed and not _numeric(scale) else float)
    keys = ["item_id", "annotator_id"] + (["repeat"] if "repeat" in df.columns else [])
    if "repeat" in df.columns:
        rep = pd.to_numeric(df["repeat"], errors="coerce")
        if rep.isna().any() or (rep < 0).any():
            bad = int((rep.isna() | (rep < 0)).idxmax())
            raise DataError(f"{where} line {bad + row_offset}: repeat must be 0 or a positive integer, got {df.at[bad, 'repeat']!r}")
        df["repeat"] = rep.astype(int)
    dup = df.duplicated(keys, keep="first")
    if dup.any():
        pos = int(dup.idxmax())
        first = int(df[df.duplicated(keys, keep=False)].index[0])
        raise DataError(
            f"{where} line {pos + row_offset}: duplicate judgement of item {df.at[pos, 'item_id']!r} by annotator "
            f"{df.at[pos, 'annotator_id']!r} (first at line {first + row_offset})"
        )
    if known_items is not None:
        known = {str(i) for i in known_items}
        unknown = ~df["item_id"].isin(known)
        if unknown.any():
            pos = int(unknown.idxmax())
            raise DataError(f"{where} line {pos + row_offset}: unknown item_id {df.at[pos, 'item_id']!r}")
    return df


def _numeric(scale: Scale) -> bool:
    return all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in scale.options)


def import_judgements(
    path: str | os.PathLike,
    scale: Scale,
    *,
    known_items: Iterable[Any] | None = None,
    source: str = "human",
) -> pd.DataFrame:
    """Read completed judgements (CSV, long format) and validate them; adds ``source``."""
    # columns are checked by validate_judgements, which also names offending rows
    df = read_csv_checked(path, [], what="judgements", dtype={"item_id": str, "annotator_id": str})
    df = validate_judgements(df, scale, known_items=known_items, where=str(path))
    if "source" not in df.columns:
        df["source"] = source
    return df


def import_label_studio(
    path: str | os.PathLike,
    scale: Scale,
    *,
    known_items: Iterable[Any] | None = None,
    source: str = "human",
) -> pd.DataFrame:
    """Read a Label Studio JSON export (tasks with ``annotations``) into long format and validate it."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"Label Studio export not found: {path}")
    try:
        tasks = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"Label Studio export {path} is not valid JSON: {exc}") from exc
    rows = []
    for t_pos, task in enumerate(tasks):
        item_id = (task.get("data") or {}).get("item_id", task.get("id"))
        for annotation in task.get("annotations") or []:
            if annotation.get("was_cancelled"):
                continue
            value = None
            for res in annotation.get("result") or []:
                v = res.get("value") or {}
                if "choices" in v and v["choices"]:
                    value = v["choices"][0]
                elif "number" in v:
                    value = v["number"]
                elif "rating" in v:
                    value = v["rating"]
            if value is not None and scale.is_closed:
                # Label Studio returns the option text; map it back to the option
                texts = [t.lower() for t in scale.texts()]
                if str(value).lower() in texts:
                    value = scale.options[texts.index(str(value).lower())]
            rows.append({
                "item_id": item_id,
                "annotator_id": annotation.get("completed_by"),
                "label": value,
                "timestamp": annotation.get("created_at"),
                "task_index": t_pos,
            })
    df = pd.DataFrame(rows, columns=["item_id", "annotator_id", "label", "timestamp", "task_index"])
    df = validate_judgements(df, scale, known_items=known_items, where=f"{path} annotation", row_offset=1)
    df["source"] = source
    return df
