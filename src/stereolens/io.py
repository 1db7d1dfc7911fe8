"""Files in and out: atomic writes and checked table reads.

Every output is written to a temporary name beside its destination and renamed
into place, so an interrupted stage never leaves a half-written artefact behind
an old, valid one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; rename it onto ``dest`` on success."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(dest: str | os.PathLike, text: str) -> Path:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(dest)


def write_json(dest: str | os.PathLike, obj: Any) -> Path:
    return write_text(dest, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays appear in almost every metrics dict
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_csv(dest: str | os.PathLike, df: pd.DataFrame, index: bool = False) -> Path:
    with atomic_path(dest) as tmp:
        df.to_csv(tmp, index=index, encoding="utf-8")
    return Path(dest)


def read_csv_checked(
    path: str | os.PathLike,
    required: Iterable[str],
    *,
    what: str = "table",
    dtype: Any = None,
    keep_default_na: bool = True,
) -> pd.DataFrame:
    """Read a CSV and stop with one clear line if it is missing or lacks columns."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    try:
        df = pd.read_csv(path, dtype=dtype, keep_default_na=keep_default_na, encoding="utf-8")
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"{what} {path} cannot be parsed as CSV: {str(exc).splitlines()[0]}") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(
            f"{what} {path} is missing column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns))})"
        )
    return df


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def md5_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The digest DVC records for a file (plain md5 of its bytes)."""
    h = hashlib.md5()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
