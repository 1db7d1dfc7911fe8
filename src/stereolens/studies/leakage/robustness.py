"""Does the leakage verdict survive each defensible analysis choice?

The headline of the study is its **edge set**: the (panel, source -> target) terms with alpha > 0 and p < alpha
in the converged fits of the configured analysis.  Each choice the paper leaves open, or the project exposes as
an option, is changed one at a time and the edge set recomputed from the same stored scores (no model pass):

* missing human cells (the published 999 code): zero-filled against dropped (``fit.missing``);
* the minimum-annotator rule: thin groups (rated by fewer than ``min_annotators_per_group``) kept with their
  values against dropped, i.e. the paper's stated minimum applied (``fit.thin_groups``);
* the choice task's two orders against one (each order alone, re-aggregated from the stored per-query
  probabilities; only where the choice task ran in both orders);
* converged fits only against every fit;
* the paper's uncorrected rule against Holm and Benjamini-Hochberg over the family of leakage tests;
* MixedLM's model-based standard error against the clustered one (groups resampled).

A variant *agrees* when its edge set is the headline's, edge for edge (ours: a set-valued verdict has no
single estimate, so ``estimate`` is the number of edges, ``n`` the number of leakage tests behind them and the
interval columns are empty).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from stereolens.errors import DataError

ROBUSTNESS_COLUMNS = ["choice", "variant", "estimate", "ci_low", "ci_high", "n", "decision", "agrees", "ran", "reason"]
HEADLINE = "headline"
MISSING_CHOICE = "missing human cells"
THIN_CHOICE = "minimum annotators per group"
ORDER_CHOICE = "choice task orders"
ORDERS = {"first": "first-listed order only", "second": "second-listed order only"}


# --------------------------------------------------------------------------- variant fits (the fit stage)


@dataclass
class VariantFit:
    """One changed choice for one (model, method, target) fit: the fit, or why it was not run."""

    choice: str
    variant: str
    slug: str  # the folder under the fit's variants/
    fit: Any = None  # LeakageFit, or None when not run
    reason: str = ""

    @property
    def ran(self) -> bool:
        return self.fit is not None


def thin_variant_name(rule: str) -> str:
    return "thin groups dropped (the paper's minimum applied)" if rule == "drop" else "thin groups kept with their values"


def one_order_matrix(per_query: pd.DataFrame, order: str, like: pd.DataFrame) -> pd.DataFrame | None:
    """The choice matrix a one-order run would have given: each pair's ``first`` (or ``second``) listing within
    its group and language, re-aggregated as :func:`~stereolens.studies.leakage.choice.choice_group_trait_scores`
    does, in ``like``'s rows and columns; None when no pair was asked in both orders."""
    from stereolens.studies.leakage.choice import choice_group_trait_scores
    from stereolens.studies.leakage.choice_order import QUERY_KEYS, query_shares
    from stereolens.studies.leakage.items import to_matrix

    if order not in ORDERS:
        raise DataError(f"choice order must be one of {', '.join(ORDERS)}, got {order!r}")
    shares = query_shares(per_query).reset_index(drop=True)
    pair = shares[["trait1", "trait2"]].apply(lambda r: "\x1f".join(sorted((str(r.iloc[0]), str(r.iloc[1])))), axis=1)
    # queries are stored in the order they were asked: a pair's first listing comes first in its group
    rank = shares.assign(pair=pair).groupby(["language", "group", "pair"], sort=False).cumcount()
    twice = shares.assign(pair=pair).groupby(["language", "group", "pair"], sort=False)["trait1"].transform("size") == 2
    if not twice.any():
        return None
    kept = shares[twice & (rank == (0 if order == "first" else 1))][[*QUERY_KEYS, "p_trait1", "p_trait2"]]
    scores = choice_group_trait_scores(kept)
    return to_matrix(scores, list(like.index), list(like.columns))


def variant_fits(
    target: pd.DataFrame, human: Mapping[str, pd.DataFrame], language: str, *, configured: Any,
    baseline: pd.DataFrame | None, scale: str, missing: str, alpha: float, thin: Mapping[str, Sequence[str]] | None,
    thin_rule: str, method: str, per_query: pd.DataFrame | None,
) -> list[VariantFit]:
    """The fits of the choices changed one at a time (besides the missing-cell treatment, which
    :func:`~stereolens.studies.leakage.fit.fit_missing_treatments` fits), each under the configured
    missing-cell treatment; ``configured`` is the configured fit (its thin-row count says whether the thin rule
    can change anything)."""
    from stereolens.studies.leakage.fit import THIN_RULES, fit_leakage

    def refit(matrix: pd.DataFrame, rule: str) -> Any:
        return fit_leakage(matrix, human, language, baseline=baseline, scale=scale, missing=missing, alpha=alpha,
                           thin=thin, thin_rule=rule)

    other_rule = next(r for r in THIN_RULES if r != thin_rule)
    thin_variant = VariantFit(THIN_CHOICE, thin_variant_name(other_rule), f"thin_{other_rule}")
    if configured.cell_counts.get("n_thin", 0):
        thin_variant.fit = refit(target, other_rule)
    else:
        thin_variant.reason = "no group of the fitted languages is rated by fewer annotators than the minimum"
    out = [thin_variant]
    if method == "choice":
        for order, name in ORDERS.items():
            variant = VariantFit(ORDER_CHOICE, name, f"choice_{order}_order")
            matrix = one_order_matrix(per_query, order, target) if per_query is not None else None
            if matrix is None:
                variant.reason = ("the choice task was asked in one order only (choice.both_orders: false)"
                                  if per_query is not None else "no per-query choice table stored")
            else:
                variant.fit = refit(matrix, thin_rule)
            out.append(variant)
    return out


# --------------------------------------------------------------------------- the table (the report stage)


@dataclass
class FitVariants:
    """Every fit's coefficient tables under each variant, as the report stage collected them: ``configured``
    and ``alternative`` (the other missing-cell treatment) stack every fit (columns panel, target, term,
    estimate, p, converged, ...); ``changed`` maps (choice, variant) to the per-fit tables of the fits it
    changed, ``not_run`` to the reasons of the fits it could not change."""

    configured: pd.DataFrame
    alternative: pd.DataFrame | None = None
    alternative_name: str = ""
    changed: dict[tuple[str, str], list[pd.DataFrame]] = field(default_factory=dict)
    not_run: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    choice_panels: bool = False  # some panel ran the choice task


def _edge_keys(coefficients: pd.DataFrame, *, alpha: float, p_col: str = "p", converged_only: bool = True) -> set[str]:
    """"panel SRC->TGT" of every non-target human term with estimate > 0 and ``p_col`` < alpha."""
    from stereolens.studies.leakage.fit import non_target_family

    if coefficients is None or coefficients.empty:
        return set()
    family = non_target_family(coefficients)
    keep = (family["estimate"] > 0) & (family[p_col] < alpha)
    if converged_only:
        keep &= family["converged"].astype(bool)
    return {f"{r.panel} {str(r.term)[2:]}->{r.target}" for r in family[keep].itertuples()}


def _tests(coefficients: pd.DataFrame, *, converged_only: bool = True) -> int:
    from stereolens.studies.leakage.fit import non_target_family

    family = non_target_family(coefficients)
    return int(family["converged"].astype(bool).sum()) if converged_only else len(family)


def _replace_fits(configured: pd.DataFrame, tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The configured fits with the (panel, target) fits in ``tables`` swapped for those."""
    if not tables:
        return configured
    changed = pd.concat(tables, ignore_index=True)
    swapped = set(zip(changed["panel"], changed["target"]))
    keep = [(p, t) not in swapped for p, t in zip(configured["panel"], configured["target"])]
    return pd.concat([configured[keep], changed], ignore_index=True)


def describe_edges(edges: set[str], headline: set[str] | None = None) -> str:
    """The decision in words: the edges, and against the headline what was lost and what is new."""
    text = "no edge" if not edges else f"{len(edges)} edge{'s' if len(edges) != 1 else ''}: {', '.join(sorted(edges))}"
    if headline is not None and edges != headline:
        lost, new = sorted(headline - edges), sorted(edges - headline)
        text += " (" + "; ".join(part for part in (f"lost {', '.join(lost)}" if lost else "",
                                                    f"new {', '.join(new)}" if new else "") if part) + ")"
    return text


def robustness_table(variants: FitVariants, *, alpha: float = 0.05) -> pd.DataFrame:
    """One row per choice (``ROBUSTNESS_COLUMNS``), the headline first."""
    configured = variants.configured
    headline = _edge_keys(configured, alpha=alpha)
    rows = [_row(HEADLINE, HEADLINE, headline, None, _tests(configured))]

    if variants.alternative is not None:
        rows.append(_row(MISSING_CHOICE, variants.alternative_name, _edge_keys(variants.alternative, alpha=alpha),
                         headline, _tests(variants.alternative)))
    for (choice, name), tables in variants.changed.items():
        reasons = variants.not_run.get((choice, name), [])
        if not tables:
            rows.append(_not_run(choice, name, "; ".join(dict.fromkeys(reasons)) or "not run"))
            continue
        table = _replace_fits(configured, tables)
        rows.append(_row(choice, name, _edge_keys(table, alpha=alpha), headline, _tests(table)))
    if not variants.choice_panels:
        for name in ORDERS.values():
            rows.append(_not_run(ORDER_CHOICE, name, "the choice task does not run in this configuration "
                                 "(study/leakage=paper runs it, in both orders, for causal models)"))
    rows.append(_row("converged fits only", "every fit, converged or not",
                     _edge_keys(configured, alpha=alpha, converged_only=False), headline,
                     _tests(configured, converged_only=False)))
    if {"p_holm", "p_bh"} <= set(configured.columns):
        for col, name in (("p_holm", "Holm over the family of leakage tests"),
                          ("p_bh", "Benjamini-Hochberg over the family of leakage tests")):
            rows.append(_row("multiple comparisons (paper: uncorrected p)", name,
                             _edge_keys(configured, alpha=alpha, p_col=col), headline, _tests(configured)))
    if "p_cluster" in configured.columns:
        rows.append(_row("standard error (paper: MixedLM's model-based)", "clustered by group (bootstrap)",
                         _edge_keys(configured, alpha=alpha, p_col="p_cluster"), headline, _tests(configured)))
    table = pd.DataFrame(rows, columns=ROBUSTNESS_COLUMNS)
    # counts stay whole numbers in the CSV (empty where the variant was not run)
    return table.astype({"estimate": "Int64", "n": "Int64"})


def _row(choice: str, variant: str, edges: set[str], headline: set[str] | None, n_tests: int) -> dict[str, Any]:
    return {"choice": choice, "variant": variant, "estimate": len(edges), "ci_low": math.nan, "ci_high": math.nan,
            "n": n_tests, "decision": describe_edges(edges, headline),
            "agrees": True if headline is None else edges == headline, "ran": True, "reason": ""}


def _not_run(choice: str, variant: str, reason: str) -> dict[str, Any]:
    return {"choice": choice, "variant": variant, "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
            "n": math.nan, "decision": "", "agrees": math.nan, "ran": False, "reason": reason}


def robustness_summary(table: pd.DataFrame, *, file: str = "robustness.csv") -> dict[str, Any]:
    """The ``robustness`` block of summary.json: the headline's decision and how many variants that ran agree
    with it (the headline's own row is not counted)."""
    others = table[table["variant"] != HEADLINE]
    ran = others[others["ran"].astype(bool)]
    return {"headline_decision": str(table.iloc[0]["decision"]),
            "survives": int(ran["agrees"].astype(bool).sum()), "of": len(ran),
            "not_run": int((~others["ran"].astype(bool)).sum()), "table": file}
