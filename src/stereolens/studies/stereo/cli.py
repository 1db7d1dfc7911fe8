"""``stereolens stereo score`` and ``stereo evaluate``: StereoSet scoring and ss / lms / icat outside DVC.

    stereolens stereo score --model M --instances instances.csv --output scores.csv [--score mean|sum|stereoset_generative]
    stereolens stereo evaluate --scores scores.csv --output DIR [--resamples 1000] [--seed 0] [--score mean|sum|stereoset_generative]
        [--countries SPAIN ...]

``score`` reads a StereoSet-format table (columns as ``data/processed/stereo/instances.csv``:
``id,country,category,target,context,sent_stereo,sent_anti,sent_unrelated``; others are kept) and
writes it back with ``score_stereo``, ``score_anti``, ``score_unrelated`` and ``n_tokens_*``, scored
by the same function as the ``stereo-evaluate`` stage (default ``mean``: per-token mean log-probability).

Input columns: ``id,country,category,target,score_stereo,score_anti,score_unrelated``
(higher = more likely; log-likelihoods, so a positive score is refused unless ``--score
stereoset_generative`` says the file holds StereoSet's positive ratios, of which a negative one is refused); a
country outside ``--countries`` (default: the study's, those of ``data/seed/stereo/prompts.yaml``) is refused, since
a misspelt one would become a country of its own.  Output: ``summary.json`` with ``ss``, ``lms``, ``icat``
overall and ``by_country: {COUNTRY: {ss, lms, icat}}`` on StereoSet's 0-100
scale (plus intervals and counts), and ``by_country.csv``, ``by_category.csv``,
``by_country_category.csv``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stereolens.stats.stereoset import CANDIDATE_SCORES, DEFAULT_CANDIDATE_SCORE

DEFAULT_PROMPTS = "data/seed/stereo/prompts.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "stereo", help="country-specific StereoSet benchmark (EspanStereo) tools")
    sc = sub.add_parser("score", help="score the three candidates of a StereoSet-format file given their context")
    sc.add_argument("--model", required=True, help="Hugging Face model name or local directory (masked or causal LM)")
    sc.add_argument("--instances", required=True,
                    help="CSV: id,country,category,target,context,sent_stereo,sent_anti,sent_unrelated")
    sc.add_argument("--output", required=True, help="CSV: the instances plus score_* and n_tokens_* per candidate")
    sc.add_argument("--score", choices=CANDIDATE_SCORES, default=DEFAULT_CANDIDATE_SCORE,
                    help="per-token mean (default), sum, or StereoSet's generative intersentence score (causal LMs)")
    sc.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None, help="model dtype (default: float32)")
    sc.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    sc.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    sc.add_argument("--cache-dir", default=None, help="response cache directory (default: $STEREOLENS_CACHE_DIR or cache/models)")
    sc.add_argument("--progress", action="store_true", help="show a progress bar")
    sc.set_defaults(func=_score)

    ev = sub.add_parser("evaluate", help="ss, lms and icat overall and per country from candidate scores")
    ev.add_argument("--scores", required=True, help="CSV: id,country,category,target,score_stereo,score_anti,score_unrelated")
    ev.add_argument("--output", required=True, help="output directory")
    ev.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over items for the intervals (0 = none)")
    # the spelling before the CLIs agreed on --resamples; kept working, not advertised
    ev.add_argument("--bootstrap", dest="bootstrap", type=int, help=argparse.SUPPRESS)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--score", choices=CANDIDATE_SCORES, default=DEFAULT_CANDIDATE_SCORE,
                    help="how `stereo score` scored the file: mean or sum (log-likelihoods, none positive: the default "
                         "mean) or stereoset_generative (positive ratios)")
    ev.add_argument("--countries", nargs="+", default=None, metavar="COUNTRY",
                    help=f"the countries the scores may name; a row of another is refused (default: the countries of "
                         f"the study's prompt templates, {DEFAULT_PROMPTS}, when present)")
    ev.set_defaults(func=_evaluate)


def _score(args: argparse.Namespace) -> int:
    from stereolens.models import ResponseCache
    from stereolens.studies.stereo.evaluation import score_file

    scored = score_file(args.model, args.instances, args.output, score=args.score, dtype=args.dtype, device=args.device,
                        cache=ResponseCache(args.cache_dir, enabled=not args.no_cache), progress=args.progress)
    print(f"scored {len(scored)} StereoSet instances ({args.score}) -> {args.output}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from stereolens.cli_support import check_count
    from stereolens.studies.stereo.evaluation import evaluate_file
    from stereolens.studies.stereo.prompts import template_countries

    option = "--bootstrap" if args.bootstrap is not None else "--resamples"
    resamples = check_count(args.bootstrap if args.bootstrap is not None else args.resamples, option, minimum=0)
    countries, source = args.countries, "--countries"
    if countries is None and Path(DEFAULT_PROMPTS).is_file():
        countries, source = template_countries(DEFAULT_PROMPTS), f"the prompt templates {DEFAULT_PROMPTS}"
    s = evaluate_file(args.scores, args.output, n_resamples=resamples, seed=args.seed, score=args.score,
                      countries=countries, countries_from=source)
    from stereolens.report.markdown import format_cell, format_estimate  # as the report writes them

    countries = ", ".join(f"{c} {format_estimate(v['ss'], unit='percent')}" for c, v in s["by_country"].items())
    print(f"ss {format_estimate(s['ss'], unit='percent')}  lms {format_estimate(s['lms'], unit='percent')}  "
          f"icat {format_cell(s['icat'])}  (n={s['n']}; ss by country: {countries}) -> {args.output}")
    return 0
