"""Annotation tasks out (CSV and Label Studio JSON) and judgements in, with schema validation.

Judgements come back in long format, one row per (item, annotator):
``item_id, annotator_id, label`` plus optional ``timestamp``, ``repeat`` (1 for
the second answer to a repeated item), ``language``, ``group`` and demographic
columns.  Anything wrong is refused with one line naming the file row
(the CSV line number, header = line 1).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
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
    text_fields: Mapping[str, str] | None = None,
    item_choices: Mapping[Any, Sequence[str]] | None = None,
) -> dict[str, Path]:
    """Write ``<name>.csv`` (one row per item with instructions and answer options),
    ``<name>.label_studio.json`` (tasks Label Studio imports) and
    ``<name>.label_config.xml`` (the matching labelling interface).

    ``text_fields`` (control name -> prompt) adds a text box per field (a rewrite, a reason);
    ``item_choices`` (item_id -> option texts in scale order) shows each task its own option texts,
    read back by position on import."""
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
        if item_choices is not None:
            texts = list(item_choices[row["item_id"]])
            if len(texts) != len(scale.options):
                raise DataError(f"item {row['item_id']!r}: {len(texts)} option texts for the {len(scale.options)} "
                                f"options of scale {scale.name!r}")
            data["choices"] = [{"value": t} for t in texts]
        records.append({"data": data})
    json_path = write_json(out_dir / f"{name}.label_studio.json", records)
    config = label_studio_config(scale, instructions, text_col, text_fields=text_fields,
                                 per_task_choices=item_choices is not None)
    xml_path = write_text(out_dir / f"{name}.label_config.xml", config)
    return {"csv": csv_path, "label_studio": json_path, "label_config": xml_path}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def label_studio_config(scale: Scale, instructions: str, text_col: str = "text", *,
                        text_fields: Mapping[str, str] | None = None, per_task_choices: bool = False) -> str:
    """A Label Studio labelling config: single choice for closed scales (the task's own ``choices`` when
    ``per_task_choices``), a number for ranges, and a text box per ``text_fields`` entry."""
    head = f'<View>\n  <Header value="{_attr(instructions)}"/>\n  <Text name="text" value="${text_col}"/>\n'
    if scale.is_closed and per_task_choices:
        body = '  <Choices name="label" toName="text" choice="single" required="true" value="$choices"/>\n'
    elif scale.is_closed:
        choices = "\n".join(f'    <Choice value="{_attr(str(t))}"/>' for t in scale.texts())
        body = f'  <Choices name="label" toName="text" choice="single" required="true">\n{choices}\n  </Choices>\n'
    else:
        body = (
            f'  <Number name="label" toName="text" min="{scale.minimum:g}" max="{scale.maximum:g}" required="true"/>\n'
        )
    for field_name, prompt in (text_fields or {}).items():
        body += (f'  <Header value="{_attr(prompt)}"/>\n'
                 f'  <TextArea name="{_attr(field_name)}" toName="text" rows="2" maxSubmissions="1" editable="true"/>\n')
    return head + body + "</View>\n"


def _attr(text: str) -> str:
    return escape(text, {chr(34): "&quot;"})


def validate_judgements(
    df: pd.DataFrame,
    scale: Scale,
    *,
    known_items: Iterable[Any] | None = None,
    where: str = "judgements",
    row_offset: int = 2,
    places: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Check columns, labels, duplicates and item ids; return the table with labels coerced to the scale.

    ``row_offset`` turns a DataFrame position into the row number a person sees
    (2 for a CSV with a header line); ``places`` names each row's place instead
    (a Label Studio export's record, ``record 2 (task 5), annotation 15``).
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(f"{where} lack column(s) {', '.join(missing)} (have: {', '.join(map(str, df.columns))})")
    df = df.reset_index(drop=True).copy()

    def place(pos: int) -> str:
        return places[pos] if places is not None else f"line {pos + row_offset}"

    def at(pos: int) -> str:
        return f"{where} {place(pos)}"

    for col in ("item_id", "annotator_id"):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise DataError(f"{at(int(empty.idxmax()))}: empty {col}")
        df[col] = df[col].astype(str).str.strip()
    labels = []
    for pos, value in enumerate(df["label"].tolist()):
        try:
            labels.append(scale.coerce(value))
        except (TypeError, ValueError) as exc:
            raise DataError(
                f"{at(pos)}, column label (item {df.at[pos, 'item_id']!r}, annotator "
                f"{df.at[pos, 'annotator_id']!r}): {exc} on scale {scale.name!r}"
            ) from None
    df["label"] = pd.Series(labels, index=df.index, dtype=object if scale.is_closed and not _numeric(scale) else float)
    keys = ["item_id", "annotator_id"] + (["repeat"] if "repeat" in df.columns else [])
    if "repeat" in df.columns:
        rep = pd.to_numeric(df["repeat"], errors="coerce")
        if rep.isna().any() or (rep < 0).any():
            bad = int((rep.isna() | (rep < 0)).idxmax())
            raise DataError(f"{at(bad)}: repeat must be 0 or a positive integer, got {df.at[bad, 'repeat']!r}")
        df["repeat"] = rep.astype(int)
    dup = df.duplicated(keys, keep="first")
    if dup.any():
        pos = int(dup.idxmax())
        first = int(df[df.duplicated(keys, keep=False)].index[0])
        raise DataError(
            f"{at(pos)}: duplicate judgement of item {df.at[pos, 'item_id']!r} by annotator "
            f"{df.at[pos, 'annotator_id']!r} (first at {place(first)})"
        )
    if known_items is not None:
        known = {str(i) for i in known_items}
        unknown = ~df["item_id"].isin(known)
        if unknown.any():
            pos = int(unknown.idxmax())
            raise DataError(f"{at(pos)}: unknown item_id {df.at[pos, 'item_id']!r}")
    return df


def _numeric(scale: Scale) -> bool:
    return all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in scale.options)


def judgements_file(path: str | os.PathLike | None, *, key: str) -> Path | None:
    """The judgements file a stage's params ``key`` names, or None when the key is unset or the file is not there
    (yet: the stage writes the task files first, then says so); a folder in its place is refused in one line
    naming the key, before the stage writes anything."""
    if not path:
        return None
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{key}={path} is a folder, not a judgements file (give the Label Studio export or the CSV "
                        f"itself)")
    return path if path.exists() else None


def import_judgements(
    path: str | os.PathLike,
    scale: Scale,
    *,
    known_items: Iterable[Any] | None = None,
    source: str = "human",
    annotator_map: Mapping[str, str] | None = None,
    text_fields: Sequence[str] = ("rewrite", "reason"),
) -> pd.DataFrame:
    """Read completed judgements and validate them; adds ``source`` (the annotation's provenance).

    ``path`` is a long-format CSV or a Label Studio export (JSON, JSON-MIN or CSV, told apart and checked
    whole by :func:`~stereolens.annotation.label_studio.read_export`); ``annotator_map`` turns Label Studio
    users into the team's annotator ids (one-to-one), ``text_fields`` names an export's free-text answers."""
    from stereolens.annotation.label_studio import map_annotators, read_export, read_label_studio

    # the whole file is checked (there, a file, UTF-8, its kind; an export's every record) before any row is read
    export = read_export(path)
    long_csv = export.kind == "long"
    if long_csv:
        # columns are checked by validate_judgements, which also names offending rows
        df = read_csv_checked(path, [], what="judgements", dtype={"item_id": str, "annotator_id": str})
        if annotator_map:
            df["annotator_id"] = map_annotators(df["annotator_id"], annotator_map, where=str(path))
        places = None  # CSV line numbers, the header being line 1
    else:
        df = read_label_studio(export, scale, text_fields=text_fields, annotator_map=annotator_map)
        places = df.pop("record").tolist()  # an export's records, by place and Label Studio ids
    df = validate_judgements(df, scale, known_items=known_items, where=str(path), places=places)
    # a long CSV may carry each row's own provenance (a file merged from several sources); every
    # judgement of a Label Studio export comes from the annotators of that project
    if not long_csv or "source" not in df.columns:
        df["source"] = source
    return df
