"""``stereolens power``: how many pairs a cell needs, and what the cells of a dataset can detect.

One question per call: ``--rate`` (pairs per cell for a true rate of stereotypical wins),
``--effect`` (items for a standardised paired effect d_z of continuous scores),
``--discordance`` with ``--difference`` (items to tell two models apart with McNemar's test),
or ``--dataset`` (the minimum detectable effect of each cell of CrowS-Pairs or of a pairs,
StereoSet-instances or scored CSV).  The methods are those of :mod:`stereolens.stats.power`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError, DataError

# named datasets: (folder under --raw-dir, file, cell column, what)
DATASETS = {"crows": ("crows_pairs", "crows_pairs_anonymized.csv", "bias_type", "CrowS-Pairs")}
# the cell column of a study's table, first found wins: CrowS bias types, pairs dimensions,
# StereoSet-format countries
CELL_COLUMNS = ("bias_type", "dimension", "country")
# columns that split a long table further (one cell per model and language as well)
SPLIT_COLUMNS = ("model", "language")
SCORE_COLUMNS = ("score_stereo", "score_anti")
# the question's own numbers are echoed as given (0.5001 must not read as 0.5)
ECHO_DIGITS = 6


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "power", help="pairs needed per cell for a true rate, d_z or two models; or each cell's minimum detectable "
                      "effect in a dataset",
        description="Give exactly one of --rate, --effect, --discordance (with --difference) or --dataset.")
    question = parser.add_argument_group("the question (one of)")
    question.add_argument("--rate", type=float,
                          help="true share of untied pairs whose stereotypical sentence wins, e.g. 0.60; 0.40 asks "
                               "the same question mirrored")
    question.add_argument("--effect", type=float, help="standardised paired effect d_z of continuous scores, e.g. 0.2")
    question.add_argument("--discordance", type=float,
                          help="share of items on which exactly one of two models is stereotypical, e.g. 0.2")
    question.add_argument("--difference", type=float,
                          help="difference of the two models' bias scores to detect (with --discordance), e.g. 0.05")
    question.add_argument("--dataset",
                          help=f"a named dataset ({', '.join(DATASETS)}) or a CSV of pairs, StereoSet instances or "
                               "scores: each cell's minimum detectable effect")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level of each test (default 0.05)")
    parser.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    parser.add_argument("--cells", type=int,
                        help="cells in the family: adds Bonferroni's alpha / cells (Holm's first step); with "
                             "--dataset it replaces the dataset's own count")
    parser.add_argument("--ties", type=float, default=0.0,
                        help="share of pairs expected to tie, set aside by the test: inflates the pairs to collect "
                             "(with --dataset of unscored pairs: shrinks each cell's n), e.g. 0.1")
    parser.add_argument("--cell", help="with a CSV: the column that names a cell (default: the first of "
                                       f"{', '.join(CELL_COLUMNS)} present; none: the whole file is one cell)")
    parser.add_argument("--raw-dir", default="data/raw", help="where datasets are ingested (default data/raw)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--output", help="also write the JSON object to this file")
    parser.set_defaults(func=_power)


def _power(args: argparse.Namespace) -> int:
    from stereolens.io import check_writable, finite_json, write_json
    from stereolens.stats.power import check_probability

    if (args.difference is None) != (args.discordance is None):
        raise ConfigError("--discordance and --difference go together (the two models' disagreement and the "
                          "difference of their bias scores)")
    asked = [name for name, given in (("--rate", args.rate is not None), ("--effect", args.effect is not None),
                                      ("--discordance", args.discordance is not None),
                                      ("--dataset", args.dataset is not None)) if given]
    if len(asked) != 1:
        raise ConfigError("give exactly one of --rate, --effect, --discordance (with --difference) or --dataset"
                          + (f", not {' and '.join(asked)}" if asked else ""))
    check_probability(args.alpha, "--alpha")
    check_probability(args.power, "--power")
    check_probability(args.ties, "--ties", low_open=False)
    if args.cells is not None and args.cells < 1:
        raise ConfigError(f"--cells must be a whole number >= 1, got {args.cells}")
    if args.cell and args.dataset is None:
        raise ConfigError("--cell names a column of the --dataset file; give --dataset too")
    check_writable(args.output)

    if args.rate is not None:
        result, text = _rate(args)
    elif args.effect is not None:
        result, text = _effect(args)
    elif args.discordance is not None:
        result, text = _mcnemar(args)
    else:
        result, text = _dataset(args)
    if args.output:
        write_json(args.output, result)
    print(json.dumps(finite_json(result), indent=2, ensure_ascii=False, allow_nan=False) if args.json else text)
    return 0


def _levels(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    """(key, label, alpha) of each level asked for: unadjusted, and Bonferroni / Holm's first step."""
    from stereolens.stats.power import family_alpha

    levels = [("unadjusted", "unadjusted", args.alpha)]
    if args.cells and args.cells > 1:
        levels.append(("bonferroni", f"Bonferroni over {args.cells} cells (= Holm's first step)",
                       family_alpha(args.alpha, args.cells)))
    return levels


def _table(rows: list[dict[str, Any]]) -> str:
    """Rows of text and numbers as an aligned table, every number as the report shows it."""
    import pandas as pd

    from stereolens.report.markdown import format_cell

    frame = pd.DataFrame([{k: format_cell(v) for k, v in row.items()} for row in rows])
    return frame.to_string(index=False)


def _holm_note(args: argparse.Namespace) -> list[str]:
    if not (args.cells and args.cells > 1):
        return []
    from stereolens.report.markdown import format_cell

    return [f"Holm's first step tests the smallest p at alpha / {args.cells}, as Bonferroni does; its later steps "
            f"are less strict (alpha / {args.cells - 1} ... alpha), so the Bonferroni row is what a cell needs to be "
            f"found first (Bonferroni's per-cell alpha {format_cell(args.alpha / args.cells)})."]


def _text(head: str, rows: list[dict[str, Any]], notes: list[str]) -> str:
    """A heading line, the table, then the notes, as the terminal shows them."""
    return "\n".join([head, "", _table(rows), *([""] + notes if notes else [])])


def _rate(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from stereolens.report.markdown import format_cell
    from stereolens.stats.power import EXACT_SEARCH_LIMIT, check_rate, pairs_needed

    check_rate(args.rate, "--rate")
    levels = []
    for key, label, alpha in _levels(args):
        levels.append({"level": key, **pairs_needed(args.rate, alpha=alpha, power=args.power, ties=args.ties).as_dict()})
    result = {"question": "pairs per cell for a true rate", "rate": args.rate, "mirror": 1 - args.rate,
              "alpha": args.alpha, "power": args.power, "ties": args.ties, "cells": args.cells,
              "test": "two-sided exact binomial test of 0.5 over untied pairs", "levels": levels}
    rows = []
    for (_, label, alpha), level in zip(_levels(args), levels):
        row = {"level": label, "alpha": alpha, "exact": level["exact"], "exact, every n from": level["exact_stable"],
               "exact power": level["exact_power"], "normal approx.": level["normal"]}
        if args.ties:
            row.update({"to collect, exact": level["exact_raw"], "to collect, normal": level["normal_raw"]})
        rows.append(row)
    head = (f"Untied pairs per cell to find a true rate of {format_cell(args.rate, ECHO_DIGITS)} (or its mirror "
            f"{format_cell(1 - args.rate, ECHO_DIGITS)}) with {format_cell(args.power * 100)}% power: two-sided exact binomial test "
            "of 0.5, the normal approximation (Cohen's h) beside it.")
    notes = ["exact: the smallest n whose exact power reaches the target; the exact power is a sawtooth in n, so "
             "'every n from' gives the n from which every larger n reaches it too."]
    if any(level["exact"] is None for level in levels):
        notes.append(f"n/a: beyond {EXACT_SEARCH_LIMIT:,} untied pairs the exact search is skipped; the sawtooth is then "
                     "far below a percentage point and the normal approximation stands.")
    if args.ties:
        notes.append(f"to collect: with {format_cell(args.ties * 100)}% of pairs tied and set aside, "
                     f"untied / (1 - {format_cell(args.ties)}).")
    return result, _text(head, rows, notes + _holm_note(args))


def _effect(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from stereolens.report.markdown import format_cell
    from stereolens.stats.power import check_effect, paired_effect_needed

    check_effect(args.effect, "--effect")
    levels = [{"level": key, **paired_effect_needed(args.effect, alpha=alpha, power=args.power)}
              for key, _, alpha in _levels(args)]
    result = {"question": "items for a standardised paired effect d_z", "effect": args.effect, "alpha": args.alpha,
              "power": args.power, "cells": args.cells,
              "test": "two-sided one-sample t-test of the per-item differences (statsmodels TTestPower)",
              "levels": levels}
    rows = [{"level": label, "alpha": alpha, "items": level["items"], "power at items": level["power_at_items"]}
            for (_, label, alpha), level in zip(_levels(args), levels)]
    head = (f"Items per cell to find a standardised paired effect d_z = {format_cell(args.effect, ECHO_DIGITS)} (mean / sd of the "
            f"per-item differences) with {format_cell(args.power * 100)}% power: two-sided paired t-test.")
    return result, _text(head, rows, _holm_note(args))


def _mcnemar(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from stereolens.report.markdown import format_cell
    from stereolens.stats.power import MCNEMAR_EXACT_LIMIT, check_discordance, mcnemar_items_needed

    check_discordance(args.discordance, args.difference, names=("--discordance", "--difference"))
    levels = [{"level": key, **mcnemar_items_needed(args.discordance, args.difference, alpha=alpha, power=args.power)}
              for key, _, alpha in _levels(args)]
    result = {"question": "items to tell two models apart", "discordance": args.discordance,
              "difference": args.difference, "alpha": args.alpha, "power": args.power, "cells": args.cells,
              "test": "McNemar's exact test on the discordant items; Connor (1987) normal approximation beside it",
              "levels": levels}
    rows = [{"level": label, "alpha": alpha, "exact": level["exact"], "exact power": level["exact_power"],
             "normal approx. (Connor)": level["normal"], "discordant items expected": level["expected_discordant"]}
            for (_, label, alpha), level in zip(_levels(args), levels)]
    head = (f"Items both models score, per cell, to tell them apart when {format_cell(args.discordance * 100, ECHO_DIGITS)}% of "
            f"items are discordant and their bias scores differ by {format_cell(args.difference, ECHO_DIGITS)} "
            f"({format_cell(args.power * 100)}% power): McNemar's exact test.")
    notes = [] if all(level["exact"] is not None for level in levels) else [
        f"n/a: beyond {MCNEMAR_EXACT_LIMIT:,} items the exact scan is skipped and Connor's approximation stands."]
    return result, _text(head, rows, notes + _holm_note(args))


# --- --dataset: each cell's minimum detectable effect ------------------------------------------


def _dataset_table(args: argparse.Namespace):
    """(table, cell columns, source, what) for ``--dataset``: a named dataset or a CSV."""
    import pandas as pd

    from stereolens.io import read_csv_checked

    name = args.dataset
    if name in DATASETS:
        from stereolens.datasets.crows_pairs import crows_pairs_table

        folder, file, cell, what = DATASETS[name]
        path = Path(args.raw_dir) / folder / file
        if not path.is_file():
            raise DataError(f"{what} is not ingested: {path} not found (run `stereolens stage ingest --dataset "
                            f"{folder}` from the repository root, or give --raw-dir)")
        table = crows_pairs_table(path)
        if args.cell and args.cell not in table.columns:
            raise DataError(f"{what} {path} has no column {args.cell!r} (columns: {', '.join(table.columns)})")
        return table, [args.cell or cell], path, what
    path = Path(name)
    if not path.exists() and path.suffix.lower() != ".csv" and "/" not in name and "\\" not in name:
        raise ConfigError(f"--dataset {name!r}: unknown dataset (known: {', '.join(DATASETS)}) and no such file")
    table: pd.DataFrame = read_csv_checked(path, [args.cell] if args.cell else [], what="--dataset table",
                                           dtype=str, keep_default_na=False, allow_empty=False)
    if args.cell:
        cells = [args.cell]
    else:
        found = [c for c in CELL_COLUMNS if c in table.columns]
        cells = found[:1]
    split = [c for c in SPLIT_COLUMNS if c in table.columns and c not in cells]
    return table, split + cells, path, "table"


def _dataset(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    import pandas as pd

    from stereolens.io import score_column
    from stereolens.report.markdown import format_cell
    from stereolens.stats.power import family_alpha, mde_table

    table, by, path, what = _dataset_table(args)
    scored = set(SCORE_COLUMNS) <= set(table.columns)
    if scored:
        # a scored table: the test runs over the untied pairs, so a cell's n is its untied pairs
        stereo = score_column(table["score_stereo"], where=str(path), column="score_stereo", log_likelihood=False)
        anti = score_column(table["score_anti"], where=str(path), column="score_anti", log_likelihood=False)
        untied = (stereo != anti).to_numpy()
    else:
        untied = pd.Series(True, index=table.index).to_numpy()
    keys = table[by].astype(str).agg(" / ".join, axis=1) if by else pd.Series("all", index=table.index)
    counts = pd.DataFrame({"cell": keys, "untied": untied}).groupby("cell", sort=True)["untied"].agg(["size", "sum"])
    if scored:
        n = counts["sum"].astype(int)
    else:
        # unscored pairs: the expected untied pairs once a share --ties of them tie
        n = (counts["size"] * (1 - args.ties)).apply(math.floor).astype(int)
    family = args.cells or len(n)
    mde = mde_table(n, alpha=args.alpha, power=args.power, family_size=family)
    mde.insert(2, "pairs", counts["size"].astype(int).to_numpy())
    adjusted_alpha = family_alpha(args.alpha, family)
    n_basis = ("untied pairs (ties set aside by the test)" if scored else
               "pairs" if not args.ties else f"pairs less an expected {format_cell(args.ties * 100)}% ties")
    result = {"question": "minimum detectable effect per cell", "dataset": str(args.dataset), "source": str(path),
              "cell_columns": by, "n_is": n_basis, "alpha": args.alpha, "power": args.power, "family_size": family,
              "alpha_adjusted": adjusted_alpha,
              "test": "two-sided exact binomial test of 0.5 over untied pairs; normal approximation (Cohen's h) beside",
              "cells": mde.to_dict(orient="records")}
    rows = [{"cell": r["cell"], **({"pairs": r["pairs"]} if scored or args.ties else {}), "n": r["n"],
             "MDE": r["mde"], "mirror": r["mde_below"], "normal": r["mde_normal"],
             "MDE (Bonferroni)": r["mde_adjusted"], "mirror (Bonferroni)": r["mde_adjusted_below"],
             "normal (Bonferroni)": r["mde_adjusted_normal"]} for r in result["cells"]]
    cell_words = " x ".join(by) if by else "the whole file"
    head = (f"Minimum detectable effect per cell of {what} {path} (cells: {cell_words}; n: {n_basis}): the smallest "
            f"true rate above 0.5, and its mirror below, that the two-sided exact binomial test finds with "
            f"{format_cell(args.power * 100)}% power at alpha {format_cell(args.alpha)}, and at Bonferroni's "
            f"alpha / {family} = {format_cell(adjusted_alpha)} (Holm's first step). n/a: no split of n pairs can "
            "reach significance.")
    return result, _text(head, rows, [])
