"""``stereolens seegull evaluate``: the seegull tables, figures and summary from any associations file.

    stereolens seegull evaluate --associations associations.csv --output DIR [--seegull data/raw/seegull_multilingual]
                                [--pair es-MX:es-ES ...] [--resamples 1000] [--seed 0] [--offensive-cut 0]

Input columns (``data/processed/seegull/<model>/associations.csv`` has them all): ``locale, identity, attribute,
stereotype_votes, non_stereotype_votes, unsure_votes, association`` (higher = the model associates the attribute
with the identity more), optional ``mean_offensive_score`` (the offensiveness split) and ``identity_en,
attribute_en`` (the cross-locale alignment).  The verdict and the vote share are recomputed from the votes.  The
other locale of a cross-locale pair takes its verdicts from ``--seegull`` (the ingested SeeGULL folder, every
tuple) when given, else from the file's own rows.  Output: ``summary.json`` (``by_locale`` with ``auc``,
``auc_ci``, ``spearman``, ``n_stereotype``, ``n_not``, ...; ``cross_locale``), ``by_locale.csv``,
``cross_locale.csv``, ``aligned.csv``, ``figures/``, ``report.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "seegull",
                                  help="model associations against SeeGULL Multilingual's per-locale human verdicts")
    ev = sub.add_parser("evaluate", help="AUC and Spearman per locale, the offensiveness split and cross-locale fits")
    ev.add_argument("--associations", required=True,
                    help="CSV: locale,identity,attribute,stereotype_votes,non_stereotype_votes,unsure_votes,association"
                         "[,mean_offensive_score,identity_en,attribute_en]")
    ev.add_argument("--output", required=True, help="output directory")
    ev.add_argument("--seegull", default=None,
                    help="the ingested SeeGULL folder the cross-locale partners' verdicts come from (default: the file)")
    ev.add_argument("--pair", action="append", default=None, metavar="A:B",
                    help="a cross-locale regression, association in A ~ verdict A + verdict B (repeatable; default: "
                         "every ordered pair of the file's locales)")
    ev.add_argument("--resamples", type=int, default=1000, help="identity-cluster bootstrap resamples (0 = none)")
    ev.add_argument("--confidence", type=float, default=0.95)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--offensive-cut", type=float, default=0.0,
                    help="mean_offensive_score above this is offensive (dataset scale -1 .. 4)")
    ev.add_argument("--min-aligned", type=int, default=10, help="fewest aligned tuples a cross-locale fit needs")
    ev.add_argument("--model", default="model", help="the model's name in the figures and summary")
    ev.set_defaults(func=_evaluate)


def _pairs(values: list[str] | None) -> list[tuple[str, str]] | None:
    from stereolens.errors import ConfigError

    if values is None:
        return None
    pairs = []
    for value in values:
        a, sep, b = value.partition(":")
        if not sep or not a or not b:
            raise ConfigError(f"--pair {value!r}: expected LOCALE:OTHER, e.g. es-MX:es-ES")
        pairs.append((a, b))
    return pairs


def _evaluate(args: argparse.Namespace) -> int:
    from stereolens.cli_support import check_count
    from stereolens.datasets.seegull import read_seegull
    from stereolens.errors import ConfigError
    from stereolens.io import read_csv_checked
    from stereolens.stages.kit import write_study_summary
    from stereolens.studies.seegull.analysis import REQUIRED_COLUMNS, checked_associations
    from stereolens.studies.seegull.report import evaluate

    resamples = check_count(args.resamples, "--resamples", minimum=0)
    check_count(args.min_aligned, "--min-aligned", minimum=3)
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence must be a number in (0, 1), got {args.confidence}")
    pairs = _pairs(args.pair)
    raw = read_csv_checked(args.associations, REQUIRED_COLUMNS, what="seegull associations", dtype=str,
                           keep_default_na=False, allow_empty=False)
    associations = checked_associations(raw, f"seegull associations {args.associations}")
    present = set(associations["locale"])
    outside = sorted({a for a, _ in pairs or []} - present)
    if outside:
        raise ConfigError(f"--pair: {outside} not a locale of {args.associations} ({', '.join(sorted(present))})")
    verdicts = None
    if args.seegull:
        partners = sorted({b for _, b in pairs} if pairs else present)
        verdicts = read_seegull(args.seegull, partners, key="--pair")
    summary = evaluate(associations, args.output, model=args.model, verdicts=verdicts, pairs=pairs, resamples=resamples,
                       confidence=args.confidence, seed=args.seed, offensive_cut=args.offensive_cut,
                       min_aligned=args.min_aligned)
    write_study_summary(Path(args.output) / "summary.json", summary)
    shown = "; ".join(f"{loc}: AUC {b['auc']:.3f} (n {b['n_stereotype']} vs {b['n_not']})" if b.get("auc") is not None
                      else f"{loc}: AUC n/a" for loc, b in summary["by_locale"].items())
    print(f"{shown} -> {args.output}")
    return 0
