"""Label Studio exports (JSON, JSON-MIN, CSV) read into the long judgement format.

Label Studio writes one record per task (JSON, with its ``annotations``) or one
record per annotation (JSON-MIN and CSV, the task's data fields beside the
control values).  All three become the same rows: ``item_id, annotator_id,
label``, one column per text area (``rewrite``, ``reason``), ``timestamp``
(the annotation's last update), ``annotation_id`` and ``label_studio_user``.

Choices shown per task (``data.choices``, a dynamic ``<Choices value="$choices">``)
map back to the scale by position, so an option text with the task's own
country in it still becomes its score.  The task's own ``source`` (where the
item came from) is kept as ``item_source``: the judgement's ``source`` is the
annotation's provenance.  When one annotator answered a task twice, the answer
updated last counts (ties: the higher annotation id), whatever the format.

What Label Studio 1.23.2 writes for a round left unfinished (recorded in
tests/annotation/fixtures/label_studio/unfinished.*): its Export button leaves out
the tasks nobody annotated; JSON keeps a skipped annotation (``was_cancelled``,
no result) and JSON-MIN and CSV leave it out, with the task too when nothing
else was submitted on it; with ``download_all_tasks=true`` an untouched task is a
JSON task with no annotations, or a JSON-MIN / CSV record whose ``annotator`` and
``annotation_id`` are null or blank.  None of these is a judgement: the rows hold
the submitted annotations only, and a stage that needs every item judged names
the ones left over (``io.refuse_unjudged``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError

# the control names the project's labelling configs use (tasks.label_studio_config)
LABEL_CONTROL = "label"
# what Label Studio adds to each JSON-MIN / CSV record besides the task data and the controls
ANNOTATION_FIELDS = ("id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time")
LONG_COLUMNS = ("item_id", "annotator_id", "label")


def export_format(path: str | os.PathLike) -> str:
    """``long`` (the project's own CSV), ``json``, ``json-min`` or ``csv`` (Label Studio exports);
    an empty export or one of none of these kinds is refused in one line."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"judgements not found: {path}")
    text = path.read_text(encoding="utf-8-sig")
    if not text.strip():
        raise DataError(f"judgements {path} are empty (expected a long-format CSV or a Label Studio export)")
    if text.lstrip()[:1] in "[{":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"Label Studio export {path} is not valid JSON: {exc}") from None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise DataError(f"Label Studio export {path} is not a list of tasks (JSON) or annotations (JSON-MIN)")
        if not records:
            raise DataError(f"Label Studio export {path} holds no annotated task (its Export leaves out the tasks nobody "
                            f"annotated, and JSON-MIN and CSV those only skipped): annotate, then export again")
        if all("annotations" in r and "data" in r for r in records):
            return "json"
        if all("annotator" in r and "annotation_id" in r for r in records):
            return "json-min"
        raise DataError(f"{path} is neither a Label Studio JSON export (tasks with 'data' and 'annotations') nor "
                        f"JSON-MIN (records with 'annotator' and 'annotation_id'); keys of the first record: "
                        f"{', '.join(map(str, records[0]))}")
    header = next(csv.reader(io.StringIO(text.splitlines()[0])))
    if all(c in header for c in LONG_COLUMNS):
        return "long"
    if "annotator" in header and "annotation_id" in header:
        return "csv"
    raise DataError(f"judgements {path} lack column(s) {', '.join(c for c in LONG_COLUMNS if c not in header)} "
                    f"(have: {', '.join(header)}), and are no Label Studio CSV export (annotator, annotation_id) either")


def read_label_studio(
    path: str | os.PathLike,
    scale: Scale,
    *,
    text_fields: Sequence[str] = ("rewrite", "reason"),
    annotator_map: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The annotations of a Label Studio export as long rows, one per (item, annotator), labels mapped to
    the scale's options where the option text was chosen (validation is the caller's)."""
    path = Path(path)
    kind = export_format(path)
    if kind == "long":
        raise DataError(f"{path} is a long-format judgements CSV, not a Label Studio export")
    rows = _json_rows(path) if kind == "json" else _flat_rows(path, kind, text_fields)
    if not rows:
        raise DataError(f"Label Studio export {path} ({kind}) holds no submitted annotations: annotate, then export again")
    df = pd.DataFrame(rows)
    for col in text_fields:
        if col not in df.columns:
            df[col] = ""
        df[col] = df[col].fillna("").astype(str)
    df["label"] = [_option_of(label, choices, scale) for label, choices in zip(df["label"], df.pop("choices"))]
    df["label_studio_user"] = df["label_studio_user"].astype(str)
    df["annotator_id"] = map_annotators(df["label_studio_user"], annotator_map, where=str(path))
    df["annotation_id"] = pd.to_numeric(df["annotation_id"]).astype("Int64")
    return resolve_repeated_answers(df)


def _json_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for task in json.loads(path.read_text(encoding="utf-8-sig")):
        data = task.get("data") or {}
        for ann in task.get("annotations") or []:
            if ann.get("was_cancelled"):  # a skipped task is no judgement
                continue
            row = _task_fields(data, task.get("id"))
            row.update({"label_studio_user": ann.get("completed_by"), "annotation_id": ann.get("id"),
                        "timestamp": ann.get("updated_at") or ann.get("created_at"), "label": None})
            for res in ann.get("result") or []:
                value = res.get("value") or {}
                if res.get("from_name") == LABEL_CONTROL or res.get("from_name") is None:
                    row["label"] = _single(value)
                elif "text" in value:
                    row[res["from_name"]] = "\n".join(map(str, value["text"]))
            rows.append(row)
    return rows


def _flat_rows(path: Path, kind: str, text_fields: Sequence[str]) -> list[dict[str, Any]]:
    if kind == "json-min":
        records = json.loads(path.read_text(encoding="utf-8-sig"))
    else:
        records = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig").to_dict(orient="records")
    rows = []
    for rec in records:
        if rec.get("annotation_id") in (None, ""):  # a task nobody annotated
            continue
        data = {k: v for k, v in rec.items() if k not in ANNOTATION_FIELDS and k != LABEL_CONTROL and k not in text_fields}
        if kind == "csv" and isinstance(data.get("choices"), str) and data["choices"].startswith("["):
            data["choices"] = json.loads(data["choices"])
        row = _task_fields(data, rec.get("id"))
        label = rec.get(LABEL_CONTROL)
        row.update({"label_studio_user": rec.get("annotator"), "annotation_id": rec.get("annotation_id"),
                    "timestamp": rec.get("updated_at") or rec.get("created_at"),
                    "label": _single(label) if isinstance(label, dict) else (None if label == "" else label)})
        for col in text_fields:
            value = rec.get(col)
            row[col] = "\n".join(map(str, value["text"])) if isinstance(value, dict) else (value or "")
        rows.append(row)
    return rows


def _task_fields(data: Mapping[str, Any], task_id: Any) -> dict[str, Any]:
    row = {"item_id": data.get("item_id", task_id), "choices": data.get("choices")}
    if "source" in data:
        row["item_source"] = data["source"]
    return row


def _single(value: Mapping[str, Any]) -> Any:
    for key in ("choices", "number", "rating"):
        if key in value:
            v = value[key]
            return v[0] if isinstance(v, list) and v else (None if isinstance(v, list) else v)
    return None


def _option_of(label: Any, choices: Any, scale: Scale) -> Any:
    """The scale option behind a chosen text: by its position among the task's own choices, else by the
    scale's option texts (``Scale.coerce`` does the rest)."""
    if label is None or not scale.is_closed:
        return label
    if isinstance(choices, list):
        texts = [str(c.get("value")) if isinstance(c, dict) else str(c) for c in choices]
        if str(label) in texts and len(texts) == len(scale.options):
            return scale.options[texts.index(str(label))]
    return label


def map_annotators(users: pd.Series, annotator_map: Mapping[str, str] | None, *, where: str) -> pd.Series:
    """Label Studio user numbers (or emails) to the team's annotator ids; without a map the user stays the id.
    An id that already is one of the team's passes; any other user the map does not name is refused (an
    unmapped judgement would count as a stranger's)."""
    if not annotator_map:
        return users.astype(str)
    mapping = {str(k).strip(): str(v).strip() for k, v in annotator_map.items()}
    mapping.update({v: v for v in mapping.values() if v not in mapping})
    missing = sorted(set(users.astype(str).str.strip()) - set(mapping))
    if missing:
        raise DataError(f"{where}: Label Studio user(s) {', '.join(missing)} are not in the annotator map "
                        f"(label_studio_user -> annotator_id; mapped: {', '.join(sorted(mapping)) or 'none'})")
    return users.astype(str).str.strip().map(mapping)


def read_annotator_map(path: str | os.PathLike) -> dict[str, str]:
    """Label Studio user number -> the team's annotator id, from a CSV ``label_studio_user, annotator_id``,
    or from Label Studio's own user list (``GET /api/users``, saved as JSON), which credits each user
    to its email."""
    from stereolens.io import read_csv_checked

    if str(path).endswith(".json"):
        try:
            users = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"annotator map {path}: not a readable JSON user list ({exc})") from None
        if isinstance(users, dict) and "detail" in users:
            # what Label Studio answers a request it refuses (a personal access token sent as the Bearer
            # token without trading it for an access token first, docs/annotation.md)
            raise DataError(f"annotator map {path}: Label Studio refused the request ({users.get('status_code', '?')}: "
                            f"{users['detail']}), so this is no user list; fetch /api/users with an access token "
                            f"(docs/annotation.md)")
        if not isinstance(users, list) or not all(isinstance(u, dict) and "id" in u and u.get("email") for u in users):
            raise DataError(f"annotator map {path}: expected Label Studio's user list (GET /api/users: records "
                            f"with id and email)")
        return {str(u["id"]): str(u["email"]).strip() for u in users}

    table = read_csv_checked(path, ["label_studio_user", "annotator_id"], what="annotator map", dtype=str,
                             allow_empty=False)
    dup = table["label_studio_user"].str.strip().duplicated()
    if dup.any():
        raise DataError(f"annotator map {path} line {int(dup.idxmax()) + 2}: Label Studio user "
                        f"{table['label_studio_user'].iloc[int(dup.idxmax())]!r} is mapped twice")
    return dict(zip(table["label_studio_user"].str.strip(), table["annotator_id"].str.strip()))


def resolve_repeated_answers(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (item, annotator): the answer updated last, ties broken by the higher annotation id.
    The rows come back ordered by item, then annotation id, so every export format gives the same table."""
    ordered = df.assign(_time=pd.to_datetime(df["timestamp"], utc=True, errors="coerce"))
    ordered = ordered.sort_values(["_time", "annotation_id"], kind="mergesort", na_position="first")
    kept = ordered.drop_duplicates(["item_id", "annotator_id"], keep="last")
    kept = kept.sort_values(["item_id", "annotation_id"], kind="mergesort").drop(columns="_time")
    return kept.reset_index(drop=True)
