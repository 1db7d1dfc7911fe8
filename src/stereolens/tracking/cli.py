"""``stereolens compare``: the runs of one study as a table in the terminal; ``stereolens ui``: the MLflow UI
on the project's store, opened on the runs table."""

from __future__ import annotations

import argparse
import signal
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare the MLflow runs of one study (newest run per run name and DVC experiment)")
    parser.add_argument("--study", required=True, help="study name (the runs' `study` tag)")
    parser.add_argument("--metric", help="only this metric (runs without it are left out)")
    parser.add_argument("--stage", help="only runs of this stage (the `stage` tag, e.g. fit)")
    parser.add_argument("--csv", action="store_true", help="write CSV to stdout instead of a text table")
    parser.add_argument("--all", action="store_true", help="every run, not only the newest of each name")
    parser.add_argument("--by-model", action="store_true",
                        help="line the models up: one row per stage, language, variant and metric, one column per model")
    parser.add_argument("--paired", action="store_true",
                        help="the study's paired comparisons between the run's models, from reports/<study>/paired.json "
                             "(not the MLflow store): per cell the two estimates, their difference with its paired "
                             "interval, the p and its Holm and Benjamini-Hochberg adjustments, and the verdict "
                             "(significant, no difference detected, cannot be decided at this n)")
    parser.add_argument("--reports", default="reports", help="with --paired: the reports folder (default: reports)")
    _store_options(parser)
    parser.set_defaults(func=_compare)

    ui = subparsers.add_parser("ui", help="serve the MLflow UI for the project's runs on loopback and print the "
                                          "address of the experiment's runs table (for a tracking server: only "
                                          "print that address on the server)")
    _store_options(ui)
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=_ui)


def _store_options(parser: argparse.ArgumentParser) -> None:
    """Which MLflow store and experiment a command reads: the same two options for every command here."""
    parser.add_argument("--tracking-uri", default=None,
                        help="an MLflow store or tracking server (http://HOST:PORT); default: params.yaml's "
                             "tracking.tracking_uri, else sqlite:///mlruns/mlflow.db")
    parser.add_argument("--experiment", default="stereolens")


def _compare(args: argparse.Namespace) -> int:
    from stereolens.report.markdown import format_cell  # the report's one number formatter
    from stereolens.tracking.compare import DEFAULT_TRACKING_URI, compare_runs, models_side_by_side
    from stereolens.tracking.store import configured_tracking_uri

    if args.paired:
        return _compare_paired(args)
    table = compare_runs(args.study, metric=args.metric, stage=args.stage,
                         tracking_uri=args.tracking_uri or configured_tracking_uri(default=DEFAULT_TRACKING_URI),
                         experiment=args.experiment,
                         all_runs=args.all)
    if args.by_model:
        table = models_side_by_side(table)
    if args.csv:
        table.to_csv(sys.stdout, index=False)
    elif args.by_model:
        shown = table.loc[:, [c for c in table.columns if not (table[c].astype(str) == "").all()]]
        print(shown.to_string(index=False, float_format=format_cell))
    else:
        shown = table.drop(columns=["run_id", "start_time"])
        shown = shown.loc[:, [c for c in shown.columns if not (shown[c].astype(str) == "").all()]]
        print(shown.to_string(index=False, float_format=format_cell))
    return 0


def _compare_paired(args: argparse.Namespace) -> int:
    """``compare --paired``: reports/<study>/paired.json in the terminal, numbers as the report shows them."""
    from pathlib import Path

    from stereolens.errors import ConfigError
    from stereolens.report.comparisons import paired_frame, paired_text, read_paired

    if args.metric or args.stage or args.all or args.by_model:
        raise ConfigError("--paired reads reports/<study>/paired.json: --metric, --stage, --all and --by-model "
                          "select MLflow runs and do not apply")
    if not Path(args.reports).is_dir():
        raise ConfigError(f"--reports {args.reports}: no such folder (run the pipeline, or point at a reports folder)")
    paired = read_paired(args.reports, args.study)
    if args.csv:
        if paired is None:
            raise ConfigError(f"no {Path(args.reports) / args.study / 'paired.json'}: the study's paired comparisons "
                              "were not computed")
        paired_frame(paired).to_csv(sys.stdout, index=False)
    else:
        print(paired_text(paired, args.study))
    return 0


def _ui(args: argparse.Namespace) -> int:
    from stereolens.tracking.compare import DEFAULT_TRACKING_URI
    from stereolens.tracking.mlflow_run import experiment_url
    from stereolens.tracking.store import configured_tracking_uri, is_server_uri, open_experiment
    from stereolens.tracking.ui import check_port, mlflow_server

    uri = args.tracking_uri or configured_tracking_uri(default=DEFAULT_TRACKING_URI)
    if is_server_uri(uri):
        # the runs are on a tracking server, which serves its own UI: nothing to start, only the address to open
        _, found = open_experiment(uri, args.experiment)  # refuses a server that does not answer, in one line
        print(f"MLflow UI: {experiment_url(uri, found.experiment_id)}", flush=True)
        return 0
    check_port(args.port)  # before a server starts: uvicorn would only say so in a traceback half a minute later
    _, found = open_experiment(uri, args.experiment)  # refuses a store that does not exist, creating none
    # a plain `kill` (SIGTERM) must stop the server too: leave through the context manager, not around it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with mlflow_server(uri, port=args.port) as url:
        print(f"MLflow UI: {experiment_url(url, found.experiment_id)}  (Ctrl-C stops it)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
