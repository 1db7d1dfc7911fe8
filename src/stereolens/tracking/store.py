"""An MLflow store that a reading command may open: one that exists and is what its URI says.

Opening a ``sqlite:///`` URI creates the file and its folders, so a command that only reads (``compare``,
``lineage``) would leave a new, empty database behind for a mistyped path; and a file that is not a database
ends in a SQLAlchemy traceback.  Stages, which write runs, open their store without this check.
"""

from __future__ import annotations

from pathlib import Path

from stereolens.errors import ConfigError

SQLITE_PREFIX = "sqlite:///"
SQLITE_MAGIC = b"SQLite format 3\x00"


def sqlite_path(uri: str, root: str | Path = ".") -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to ``root``), or None for another kind of store."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    path = Path(uri[len(SQLITE_PREFIX):])
    return path if path.is_absolute() else Path(root) / path


def check_readable_store(uri: str, root: str | Path = ".") -> bool:
    """Whether the store of ``uri`` exists (False: nothing recorded there yet); refuse, in one line, a path
    that is not an SQLite database (an empty file among them) or a local store folder that is a file."""
    db = sqlite_path(uri, root)
    if db is None:
        local = uri[len("file://"):] if uri.startswith("file://") else (uri if "://" not in uri else None)
        if local is None:
            return True  # a tracking server: its own errors say what is wrong
        folder = Path(local) if Path(local).is_absolute() else Path(root) / local
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"tracking URI {uri}: {folder} is a file, not an MLflow store folder")
        return folder.is_dir()
    if not db.exists():
        return False
    if db.is_dir():
        raise ConfigError(f"tracking URI {uri}: {db} is a folder, not an SQLite database")
    if not db.stat().st_size:
        # SQLite takes an empty file for an empty database, and MLflow would write its tables into it
        raise ConfigError(f"tracking URI {uri}: {db} is an empty file, not an MLflow store (no run was recorded "
                          "there; check --tracking-uri)")
    with open(db, "rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise ConfigError(f"tracking URI {uri}: {db} is not an SQLite database")
    return True


def open_experiment(uri: str, experiment: str, root: str | Path = "."):
    """``(client, experiment)`` of a store a reading command opens, refused in one line where the store does not
    exist (opening it would create an empty one: a mistyped ``--tracking-uri`` would leave a new database behind)
    or holds no such experiment."""
    from mlflow.tracking import MlflowClient

    if not check_readable_store(uri, root):
        raise ConfigError(f"no MLflow store at {uri} (run a tracked stage first, or check --tracking-uri)")
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ConfigError(f"no MLflow experiment {experiment!r} in {uri} (run a tracked stage first)")
    return client, found
