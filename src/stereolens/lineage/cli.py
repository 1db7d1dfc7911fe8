"""``stereolens lineage PATH`` and ``stereolens release STUDY``."""

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
