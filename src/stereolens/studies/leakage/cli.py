"""``stereolens leakage fit`` and ``stereolens leakage human``: the study on your own files, outside DVC.

    stereolens leakage fit --human DIR --model-scores FILE --target LANG \\
        [--baseline FILE] [--scale raw|standardised] [--missing zero|drop] [--thin-groups keep|drop] --output DIR

``DIR`` holds ``H_<LANG>.csv`` files (and, written by ``stereolens leakage human`` or the
leakage-human stage, ``thin_groups.csv``: the groups rated by too few annotators, kept or
dropped by ``--thin-groups``, never zero-filled); ``FILE`` and the baseline use the same layout
(first column ``Traits``, one column per group, empty cells missing).  Writes
``coefficients.csv`` (term, estimate, se, z, p, ci_low, ci_high), ``edges.json``
and ``fit.json`` (what was fitted, which terms were available, notes).
"""

from __future__ import annotations

import argparse
from pathlib import Path



def run_fit(args: argparse.Namespace) -> int:
    from stereolens.studies.leakage.fit import fit_leakage, leakage_edges
    from stereolens.io import write_csv, write_json

    from stereolens.errors import DataError
    from stereolens.io import check_writable
    from stereolens.io import read_csv_checked
    from stereolens.studies.leakage.matrices import (check_matrix_labels, read_human_dir, read_score_matrix,
                                                     read_thin_groups)

    check_writable(Path(args.output) / "fit.json")
    human = read_human_dir(args.human)
    # a folder of your own H matrices may have no thin-group list: then no group is thin
    thin = read_thin_groups(args.human, required=False)
    lang = args.target.upper()
    if lang not in human:
        raise DataError(
            f"no H_{lang}.csv in {args.human} (has: {', '.join(f'H_{k}.csv' for k in sorted(human))}): "
            f"check --target, or add the target language's human matrix"
        )
    target = read_score_matrix(args.model_scores, "model score matrix")
    baseline = read_score_matrix(args.baseline, "baseline matrix") if args.baseline else None
    seed = Path(args.lexicon)
    traits = set(read_csv_checked(seed / "traits.csv", ["trait"], what="traits", dtype=str)["trait"])
    groups = set(read_csv_checked(seed / "groups.csv", ["group"], what="groups", dtype=str)["group"])
    for code, matrix in sorted(human.items()):
        check_matrix_labels(matrix, Path(args.human) / f"H_{code}.csv", "human matrix", traits, groups)
    check_matrix_labels(target, args.model_scores, "model score matrix", traits, groups)
    if baseline is not None:
        check_matrix_labels(baseline, args.baseline, "baseline matrix", traits, groups)
    absent = [g for g in human[lang].columns if g not in target.columns]
    if absent:
        raise DataError(
            f"model score matrix {args.model_scores} line 1: no column for group(s) {', '.join(absent)} "
            f"that H_{lang}.csv scores (add the columns, empty cells for groups the model was not asked about)"
        )
    fit = fit_leakage(target, human, lang, baseline=baseline, scale=args.scale, missing=args.missing, alpha=args.alpha,
                      thin=thin, thin_rule=args.thin_groups)
    out = Path(args.output)
    write_csv(out / "coefficients.csv", fit.coefficients)
    edges = leakage_edges(fit, alpha=args.alpha)
    if not fit.converged:
        print(f"note: the fit did not converge; its {len(leakage_edges(fit, alpha=args.alpha, converged_only=False))} "
              "edge(s) are not reported")
    write_json(out / "edges.json", edges)
    write_json(out / "fit.json", fit.summary())
    print(fit.coefficients.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for note in fit.notes:
        print(f"note: {note}")
    from stereolens.report.markdown import format_cell  # as the report writes them

    print(f"{len(edges)} leakage edge(s) into {lang}: " + (", ".join(
        f"{e['source']}->{e['target']} ({format_cell(e['estimate'])}, p={format_cell(e['p'])})" for e in edges) or "none"))
    print(f"wrote {out / 'coefficients.csv'}, {out / 'edges.json'}, {out / 'fit.json'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    actions = get_or_create_subparser(subparsers, "leakage", help="stereotype leakage study (Cao et al. 2024)")
    p = actions.add_parser("fit", help="fit the leakage regression MLLM_tgt ~ sum_l H_l + LM_tgt (random intercept per trait)")
    p.add_argument("--human", required=True, help="directory of H_<LANG>.csv human matrices")
    p.add_argument("--model-scores", required=True, help="the model's traits x groups matrix for the target language")
    p.add_argument("--target", required=True, help="target language code (e.g. HI)")
    p.add_argument("--baseline", default=None, help="monolingual LM matrix for the target language (optional)")
    p.add_argument("--scale", choices=("raw", "standardised"), default="raw")
    p.add_argument("--missing", choices=("zero", "drop"), default="zero",
                   help="missing human cells (no value, the published 999): 0 (default, the reference code's "
                        "treatment) or drop")
    p.add_argument("--thin-groups", choices=("keep", "drop"), default="keep",
                   help="groups rated by too few annotators (thin_groups.csv in --human): keep their values (default, "
                        "as the reference code does) or drop their rows; never zero-filled")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level for edges and CIs")
    p.add_argument("--lexicon", default="data/seed/leakage",
                   help="folder with traits.csv and groups.csv (default data/seed/leakage): unknown traits or groups "
                        "in a matrix are refused")
    p.add_argument("--output", required=True, help="output directory")
    p.set_defaults(func=run_fit)

    human = actions.add_parser("human", help="survey files (data_full_*.json) -> H_<LANG>.csv matrices")
    human.add_argument("--survey", required=True, help="directory with data_full_<language>.json")
    human.add_argument("--output", required=True, help="directory for H_<LANG>.csv")
    human.add_argument("--languages", nargs="+", default=["EN", "RU", "ZH", "HI"])
    human.add_argument("--name-map", default=None, help="survey group name map (default data/seed/leakage/survey_group_names.csv)")
    human.add_argument("--min-foreign-nonshared", type=int, default=None,
                       help="annotators needed to report a group unique to another country (default 5, the published rule)")
    human.add_argument("--min-annotators-per-group", type=int, default=None,
                       help="annotators below which a rated group is thin (default 5, "
                            "study.leakage.min_annotators_per_group): kept with its values and listed in thin_groups.csv")
    human.set_defaults(func=run_human)


def run_human(args: argparse.Namespace) -> int:
    from stereolens.studies.leakage.matrices import (DEFAULT_MIN_FOREIGN_NONSHARED, MIN_ANNOTATORS_PER_GROUP,
                                                     survey_annotation_counts, survey_to_matrices, thin_groups_table,
                                                     write_matrices, write_thin_groups)

    minimum = DEFAULT_MIN_FOREIGN_NONSHARED if args.min_foreign_nonshared is None else args.min_foreign_nonshared
    per_group = MIN_ANNOTATORS_PER_GROUP if args.min_annotators_per_group is None else args.min_annotators_per_group
    matrices = survey_to_matrices(Path(args.survey), args.languages, args.name_map, min_foreign_nonshared=minimum)
    counts = survey_annotation_counts(Path(args.survey), args.languages, args.name_map)
    thin = thin_groups_table(matrices, counts, per_group)
    for path in [*write_matrices(matrices, args.output), write_thin_groups(thin, args.output)]:
        print(f"wrote {path}")
    for row in thin.itertuples():
        print(f"note: {row.language} {row.group}: {row.n_annotators} annotator(s), fewer than {per_group}: kept and "
              "listed as thin")
    return 0
