"""``stereolens compare``: the runs of one study as a table in the terminal."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare the MLflow runs of one study (newest run per run name and DVC experiment)")
    parser.add_argument("--study", required=True, help="study name (the runs' `study` tag)")
    parser.add_argument("--metric", help="only this metric (runs without it are left out)")
    parser.add_argument("--stage", help="only runs of this stage (the `stage` tag, e.g. fit)")
    parser.add_argument("--csv", action="store_true", help="write CSV to stdout instead of a text table")
    parser.add_argument("--all", action="store_true", help="every run, not only the newest of each name")
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///mlruns/mlflow.db")
    parser.add_argument("--experiment", default="stereolens")
    parser.set_defaults(func=_compare)


def _compare(args: argparse.Namespace) -> int:
    from stereolens.tracking.compare import DEFAULT_TRACKING_URI, compare_runs

    table = compare_runs(args.study, metric=args.metric, stage=args.stage,
                         tracking_uri=args.tracking_uri or DEFAULT_TRACKING_URI, experiment=args.experiment,
                         all_runs=args.all)
    if args.csv:
        table.to_csv(sys.stdout, index=False)
    else:
        shown = table.drop(columns=["run_id", "start_time"])
        shown = shown.loc[:, [c for c in shown.columns if not (shown[c].astype(str) == "").all()]]
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0
