"""``stereolens stereo evaluate``: StereoSet ss / lms / icat of any scored instance table, outside DVC.

    stereolens stereo evaluate --scores scores.csv --output DIR [--bootstrap 1000] [--seed 0]

Input columns: ``id,country,category,target,score_stereo,score_anti,score_unrelated``
(higher = more likely).  Output: ``summary.json`` with ``ss``, ``lms``, ``icat``
overall and ``by_country: {COUNTRY: {ss, lms, icat}}`` on StereoSet's 0-100
scale (plus intervals and counts), and ``by_country.csv``, ``by_category.csv``,
``by_country_category.csv``.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "stereo", help="country-specific StereoSet benchmark (seed 003) tools")
    ev = sub.add_parser("evaluate", help="ss, lms and icat overall and per country from candidate scores")
    ev.add_argument("--scores", required=True, help="CSV: id,country,category,target,score_stereo,score_anti,score_unrelated")
    ev.add_argument("--output", required=True, help="output directory")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over items for the intervals (0 = none)")
    ev.add_argument("--seed", type=int, default=0)
    ev.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from stereolens.studies.stereo.evaluation import evaluate_file

    s = evaluate_file(args.scores, args.output, n_resamples=args.bootstrap, seed=args.seed)
    countries = ", ".join(f"{c} {v['ss']:.1f}" for c, v in s["by_country"].items())
    print(f"ss {s['ss']:.1f}  lms {s['lms']:.1f}  icat {s['icat']:.1f}  (n={s['n']}; ss by country: {countries}) -> {args.output}")
    return 0
