"""``stereolens lineage PATH``, ``stereolens release STUDY`` and ``stereolens reproduce --against REV``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("lineage", help="the stages, inputs, params, models and provenance behind an artefact")
    parser.add_argument("path", help="any artefact: a report table, a figure, a dataset file or folder")
    parser.add_argument("--json", action="store_true", help="the full record as JSON")
    parser.add_argument("--tracking-uri", default=None, help="MLflow store (default: sqlite:///mlruns/mlflow.db)")
    parser.set_defaults(func=_lineage)

    parser = subparsers.add_parser("release", help="assemble an audited dataset release of a study (or refuse)")
    parser.add_argument("study")
    parser.add_argument("--output", required=True, help="a new, empty folder")
    parser.add_argument("--allow-unreviewed", action="store_true",
                        help="release simulated / unreviewed / gate-failing items, said so on the datasheet's first line")
    parser.add_argument("--params", default="params.yaml", help="composed parameters (default: params.yaml)")
    parser.add_argument("--tracking-uri", default=None)
    parser.set_defaults(func=_release)

    parser = subparsers.add_parser(
        "reproduce", help="compare the workspace's outputs (a rerun) with a committed run's, number by number",
        description="Per stage of REV's dvc.lock: 'reproduced' when every output file agrees with the committed one "
                    "(integers exactly, other numbers to --rtol/--atol, numbers in page text also to their last "
                    "written digit), else the first number that differs: file, row, column, both values. The "
                    "committed outputs come from the DVC cache or the default remote. Exit 0 when every stage "
                    "checked reproduced, 1 when one differs or could not be checked.")
    parser.add_argument("--against", required=True, metavar="REV",
                        help="the git revision whose dvc.lock holds the committed run, e.g. HEAD or main")
    parser.add_argument("--stage", action="append", default=[], metavar="NAME",
                        help="check only this stage (crows_score, or one member: crows_score@gemma3-270m; repeatable)")
    parser.add_argument("--rtol", type=float, default=None, help="relative tolerance for non-integers (default 1e-05)")
    parser.add_argument("--atol", type=float, default=None, help="absolute tolerance for non-integers (default 1e-08)")
    parser.add_argument("--json", action="store_true", help="one JSON record per stage instead of a line")
    parser.set_defaults(func=_reproduce)


def _lineage(args: argparse.Namespace) -> int:
    from stereolens.lineage.trace import format_lineage, trace

    info = trace(Path(args.path).absolute(), tracking_uri=args.tracking_uri)
    print(json.dumps(info, indent=2, default=str, ensure_ascii=False) if args.json else format_lineage(info))
    return 0


def _release(args: argparse.Namespace) -> int:
    from stereolens.lineage.release import release
    from stereolens.stages.common import load_params

    block = load_params(f"release.{args.study}", path=args.params)[f"release.{args.study}"]
    result = release(args.study, block, args.output, allow_unreviewed=args.allow_unreviewed,
                     tracking_uri=args.tracking_uri)
    flagged = f", {result['flagged']} UNREVIEWED item(s) labelled" if result["flagged"] else ""
    print(f"release {args.study}: {result['files']} file(s), {len(result['gates'])} gate report(s){flagged} -> {result['output']}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from stereolens.errors import ConfigError
    from stereolens.lineage.reproduce import ATOL, RTOL, Tolerance, reproduce

    tolerance = Tolerance(RTOL if args.rtol is None else args.rtol, ATOL if args.atol is None else args.atol)
    if not (tolerance.rtol >= 0 and tolerance.atol >= 0):
        raise ConfigError(f"--rtol and --atol must be numbers >= 0, got {tolerance.rtol:g} and {tolerance.atol:g}")
    counts: dict[str, int] = {}
    for check in reproduce(args.against, tolerance=tolerance, stages=args.stage):
        counts[check.status] = counts.get(check.status, 0) + 1
        print(json.dumps(check.as_dict(args.against), ensure_ascii=False) if args.json else check.describe(args.against),
              flush=True)
    total = sum(counts.values())
    rest = ", ".join(f"{n} {'differ' if status == 'differs' and n > 1 else status}"
                     for status, n in counts.items() if status != "reproduced")
    if not args.json:
        print(f"reproduce against {args.against}: {counts.get('reproduced', 0)} of {total} stage(s) reproduced"
              + (f"; {rest}" if rest else "") + f" (tolerance: integers exact, {tolerance.rule()})")
    return 1 if counts.get("differs") or counts.get("not checked") else 0
