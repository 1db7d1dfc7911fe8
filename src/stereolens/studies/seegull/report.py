"""The seegull report: tables, a figure per locale, ``report.md`` and ``summary.json`` from an associations
table, the same for the ``seegull-report`` stage and ``stereolens seegull evaluate``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.io import write_csv, write_text
from stereolens.report.markdown import format_cell, format_estimate, markdown_table
from stereolens.studies.seegull.analysis import (ASSOCIATION_DEFINITION, AUC_DEFINITION, LIMITS, SPEARMAN_DEFINITION,
                                                 aligned_verdicts, cross_locale_table, locale_pairs, locale_table)

FIGURES = "figures"
_SUBSET_KEYS = ("auc", "auc_low", "auc_high", "spearman", "spearman_p", "spearman_low", "spearman_high",
                "n_stereotype", "n_not", "n_no_majority", "n_tuples", "n_identities")


def _locale_block(row: Mapping[str, Any]) -> dict[str, Any]:
    block = {k: row.get(k) for k in _SUBSET_KEYS}
    block["auc_ci"] = [row.get("auc_low"), row.get("auc_high")]
    block["spearman_ci"] = [row.get("spearman_low"), row.get("spearman_high")]
    return block


def by_locale(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``summary.json``'s ``by_locale``: per locale the AUC with its interval, Spearman, the counts, and the same
    for the offensive and not-offensive tuples."""
    out: dict[str, dict[str, Any]] = {}
    records = table.replace({np.nan: None}).to_dict("records")
    for row in records:
        if row["subset"] == "all":
            out[row["locale"]] = _locale_block(row)
    for row in records:
        if row["subset"] != "all":
            out[row["locale"]][row["subset"]] = _locale_block(row)
    return out


def cross_locale_block(cross: pd.DataFrame) -> list[dict[str, Any]]:
    """``summary.json``'s ``cross_locale``: per ordered pair the aligned count and each term's estimate, interval
    and p, or the reason there is no fit."""
    blocks = []
    for (locale, other), part in cross.groupby(["locale", "other_locale"], sort=False):
        first = part.iloc[0]
        block: dict[str, Any] = {"locale": locale, "other_locale": other, "n_aligned": int(first["n_aligned"]),
                                 "n_identities": int(first["n_identities"]), "note": first["note"] or None}
        for r in part.replace({np.nan: None}).to_dict("records"):
            if r["term"]:
                block[r["term"]] = {k: r[k] for k in ("estimate", "std_error", "ci_low", "ci_high", "p")}
        blocks.append(block)
    return blocks


def headline(locales: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The report site's headline: per locale the AUC and its interval, then Spearman."""
    figures: dict[str, Any] = {}
    for locale, block in locales.items():
        figures[f"AUC {locale}"] = block["auc"]
        figures[f"AUC {locale} low"] = block["auc_low"]
        figures[f"AUC {locale} high"] = block["auc_high"]
    for locale, block in locales.items():
        figures[f"Spearman {locale}"] = block["spearman"]
    return figures


def provenance(templates: pd.DataFrame, dataset: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the numbers rest on: the annotators' votes (human), the project's authored templates."""
    cited = dataset or {}
    notes = ["Human verdicts: SeeGULL Multilingual (Bhutani et al., ACL 2024), three annotators per tuple from "
             "the tuple's locale; licence " + str(cited.get("license") or "CC BY 4.0")
             + (f"; attribution: {cited['attribution']}" if cited.get("attribution") else "")
             + (f"; upstream commit {cited['upstream_commit']}" if cited.get("upstream_commit") else "") + ".",
             "Templates: authored by this project per language (data/seed/seegull/templates.csv), not reviewed by "
             "native speakers.",
             *LIMITS]
    return {"annotation_source": "human", "translation_status": "source",
            "source": {"authored": int(len(templates))}, "machine_generated": False, "notes": notes}


def locale_figure(rows: pd.DataFrame, block: Mapping[str, Any], stem: str | os.PathLike, *, model: str) -> list[Path]:
    """The association of every tuple of one locale against its stereotype votes (0-3 of 3), box and points,
    with the AUC and Spearman in the title."""
    from stereolens.figures import save_figure  # first: it puts matplotlib on the Agg backend

    import matplotlib.pyplot as plt

    locale = str(rows["locale"].iloc[0])
    n = int(rows["n_annotators"].max()) if len(rows) else 3
    groups = [rows.loc[rows["stereotype_votes"] == v, "association"].to_numpy(dtype=float) for v in range(n + 1)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.boxplot([g if len(g) else [np.nan] for g in groups], positions=list(range(n + 1)), widths=0.5,
               showfliers=False)
    rng = np.random.default_rng(0)  # jitter only: the points' horizontal spread carries no information
    for v, g in enumerate(groups):
        ax.scatter(v + rng.uniform(-0.18, 0.18, len(g)), g, s=8, alpha=0.45,
                   color="#c44e52" if 2 * v > n else "#4c72b0" if 2 * (n - v) > n else "#888888")
    ax.axhline(0, color="#555555", linewidth=0.8, linestyle=":")
    ax.set_xticks(list(range(n + 1)), [f"{v} of {n}\n(n={len(g)})" for v, g in enumerate(groups)])
    ax.set_xlabel("annotators who called the tuple a stereotype (3 per tuple)\n"
                  "red: stereotype majority, blue: not-stereotype majority, grey: no majority", fontsize=8)
    ax.set_ylabel("association (ILPS, nats)")
    auc_text = format_estimate(block.get("auc"), block.get("auc_low"), block.get("auc_high"))
    rho_text = format_estimate(block.get("spearman"), block.get("spearman_low"), block.get("spearman_high"))
    ax.set_title(f"{model}, {locale}: AUC {auc_text}, Spearman {rho_text}", fontsize=9)
    return save_figure(fig, stem)


def auc_figure(locales: Mapping[str, Mapping[str, Any]], stem: str | os.PathLike, *, model: str) -> list[Path]:
    """AUC per locale with its identity-bootstrap interval and the 0.5 line (no agreement with the verdicts)."""
    from stereolens.figures import save_figure  # first: it puts matplotlib on the Agg backend

    import matplotlib.pyplot as plt

    names = list(locales)
    fig, ax = plt.subplots(figsize=(6.4, 0.38 * len(names) + 1.6))
    for i, name in enumerate(names):
        block = locales[name]
        value = block.get("auc")
        if value is None:
            continue
        low, high = block.get("auc_low"), block.get("auc_high")
        if low is not None and high is not None:
            ax.plot([low, high], [i, i], color="#4c72b0", linewidth=2)
        ax.plot([value], [i], "o", color="#1d2330")
    ax.axvline(0.5, color="#c44e52", linestyle="--", linewidth=1, label="0.5: association ignores the verdict")
    ax.set_yticks(list(range(len(names))), [f"{n} ({locales[n]['n_stereotype']} vs {locales[n]['n_not']})"
                                            for n in names])
    ax.set_xlim(0, 1)
    ax.set_xlabel("AUC: stereotype-majority tuples above not-stereotype-majority tuples")
    ax.set_title(f"{model}: does the association follow the locale's verdicts? (3 annotators per tuple)", fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    return save_figure(fig, stem)


def report_markdown(summary: Mapping[str, Any], table: pd.DataFrame, cross: pd.DataFrame) -> str:
    """``report.md``: what was measured, the per-locale table, the cross-locale fits, the limits and the choices
    that are ours."""
    shown = table.assign(
        AUC=[format_estimate(v, lo, hi) for v, lo, hi in zip(table["auc"], table["auc_low"], table["auc_high"])],
        Spearman=[format_estimate(v, lo, hi) for v, lo, hi in
                  zip(table["spearman"], table["spearman_low"], table["spearman_high"])],
    )[["locale", "subset", "n_stereotype", "n_not", "n_no_majority", "n_identities", "AUC", "Spearman"]]
    lines = [f"# SeeGULL Multilingual: {summary['model']} against the locales' human verdicts", "",
             "**Limits.** " + " ".join(LIMITS), "",
             f"- {ASSOCIATION_DEFINITION} ({summary['method']['reduction']} of the attribute's token log-probabilities, "
             f"{summary['method']['aggregation']} over templates).",
             f"- {AUC_DEFINITION} ({summary['method']['resamples']} resamples, {summary['method']['confidence']:.0%}).",
             f"- {SPEARMAN_DEFINITION}.",
             f"- Offensive: `mean_offensive_score` above {format_cell(summary['method']['offensive_cut'])} on the "
             "dataset's scale (-1 not offensive, 0 unsure, 4 extremely offensive); tuples without a score are in "
             "neither subset.",
             f"- Tuples: {summary['sample']}.", "",
             "## Per locale", "", markdown_table(shown)]
    lines += ["## Cross-locale: association in A ~ A's stereotype vote share + B's", "",
              "Over A's tuples whose English translation (the dataset authors') matches tuples of B; OLS with standard "
              "errors clustered by identity. A positive *other locale's verdict* means that B's annotators' verdict "
              "predicts the model's association in A beyond A's own annotators' verdict.", ""]
    if cross.empty:
        lines.append("_(no pair configured)_")
    else:
        fits = cross.assign(estimate=[format_estimate(v, lo, hi) for v, lo, hi in
                                      zip(cross["estimate"], cross["ci_low"], cross["ci_high"])])
        lines.append(markdown_table(fits[["locale", "other_locale", "term", "estimate", "p", "n_aligned",
                                          "n_identities", "note"]]))
    lines += ["", "## What is ours, not the dataset's", "",
              "- The templates are authored by this project per language and not reviewed by native speakers; the "
              "identity and attribute are put in as the dataset writes them (no agreement in gender or number).",
              "- The verdict is the majority of the three votes (two of three); tuples without one (an unsure "
              "majority, or one vote each) enter the Spearman correlation but neither AUC class.",
              "- The interval resamples identities, not tuples: the tuples of one identity share its sentences.",
              "", f"Dataset: {summary['dataset'].get('attribution') or 'SeeGULL Multilingual (Bhutani et al., ACL 2024)'}; "
              f"licence {summary['dataset'].get('license') or 'CC BY 4.0'}"
              + (f"; upstream commit {summary['dataset']['upstream_commit']}" if summary["dataset"].get("upstream_commit")
                 else "") + "."]
    return "\n".join(lines) + "\n"


def evaluate(associations: pd.DataFrame, output: str | os.PathLike, *, model: str, verdicts: pd.DataFrame | None = None,
             pairs: Sequence[Sequence[str]] | None = None, resamples: int = 1000, confidence: float = 0.95, seed: int = 0,
             offensive_cut: float = 0.0, min_aligned: int = 10, method: Mapping[str, Any] | None = None,
             templates: pd.DataFrame | None = None, dataset: Mapping[str, Any] | None = None,
             sample: str = "every tuple of the file", skipped: str | None = None,
             locales: Sequence[str] | None = None) -> dict[str, Any]:
    """Every table, figure and the summary of one associations table under ``output`` (``associations`` already
    checked; ``verdicts``: the tuples the cross-locale partners' votes come from, the associations themselves when
    None; ``locales``: the run's locales, the file's when None).  Returns the summary (not yet written: the caller
    writes it with the report contract's check)."""
    output = Path(output)
    measured = list(dict.fromkeys(associations["locale"]))
    locales = list(locales) if locales is not None else measured  # the run's locales, measured or not (a skip)
    table = locale_table(associations, resamples=resamples, confidence=confidence, seed=seed,
                         offensive_cut=offensive_cut)
    pairs = locale_pairs(locales, pairs)
    aligned = aligned_verdicts(associations, associations if verdicts is None else verdicts, pairs)
    cross = cross_locale_table(aligned, pairs, confidence=confidence, min_aligned=min_aligned)
    blocks = by_locale(table) if len(table) else {}
    templates = templates if templates is not None else pd.DataFrame(columns=["template_id"])
    dataset = dict(dataset or {})
    summary: dict[str, Any] = {
        "model": model, "skipped": skipped, "locales": locales, "by_locale": blocks,
        "cross_locale": cross_locale_block(cross),
        "method": {"association": ASSOCIATION_DEFINITION, "auc": AUC_DEFINITION, "spearman": SPEARMAN_DEFINITION,
                   "resamples": resamples, "confidence": confidence, "seed": seed, "offensive_cut": offensive_cut,
                   "min_aligned": min_aligned, **dict(method or {"reduction": "as scored", "aggregation": "as scored"})},
        "sample": sample, "limits": list(LIMITS), "dataset": dataset,
        "headline": headline(blocks), "provenance": provenance(templates, dataset),
    }
    write_csv(output / "by_locale.csv", table)
    write_csv(output / "cross_locale.csv", cross)
    write_csv(output / "aligned.csv", aligned)
    write_csv(output / "templates.csv", templates)
    (output / FIGURES).mkdir(parents=True, exist_ok=True)  # a declared output, even for a skipped model
    for locale in measured:
        rows = associations[associations["locale"] == locale]
        locale_figure(rows, blocks[locale], output / FIGURES / f"association_{locale}", model=model)
    if blocks:
        auc_figure(blocks, output / FIGURES / "auc_by_locale", model=model)
    write_text(output / "report.md", report_markdown(summary, table, cross))
    return summary
