"""One MLflow run per execution of a measuring stage.

Runs are named ``<study>/<stage>/<model>/<language>/<variant>`` (the parts that
apply; ``variant`` tells apart runs of one stage that share model and language,
such as the two methods of a leakage fit; a model given as a hub id or a path is
named by its last part, the whole one is the ``model`` tag), carry the same name parts as tags,
the model id and language also as the params ``model_id`` and ``language`` (the
UI's compare view plots params, not tags; ``model`` is the model config where a
stage declares it), a scoring run's numeric precision as the param ``precision``
(``float32`` or the opt-in ``bfloat16`` / ``float16``, whose scores differ), the params
(a config mapping as one compact-JSON param), metrics, tables and figures as artifacts,
and the datasets they read as inputs whose digest is the DVC md5 of the file, so a run
in the UI points at the exact versioned artefact.
The inputs need no call in the stage: a run opened inside ``stereolens stage NAME``
logs the data deps (``data/``, ``reports/``) that ``dvc.yaml`` declares for that
stage (:func:`stage_inputs`), so every measuring run carries them and they are the
ones DVC tracks; a stage may log further tables with :meth:`StageRun.log_dataset`.
The experiment is tagged ``mlflow.experimentKind = custom_model_development`` (how
MLflow 3 records an experiment of model runs rather than GenAI traces, and what the
tracking API and older UIs read); MLflow 3.17's UI chooses its view from a
``workflowType`` in the address or the browser's local storage instead, never from the
store, so :func:`experiment_url` is the address that opens the runs table, and :func:`run_url` the one that
opens a run's page in the same layout: with a tracking server (``tracking_uri: http://HOST:PORT``) a stage prints
that link for each run, in place of MLflow's own (which open the GenAI layout).  A server keeps a new
experiment's artifacts in its own artifact root (:func:`_artifact_location`).
``annotation_source`` is a tag wherever annotations feed the result (human / llm_panel / simulated).

Comparable runs by construction: every stage that logs declares its run schema once
(:func:`declare_run`: the params keys and the metric names, the latter as templates
over axes such as ``alpha_{term}`` whose values come from the configuration, never
from results).  The handle refuses a params key or metric the schema does not
declare, and a run that closes without every declared metric, so two runs of one
stage (another model, another language, another method) carry the same key set
and the MLflow UI's compare view lines them up.  A declared metric with no value
in a run (a term the fit left out, a cell with no items) is logged as NaN, not
left out: MLflow stores NaN, the UI shows it, and the key set stays equal.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import json
import math
import os
import shlex
import string
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stereolens.io import md5_file, project_path

ANNOTATION_SOURCES = ("human", "llm_panel", "simulated")
# params a run carries beside its schema's: its name parts (stage_run's model and language) and, where a
# model scores in the run, that model's precision (stage_run's scoring_model)
RUN_AXIS_PARAMS = ("model_id", "language", "precision")
# MLflow's limit on a param value; a longer one is cut here and logged whole as an artifact
MAX_PARAM_LEN = 6000
# The experiment tag MLflow 3 reads for an experiment's kind, and the kind of ours: model runs, not GenAI traces
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# dvc.yaml deps under these folders are a run's input datasets (the others are code and model folders)
DATA_ROOTS = ("data/", "reports/")


class RunSchemaError(Exception):
    """A stage logged a key its run schema does not declare, or left a declared metric out: a bug in the
    stage, so it keeps its traceback (it is not a :class:`~stereolens.errors.StereolensError`)."""


@dataclass(frozen=True)
class RunSchema:
    """The params keys and metric names every MLflow run of one stage carries.

    ``metrics`` are names or templates over axes (``"alpha_{term}"``); the axes' values are
    given when the run opens and must come from the configuration (the languages, the methods
    of a study), so that every run of the stage expands them to the same names.
    """

    study: str
    stage: str
    params: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()

    @property
    def axes(self) -> frozenset[str]:
        return frozenset(field for template in self.metrics for _, field, _, _ in string.Formatter().parse(template)
                         if field)

    def metric_names(self, axes: Mapping[str, Sequence[str]] | None = None) -> frozenset[str]:
        axes = dict(axes or {})
        if set(axes) != self.axes:
            raise RunSchemaError(f"run schema {self.study}/{self.stage}: axes {sorted(axes)} given, "
                                 f"{sorted(self.axes)} declared")
        empty = [a for a, values in axes.items() if not list(values)]
        if empty:
            raise RunSchemaError(f"run schema {self.study}/{self.stage}: axis {empty} has no values")
        names: set[str] = set()
        for template in self.metrics:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f]
            for combo in itertools.product(*(list(dict.fromkeys(str(v) for v in axes[f])) for f in fields)):
                names.add(template.format(**dict(zip(fields, combo))))
        return frozenset(names)


RUN_SCHEMAS: dict[tuple[str, str], RunSchema] = {}


def declare_run(study: str, stage: str, *, params: Sequence[str] = (), metrics: Sequence[str] = ()) -> RunSchema:
    """Declare (once, at import of the stage module) what every run of ``study``/``stage`` logs."""
    reserved = sorted(set(params) & set(RUN_AXIS_PARAMS))
    if reserved:
        raise RunSchemaError(f"run schema {study}/{stage}: params {reserved} are logged for every run from "
                             "stage_run's model and language; do not declare them")
    schema = RunSchema(study, stage, tuple(params), tuple(metrics))
    known = RUN_SCHEMAS.setdefault((study, stage), schema)
    if known != schema:
        raise RunSchemaError(f"run schema {study}/{stage} declared twice, differently: {known} and {schema}")
    return schema


def param_value(value: Any) -> str:
    """A param as MLflow shows it: strings as they are, everything else as compact JSON (a config mapping
    becomes one param, so that options with different inner keys still give every run the same keys)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def metric_value(name: str, value: Any) -> float:
    """A metric as a float; a value that does not exist (None, NaN) is NaN, so the key is still logged."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RunSchemaError(f"metric {name!r}: {value!r} is not a number") from None


def dvc_md5(path: str | os.PathLike, lock_path: str | os.PathLike = "dvc.lock") -> str:
    """The md5 DVC records for ``path``: a plain file's own md5 (computed from its bytes,
    so a stage run by hand never logs a stale digest), or for a directory the ``.dir``
    md5 that dvc.lock holds for it ("" when the lock has none)."""
    path = Path(path)
    if path.is_file():
        return md5_file(path)
    lock = Path(lock_path)
    if lock.exists():
        stages = _locked_stages(str(lock.resolve()), lock.stat().st_mtime_ns)
        wanted = os.path.normpath(str(path))
        # the producing stage's outs first: a consumer's deps record is the md5 of its own last run
        entries = [e for stage in stages.values() for e in stage.get("outs", [])]
        entries += [e for stage in stages.values() for e in stage.get("deps", [])]
        for entry in entries:
            if os.path.normpath(entry.get("path", "")) == wanted and entry.get("md5"):
                return entry["md5"]
    return ""


@functools.lru_cache(maxsize=2)
def _locked_stages(lock: str, _mtime_ns: int) -> dict[str, Any]:
    """dvc.lock's stages, read once per process and lock version (a stage logs several datasets) with libyaml's
    loader where PyYAML has it: the pure-Python one took a second of every stage's start on a 300 kB lock."""
    with open(lock, encoding="utf-8") as fh:
        return (yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("stages", {})


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class StageRun:
    """Logging handle for one stage execution, held to the stage's :class:`RunSchema`.

    The schema is checked whether tracking is on or off, so a test run with tracking
    disabled catches a stage that would log an undeclared key.
    """

    def __init__(self, mlflow_module=None, schema: RunSchema | None = None,
                 metric_names: frozenset[str] | None = None) -> None:
        self._mlflow = mlflow_module
        self.schema = schema
        self.metric_names = metric_names if metric_names is not None else (
            schema.metric_names() if schema and not schema.axes else frozenset())
        self.logged_metrics: set[str] = set()
        self.logged_params: set[str] = set()
        self.logged_inputs: set[Path] = set()

    @property
    def enabled(self) -> bool:
        return self._mlflow is not None

    @property
    def run_id(self) -> str | None:
        if not self._mlflow:
            return None
        run = self._mlflow.active_run()
        return run.info.run_id if run else None

    def _where(self) -> str:
        return f"{self.schema.study}/{self.schema.stage}" if self.schema else "stage run"

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Exactly the declared params keys; a mapping value is one param (compact JSON)."""
        declared = set(self.schema.params) if self.schema else set(params)
        if set(params) != declared:
            raise RunSchemaError(f"{self._where()}: params keys {sorted(params)} differ from the declared "
                                 f"{sorted(declared)}")
        self.logged_params |= set(params)
        if not self._mlflow:
            return
        values = {key: param_value(value) for key, value in params.items()}
        long = {key: text for key, text in values.items() if len(text) > MAX_PARAM_LEN}
        for key, text in long.items():
            note = f"... (cut; whole value in artifact params/{key}.json)"
            values[key] = text[: MAX_PARAM_LEN - len(note)] + note
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"{key}.json"
                path.write_text(text, encoding="utf-8")
                self._mlflow.log_artifact(str(path), artifact_path="params")
        items = list(values.items())
        for start in range(0, len(items), 100):  # MLflow caps a batch at 100 params
            self._mlflow.log_params(dict(items[start : start + 100]))

    def log_run_axes(self, *, model: str | None, language: str | None, precision: str | None = None) -> None:
        """The run's model id, language and precision as params (:data:`RUN_AXIS_PARAMS`), so that they can be
        plot axes."""
        values = {key: value for key, value in zip(RUN_AXIS_PARAMS, (model, language, precision)) if value is not None}
        if self._mlflow and values:
            self._mlflow.log_params({key: str(value) for key, value in values.items()})

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Declared metrics only; None and NaN are logged as NaN (the key set stays the declared one)."""
        undeclared = sorted(set(metrics) - self.metric_names)
        if undeclared:
            raise RunSchemaError(f"{self._where()}: metric(s) {undeclared} not declared in its run schema "
                                 f"(declared: {sorted(self.metric_names)})")
        clean = {key: metric_value(key, value) for key, value in metrics.items()}
        self.logged_metrics |= set(clean)
        if self._mlflow and clean:
            self._mlflow.log_metrics(clean, step=step)

    def check_complete(self) -> None:
        missing = sorted(self.metric_names - self.logged_metrics)
        if missing:
            raise RunSchemaError(f"{self._where()}: declared metric(s) {missing} were not logged "
                                 "(log None for a value that does not exist in this run)")

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
        """Log a table (or a folder) as a run input whose digest is its DVC md5; once per path and run."""
        if not self._mlflow or Path(path).resolve() in self.logged_inputs:
            return
        self.logged_inputs.add(Path(path).resolve())
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
        from stereolens.tracking.store import check_server_answers, is_server_uri

        if is_server_uri(uri):
            check_server_answers(uri)  # one line naming the server, not two minutes of retries and a traceback
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
        location = _artifact_location(uri, tracking_cfg.get("artifact_location"))
        try:
            experiment_id = mlflow.create_experiment(experiment_name, artifact_location=location)
        except mlflow.exceptions.MlflowException:
            # a concurrent run (dvc queue start --jobs 2) created it between our look and our create
            experiment_id = mlflow.get_experiment_by_name(experiment_name).experiment_id
    else:
        experiment_id = experiment.experiment_id
    if (experiment and experiment.tags or {}).get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        mlflow.MlflowClient().set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment_id


def _artifact_location(uri: str, artifacts: str | None) -> str | None:
    """Where a new experiment keeps its artifacts: ``artifact_location`` as a folder of the project for a local
    store; for a tracking server, the server's own artifact root (``None``: with ``mlflow server
    --serve-artifacts``, the default, the client uploads through the server), unless the location is itself a
    remote URI (``s3://...``).  A local folder of this machine would keep a shared server's artifacts where
    no one else can read them."""
    from stereolens.tracking.store import is_server_uri

    if not artifacts:
        return None
    if is_server_uri(uri):
        return artifacts if "://" in artifacts and not artifacts.startswith("file://") else None
    return project_path(artifacts).resolve().as_uri()


def experiment_url(server_url: str, experiment_id: str, search: str | None = None) -> str:
    """The address at which an MLflow server's UI opens ``experiment_id`` on its runs table, filtered by the
    search expression ``search`` (``params.model_id = 'smollm2-135m'``) when one is given.

    MLflow 3.17's UI picks the experiment page's view from ``workflowType`` (the address, else the
    GenAI / Model training switch remembered by the browser, GenAI by default), not from the experiment's
    kind tag (the bundle's experiment-kind hook reads the tag only behind a feature flag compiled to true,
    which makes it read ``workflowType`` instead): without it the page opens on an empty GenAI traces
    overview.  The address names the runs tab itself: the experiment page's redirect to its tab keeps
    only ``workflowType``, the workspace and the time range, so a ``searchFilter`` given to it is dropped."""
    from urllib.parse import quote, urlencode

    query = {"workflowType": "machine_learning", **({"searchFilter": search} if search else {})}
    return f"{server_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{urlencode(query, quote_via=quote)}"


def run_url(server_url: str, experiment_id: str, run_id: str) -> str:
    """The address at which an MLflow server's UI opens one run's page in the model-training layout.

    The page reads ``workflowType`` as the experiment page does (:func:`experiment_url`): the link MLflow
    prints itself (``#/experiments/<id>/runs/<run id>``, no ``workflowType``) opens it in the GenAI layout in
    a browser that has not chosen **Model training**."""
    return (f"{server_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
            "?workflowType=machine_learning")


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
    """Study and stage first, then what tells the runs of a stage apart; a model given as a hub id or a
    path (``google/gemma-3-270m``, ``/models/x``) by its last part, so the name stays short and its parts
    stay the ``/``-separated ones (the ``model`` tag keeps the whole id)."""
    if model:
        model = model.rstrip("/").rsplit("/", 1)[-1] or model
    return "/".join(part for part in (study, stage, model, language, variant) if part)


# The `stereolens stage` command being run in this process (its name and parsed options), set by the stage CLI
_INVOKED_STAGE: contextvars.ContextVar[tuple[str, dict[str, Any]] | None] = contextvars.ContextVar(
    "stereolens_invoked_stage", default=None)


@contextlib.contextmanager
def invoked_stage(name: str, options: Mapping[str, Any]) -> Iterator[None]:
    """Mark the runs opened inside as runs of ``stereolens stage name`` with these options (for :func:`stage_inputs`)."""
    token = _INVOKED_STAGE.set((name, dict(options)))
    try:
        yield
    finally:
        _INVOKED_STAGE.reset(token)


def _command_matches(cmd: str, name: str, options: Mapping[str, Any]) -> bool:
    """Whether a dvc.yaml ``cmd`` runs stage ``name`` with these options (``--language hi`` as ``language='hi'``)."""
    words = shlex.split(cmd if isinstance(cmd, str) else " ".join(cmd))
    if "stage" not in words or words.index("stage") + 1 >= len(words) or words[words.index("stage") + 1] != name:
        return False
    rest = words[words.index("stage") + 2 :]
    for flag, value in zip(rest, rest[1:] + [None]):
        if flag.startswith("--") and value is not None and not value.startswith("--"):
            if str(options.get(flag[2:].replace("-", "_"))) != value:
                return False
    return True


def stage_inputs(root: str | os.PathLike = ".") -> list[str]:
    """The data deps (under :data:`DATA_ROOTS`) that ``root``'s dvc.yaml declares for the stage command being run.

    Empty outside ``stereolens stage`` or where no dvc.yaml stage (or more than one) runs that command with
    these options: a stage run by hand in a scratch folder logs what it logs explicitly, nothing guessed."""
    invoked = _INVOKED_STAGE.get()
    if invoked is None or not (Path(root) / "dvc.yaml").is_file():
        return []
    name, options = invoked
    matching = [(cmd, deps) for cmd, deps in _stage_deps(str(Path(root).resolve()), (Path(root) / "dvc.yaml").stat().st_mtime_ns)
                if _command_matches(cmd, name, options)]
    if len(matching) != 1:
        return []
    return [path for path in matching[0][1] if path.startswith(DATA_ROOTS)]


@functools.lru_cache(maxsize=4)
def _stage_deps(root: str, _dvc_yaml_mtime: int) -> tuple[tuple[Any, tuple[str, ...]], ...]:
    """Every dvc.yaml stage's command and dep paths (read once per process and dvc.yaml version: a stage such
    as the leakage fit opens several runs)."""
    from dvc.exceptions import DvcException

    from stereolens.errors import ConfigError
    from stereolens.lineage.graph import declared_stages

    try:
        stages = declared_stages(root)
    except (ConfigError, DvcException):
        return ()  # not a DVC project, or a dvc.yaml DVC itself cannot read: no stage to take inputs from
    return tuple((cmd, tuple(deps)) for _, cmd, deps in stages)


def computed_precision(model_cfg: Mapping[str, Any]) -> str:
    """The dtype a configured model computes in here: ``model.dtype`` (float32 unless the opt-in reduced
    precision is set), or float32 where this device lacks it and ``model.reduced_precision`` falls back;
    ``bfloat16+verify-fp32`` where ``model.verify`` rescores near-boundary decisions in float32."""
    from stereolens.models.hardware import effective_dtype, precision_mode

    dtype, _ = effective_dtype(model_cfg.get("dtype"), str(model_cfg.get("device") or "cpu"),
                               str(model_cfg.get("reduced_precision") or "fall_back"))
    return precision_mode(dtype, model_cfg.get("verify"))


@contextlib.contextmanager
def stage_run(
    tracking_cfg: Mapping[str, Any] | None,
    schema: RunSchema,
    *,
    model: str | None = None,
    language: str | None = None,
    variant: str | None = None,
    params: Mapping[str, Any] | None = None,
    axes: Mapping[str, Sequence[str]] | None = None,
    annotation_source: str | None = None,
    tags: Mapping[str, Any] | None = None,
    scoring_model: Mapping[str, Any] | None = None,
) -> Iterator[StageRun]:
    """Open an MLflow run for one stage execution (or a no-op handle when tracking is off), held to ``schema``.

    ``scoring_model`` is the config of the model that scores in this run: the dtype it computes in on this
    machine (:func:`computed_precision`) becomes the param ``precision``, and the hardware's half-precision
    support the tag ``precision_support``.
    """
    if annotation_source is not None and annotation_source not in ANNOTATION_SOURCES:
        raise ValueError(f"annotation_source must be one of {ANNOTATION_SOURCES}, got {annotation_source!r}")
    if RUN_SCHEMAS.get((schema.study, schema.stage)) != schema:
        raise RunSchemaError(f"run schema {schema.study}/{schema.stage} is not the one declared with declare_run")
    names = schema.metric_names(axes)
    study, stage = schema.study, schema.stage
    if not tracking_cfg or not tracking_cfg.get("enabled", False):
        handle = StageRun(None, schema, names)
        handle.log_params(params or {})
        yield handle
        handle.check_complete()
        return
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # MLflow prints its own run and experiment links for a tracking server, which open the GenAI layout; the
    # run's link is printed below instead (run_url)
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
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
    name = run_name(study, stage, model, language, variant)
    with mlflow.start_run(experiment_id=experiment_id, run_name=name) as started:
        handle = StageRun(mlflow, schema, names)
        handle.set_tags(all_tags)
        handle.log_params(params or {})
        handle.log_run_axes(model=model, language=language,
                            precision=None if scoring_model is None else computed_precision(scoring_model))
        if scoring_model is not None:
            from stereolens.models.hardware import capability_record

            device = str(scoring_model.get("device") or "cpu")
            handle.set_tags({"precision_support": json.dumps(capability_record(device), sort_keys=True)})
        for path in stage_inputs():
            handle.log_dataset(path, name=path)
        yield handle
        handle.check_complete()
    from stereolens.tracking.store import is_server_uri

    uri = mlflow.get_tracking_uri()
    if is_server_uri(uri):
        print(f"MLflow run {name}: {run_url(uri, experiment_id, started.info.run_id)}", flush=True)
