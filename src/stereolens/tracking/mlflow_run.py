"""One MLflow run per execution of a measuring stage.

Runs are named ``<study>/<stage>/<model>/<language>/<variant>`` (the parts that
apply; ``variant`` tells apart runs of one stage that share model and language,
such as the two methods of a leakage fit), and carry the same name as tags,
carry the flattened params, metrics, tables and figures as artifacts, and the
datasets they read as inputs whose digest is the DVC md5 of the file, so a run
in the UI points at the exact versioned artefact.  ``annotation_source`` is a
tag wherever annotations feed the result (human / llm_panel / simulated).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from stereolens.io import md5_file, project_path

ANNOTATION_SOURCES = ("human", "llm_panel", "simulated")
_MAX_PARAM_LEN = 6000


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``; lists become their YAML flow form."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
            if text.endswith("\n..."):
                text = text[: -len("\n...")]
            flat[name] = text[:_MAX_PARAM_LEN]
    return flat


def dvc_md5(path: str | os.PathLike, lock_path: str | os.PathLike = "dvc.lock") -> str:
    """The md5 DVC records for ``path``: a plain file's own md5 (computed from its bytes,
    so a stage run by hand never logs a stale digest), or for a directory the ``.dir``
    md5 that dvc.lock holds for it ("" when the lock has none)."""
    path = Path(path)
    if path.is_file():
        return md5_file(path)
    lock = Path(lock_path)
    if lock.exists():
        with open(lock, encoding="utf-8") as fh:
            stages = (yaml.safe_load(fh) or {}).get("stages", {})
        wanted = os.path.normpath(str(path))
        for stage in stages.values():
            for entry in stage.get("outs", []) + stage.get("deps", []):
                if os.path.normpath(entry.get("path", "")) == wanted and entry.get("md5"):
                    return entry["md5"]
    return ""


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class StageRun:
    """Logging handle for one stage execution; a no-op when tracking is disabled."""

    def __init__(self, mlflow_module=None) -> None:
        self._mlflow = mlflow_module

    @property
    def enabled(self) -> bool:
        return self._mlflow is not None

    @property
    def run_id(self) -> str | None:
        if not self._mlflow:
            return None
        run = self._mlflow.active_run()
        return run.info.run_id if run else None

    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self._mlflow:
            return
        flat = flatten_params(params)
        items = list(flat.items())
        for start in range(0, len(items), 100):  # MLflow caps a batch at 100 params
            self._mlflow.log_params(dict(items[start : start + 100]))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not self._mlflow:
            return
        clean = {}
        for key, value in metrics.items():
            if value is None:
                continue
            try:
                clean[key] = float(value)
            except (TypeError, ValueError):
                continue
        if clean:
            self._mlflow.log_metrics(clean, step=step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self._mlflow:
            self._mlflow.set_tags({k: str(v) for k, v in tags.items() if v is not None})

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        if not self._mlflow:
            return
        path = Path(path)
        if path.is_dir():
            self._mlflow.log_artifacts(str(path), artifact_path=artifact_path or path.name)
        elif path.exists():
            self._mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def log_dataset(self, path: str | os.PathLike, *, name: str | None = None, context: str = "evaluation") -> None:
        """Log a table as a run input whose digest is its DVC md5."""
        if not self._mlflow:
            return
        import mlflow.data
        import pandas as pd
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.http_dataset_source import HTTPDatasetSource

        path = Path(path)
        digest = dvc_md5(path)[:36] or None
        name = name or path.stem
        with warnings.catch_warnings():
            # schema-inference hints about integer columns are irrelevant for an input record
            warnings.simplefilter("ignore", UserWarning)
            if path.suffix == ".csv" and path.is_file():
                df = pd.read_csv(path, nrows=100_000)
                dataset = mlflow.data.from_pandas(df, source=str(path.resolve()), name=name, digest=digest)
            else:
                # directories and non-tabular files: describe without loading
                dataset = MetaDataset(source=HTTPDatasetSource(url=path.resolve().as_uri()), name=name, digest=digest)
            self._mlflow.log_input(dataset, context=context)


def _configure(mlflow, tracking_cfg: Mapping[str, Any]) -> str:
    uri = tracking_cfg.get("tracking_uri") or "sqlite:///mlruns/mlflow.db"
    if not uri.startswith("sqlite:///"):
        return _configure_store(mlflow, uri, tracking_cfg)
    from filelock import FileLock

    db_part, sep, query = uri[len("sqlite:///") :].partition("?")
    # a relative store lands in the project, not in a queued experiment's temporary copy
    db = project_path(db_part)
    uri = f"sqlite:///{db}{sep}{query}"
    db.parent.mkdir(parents=True, exist_ok=True)
    # the first connection creates and migrates the schema: two processes doing it at once
    # collide ("duplicate column name"), so store set-up is serialised across processes
    with FileLock(str(db) + ".lock", timeout=SQLITE_BUSY_TIMEOUT_S):
        return _configure_store(mlflow, sqlite_with_busy_timeout(uri), tracking_cfg)


def _configure_store(mlflow, uri: str, tracking_cfg: Mapping[str, Any]) -> str:
    mlflow.set_tracking_uri(uri)
    experiment_name = tracking_cfg.get("experiment") or "stereolens"
    experiment = mlflow.get_experiment_by_name(experiment_name)
    if experiment is None:
        artifacts = tracking_cfg.get("artifact_location")
        location = project_path(artifacts).resolve().as_uri() if artifacts else None
        try:
            experiment_id = mlflow.create_experiment(experiment_name, artifact_location=location)
        except mlflow.exceptions.MlflowException:
            # a concurrent run (dvc queue start --jobs 2) created it between our look and our create
            experiment_id = mlflow.get_experiment_by_name(experiment_name).experiment_id
    else:
        experiment_id = experiment.experiment_id
    return experiment_id


SQLITE_BUSY_TIMEOUT_S = 120


def sqlite_with_busy_timeout(uri: str) -> str:
    """A SQLite store URI whose connections wait for a concurrent writer instead of failing.

    SQLite allows one writer at a time; with the default 5 s wait, two stages run
    side by side (``dvc queue start --jobs 2``) fail with "database is locked" while
    the other logs artifacts.  The driver's ``timeout`` makes a writer queue instead.
    """
    if not uri.startswith("sqlite:") or "timeout=" in uri:
        return uri
    return f"{uri}{'&' if '?' in uri else '?'}timeout={SQLITE_BUSY_TIMEOUT_S}"


def run_name(
    study: str, stage: str, model: str | None = None, language: str | None = None, variant: str | None = None
) -> str:
    return "/".join(part for part in (study, stage, model, language, variant) if part)


@contextlib.contextmanager
def stage_run(
    tracking_cfg: Mapping[str, Any] | None,
    *,
    study: str,
    stage: str,
    model: str | None = None,
    language: str | None = None,
    variant: str | None = None,
    params: Mapping[str, Any] | None = None,
    annotation_source: str | None = None,
    tags: Mapping[str, Any] | None = None,
) -> Iterator[StageRun]:
    """Open an MLflow run for one stage execution (or a no-op handle when tracking is off)."""
    if annotation_source is not None and annotation_source not in ANNOTATION_SOURCES:
        raise ValueError(f"annotation_source must be one of {ANNOTATION_SOURCES}, got {annotation_source!r}")
    if not tracking_cfg or not tracking_cfg.get("enabled", False):
        yield StageRun(None)
        return
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    experiment_id = _configure(mlflow, tracking_cfg)
    all_tags = {
        "study": study,
        "stage": stage,
        "model": model,
        "language": language,
        "variant": variant,
        "annotation_source": annotation_source,
        "git_commit": _git_commit(),
        # set by `dvc exp run` / `dvc queue start`: runs of one grid share their run names, this tells them apart
        "dvc_experiment": os.environ.get("DVC_EXP_NAME"),
        **(tags or {}),
    }
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name(study, stage, model, language, variant)):
        handle = StageRun(mlflow)
        handle.set_tags(all_tags)
        if params:
            handle.log_params(params)
        yield handle
