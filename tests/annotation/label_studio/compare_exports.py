"""Are two sets of Label Studio exports the same but for what changes from one recording to the next?

``python tests/annotation/label_studio/compare_exports.py NEW_DIR [OLD_DIR]`` (OLD_DIR defaults to the committed
fixtures) compares every export and label config the two folders share, file by file, after masking the
values that differ each time Label Studio records the same annotations: timestamps, uuids, lead times and
the numbers of tasks, annotations and projects (kept as their type).  Keys, columns, their order, user
numbers, labels, texts and value shapes must match; it prints
each difference and exits 1 if there is one.  Used to check the committed fixtures against what today's
Label Studio exports for the project's own configs (``driver.py --record`` into a scratch folder first).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

# values Label Studio sets from the clock (or a fresh uuid) whenever the same annotations are submitted again, and
# the numbers of tasks, annotations, projects and users' own records, which shift when a recording adds or reorders
# projects (the user numbers an annotation carries, completed_by and annotator, are kept: the fixtures' tests name them)
VOLATILE = ("created_at", "updated_at", "draft_created_at", "last_comment_updated_at", "unique_id", "lead_time",
            "last_activity", "date_joined", "id", "annotation_id", "task", "project", "inner_id")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "label_studio"


def _mask(value: Any) -> str:
    return "<null>" if value in (None, "") else f"<{type(value).__name__}>"


def masked(path: Path) -> Any:
    """The file's content with the volatile values replaced by their type (``<str>``, ``<null>``)."""
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".json":
        def walk(node: Any) -> Any:
            if isinstance(node, dict):
                return [(k, _mask(v) if k in VOLATILE else walk(v)) for k, v in node.items()]
            if isinstance(node, list):
                return [walk(v) for v in node]
            return node
        return walk(json.loads(text))
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        header = rows[0]
        return [header] + [[_mask(v) if h in VOLATILE else v for h, v in zip(header, row)] for row in rows[1:]]
    return text


def differences(new_dir: Path, old_dir: Path = FIXTURES) -> list[str]:
    out = []
    names = sorted(p.name for p in old_dir.iterdir() if p.suffix in (".json", ".csv", ".xml")
                   and p.name != "RECORDED_WITH.json")
    for name in names:
        new, old = new_dir / name, old_dir / name
        if not new.exists():
            out.append(f"{name}: not recorded in {new_dir}")
            continue
        a, b = masked(old), masked(new)
        if a != b:
            out.append(f"{name}: {_first_difference(a, b)}")
    return out


def _first_difference(old: Any, new: Any, where: str = "") -> str:
    if isinstance(old, list) and isinstance(new, list):
        pairs = all(isinstance(x, tuple) for x in old + new)
        if pairs and [k for k, _ in old] != [k for k, _ in new]:
            return f"{where or 'top'}: keys {[k for k, _ in old]} -> {[k for k, _ in new]}"
        if len(old) != len(new):
            return f"{where or 'top'}: {len(old)} entries -> {len(new)}"
        for i, (x, y) in enumerate(zip(old, new)):
            if x != y:
                key = f"{where}.{x[0]}" if pairs else f"{where}[{i}]"
                return _first_difference(x[1] if pairs else x, y[1] if pairs else y, key)
    return f"{where or 'top'}: {str(old)[:120]!r} -> {str(new)[:120]!r}"


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python tests/annotation/label_studio/compare_exports.py NEW_DIR [OLD_DIR]")
    found = differences(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else FIXTURES)
    print("\n".join(found) if found else "same but for timestamps, uuids, lead times and task, annotation and project numbers")
    sys.exit(1 if found else 0)
