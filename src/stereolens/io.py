"""Files in and out: atomic writes and checked table reads.

Every output is written to a temporary name beside its destination and renamed
into place, so an interrupted stage never leaves a half-written artefact behind
an old, valid one.  Numbers in CSV and JSON outputs are written at
:data:`SIGNIFICANT_DIGITS` significant digits (see :func:`fixed_precision`), so a rerun whose
floating-point arithmetic differs below that precision writes the same bytes.  The file then gets the permissions an ordinary ``open`` would
give it (``0666`` less the umask), not the ``0600`` of a temporary file: a lab's
shared group must be able to read results.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stereolens.errors import DataError

if TYPE_CHECKING:  # pandas loads when a table is read, not whenever a path is written (`stereolens --help`)
    import pandas as pd


def _current_umask() -> int:
    # os.umask can only be read by setting it; done once, at import, before any thread runs
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()
FILE_MODE = 0o666 & ~_UMASK


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; rename it onto ``dest`` on success.

    A destination that cannot be written (a missing or read-only folder, a path
    through a file) is a one-line :class:`DataError` naming it.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as exc:
        raise DataError(f"cannot write {dest}: {exc.strerror or exc} (choose a folder you can write to)") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, FILE_MODE)
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def check_writable(*dests: str | os.PathLike | None) -> None:
    """Refuse, before any work, output paths that cannot be written (nothing is left behind)."""
    for dest in dests:
        if dest is None:
            continue
        dest = Path(dest)
        if dest.is_dir():
            raise DataError(f"cannot write {dest}: it is a folder (give a file name)")
        parent = dest.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise DataError(f"cannot write {dest}: {parent} is not a writable folder (choose a folder you can write to)")


def write_text(dest: str | os.PathLike, text: str) -> Path:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(dest)


# Seven significant digits, float32's precision (the models compute in float32).  Chosen by comparing the
# committed default run with a cold fresh-clone run on the same machine (docs/reliability.md): seven
# digits absorb every float difference outside the leakage choice scores, whose noise (up to a relative
# 1e-5) only four digits would absorb; four turn an AmchiBias pair decision around and six move a
# printed median log-probability difference (a difference of two sums near -100).
SIGNIFICANT_DIGITS = 7
_EXACT_INTEGER = 2.0**53


def fixed_precision(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits (not decimals: a log-probability of
    -128.9096 and a p-value of 1.7e-46 both keep seven digits); whole numbers, NaN and
    infinities are returned as they are, so a count stored as a float stays exact."""
    if not math.isfinite(value) or (value.is_integer() and abs(value) < _EXACT_INTEGER):
        return value
    return float(f"{value:.{digits}g}")


def _fixed_precision_tree(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _fixed_precision_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fixed_precision_tree(v) for v in obj]
    if isinstance(obj, float):
        return fixed_precision(obj)
    return obj


def fixed_precision_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every float column at :data:`SIGNIFICANT_DIGITS` significant digits."""
    floats = df.select_dtypes(include="floating").columns
    if not len(floats):
        return df
    out = df.copy()
    for col in floats:
        out[col] = out[col].map(fixed_precision, na_action="ignore").astype(df[col].dtype)
    return out


def finite_json(obj: Any) -> Any:
    """``obj`` with every NaN or infinity replaced by ``null`` (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return finite_json(obj.item())
    if hasattr(obj, "tolist"):
        return finite_json(obj.tolist())
    return obj


def write_json(dest: str | os.PathLike, obj: Any) -> Path:
    """Valid JSON: NaN and infinities become ``null`` (the producer says why in a note field);
    other floats are written at :data:`SIGNIFICANT_DIGITS` significant digits."""
    text = json.dumps(_fixed_precision_tree(finite_json(obj)), indent=2, ensure_ascii=False, sort_keys=False, default=_json_default,
                      allow_nan=False)
    return write_text(dest, text + "\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays appear in almost every metrics dict
    if hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0:
        return finite_json(obj.item())
    if hasattr(obj, "tolist"):
        return finite_json(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_csv(dest: str | os.PathLike, df: pd.DataFrame, index: bool = False) -> Path:
    """``df`` as UTF-8 CSV, float columns at :data:`SIGNIFICANT_DIGITS` significant digits."""
    with atomic_path(dest) as tmp:
        fixed_precision_frame(df).to_csv(tmp, index=index, encoding="utf-8")
    return Path(dest)


def _encoding_problem(raw: bytes, path: Path) -> str | None:
    """``FILE line N: not UTF-8 ...`` for the first undecodable byte, else None."""
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return (
            f"{path} line {line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8 "
            "(spreadsheets: 'CSV UTF-8')"
        )


def _delimiter_hint(header: str) -> str:
    for sep, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe")):
        if sep in header and "," not in header:
            return f"; the header looks {name}-separated: save the file comma-separated"
    return ""


def missing_columns_message(where: str, missing: Sequence[str], have: Iterable[Any]) -> str:
    """``FILE: missing column(s) X (has: ...; did you mean Y?)`` with a close match when there is one."""
    have = [str(c) for c in have]
    hints = []
    for name in missing:
        close = difflib.get_close_matches(name, have, n=1, cutoff=0.6)
        if close:
            hints.append(f"{close[0]!r} for {name!r}")
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    return f"{where} line 1: missing column(s) {', '.join(missing)} (has: {', '.join(have)}{hint})"


def read_csv_checked(
    path: str | os.PathLike,
    required: Iterable[str],
    *,
    what: str = "table",
    dtype: Any = None,
    keep_default_na: bool = True,
    allow_empty: bool = True,
) -> pd.DataFrame:
    """Read a CSV and stop with one clear line if it is missing, unreadable, empty or lacks columns.

    A UTF-8 byte-order mark (spreadsheets write one) is accepted; other encodings,
    a file with no header, a header with no rows (when not ``allow_empty``) and a
    wrong delimiter are refused with the line and a hint.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    if path.is_dir():
        raise DataError(f"{what} {path} is a folder, not a CSV file")
    raw = path.read_bytes()
    problem = _encoding_problem(raw, path)
    if problem:
        raise DataError(f"{what} {problem}")
    if not raw.strip():
        raise DataError(f"{what} {path} is empty (expected a header line, then one row per record)")
    try:
        df = pd.read_csv(path, dtype=dtype, keep_default_na=keep_default_na, encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"{what} {path} cannot be parsed as CSV: {str(exc).splitlines()[0].strip()}") from exc
    header = raw.decode("utf-8").lstrip("\ufeff").splitlines()[0]
    required = list(required)
    missing = [c for c in required if c not in df.columns]
    hint = _delimiter_hint(header)
    if hint and len(df.columns) == 1 and (missing or len(required) > 1):
        raise DataError(f"{what} {path} line 1: one column {header[:60]!r}{hint}")
    if missing:
        raise DataError(f"{what} " + missing_columns_message(str(path), missing, df.columns) + hint)
    if not len(df) and not allow_empty:
        raise DataError(f"{what} {path} has a header but no rows")
    return df


def cell_text(value: Any) -> str:
    """A cell as an error line shows it: text quoted as written, a number plainly (``inf``, ``7``, not
    ``np.float64(inf)`` or ``np.int64(7)``)."""
    import numbers

    if isinstance(value, str):
        return repr(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    return repr(value)


def score_column(cells: pd.Series, *, where: str, column: str, log_likelihood: bool = True,
                 allow_empty: bool = False, ratio_of_negatives: bool = False) -> pd.Series:
    """``cells`` (one score column, read as text or as numbers) as floats, else one line naming ``where``, the line
    (header = line 1) and ``column``: every cell a finite number (``allow_empty``: or empty, kept as NaN), and for
    ``log_likelihood`` scores none positive, since a log-likelihood never is (a column of probabilities written
    by mistake would otherwise be analysed as if it were one); ``ratio_of_negatives`` scores (StereoSet's
    generative score, one negative mean log-probability over another) none negative."""
    import numpy as np
    import pandas as pd

    text = cells.astype(object)
    blank = text.isna().to_numpy() | np.array([isinstance(v, str) and not v.strip() for v in text], dtype=bool)
    values = pd.to_numeric(text.where(~blank, None).map(lambda v: v.strip() if isinstance(v, str) else v),
                           errors="coerce").astype(float)
    raw = values.to_numpy()
    bad = ((blank & (not allow_empty)) | (~blank & ~np.isfinite(raw))
           | ((raw > 0) if log_likelihood else np.zeros(len(raw), dtype=bool))
           | ((raw < 0) if ratio_of_negatives else np.zeros(len(raw), dtype=bool)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        cell = cell_text(text.iat[row])
        if blank[row]:
            message = "empty"
        elif np.isnan(raw[row]):
            message = f"{cell} is not a number"
        elif np.isinf(raw[row]):
            # an infinite score would win (or lose) every comparison it enters: a scoring failure, not a preference
            message = f"{cell} is not a finite number"
        elif ratio_of_negatives:
            message = (f"{raw[row]:g} is negative, but these scores are ratios of two negative mean log-probabilities "
                       "(>= 0); were log-likelihoods written instead?")
        else:
            message = f"{raw[row]:g} is positive, but scores are log-likelihoods (<= 0); were probabilities written instead?"
        raise DataError(f"{where} line {row + 2}, column {column}: {message}")
    return pd.Series(raw, index=cells.index, name=cells.name)


def refuse_unjudged(items: Iterable[Any], judged: Iterable[Any], *, where: str, shown: int = 5) -> None:
    """Refuse judgements (``where``: their file) that leave some of ``items`` (ids) unjudged, in one line with how
    many and the first ``shown`` in ``items``' order: an item nobody judged would otherwise be counted as rejected."""
    have = {str(i) for i in judged}
    absent = [i for i in dict.fromkeys(str(i) for i in items) if i not in have]
    if absent:
        listed = ", ".join(repr(i) for i in absent[:shown]) + (f" and {len(absent) - shown} more" if len(absent) > shown else "")
        raise DataError(f"{where}: {len(absent)} item(s) nobody judged, which would count as rejected: {listed} (a Label "
                        "Studio task with no submitted annotation, or only skipped ones, is unjudged); judge them, "
                        "then import again")


def project_path(path: str | os.PathLike) -> Path:
    """``path`` with a relative path anchored at the DVC project root when DVC runs the stage.

    ``dvc exp run --queue`` / ``dvc queue start`` run each experiment in a temporary copy
    under ``.dvc/tmp/exps/`` and set ``DVC_ROOT`` to the project the experiment was queued
    from.  State that must outlive that copy and be shared by every experiment (the MLflow
    store, the model response cache) is anchored there; DVC outputs are not (they come back
    with the experiment's commit).  Outside DVC, or for an absolute path, ``path`` is unchanged.
    """
    path = Path(path)
    root = os.environ.get("DVC_ROOT")
    if path.is_absolute() or not root:
        return path
    return Path(root) / path


def _file_digest(path: str | os.PathLike, algorithm: str, chunk: int = 1 << 20) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    return _file_digest(path, "sha256", chunk)


def md5_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The digest DVC records for a file (plain md5 of its bytes)."""
    return _file_digest(path, "md5", chunk)
