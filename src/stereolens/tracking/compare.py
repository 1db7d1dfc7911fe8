"""Runs of one study side by side, as the MLflow UI's compare view lines them up.

One row per run name and DVC experiment (the newest run of that name: a rerun
replaces the earlier one, as it replaces the files DVC tracks; the queued
experiments of a sweep, tagged ``dvc_experiment``, each keep their own row), the identifying tags as the first
columns, then one column per metric.  The table is read from the MLflow store
itself, so it is exactly what the UI shows.
"""

from __future__ import annotations

import pandas as pd

from stereolens.errors import ConfigError

DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
ID_COLUMNS = ("run_name", "dvc_experiment", "stage", "model", "language", "variant", "annotation_source", "run_id", "start_time")


def compare_runs(
    study: str,
    *,
    metric: str | None = None,
    stage: str | None = None,
    tracking_uri: str = DEFAULT_TRACKING_URI,
    experiment: str = "stereolens",
    all_runs: bool = False,
) -> pd.DataFrame:
    """The runs of ``study`` (optionally one ``stage``) with their metrics (or only ``metric``)."""
    from stereolens.tracking.store import open_experiment

    client, found = open_experiment(tracking_uri, experiment)  # refuses a store that does not exist: opening it would create one
    query = f"tags.study = '{study}'" + (f" and tags.stage = '{stage}'" if stage else "")
    runs = []
    page_token = None
    while True:
        page = client.search_runs([found.experiment_id], filter_string=query, order_by=["attributes.start_time DESC"],
                                  max_results=1000, page_token=page_token)
        runs.extend(page)
        page_token = page.token
        if not page_token:
            break
    rows, seen = [], set()
    for run in runs:
        name, tags = run.info.run_name, run.data.tags
        key = (name, tags.get("dvc_experiment", ""))
        if not all_runs and key in seen:
            continue  # an older run of the same name in the same experiment: superseded by the rerun
        seen.add(key)
        row = {
            "run_name": name,
            "dvc_experiment": tags.get("dvc_experiment", ""),
            "stage": tags.get("stage", ""),
            "model": tags.get("model", ""),
            "language": tags.get("language", ""),
            "variant": tags.get("variant", ""),
            "annotation_source": tags.get("annotation_source", ""),
            "run_id": run.info.run_id,
            "start_time": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC").isoformat(timespec="seconds"),
        }
        metrics = run.data.metrics
        if metric is not None:
            if metric not in metrics:
                continue
            row[metric] = metrics[metric]
        else:
            row.update(metrics)
        rows.append(row)
    if not rows:
        what = f"metric {metric!r} in " if metric else ""
        raise ConfigError(f"no MLflow runs with {what}study {study!r}" + (f", stage {stage!r}" if stage else "")
                          + f" in {tracking_uri}")
    table = pd.DataFrame(rows)
    metric_columns = sorted(c for c in table.columns if c not in ID_COLUMNS)
    return table[[*ID_COLUMNS, *metric_columns]].sort_values(["stage", "model", "language", "variant", "dvc_experiment"],
                                                            kind="stable", ignore_index=True)


# what identifies one measurement across models: the same stage, language, variant and DVC experiment
_LINE_UP_KEYS = ["stage", "language", "variant", "dvc_experiment"]


def models_side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """The compare table turned so that the models of a run stand side by side: one row per stage,
    language, variant, DVC experiment and metric, one column per model (in the order the models first
    appear), NaN where a model has no such run or metric. Run names differ only in the model, so a
    row is one measurement taken on each model."""
    metric_columns = [c for c in table.columns if c not in ID_COLUMNS]
    if not metric_columns:
        raise ConfigError("no metrics to line up")
    long = table.melt(id_vars=[*_LINE_UP_KEYS, "model"], value_vars=metric_columns, var_name="metric").dropna(subset=["value"])
    models = list(dict.fromkeys(table["model"]))
    wide = long.pivot_table(index=[*_LINE_UP_KEYS, "metric"], columns="model", values="value", aggfunc="first", sort=True)
    return wide.reindex(columns=models).reset_index().rename_axis(columns=None)
