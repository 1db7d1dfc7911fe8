"""``stereolens leakage fit``: the leakage regression on your own matrices, outside DVC.

    stereolens leakage fit --human DIR --model-scores FILE --target LANG \\
        [--baseline FILE] [--scale raw|standardised] [--missing drop|zero] --output DIR

``DIR`` holds ``H_<LANG>.csv`` files; ``FILE`` and the baseline use the same layout
(first column ``Traits``, one column per group, empty cells missing).  Writes
``coefficients.csv`` (term, estimate, se, z, p, ci_low, ci_high), ``edges.json``
and ``fit.json`` (what was fitted, which terms were available, notes).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from stereolens.errors import DataError

_HUMAN_FILE = re.compile(r"^H_([A-Za-z]{2,3})\.csv$")


def read_score_matrix(path: str | Path, what: str) -> pd.DataFrame:
    """A traits x groups matrix in the H_<LANG>.csv layout (999 and empty cells are missing)."""
    from stereolens.annotation.aggregate import read_matrix

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} not found: {path}")
    try:
        return read_matrix(path)
    except ValueError as exc:
        raise DataError(f"{what} {path}: cells must be numbers or empty ({str(exc).splitlines()[0]})") from exc


def read_human_dir(directory: str | Path) -> dict[str, pd.DataFrame]:
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"human matrix directory not found: {directory}")
    out = {}
    for path in sorted(directory.iterdir()):
        m = _HUMAN_FILE.match(path.name)
        if m:
            out[m.group(1).upper()] = read_score_matrix(path, "human matrix")
    if not out:
        raise DataError(f"{directory} holds no H_<LANG>.csv files")
    return out


def run_fit(args: argparse.Namespace) -> int:
    from stereolens.analysis.leakage import fit_leakage, leakage_edges
    from stereolens.io import write_csv, write_json

    human = read_human_dir(args.human)
    target = read_score_matrix(args.model_scores, "model score matrix")
    baseline = read_score_matrix(args.baseline, "baseline matrix") if args.baseline else None
    lang = args.target.upper()
    if lang not in human:
        print(f"stereolens: note: no H_{lang}.csv in {args.human}; the target language's own human term is absent")
    fit = fit_leakage(target, human, lang, baseline=baseline, scale=args.scale, missing=args.missing, alpha=args.alpha)
    out = Path(args.output)
    write_csv(out / "coefficients.csv", fit.coefficients)
    edges = leakage_edges(fit, alpha=args.alpha)
    write_json(out / "edges.json", edges)
    write_json(out / "fit.json", fit.summary())
    print(fit.coefficients.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for note in fit.notes:
        print(f"note: {note}")
    print(f"{len(edges)} leakage edge(s) into {lang}: " + (", ".join(f"{e['source']}->{e['target']} ({e['estimate']:.3g}, p={e['p']:.2g})" for e in edges) or "none"))
    print(f"wrote {out / 'coefficients.csv'}, {out / 'edges.json'}, {out / 'fit.json'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli import get_or_create_subparser

    actions = get_or_create_subparser(subparsers, "leakage", help="stereotype leakage study (seed 001)")
    p = actions.add_parser("fit", help="fit the leakage regression MLLM_tgt ~ sum_l H_l + LM_tgt (random intercept per trait)")
    p.add_argument("--human", required=True, help="directory of H_<LANG>.csv human matrices")
    p.add_argument("--model-scores", required=True, help="the model's traits x groups matrix for the target language")
    p.add_argument("--target", required=True, help="target language code (e.g. HI)")
    p.add_argument("--baseline", default=None, help="monolingual LM matrix for the target language (optional)")
    p.add_argument("--scale", choices=("raw", "standardised"), default="raw")
    p.add_argument("--missing", choices=("drop", "zero"), default="drop", help="missing human cells: drop (default) or 0")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level for edges and CIs")
    p.add_argument("--output", required=True, help="output directory")
    p.set_defaults(func=run_fit)
