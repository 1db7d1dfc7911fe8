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

Nothing is read into judgements before the whole export has been checked: the file (there, a file,
UTF-8, whole), its structure (lists where lists belong, ids of the right type, every task carrying its
``data.item_id``), one answer per annotation, and the annotator map (every Label Studio user credited to
exactly one team id, no id given to two users).  The first problem is refused in one line naming the
record by its place in the file (``record N`` of a JSON list, ``line N`` of a CSV) and its Label Studio ids.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.annotation.scales import Scale
from stereolens.errors import DataError
from stereolens.io import _delimiter_hint, _encoding_problem, cell_text

# the control names the project's labelling configs use (tasks.label_studio_config)
LABEL_CONTROL = "label"
# what Label Studio adds to each JSON-MIN / CSV record besides the task data and the controls
ANNOTATION_FIELDS = ("id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time")
LONG_COLUMNS = ("item_id", "annotator_id", "label")
# the keys that tell a JSON export's task from a JSON-MIN record
JSON_SHAPES = {"json": ("data", "annotations"), "json-min": ("annotator", "annotation_id")}
SHAPE_NAMES = {"json": "JSON task", "json-min": "JSON-MIN annotation"}


@dataclass(frozen=True)
class Export:
    """A judgements file read and checked as a whole: its ``kind`` (``long``, the project's own CSV, or a Label
    Studio ``json``, ``json-min`` or ``csv`` export) and, for an export, its records with the place each has in
    the file (``record 3`` of a JSON list, ``line 7`` of a CSV, the header being line 1)."""

    path: Path
    kind: str
    records: list[dict[str, Any]] = field(default_factory=list)
    places: list[str] = field(default_factory=list)


def read_export(path: str | os.PathLike) -> Export:
    """The judgements file at ``path``, its kind detected; a missing file, a folder, a file that is not UTF-8,
    empty, not valid JSON, a CSV cut mid-row, records of mixed or unknown shape are refused in one line naming
    the file (and the record).  A long CSV's rows are left to :func:`~stereolens.io.read_csv_checked`."""
    path = Path(path)
    text = _judgements_text(path)
    if text.lstrip()[:1] in ("[", "{"):
        return _json_export(path, text)
    return _csv_export(path, text)


def _judgements_text(path: Path) -> str:
    if not path.exists():
        raise DataError(f"judgements not found: {path}")
    if path.is_dir():
        raise DataError(f"judgements {path} is a folder, not a file (give the Label Studio export or the CSV itself)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"judgements {path} cannot be read ({exc.strerror})") from None
    problem = _encoding_problem(raw, path)
    if problem:
        raise DataError(f"judgements {problem}")
    text = raw.decode("utf-8-sig")
    if not text.strip():
        raise DataError(f"judgements {path} are empty (expected a long-format CSV or a Label Studio export)")
    return text


def _json_export(path: Path, text: str) -> Export:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"Label Studio export {path} line {exc.lineno}, column {exc.colno}: not valid JSON "
                        f"({exc.msg})") from None
    if not isinstance(records, list):
        raise DataError(f"Label Studio export {path}: a JSON {_json_type(records)}, not the list of tasks (JSON) or "
                        f"annotations (JSON-MIN) an export is")
    if not records:
        raise DataError(f"Label Studio export {path} holds no annotated task (its Export leaves out the tasks nobody "
                        f"annotated, and JSON-MIN and CSV those only skipped): annotate, then export again")
    places = [f"record {n}" for n in range(1, len(records) + 1)]
    for place, record in zip(places, records):
        if not isinstance(record, dict):
            raise DataError(f"Label Studio export {path} {place}: a JSON {_json_type(record)}, not a task or an "
                            f"annotation")
    shapes = [next((k for k, keys in JSON_SHAPES.items() if all(key in r for key in keys)), None) for r in records]
    counts = {kind: shapes.count(kind) for kind in JSON_SHAPES}
    if not any(counts.values()):
        raise DataError(f"{path} is neither a Label Studio JSON export (tasks with 'data' and 'annotations') nor "
                        f"JSON-MIN (records with 'annotator' and 'annotation_id'); keys of record 1"
                        f"{_ids(records[0])}: {', '.join(map(str, records[0]))}")
    # the shape most records have is the export's; the first record of another shape is the one named
    kind = max(counts, key=counts.get)
    for place, record, shape in zip(places, records, shapes):
        if shape != kind:
            lacks = [key for key in JSON_SHAPES[kind] if key not in record]
            raise DataError(f"Label Studio export {path} {place}{_ids(record)}: not a {SHAPE_NAMES[kind]} like the "
                            f"other records: lacks {', '.join(map(repr, lacks))} (has: {', '.join(map(str, record))})")
    return Export(path, kind, records, places)


def _csv_export(path: Path, text: str) -> Export:
    first_line = text.splitlines()[0]
    header = next(csv.reader([first_line]))
    if all(c in header for c in LONG_COLUMNS):
        return Export(path, "long")
    if "annotator" not in header or "annotation_id" not in header:
        hint = _delimiter_hint(first_line)
        if hint and len(header) == 1:
            raise DataError(f"judgements {path} line 1: one column {first_line[:60]!r}{hint}")
        raise DataError(f"judgements {path} lack column(s) {', '.join(c for c in LONG_COLUMNS if c not in header)} "
                        f"(have: {', '.join(header)}), and are no Label Studio CSV export (annotator, annotation_id) "
                        f"either")
    # the csv module, strict, rather than pandas: a quote left open (a file cut mid-field) is an error, not a
    # field that swallows the rest of the file, a short row is not padded with blanks, and each record keeps
    # the line it starts on (a text answer may span several lines)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records, places, start = [], [], 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if line == 1 or not row:
                continue
            if len(row) != len(header):
                raise DataError(f"Label Studio export {path} line {line}: {len(row)} fields where the header has "
                                f"{len(header)} (a file cut short, or a row edited by hand?)")
            records.append(dict(zip(header, row)))
            places.append(f"line {line}")
    except csv.Error as exc:
        raise DataError(f"Label Studio export {path} line {start}: not a whole CSV row ({exc}): a file cut short, "
                        f"or a quote left open?") from None
    return Export(path, "csv", records, places)


def read_label_studio(
    path: str | os.PathLike | Export,
    scale: Scale,
    *,
    text_fields: Sequence[str] = ("rewrite", "reason"),
    annotator_map: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The annotations of a Label Studio export as long rows, one per (item, annotator), labels mapped to
    the scale's options where the option text was chosen (validation is the caller's).  Column ``record``
    names the record each row comes from (``record 2 (task 5), annotation 15``), for the caller's messages."""
    export = path if isinstance(path, Export) else read_export(path)
    path = export.path
    if export.kind == "long":
        raise DataError(f"{path} is a long-format judgements CSV, not a Label Studio export")
    rows = _json_rows(export) if export.kind == "json" else _flat_rows(export, text_fields)
    if not rows:
        raise DataError(f"Label Studio export {path} ({export.kind}) holds no submitted annotations: annotate, then "
                        f"export again")
    df = pd.DataFrame(rows)
    stamps = pd.Series([None if _blank(t) else str(t) for t in df["timestamp"]], index=df.index, dtype=object)
    unread = stamps.notna() & _times(stamps).isna()
    if unread.any():
        pos = int(unread.to_numpy().nonzero()[0][0])
        raise DataError(f"Label Studio export {path} {df.at[pos, 'record']}: time {cell_text(stamps.iat[pos])} is not "
                        f"an ISO 8601 time (which answer of a user counts depends on it)")
    df["timestamp"] = stamps
    for col in text_fields:
        if col not in df.columns:
            df[col] = ""
        df[col] = df[col].fillna("").astype(str)
    df["label"] = [_option_of(label, choices, scale) for label, choices in zip(df["label"], df.pop("choices"))]
    df["annotator_id"] = map_annotators(df["label_studio_user"], annotator_map, where=str(path))
    df["annotation_id"] = df["annotation_id"].astype("Int64")
    return resolve_repeated_answers(df)


def _json_rows(export: Export) -> list[dict[str, Any]]:
    rows, seen = [], {}
    for place, task in zip(export.places, export.records):
        at = f"{place}{_ids(task)}"
        if task.get("id") is not None:
            _number_id(task["id"], export.path, at, "task id")
        data = task["data"]
        if not isinstance(data, dict):
            raise DataError(f"Label Studio export {export.path} {at}: 'data' is a JSON {_json_type(data)}, not the "
                            f"task's fields")
        item = _item_id(data.get("item_id"), export.path, at, "data.item_id")
        annotations = task["annotations"]
        if not isinstance(annotations, list):
            raise DataError(f"Label Studio export {export.path} {at}: 'annotations' is a JSON "
                            f"{_json_type(annotations)}, not a list")
        for n, ann in enumerate(annotations, 1):
            if not isinstance(ann, dict):
                raise DataError(f"Label Studio export {export.path} {at}, annotation {n} of {len(annotations)}: a "
                                f"JSON {_json_type(ann)}, not an annotation")
            # an export Label Studio wrote numbers every annotation; one made by hand may leave the ids out
            ann_id = None if ann.get("id") is None else _number_id(
                ann.get("id"), export.path, f"{at}, annotation {n} of {len(annotations)}", "annotation id")
            where = f"{at}, annotation {n} of {len(annotations)}" if ann_id is None else f"{at}, annotation {ann_id}"
            if ann_id is not None:
                _once(seen, ann_id, export.path, where)
            cancelled = ann.get("was_cancelled", False)
            if not isinstance(cancelled, bool):
                raise DataError(f"Label Studio export {export.path} {where}: was_cancelled is "
                                f"{cell_text(cancelled)}, not true or false")
            if cancelled:  # a skipped task is no judgement
                continue
            row = _task_fields(data, item)
            row.update({"label_studio_user": _user(ann.get("completed_by"), export.path, where),
                        "annotation_id": ann_id, "timestamp": ann.get("updated_at") or ann.get("created_at"),
                        "label": None, "record": where})
            results = ann.get("result") or []
            if not isinstance(results, list):
                raise DataError(f"Label Studio export {export.path} {where}: 'result' is a JSON "
                                f"{_json_type(results)}, not a list")
            answered = False
            for res in results:
                value = res.get("value") if isinstance(res, dict) else None
                if not isinstance(value, dict):
                    raise DataError(f"Label Studio export {export.path} {where}: a result without a 'value' object")
                if res.get("from_name") == LABEL_CONTROL or res.get("from_name") is None:
                    if answered:
                        raise DataError(f"Label Studio export {export.path} {where}: two answers to "
                                        f"'{LABEL_CONTROL}' where the scale takes one")
                    row["label"], answered = _single(value, export.path, where), True
                elif "text" in value:
                    text = value["text"]
                    row[res["from_name"]] = "\n".join(map(str, text)) if isinstance(text, list) else str(text)
            _answered(row["label"], export.path, where)
            rows.append(row)
    return rows


def _flat_rows(export: Export, text_fields: Sequence[str]) -> list[dict[str, Any]]:
    rows, seen = [], {}
    in_csv = export.kind == "csv"
    for place, rec in zip(export.places, export.records):
        where = f"{place}{_ids(rec)}"
        if _blank(rec.get("annotation_id")) and _blank(rec.get("annotator")):  # a task nobody annotated
            continue
        if not _blank(rec.get("id")):
            _number_id(rec["id"], export.path, where, "task id")
        ann_id = _number_id(rec.get("annotation_id"), export.path, where, "annotation id")
        _once(seen, ann_id, export.path, where)
        user = _user(rec.get("annotator"), export.path, where)
        data = {k: v for k, v in rec.items() if k not in ANNOTATION_FIELDS and k != LABEL_CONTROL and k not in text_fields}
        item = _item_id(data.get("item_id"), export.path, where, "item_id")
        if in_csv and isinstance(data.get("choices"), str) and data["choices"].startswith("["):
            data["choices"] = _json_cell(data["choices"], export.path, where, "choices")
        label = rec.get(LABEL_CONTROL)
        if in_csv and isinstance(label, str) and label.startswith("{"):  # several choices: {"choices": [...]}
            label = _json_cell(label, export.path, where, LABEL_CONTROL)
        if isinstance(label, dict):
            label = _single(label, export.path, where)
        elif isinstance(label, list):
            label = _single({"choices": label}, export.path, where)
        _answered(label, export.path, where)
        row = _task_fields(data, item)
        row.update({"label_studio_user": user, "annotation_id": ann_id, "label": label, "record": where,
                    "timestamp": rec.get("updated_at") or rec.get("created_at")})
        for col in text_fields:
            value = rec.get(col)
            value = value.get("text", []) if isinstance(value, dict) else value
            row[col] = "\n".join(map(str, value)) if isinstance(value, list) else (value or "")
        rows.append(row)
    return rows


def _task_fields(data: Mapping[str, Any], item: str) -> dict[str, Any]:
    row = {"item_id": item, "choices": data.get("choices")}
    if "source" in data:
        row["item_source"] = data["source"]
    return row


def _single(value: Mapping[str, Any], path: Path, where: str) -> Any:
    """The one answer of a control's value (``choices``, ``number`` or ``rating``); two choices ticked are
    refused: keeping either would be a guess."""
    for key in ("choices", "number", "rating"):
        if key in value:
            v = value[key]
            if not isinstance(v, list):
                return v
            if len(v) > 1:
                raise DataError(f"Label Studio export {path} {where}: {len(v)} choices ticked "
                                f"({', '.join(cell_text(c) for c in v)}) where the scale takes one")
            return v[0] if v else None
    return None


def _answered(label: Any, path: Path, where: str) -> None:
    if label is None or (isinstance(label, str) and not label.strip()):
        raise DataError(f"Label Studio export {path} {where}: no answer to '{LABEL_CONTROL}' (submitted empty)")


def _once(seen: dict[int, str], ann_id: int, path: Path, where: str) -> None:
    if ann_id in seen:
        raise DataError(f"Label Studio export {path} {where}: annotation {ann_id} again (first at {seen[ann_id]}); "
                        f"one export, not several pasted together")
    seen[ann_id] = where


def _ids(record: Any) -> str:
    """`` (task 5, annotation 17)``: the Label Studio ids a record carries, to name it by."""
    parts = []
    for key, name in (("id", "task"), ("annotation_id", "annotation")):
        value = record.get(key) if isinstance(record, dict) else None
        if _is_int(value) or (isinstance(value, str) and value.strip()):
            parts.append(f"{name} {value.strip() if isinstance(value, str) and value.strip().isdigit() else cell_text(value)}")
    return f" ({', '.join(parts)})" if parts else ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or (isinstance(value, str) and not value.strip())


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "number")


def _number_id(value: Any, path: Path, where: str, what: str) -> int:
    """A Label Studio id: a whole number (a CSV cell holds its digits)."""
    if _is_int(value):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    shown = "is missing" if value is None else f"{cell_text(value)} is not a number"
    raise DataError(f"Label Studio export {path} {where}: {what} {shown} (Label Studio numbers its tasks, "
                    f"annotations and users)")


def _item_id(value: Any, path: Path, where: str, key: str) -> str:
    """The project's item id the task carries; the Label Studio task number is never taken for it."""
    if _is_int(value) or (isinstance(value, str) and value.strip()):
        return str(value).strip()
    if _blank(value):
        raise DataError(f"Label Studio export {path} {where}: no {key} (every task the project exports carries its "
                        f"item id; the Label Studio task number is not one)")
    raise DataError(f"Label Studio export {path} {where}: {key} is a JSON {_json_type(value)}, not an item id")


def _user(value: Any, path: Path, where: str) -> str:
    """Who annotated: a Label Studio user number, or an email (what its converter writes for a user given as
    a record)."""
    if isinstance(value, dict):
        value = value.get("email") or value.get("id")
    if _is_int(value) or (isinstance(value, str) and value.strip()):
        return str(value).strip()
    shown = "no annotator" if _blank(value) else f"annotator {cell_text(value)} is no Label Studio user"
    raise DataError(f"Label Studio export {path} {where}: {shown} (a user number or email)")


def _json_cell(text: str, path: Path, where: str, column: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"Label Studio export {path} {where}, column {column}: not valid JSON ({exc.msg})") from None


def _times(values: pd.Series) -> pd.Series:
    # ISO 8601 throughout: with an inferred format, a time without a fraction of a second (Label Studio
    # writes none when it is zero) would not parse and would sort first
    return pd.to_datetime(values, utc=True, errors="coerce", format="ISO8601")


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


def one_to_one_map(entries: Iterable[tuple[str, Any, Any]], *, where: str) -> dict[str, str]:
    """Label Studio user -> the team's annotator id from ``(place, user, annotator_id)`` entries, refused in one
    line (``where`` and the entry's place) unless one-to-one: every user named once and not blank, each to a
    non-empty id that no other user has.  Two users on one id would merge two people's answers (the later one
    replacing the other's on every item both judged); an empty id would credit a person's answers to nobody."""
    mapping: dict[str, str] = {}
    user_at: dict[str, str] = {}
    id_of: dict[str, tuple[str, str]] = {}
    for place, user, annotator in entries:
        user, annotator = _cell(user), _cell(annotator)
        if not user:
            raise DataError(f"{where} {place}: empty Label Studio user")
        if not annotator:
            raise DataError(f"{where} {place}: Label Studio user {user!r} has an empty annotator id")
        if user in user_at:
            raise DataError(f"{where} {place}: Label Studio user {user!r} is mapped twice (first at {user_at[user]})")
        if annotator in id_of:
            other, other_place = id_of[annotator]
            raise DataError(f"{where} {place}: annotator id {annotator!r} is given to Label Studio users {other!r} "
                            f"({other_place}) and {user!r}; one id per person, or their answers merge")
        mapping[user], user_at[user], id_of[annotator] = annotator, place, (user, place)
    return mapping


def _cell(value: Any) -> str:
    return "" if _blank(value) else str(value).strip()


def map_annotators(users: pd.Series, annotator_map: Mapping[str, str] | None, *, where: str) -> pd.Series:
    """Label Studio user numbers (or emails) to the team's annotator ids; without a map the user stays the id.
    An id that already is one of the team's passes; any other user the map does not name is refused (an
    unmapped judgement would count as a stranger's), and so are two users of the file credited to one id
    (the map's own id passing for a user it does not name).  Blank users are left for the caller to name."""
    if not annotator_map:
        return users.astype(str)
    # a map built by hand (or by a study from its own table) passes the same check as a map file
    mapping = one_to_one_map(((f"user {k!r}", k, v) for k, v in annotator_map.items()), where="annotator map")
    mapping.update({v: v for v in mapping.values() if v not in mapping})
    blank = users.isna() | (users.astype(str).str.strip() == "")
    present = users.astype(str).str.strip()[~blank]
    missing = sorted(set(present) - set(mapping))
    if missing:
        raise DataError(f"{where}: Label Studio user(s) {', '.join(missing)} are not in the annotator map "
                        f"(label_studio_user -> annotator_id; mapped: {', '.join(sorted(mapping)) or 'none'})")
    credited: dict[str, list[str]] = {}
    for user in sorted(set(present)):
        credited.setdefault(mapping[user], []).append(user)
    for annotator, who in credited.items():
        if len(who) > 1:
            raise DataError(f"{where}: Label Studio users {' and '.join(map(repr, who))} would both be credited to "
                            f"annotator {annotator!r}; give each user its own id in the annotator map")
    return users.where(blank, present.map(mapping))


def read_annotator_map(path: str | os.PathLike) -> dict[str, str]:
    """Label Studio user number -> the team's annotator id, from a CSV ``label_studio_user, annotator_id``,
    or from Label Studio's own user list (``GET /api/users``, saved as JSON), which credits each user
    to its email.  Either is refused in one line unless it maps users and ids one-to-one (:func:`one_to_one_map`)."""
    from stereolens.io import read_csv_checked

    where = f"annotator map {path}"
    if str(path).endswith(".json"):
        p = Path(path)
        if not p.is_file():
            raise DataError(f"annotator map not found: {path}" if not p.exists() else f"{where} is a folder, not a file")
        raw = p.read_bytes()
        problem = _encoding_problem(raw, p)
        if problem:
            raise DataError(f"annotator map {problem}")
        try:
            users = json.loads(raw.decode("utf-8-sig"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{where} line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})") from None
        if isinstance(users, dict) and "detail" in users:
            # what Label Studio answers a request it refuses (a personal access token sent as the Bearer
            # token without trading it for an access token first, docs/annotation.md)
            raise DataError(f"annotator map {path}: Label Studio refused the request ({users.get('status_code', '?')}: "
                            f"{users['detail']}), so this is no user list; fetch /api/users with an access token "
                            f"(docs/annotation.md)")
        if not isinstance(users, list):
            raise DataError(f"{where}: expected Label Studio's user list (GET /api/users: records with id and email)")
        for n, u in enumerate(users, 1):
            if not isinstance(u, dict) or not _is_int(u.get("id")) or not isinstance(u.get("email"), str):
                raise DataError(f"{where} record {n}: not a Label Studio user (GET /api/users: records with a "
                                f"numeric id and an email)")
        return one_to_one_map(((f"record {n}", u["id"], u["email"]) for n, u in enumerate(users, 1)), where=where)

    table = read_csv_checked(path, ["label_studio_user", "annotator_id"], what="annotator map", dtype=str,
                             keep_default_na=False, allow_empty=False)
    return one_to_one_map(((f"line {i + 2}", u, a) for i, (u, a) in
                          enumerate(zip(table["label_studio_user"], table["annotator_id"]))), where=where)


def resolve_repeated_answers(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (item, annotator): the answer updated last, ties broken by the higher annotation id.
    The rows come back ordered by item, then annotation id, so every export format gives the same table."""
    ordered = df.assign(_time=_times(df["timestamp"]))
    ordered = ordered.sort_values(["_time", "annotation_id"], kind="mergesort", na_position="first")
    kept = ordered.drop_duplicates(["item_id", "annotator_id"], keep="last")
    kept = kept.sort_values(["item_id", "annotation_id"], kind="mergesort").drop(columns="_time")
    return kept.reset_index(drop=True)
