"""``stereolens reproduce --against REV``: does a rerun give the committed run's numbers?

The workspace holds a rerun's outputs (``dvc repro``, ``make run``); revision ``REV``
recorded the committed run's in its ``dvc.lock``.  Both are read through DVC: the
stages and their outputs as ``REV`` declares them (``dvc.repo.Repo(rev=REV)``), the
committed bytes through DVC's file system at that revision, which takes each object
from the local cache or, failing that, from the default remote.  Every cached output of
every stage is compared file by file:

- byte-identical files (the same md5 as the lock) agree;
- tables (``.csv``, ``.tsv``) cell by cell, JSON value by value, other text (Markdown,
  HTML, YAML) token by token, each number at the tolerance of its kind (below);
- figures (``.png``, ``.svg``, ``.pdf``, ...) are drawings of numbers the stage also
  writes as tables: a figure whose bytes differ is noted, not compared;
- any other file must be byte-identical.

Tolerances (:class:`Tolerance`; ``--rtol``/``--atol``), the same for every stage:

- an integer (written without a point or exponent: counts, sizes, ranks, seeds, ids),
  in a table, JSON or text: equal;
- any other number in a table or JSON (log-probabilities, scores, statistics, p-values,
  coefficients): ``|a - b| <= rtol * max(|a|, |b|) + atol``, rtol 1e-5, atol 1e-8; NaN
  agrees with NaN only;
- a number with decimals inside text (a page's ``57.6%``): as above, or within one unit
  of its last written digit when both are written with that many decimals;
- text, booleans, column names, keys, row counts: equal.

rtol 1e-5 is ten to a hundred units of the seventh significant digit the outputs are
written at (``stereolens.io.SIGNIFICANT_DIGITS``): float32 kernels chosen for another CPU move
scores in their last bits (docs/reliability.md), a changed model, config or bug moves
them by far more.  A stage is "reproduced" when every file agrees; otherwise the first
number that does not is named: file, row and column (or JSON key, or text line), both
values and the rule it broke.  Outputs declared ``cache: false`` (the converted model
folder) are kept by no revision and are skipped.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError

RTOL = 1e-5
ATOL = 1e-8
FIGURE_SUFFIXES = frozenset({".png", ".svg", ".pdf", ".jpg", ".jpeg", ".gif", ".webp"})
TABLE_DELIMITERS = {".csv": ",", ".tsv": "\t"}
JSON_SUFFIXES = frozenset({".json"})
# a number inside text: sign, digits with an optional fraction, an optional exponent
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# where a committed output can come from, and how to put it there
_UNAVAILABLE = ("is neither in the DVC cache nor on the default remote (`dvc fetch` on a checkout of {rev}, "
                "before rerunning, fills the cache; or add the remote it was pushed to)")
_INTEGER = re.compile(r"[-+]?\d+")
# the values a table cell or a text may write for a missing or non-finite number
_SPECIAL = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "-inf": -math.inf, "Infinity": math.inf,
            "-Infinity": -math.inf}


# --------------------------------------------------------------------------- numbers
@dataclass(frozen=True)
class Tolerance:
    rtol: float = RTOL
    atol: float = ATOL

    def floats_agree(self, a: float, b: float, unit: float = 0.0) -> bool:
        """``a`` and ``b`` within ``rtol * max(|a|, |b|) + atol``, or within ``unit`` (a last written digit)."""
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        allowed = max(self.rtol * max(abs(a), abs(b)) + self.atol, unit * (1 + 1e-9))
        return abs(a - b) <= allowed

    def rule(self) -> str:
        return f"relative {self.rtol:g}, absolute {self.atol:g}"


def _number(text: str) -> tuple[float, bool] | None:
    """(value, is an integer) of a cell or token written as a number; None for anything else."""
    text = text.strip()
    if text in _SPECIAL:
        return _SPECIAL[text], False
    if not _NUMBER.fullmatch(text):
        return None
    if _INTEGER.fullmatch(text):
        return float(int(text)), True
    return float(text), False


def _decimals(token: str) -> int | None:
    """Digits after the point of a number written without an exponent; None for an exponent or none."""
    if "e" in token.lower() or "." not in token:
        return None
    return len(token.split(".", 1)[1])


@dataclass(frozen=True)
class Disagreement:
    """The first value of a file that does not agree: where, both values, the rule it broke."""

    path: str
    where: str  # "row 3, column estimate" / "key headline.bias_score" / "line 12" / ""
    committed: str
    rerun: str
    rule: str

    def describe(self, rev: str) -> str:
        place = f"{self.path} {self.where}" if self.where else self.path
        return f"{place}: {self.committed} at {rev}, {self.rerun} in the rerun ({self.rule})"


def _shown(value: Any) -> str:
    """A value as a message shows it: a number as written, text quoted."""
    if isinstance(value, str):
        return value if _number(value) is not None else repr(value)
    return json.dumps(value, ensure_ascii=False)


def _compare_numbers(a: tuple[float, bool], b: tuple[float, bool], tol: Tolerance, unit: float = 0.0) -> str | None:
    """None when two parsed numbers agree, else the rule they broke."""
    (x, x_int), (y, y_int) = a, b
    if x_int and y_int:
        return None if x == y else "integers are exact"
    if tol.floats_agree(x, y, unit):
        return None
    return tol.rule() + (f", or one unit in the last written digit ({unit:g})" if unit else "")


def _compare_text(a: str, b: str, tol: Tolerance) -> tuple[str, str, str] | None:
    """None when two texts agree token by token, else (committed token, rerun token, rule)."""
    pieces_a, pieces_b = _tokens(a), _tokens(b)
    for (kind_a, tok_a), (kind_b, tok_b) in zip(pieces_a, pieces_b):
        if tok_a == tok_b:
            continue
        if kind_a == kind_b == "number":
            da, db = _decimals(tok_a), _decimals(tok_b)
            unit = 10.0 ** -da if da is not None and da == db else 0.0
            broken = _compare_numbers(_number(tok_a), _number(tok_b), tol, unit)
            if broken is None:
                continue
            return tok_a, tok_b, broken
        return tok_a, tok_b, "text is exact"
    if len(pieces_a) != len(pieces_b):
        rest_a = "".join(t for _, t in pieces_a[len(pieces_b):]) or "(end)"
        rest_b = "".join(t for _, t in pieces_b[len(pieces_a):]) or "(end)"
        return rest_a[:60], rest_b[:60], "text is exact"
    return None


def _tokens(text: str) -> list[tuple[str, str]]:
    out, last = [], 0
    for match in _NUMBER.finditer(text):
        if match.start() > last:
            out.append(("text", text[last:match.start()]))
        out.append(("number", match.group()))
        last = match.end()
    if last < len(text):
        out.append(("text", text[last:]))
    return out


def _compare_cells(a: str, b: str, tol: Tolerance) -> tuple[str, str, str] | None:
    if a == b:
        return None
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        broken = _compare_numbers(na, nb, tol)
        return None if broken is None else (a, b, broken)
    if (na is None) != (nb is None):
        return a, b, "a number and text"
    found = _compare_text(a, b, tol)
    return None if found is None else (a, b, found[2])


# --------------------------------------------------------------------------- files
def compare_table(path: str, committed: str, rerun: str, tol: Tolerance, delimiter: str = ",") -> Disagreement | None:
    """The first cell of a table that disagrees: column names and row counts exactly, cells by kind."""
    rows_a = list(csv.reader(io.StringIO(committed), delimiter=delimiter))
    rows_b = list(csv.reader(io.StringIO(rerun), delimiter=delimiter))
    header_a, header_b = (rows_a[0] if rows_a else []), (rows_b[0] if rows_b else [])
    if header_a != header_b:
        return Disagreement(path, "header", ",".join(header_a), ",".join(header_b), "column names are exact")
    if len(rows_a) != len(rows_b):
        return Disagreement(path, "", f"{len(rows_a) - 1} rows", f"{len(rows_b) - 1} rows", "row counts are exact")
    for number, (row_a, row_b) in enumerate(zip(rows_a[1:], rows_b[1:]), start=2):
        for column, (a, b) in enumerate(zip(row_a, row_b)):
            found = _compare_cells(a, b, tol)
            if found is not None:
                name = header_a[column] if column < len(header_a) else str(column + 1)
                return Disagreement(path, f"row {number} (the header is row 1), column {name}", _shown(found[0]),
                                    _shown(found[1]), found[2])
        if len(row_a) != len(row_b):
            return Disagreement(path, f"row {number}", f"{len(row_a)} cells", f"{len(row_b)} cells", "cell counts are exact")
    return None


def compare_json(path: str, committed: Any, rerun: Any, tol: Tolerance, where: str = "") -> Disagreement | None:
    """The first value of two JSON documents that disagrees, named by its key path."""
    place = f"key {where}" if where else "(the whole document)"
    if isinstance(committed, dict) and isinstance(rerun, dict):
        if list(committed) != list(rerun):
            only_a = [k for k in committed if k not in rerun]
            only_b = [k for k in rerun if k not in committed]
            if only_a or only_b:
                return Disagreement(path, place, f"keys only here: {only_a}", f"keys only here: {only_b}", "keys are exact")
        for key in committed:
            found = compare_json(path, committed[key], rerun[key], tol, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    if isinstance(committed, list) and isinstance(rerun, list):
        if len(committed) != len(rerun):
            return Disagreement(path, place, f"{len(committed)} items", f"{len(rerun)} items", "list lengths are exact")
        for i, (a, b) in enumerate(zip(committed, rerun)):
            found = compare_json(path, a, b, tol, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    numbers = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in (committed, rerun)]
    if all(numbers):
        pair = [(float(v), isinstance(v, int)) for v in (committed, rerun)]
        broken = _compare_numbers(pair[0], pair[1], tol)
    elif isinstance(committed, str) and isinstance(rerun, str):
        found = _compare_text(committed, rerun, tol)
        broken = None if found is None else found[2]
    else:
        broken = None if committed == rerun and type(committed) is type(rerun) else "values are exact"
    return None if broken is None else Disagreement(path, place, _shown(committed), _shown(rerun), broken)


def compare_text(path: str, committed: str, rerun: str, tol: Tolerance) -> Disagreement | None:
    """The first line that disagrees; a report page's identity line (when and from which commit and lock it was
    built) is not compared."""
    from stereolens.report.identity import IDENTITY_WORDS

    committed, rerun = (IDENTITY_WORDS.sub("report built (the run's identity)", text) for text in (committed, rerun))
    lines_a, lines_b = committed.splitlines(), rerun.splitlines()
    for number, (a, b) in enumerate(zip(lines_a, lines_b), start=1):
        found = _compare_text(a, b, tol)
        if found is not None:
            return Disagreement(path, f"line {number}", _shown(found[0]), _shown(found[1]), found[2])
    if len(lines_a) != len(lines_b):
        return Disagreement(path, "", f"{len(lines_a)} lines", f"{len(lines_b)} lines", "line counts are exact")
    return None


def compare_file(path: str, committed: bytes, rerun: bytes, tol: Tolerance) -> Disagreement | None:
    """None when a file's committed and rerun bytes agree (see the module docstring); figures are the
    caller's to note."""
    if committed == rerun:
        return None
    suffix = Path(path).suffix.lower()
    try:
        text_a, text_b = committed.decode("utf-8"), rerun.decode("utf-8")
    except UnicodeDecodeError:
        return Disagreement(path, "", f"{len(committed)} bytes", f"{len(rerun)} bytes",
                            "a file that is not text is compared byte for byte")
    if suffix in TABLE_DELIMITERS:
        return compare_table(path, text_a, text_b, tol, TABLE_DELIMITERS[suffix])
    if suffix in JSON_SUFFIXES:
        try:
            return compare_json(path, json.loads(text_a), json.loads(text_b), tol)
        except json.JSONDecodeError:
            pass  # not JSON after all: compared as text
    return compare_text(path, text_a, text_b, tol)


# --------------------------------------------------------------------------- stages
@dataclass
class StageCheck:
    stage: str
    status: str  # "reproduced", "differs", "not checked" or "skipped"
    disagreement: Disagreement | None = None
    reason: str = ""  # why a stage was not checked or skipped, or what differs short of a number
    identical: int = 0  # files byte-identical
    within: int = 0  # files that differ in bytes but agree at the tolerance
    figures: list[str] = field(default_factory=list)  # figures whose bytes differ (not compared)

    def describe(self, rev: str) -> str:
        if self.status == "reproduced":
            files = f"{self.identical + self.within} file(s): {self.identical} byte-identical, {self.within} within tolerance"
            drawn = f"; {len(self.figures)} figure(s) differ in bytes, not compared" if self.figures else ""
            return f"{self.stage}: reproduced ({files}{drawn})"
        if self.status == "differs":
            return f"{self.stage}: differs: " + (self.disagreement.describe(rev) if self.disagreement else self.reason)
        return f"{self.stage}: {self.status}: {self.reason}"

    def as_dict(self, rev: str) -> dict[str, Any]:
        record = {"stage": self.stage, "status": self.status, "line": self.describe(rev),
                  "identical": self.identical, "within_tolerance": self.within, "figures_differing": self.figures}
        if self.disagreement is not None:
            record["first_difference"] = vars(self.disagreement)
        return record


def _committed_files(fs: Any, out: str) -> dict[str, str | None]:
    """``{path: md5}`` of the files the revision recorded under the output ``out`` (a file or a folder)."""
    info = fs.info(out)
    if info.get("type") != "directory":
        return {out: info.get("md5")}
    found = {}
    for path in fs.find(out):
        entry = fs.info(path)
        if entry.get("dvc_info") is None:
            continue  # a git-tracked file beside the output (a .gitignore), not part of it
        found[path.lstrip("/")] = entry.get("md5")
    return found


def _rerun_files(root: Path, out: str) -> dict[str, Path]:
    where = root / out
    if where.is_file():
        return {out: where}
    if where.is_dir():
        return {p.relative_to(root).as_posix(): p for p in sorted(where.rglob("*")) if p.is_file()}
    return {}


def check_stage(stage: Any, fs: Any, root: Path, rev: str, tol: Tolerance) -> StageCheck:
    """Compare one stage's cached outputs at ``rev`` (``stage`` from ``Repo(rev=...).index.stages``) with the workspace's."""
    from stereolens.io import md5_file

    check = StageCheck(stage.name, "reproduced")
    cached = [out for out in stage.outs if out.use_cache]
    if not cached:
        check.status, check.reason = "skipped", "its outputs are not cached (cache: false), so no revision keeps them"
        return check
    for out in cached:
        path = Path(str(out.def_path)).as_posix()
        if not (out.hash_info and out.hash_info.value):
            check.status, check.reason = "not checked", f"{rev} recorded no run of it ({path} has no md5 in its dvc.lock)"
            return check
        try:
            committed = _committed_files(fs, path)
        except Exception as exc:  # noqa: BLE001  (DVC's index, storage and file system errors alike)
            check.status = "not checked"
            check.reason = f"{path} of {rev} {_UNAVAILABLE.format(rev=rev)} ({type(exc).__name__})"
            return check
        rerun = _rerun_files(root, path)
        for name in sorted(set(committed) | set(rerun)):
            if name not in rerun:
                check.status, check.reason = "differs", f"{name} is missing in the rerun"
                return check
            if name not in committed:
                check.status, check.reason = "differs", f"{name} was written by the rerun only"
                return check
            if committed[name] and committed[name] == md5_file(rerun[name]):
                check.identical += 1
                continue
            try:
                old = fs.cat_file(name)
            except Exception:  # noqa: BLE001
                check.status = "not checked"
                check.reason = f"{name} of {rev} {_UNAVAILABLE.format(rev=rev)}"
                return check
            if Path(name).suffix.lower() in FIGURE_SUFFIXES:
                check.figures.append(name)
                continue
            found = compare_file(name, old, rerun[name].read_bytes(), tol)
            if found is not None:
                check.status, check.disagreement = "differs", found
                return check
            check.within += 1
    return check


def _selected(name: str, wanted: Sequence[str]) -> bool:
    return not wanted or name in wanted or name.split("@", 1)[0] in wanted


def _workspace_storage(root: Path) -> dict[str, Any]:
    """The workspace's remotes, default remote and cache folder (``config.local`` included), for reading
    another revision's outputs: that revision's own ``.dvc/config`` may name no remote (one added since,
    or only with ``--local``), and its objects are wherever this clone keeps or fetches them."""
    from dvc.repo import Repo

    workspace = Repo(str(root))
    try:
        config = workspace.config
        storage: dict[str, Any] = {"remote": {name: dict(section) for name, section in config.get("remote", {}).items()}}
        if config["core"].get("remote"):
            storage["core"] = {"remote": config["core"]["remote"]}
        if config.get("cache", {}).get("dir"):
            storage["cache"] = {"dir": config["cache"]["dir"]}
    finally:
        workspace.close()
    return storage


def reproduce(against: str, root: str | Path = ".", *, tolerance: Tolerance = Tolerance(),
              stages: Sequence[str] = ()) -> Iterator[StageCheck]:
    """Each stage of revision ``against`` checked against the workspace's outputs, in the pipeline's order."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    root = Path(root).resolve()
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{root}: no dvc.yaml (run reproduce from the repository root)")
    try:
        repo = Repo(str(root), rev=against, config=_workspace_storage(root))
    except DvcException as exc:
        raise ConfigError(f"--against {against}: {exc}") from exc
    try:
        pipeline = [s for s in repo.index.stages if getattr(s, "cmd", None)]
        names = [s.name for s in pipeline]  # a foreach member as crows_score@gemma3-270m
        unknown = [w for w in stages if not any(_selected(n, [w]) for n in names)]
        if unknown:
            raise ConfigError(f"--stage {', '.join(unknown)}: no such stage at {against} (stages: {', '.join(names)})")
        fs = repo.dvcfs
        for stage, name in zip(pipeline, names):
            if _selected(name, stages):
                yield check_stage(stage, fs, root, against, tolerance)
    finally:
        repo.close()
