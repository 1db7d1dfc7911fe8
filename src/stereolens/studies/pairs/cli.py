"""``stereolens pairs analyze``: the AmchiBias evaluation of any scored pairs file, outside DVC.

    stereolens pairs analyze --scores scores.csv --output DIR [--resamples 1000] [--seed 0]
                             [--fragmentation fragmentation.csv]

Input columns: ``id,dimension,group_class,score_stereo,score_anti[,score_control]``
(``group_class`` is ``hyperlocal`` or ``pan_regional`` and optional; ``model`` and
``language`` columns, when present, split the analysis).  Output: ``summary.json``
(``bias_score``, ``n``, ``lms`` with controls, ``by_dimension``; fractions in
[0, 1]), ``tables/*.csv`` shaped like AmchiBias Tables 3-6, ``figures/`` and ``report.md``.
With ``model``/``language`` columns holding more than one combination, the summary has one such
entry per combination under ``runs``.  ``--fragmentation`` (``model, language,
mean_tokens_per_term[, lossy]``, e.g. the concatenated ``fragmentation.csv`` of several
``pairs_evaluate`` runs) adds the section 5.5 correlations across models.
"""

from __future__ import annotations

import argparse

from stereolens.io import read_csv_checked


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "pairs", help="AmchiBias minimal-pair benchmark")
    analyze = sub.add_parser("analyze", help="bias score, BCa, binomial, LMS and tables of a scored pairs file")
    analyze.add_argument("--scores", required=True, help="CSV: id,dimension,group_class,score_stereo,score_anti[,score_control]")
    analyze.add_argument("--output", required=True, help="output folder")
    analyze.add_argument("--resamples", type=int, default=1000, help="resamples of the mean/median-difference intervals and the reference count behind `borderline` "
                         "(default 1000, the paper's; the bias-score interval itself is exact)")
    analyze.add_argument("--seed", type=int, default=0)
    analyze.add_argument("--fragmentation", help="CSV: model,language,mean_tokens_per_term[,lossy] (section 5.5)")
    analyze.set_defaults(func=_analyze)


def _analyze(args: argparse.Namespace) -> int:
    from stereolens.studies.pairs.analysis import REQUIRED_COLUMNS, analyze_scores
    from stereolens.studies.pairs.report import write_outputs

    from stereolens.cli_support import check_count

    check_count(args.resamples, "--resamples", minimum=1)  # the intervals and `borderline` need resamples
    scores = read_csv_checked(args.scores, REQUIRED_COLUMNS, what="scored pairs")
    analysis = analyze_scores(scores, n_resamples=args.resamples, seed=args.seed, what=str(args.scores))
    frag, frag_stats = None, None
    if args.fragmentation:
        from stereolens.studies.pairs.analysis import check_fragmentation, fragmentation_correlations

        frag = read_csv_checked(args.fragmentation, ("model", "language", "mean_tokens_per_term"),
                                what="fragmentation table")
        frag = check_fragmentation(frag, analysis.cells, what=f"fragmentation table {args.fragmentation}")
        if "lossy" not in frag.columns:
            frag["lossy"] = False
        frag_stats = fragmentation_correlations(frag, analysis.cells)
    write_outputs(analysis, args.output, title="pairs analyze", fragmentation=frag, fragmentation_stats=frag_stats,
                  provenance={"scores": str(args.scores), "config": "ad hoc (stereolens pairs analyze)"})
    s = analysis.summary
    if "bias_score" in s:
        from stereolens.report.markdown import format_estimate  # as the report writes it

        print(f"bias score {format_estimate(s['bias_score'], unit='share')} over {s['n']} pairs "
              f"-> {args.output}/summary.json")
    else:
        print(f"{len(s['runs'])} model x language runs -> {args.output}/summary.json")
    return 0
