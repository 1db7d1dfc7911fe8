"""Robustness tables: does a headline verdict survive each defensible analysis choice?

A study recomputes its headline under the choices its paper leaves open (how sentence scores are
aggregated, which pairs count, how ties are treated, ...) and lists, per choice, the estimate, its
interval, the decision it leads to and whether that decision agrees with the headline's.  One row
per choice and variant, the headline's own row first (variant ``headline``); a variant that needs
another model pass the run did not make is listed with ``ran`` false and the reason, so a reader
sees what was not checked as well as what was.

The file every study writes is ``reports/<study>/<model_id>/robustness.csv`` with
:data:`COLUMNS` (a study with several headline cells adds a leading ``cell`` column), and
``summary.json`` carries :func:`robustness_block`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

COLUMNS = ("choice", "variant", "estimate", "ci_low", "ci_high", "n", "decision", "agrees", "ran", "reason")
HEADLINE = "headline"
TABLE_FILE = "robustness.csv"

# the decision of a test of a share of stereotypical wins against 50%
STEREOTYPICAL = "stereotypical"
ANTI_STEREOTYPICAL = "anti-stereotypical"
NO_PREFERENCE = "no preference detected"


def share_decision(significant: bool, favours: str) -> str:
    """The verdict of a share test in words: the side it favours when significant, else none detected
    (a borderline row is not significant, so it reads as none detected)."""
    if not significant or favours not in (STEREOTYPICAL, ANTI_STEREOTYPICAL):
        return NO_PREFERENCE
    return favours


def interval_decision(low: float, high: float, null: float = 0.5) -> str:
    """The verdict an interval alone gives: the side of ``null`` it lies on when it excludes it."""
    if pd.isna(low) or pd.isna(high):
        return NO_PREFERENCE
    if low > null:
        return STEREOTYPICAL
    if high < null:
        return ANTI_STEREOTYPICAL
    return NO_PREFERENCE


def ran_row(choice: str, variant: str, *, estimate: float, ci_low: float, ci_high: float, n: int, decision: str,
            reason: str = "", cell: str | None = None) -> dict[str, Any]:
    """A variant that was computed (``agrees`` is filled in by :func:`robustness_table`)."""
    row = {"choice": choice, "variant": variant, "estimate": estimate, "ci_low": ci_low, "ci_high": ci_high,
           "n": int(n), "decision": decision, "agrees": None, "ran": True, "reason": reason}
    return row if cell is None else {"cell": cell, **row}


def not_run_row(choice: str, variant: str, reason: str, *, cell: str | None = None) -> dict[str, Any]:
    """A variant this run did not compute, with why (another model pass, a model kind it does not apply to)."""
    row = {"choice": choice, "variant": variant, "estimate": None, "ci_low": None, "ci_high": None, "n": None,
           "decision": None, "agrees": None, "ran": False, "reason": reason}
    return row if cell is None else {"cell": cell, **row}


def robustness_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The rows with ``agrees`` set: for each variant that ran, whether its decision is its cell's
    headline decision (the headline row of the same ``cell``, or the one headline row without cells).
    Each cell's headline row must come first among that cell's rows."""
    table = pd.DataFrame(list(rows))
    cells = "cell" in table.columns
    columns = (["cell"] if cells else []) + list(COLUMNS)
    if table.empty:
        return pd.DataFrame(columns=columns)
    keys = table["cell"] if cells else pd.Series("", index=table.index)
    headline: dict[Any, str] = {}
    agrees = []
    for key, row in zip(keys, table.to_dict("records")):
        if row["variant"] == HEADLINE:
            if key in headline:
                raise ValueError(f"robustness table: two headline rows for cell {key!r}")
            headline[key] = row["decision"]
            agrees.append(True)
            continue
        if key not in headline:
            raise ValueError(f"robustness table: the headline row of cell {key!r} must come before its variants")
        agrees.append(bool(row["decision"] == headline[key]) if row["ran"] else None)
    table["agrees"] = pd.Series(agrees, index=table.index, dtype=object)
    return table[columns]


def robustness_block(table: pd.DataFrame, *, table_file: str = TABLE_FILE) -> dict[str, Any]:
    """The ``robustness`` block of ``summary.json``: the headline's decision, how many of the variants
    that ran agree with it, how many could not be run, and the table's file name.  With several cells
    the decision names each cell's, the counts are over all cells, and ``by_cell`` has each cell's own."""
    def counts(part: pd.DataFrame) -> dict[str, Any]:
        variants = part[part["variant"] != HEADLINE]
        ran = variants[variants["ran"].astype(bool)]
        head = part[part["variant"] == HEADLINE]
        return {"headline_decision": str(head["decision"].iloc[0]) if len(head) else None,
                "survives": int(ran["agrees"].astype(bool).sum()), "of": int(len(ran)),
                "not_run": int((~variants["ran"].astype(bool)).sum())}

    if table.empty:
        return {"headline_decision": None, "survives": 0, "of": 0, "not_run": 0, "table": table_file}
    if "cell" not in table.columns:
        return {**counts(table), "table": table_file}
    by_cell = {str(cell): counts(part) for cell, part in table.groupby("cell", sort=False)}
    decisions = "; ".join(f"{cell}: {block['headline_decision']}" for cell, block in by_cell.items())
    total = counts(table)
    return {"headline_decision": decisions, "survives": total["survives"], "of": total["of"],
            "not_run": total["not_run"], "table": table_file, "by_cell": by_cell}


def share_row(choice: str, variant: str, result: Any, reason: str = "", *, cell: str | None = None) -> dict[str, Any]:
    """A variant of a share test (a ``stats.bias.BiasScore`` or a mapping with its fields): the share of
    stereotypical wins among the untied pairs, its interval, ``n`` = the untied pairs, and its decision."""
    get = result.get if isinstance(result, Mapping) else lambda key: getattr(result, key)
    return ran_row(choice, variant, estimate=get("share_untied"), ci_low=get("ci_low"), ci_high=get("ci_high"),
                   n=int(get("n")) - int(get("ties")), decision=share_decision(bool(get("significant")), get("favours")),
                   reason=reason, cell=cell)


def second_pass_row(scores: pd.DataFrame, choice: str, variant: str, columns: tuple[str, str], *, ran_reason: str,
                    missing_reason: str, cell: str | None = None, alpha: float = 0.05,
                    reference_resamples: int | None = None) -> dict[str, Any]:
    """The share test on scores a second model pass stored beside the headline's (``columns``: stereotypical and
    anti-stereotypical), or a row not run with ``missing_reason`` where the run did not make that pass."""
    from stereolens.stats.bias import REFERENCE_RESAMPLES, bias_score

    if not set(columns) <= set(scores.columns) or scores[list(columns)].isna().any().any() or scores.empty:
        return not_run_row(choice, variant, missing_reason, cell=cell)
    result = bias_score(scores[columns[0]], scores[columns[1]], confidence=1 - alpha,
                        reference_resamples=reference_resamples or REFERENCE_RESAMPLES)
    return share_row(choice, variant, result, ran_reason, cell=cell)
