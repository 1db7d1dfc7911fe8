"""``stereolens pcs analyze``: the Fifteen Percent Fluency analysis of any judged-score table, outside DVC.

    stereolens pcs analyze --scores scores.csv --output DIR [--min-gain-steps 0.25] [--rubrics rubrics.yaml] [--human prefs.csv]

Input columns: ``model,language,scenario_id,dimension,feature,condition,score``
(condition A, B or C); ``judge`` and ``sample`` columns, when present, are
averaged in that order; an ``invalid_reason`` column (as the collect stage writes
it: empty = valid) leaves the invalid responses out of every analysis.  Output: ``summary.json`` (pcs, cap_util, n_excluded,
by_dimension, ldi, hud), ``statistics.json`` (tests and counts), ``tables/*.csv``
(shaped like Fifteen Percent Fluency Tables 1-2 and 8-17), ``figures/*.png|svg`` and ``report.md``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from stereolens.studies.pcs import DEFAULT_MIN_GAIN_STEPS

DEFAULT_RUBRICS = "data/seed/pcs/rubrics.yaml"


def rubric_features(path: str | os.PathLike | None) -> dict[str, list[str]] | None:
    """Dimension -> feature names from a rubrics file, or None when no file is given."""
    if not path:
        return None
    from stereolens.studies.pcs.scenarios import load_rubrics

    return {dim: [f.name for f in feats] for dim, feats in load_rubrics(path).items()}


def _analyze(args: argparse.Namespace) -> int:
    from stereolens.io import check_writable, read_csv_checked
    from stereolens.studies.pcs.analysis import REQUIRED_COLUMNS, validate_scores
    # the analysis (pandas, scipy) loads when a command runs, not when the parser is built
    from stereolens.studies.pcs.outputs import write_analysis

    check_writable(Path(args.output) / "summary.json")
    scores = read_csv_checked(args.scores, REQUIRED_COLUMNS, what="judged scores", allow_empty=False)
    rubrics = args.rubrics if args.rubrics != DEFAULT_RUBRICS or Path(args.rubrics).exists() else None
    features = rubric_features(rubrics)
    what = f"judged scores {args.scores}"
    # refused before anything is written over an earlier analysis
    validate_scores(scores, what=what, features=features)
    human = None
    if args.human:
        human = read_csv_checked(args.human, ["language", "comparison", "preference"], what="human preferences")
    analysis, _ = write_analysis(scores, args.output, min_gain_steps=args.min_gain_steps, hindi=args.hindi, urdu=args.urdu,
                                 human=human)
    from stereolens.report.markdown import format_cell, format_estimate

    s = analysis.summary
    from stereolens.report.markdown import format_estimate

    # a ratio (never a percentage), with the interval its decision uses; or why it is undefined
    pcs = (s["pcs_note"] if s["pcs"] is None else
           f"{format_estimate(s['pcs'], s['pcs_ci_low_cluster'], s['pcs_ci_high_cluster'], unit='ratio')} ({s['pcs_decision']})")
    cap = s["cap_util_note"] if s["cap_util"] is None else format_estimate(s["cap_util"], unit="ratio")
    print(f"PCS {pcs}, capability utilisation {cap}, excluded {s['n_excluded']} "
          f"(minimum gain {format_cell(args.min_gain_steps)} scale steps) "
          f"-> {args.output}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "pcs", help="pragmatic context sensitivity (Fifteen Percent Fluency) tools")
    analyze = sub.add_parser("analyze", help="LDI, PCS, capability utilisation, HUD and tests from judged scores")
    analyze.add_argument("--scores", required=True, help="CSV: model,language,scenario_id,dimension,feature,condition,score[,judge,sample]")
    analyze.add_argument("--output", required=True, help="output directory")
    analyze.add_argument("--min-gain-steps", type=float, default=DEFAULT_MIN_GAIN_STEPS,
                         help="exclude scenario-features whose B - A is not above this many steps of the judges' "
                              f"scale (1 step = 1 point on 1-7; default {DEFAULT_MIN_GAIN_STEPS:g}, ours, as the "
                              "pipeline's stage); capability utilisation is undefined when mean B - mean A is not")
    analyze.add_argument("--rubrics", default=DEFAULT_RUBRICS,
                         help=f"rubrics YAML: features outside it are refused (default {DEFAULT_RUBRICS}, when present)")
    analyze.add_argument("--human", default=None, help="optional CSV of human preferences: language,comparison,preference")
    analyze.add_argument("--hindi", default="hi", help="language code treated as Hindi for HUD (default hi)")
    analyze.add_argument("--urdu", default="ur", help="language code treated as Urdu for HUD (default ur)")
    analyze.set_defaults(func=_analyze)
