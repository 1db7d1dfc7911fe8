"""Provenance the data already carries: provenance columns of tables, ingest records, model identities.

Nothing here is bookkeeping of its own: it reads the ``source``, ``annotation_source``
and ``translation_status`` columns the studies write, the ``PROVENANCE.json`` the
ingest stage writes beside every downloaded dataset, and the ``identity`` strings
the model layer writes into scoring manifests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

PROVENANCE_COLUMNS = ("source", "annotation_source", "translation_status")
INGEST_RECORD = "PROVENANCE.json"
# values of a provenance column that a release must not pass off as reviewed human work
UNREVIEWED = {
    "source": {"simulated", "generated", "generator", "llm", "llm_panel", "machine", "model"},
    "annotation_source": {"simulated", "llm_panel"},
    "translation_status": {"authored", "machine", "machine_translated", "unreviewed", "draft"},
    # review columns: the stereo study's instances_provenance.csv (``review``), the pairs sentences (``review_status``)
    "review": {"not_native_reviewed", "unreviewed"},
    "review_status": {"unreviewed"},
    # who validated a retrieved stereotype (the stereo study's validated.csv)
    "validation_source": {"simulated", "llm_panel"},
}
_LEADING_WORD = r"^\s*([a-z_]+)"


def status_word(value: str) -> str:
    """The status a provenance value starts with: studies qualify it ("authored, not native-reviewed",
    "machine translation:gemma3-270m"), and the qualifier must not hide the status from an audit."""
    import re

    match = re.match(_LEADING_WORD, str(value).lower())
    return match.group(1) if match else ""


def is_unreviewed(column: str, value: str) -> bool:
    """Whether a provenance column's value marks the item simulated, machine output or unreviewed."""
    return column in UNREVIEWED and status_word(value) in UNREVIEWED[column]


_MAX_SCAN_BYTES = 50 << 20  # a provenance scan must stay quick; bigger tables are named, not read


def files_under(path: str | os.PathLike, suffix: str) -> Iterator[Path]:
    path = Path(path)
    if path.is_file():
        if path.suffix == suffix:
            yield path
    elif path.is_dir():
        yield from sorted(p for p in path.rglob(f"*{suffix}") if p.is_file())


def provenance_columns(table: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``{column: {value: count}}`` for the provenance columns a CSV has (empty when none)."""
    table = Path(table)
    if table.stat().st_size > _MAX_SCAN_BYTES:
        return {}
    header = pd.read_csv(table, nrows=0).columns
    present = [c for c in PROVENANCE_COLUMNS if c in header]
    if not present:
        return {}
    frame = pd.read_csv(table, usecols=present, dtype=str, keep_default_na=False)
    return {c: {str(k): int(v) for k, v in frame[c].value_counts().sort_index().items()} for c in present}


def provenance_of(path: str | os.PathLike) -> dict[str, dict[str, dict[str, int]]]:
    """Provenance column counts of every CSV at or under ``path`` that has such columns."""
    found = {}
    for table in files_under(path, ".csv"):
        counts = provenance_columns(table)
        if counts:
            found[str(table)] = counts
    return found


def ingest_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The ingest stage's ``PROVENANCE.json`` records at or under ``path`` (dataset, licence, upstream commit)."""
    path = Path(path)
    candidates = [path] if path.name == INGEST_RECORD else list(files_under(path, ".json"))
    records = []
    for candidate in candidates:
        if candidate.name == INGEST_RECORD and candidate.is_file():
            records.append({"record": str(candidate), **json.loads(candidate.read_text(encoding="utf-8"))})
    return records


def model_identities(path: str | os.PathLike) -> list[str]:
    """Every ``identity`` string (backend, name, revision or weights hash) in JSON files at or under ``path``."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "identity" and isinstance(value, str) and value not in found:
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in files_under(path, ".json"):
        if document.stat().st_size > _MAX_SCAN_BYTES:
            continue
        try:
            walk(json.loads(document.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return found


def unreviewed_rows(table: str | os.PathLike, id_columns: list[str] | None = None) -> pd.DataFrame:
    """Rows of a CSV whose provenance columns mark them simulated, machine output or unreviewed,
    with the row's ids (the declared id columns, else the row number) and the reason."""
    table = Path(table)
    frame = pd.read_csv(table, dtype=str, keep_default_na=False)
    reasons = pd.Series("", index=frame.index)
    for column, bad in UNREVIEWED.items():
        if column in frame.columns:
            hit = frame[column].map(lambda v, c=column: is_unreviewed(c, v)).astype(bool)
            reasons = reasons.where(~hit, reasons + f"{column}=" + frame[column] + "; ")
    flagged = frame.loc[reasons != ""]
    ids = [c for c in (id_columns or []) if c in frame.columns]
    out = pd.DataFrame({"file": str(table), "row": flagged.index + 2})  # +2: header line, 1-based
    # (an empty selection aggregates to a frame, not a column: nothing flagged has no ids to join)
    out["item"] = flagged[ids].astype(str).agg("/".join, axis=1).to_numpy() if ids and len(flagged) else ""
    out["reason"] = reasons.loc[flagged.index].str.rstrip("; ").to_numpy()
    return out.reset_index(drop=True)
