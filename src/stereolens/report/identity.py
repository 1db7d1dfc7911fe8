"""The run's identity, shown on every report page and under ``stereolens profile``: when the report was
built, from which git commit, and which pipeline state (``dvc.lock``) its numbers come from.

``dvc.lock`` is hashed without the ``report`` stage's own entry: DVC records that entry only after the
report stage has run, so the hash the pages show is the one ``stereolens profile`` prints for the same
workspace afterwards, and it changes exactly when a stage whose outputs the report reads ran again with
other inputs.  The hash is SHA-256 of the lock's stages as canonical JSON (sorted keys), not of the file's
bytes, so it does not depend on how DVC happened to lay the YAML out.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

LOCK_FILE = "dvc.lock"
# the stage whose pages carry the identity: its own lock entry is not part of what the pages show
REPORT_STAGE = "report"
# the code and configuration a run's numbers depend on: uncommitted changes to these make a run's commit
# an incomplete description of it
SOURCE_PATHS = ("src", "conf", "params.yaml", "dvc.yaml")
SHORT = 12


@dataclass(frozen=True)
class RunIdentity:
    built: str  # UTC, ISO 8601 to the second
    commit: str | None  # the git commit checked out, None outside a git work tree
    changed: bool | None  # whether SOURCE_PATHS differ from that commit (None: unknown)
    lock_sha256: str | None  # see the module docstring; None without a dvc.lock

    def source_words(self) -> str:
        """``commit 1a2b3c4d5e6f, dvc.lock 0a1b2c3d4e5f``: what the numbers come from."""
        commit = (f"commit {self.commit[:SHORT]}" + (" with uncommitted changes to its code or configuration"
                                                      if self.changed else "")) if self.commit else "no git commit"
        lock = f"dvc.lock {self.lock_sha256[:SHORT]}" if self.lock_sha256 else "no dvc.lock"
        return f"{commit}, {lock}"

    def words(self) -> str:
        """One line: ``report built 2025-01-02 03:04:05 UTC, commit 1a2b3c4d5e6f, dvc.lock 0a1b2c3d4e5f``."""
        return f"report built {self.built}, {self.source_words()}"


# what RunIdentity.words() writes, as a pattern: it says when and from what a page was built, not a result, so
# `stereolens reproduce` sets it aside (a rerun's pages always differ there)
IDENTITY_WORDS = re.compile(r"report built \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
                            r"(?:commit [0-9a-f]+(?: with uncommitted changes to its code or configuration)?"
                            r"|no git commit), (?:dvc\.lock [0-9a-f]+|no dvc\.lock)")


def lock_digest(lock: str | Path) -> str | None:
    """SHA-256 of ``lock``'s stages other than ``report`` as canonical JSON; None when there is no such file
    or it is not a DVC lock file (a mapping)."""
    path = Path(lock)
    if not path.is_file():
        return None
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return None
    if not isinstance(content, dict):
        return None
    stages = {name: entry for name, entry in (content.get("stages") or {}).items() if name != REPORT_STAGE}
    canonical = json.dumps({**content, "stages": stages}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit(root: str | Path) -> tuple[str | None, bool | None]:
    """(the commit checked out at ``root``, whether SOURCE_PATHS differ from it); (None, None) outside a git
    work tree or without git.  Only a work tree whose top is ``root`` counts: a reports folder copied
    somewhere inside another repository does not take that repository's commit."""
    root = Path(root).resolve()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
        return None, None
    head = _git(root, "rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return None, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *SOURCE_PATHS)
    changed = None if status is None or status.returncode != 0 else bool(status.stdout.strip())
    return head.stdout.strip(), changed


def run_identity(root: str | Path = ".", *, built: datetime | None = None) -> RunIdentity:
    """The identity of the run whose outputs lie under ``root`` (the project folder holding ``reports/``)."""
    root = Path(root)
    when = (built or datetime.now(timezone.utc)).astimezone(timezone.utc)
    commit, changed = git_commit(root)
    return RunIdentity(built=when.strftime("%Y-%m-%d %H:%M:%S UTC"), commit=commit, changed=changed,
                       lock_sha256=lock_digest(root / LOCK_FILE))
