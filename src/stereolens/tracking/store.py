"""An MLflow store that a reading command may open: one that exists and is what its URI says.

Opening a ``sqlite:///`` URI creates the file and its folders, so a command that only reads (``compare``,
``lineage``) would leave a new, empty database behind for a mistyped path; and a file that is not a database
ends in a SQLAlchemy traceback.  Stages, which write runs, open their store without this check.

A tracking server (``http://HOST:PORT``) is asked once whether it answers, by every command that reads it and
by every stage that logs to it before the stage writes anything (:func:`check_stage_server`): MLflow's client
would otherwise retry a refused connection for about two minutes and end in a traceback, after the stage had
replaced its outputs.
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
            if is_server_uri(uri):
                check_server_answers(uri)
            return True  # a tracking server (or another store MLflow knows): its own errors say what is wrong
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


SERVER_SCHEMES = ("http://", "https://")
# how long a tracking server has to answer the check: a server on the same network answers in milliseconds
SERVER_CHECK_TIMEOUT_S = 10.0


def is_server_uri(uri: str | None) -> bool:
    """Whether ``uri`` names an MLflow tracking server (not a local store)."""
    return bool(uri) and uri.lower().startswith(SERVER_SCHEMES)


def check_server_answers(uri: str, timeout_s: float = SERVER_CHECK_TIMEOUT_S) -> None:
    """Refuse, in one line naming ``uri``, a tracking server that does not answer (nothing listens, no such
    host, no answer within ``timeout_s``).  Any HTTP answer counts, an error status included (a server behind
    an authenticating proxy, one without ``/health``): MLflow's own errors then say what is wrong."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"MLflow tracking server {uri} does not answer ({reason}): start it (`mlflow server "
                          "--host ... --port ...`) or set tracking.tracking_uri / --tracking-uri") from None


def check_stage_server(params_path: str | Path) -> None:
    """Before a stage writes anything: where its params log to a tracking server, that the server answers.

    A missing or unreadable params file is left to the stage's own reading of it, which says so in one line."""
    path = Path(params_path)
    if not path.is_file():
        return
    from stereolens.stages.common import read_params_file

    tracking = read_params_file(path).get("tracking")
    if isinstance(tracking, dict) and tracking.get("enabled") and is_server_uri(tracking.get("tracking_uri")):
        check_server_answers(tracking["tracking_uri"])


def configured_tracking_uri(params_path: str | Path = "params.yaml", default: str = "sqlite:///mlruns/mlflow.db") -> str:
    """The store the pipeline logs to: ``tracking.tracking_uri`` of ``params_path`` where it names one (a team's
    tracking server among them), else ``default``; what ``compare`` and ``ui`` read without ``--tracking-uri``."""
    path = Path(params_path)
    if path.is_file():
        from stereolens.stages.common import read_params_file

        tracking = read_params_file(path).get("tracking")
        if isinstance(tracking, dict) and isinstance(tracking.get("tracking_uri"), str) and tracking["tracking_uri"]:
            return tracking["tracking_uri"]
    return default
