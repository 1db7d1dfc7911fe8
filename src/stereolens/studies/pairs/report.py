"""Tables, figures, ``summary.json`` and ``report.md`` of a pairs analysis."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stereolens.figures import save_figure
from stereolens.io import write_csv, write_json, write_text
from stereolens.studies.pairs.analysis import ALL, PairsAnalysis, cell_mark


def write_outputs(
    analysis: PairsAnalysis,
    output: str | os.PathLike,
    *,
    title: str = "pairs",
    provenance: Mapping[str, Any] | None = None,
    fragmentation: pd.DataFrame | None = None,
    fragmentation_stats: Mapping[str, Any] | None = None,
) -> list[Path]:
    """``summary.json``, ``tables/*.csv``, ``figures/*.png|svg`` and ``report.md`` under ``output``."""
    import matplotlib.pyplot as plt

    out = Path(output)
    summary = dict(analysis.summary)
    if provenance:
        summary["provenance"] = dict(provenance)
    if fragmentation is not None and not fragmentation.empty:
        summary["fragmentation"] = fragmentation.to_dict("records")
        summary["fragmentation_correlations"] = dict(fragmentation_stats or {})
    files = [write_json(out / "summary.json", summary)]
    for name, table in analysis.tables.items():
        files.append(write_csv(out / "tables" / f"{name}.csv", table))
    if fragmentation is not None and not fragmentation.empty:
        files.append(write_csv(out / "tables" / "fragmentation.csv", fragmentation))

    cells = analysis.cells
    for (model, language), part in cells.groupby(["model", "language"], sort=True):
        data = part.sort_values("bias_score")
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(data) + 1.5))
        y = np.arange(len(data))
        err = np.vstack([data["bias_score"] - data["ci_low"], data["ci_high"] - data["bias_score"]]) * 100
        colors = ["#444444" if d == ALL else ("#dd8452" if deg else "#4c72b0")
                  for d, deg in zip(data["dimension"], data["degenerate"])]
        ax.barh(y, data["bias_score"] * 100, xerr=np.clip(err, 0, None), color=colors, capsize=3)
        ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1, label="chance (50%)")
        labels = [f"{r['dimension']}{cell_mark(r)} (n={r['n']}, ties={r['ties']}"
                  f"{', degenerate' if r['degenerate'] else ''}{', borderline' if r['borderline'] else ''})"
                  for r in data.to_dict("records")]
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 100)
        ax.set_xlabel("bias score: % pairs with the stereotypical sentence more likely (95% BCa)")
        ax.set_title(f"{title}: {model}, {language}")
        ax.legend(loc="lower right", fontsize=8)
        files += save_figure(fig, out / "figures" / f"bias_by_dimension_{_slug(model)}_{_slug(language)}")

    classes = analysis.tables.get("hyperlocal_vs_pan_regional")
    if classes is not None and not classes.empty:
        fig, ax = plt.subplots(figsize=(7, 0.5 * len(classes) + 1.5))
        labels = [f"{m} / {lang}" for m, lang in zip(classes["model"], classes["language"])]
        y = np.arange(len(classes))
        ax.barh(y - 0.2, classes["bias_hyperlocal"] * 100, height=0.4, label="hyperlocal", color="#55a868")
        ax.barh(y + 0.2, classes["bias_pan_regional"] * 100, height=0.4, label="pan-regional", color="#8172b2")
        ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1)
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 100)
        ax.set_xlabel("bias score (%)")
        ax.set_title(f"{title}: hyperlocal vs pan-regional groups (seed 002 Figure 2)")
        ax.legend(fontsize=8)
        files += save_figure(fig, out / "figures" / "hyperlocal_vs_pan_regional")

    if fragmentation is not None and not fragmentation.empty:
        merged = fragmentation.merge(cells[cells["dimension"] == ALL][["model", "language", "bias_score"]],
                                     on=["model", "language"], how="inner")
        if not merged.empty:
            fig, ax = plt.subplots(figsize=(6, 4.5))
            for language, part in merged.groupby("language", sort=True):
                ax.scatter(part["mean_tokens_per_term"], part["bias_score"] * 100, label=language)
                for _, r in part.iterrows():
                    ax.annotate(str(r["model"]) + (" (lossy)" if r["lossy"] else ""),
                                (r["mean_tokens_per_term"], r["bias_score"] * 100), fontsize=7)
            ax.axhline(50, color="#c44e52", linestyle="--", linewidth=1)
            ax.set_xlabel("mean sub-word tokens per identity term")
            ax.set_ylabel("bias score (%)")
            ax.set_title(f"{title}: fragmentation vs bias (seed 002 Figure 3)")
            ax.legend(fontsize=8)
            files += save_figure(fig, out / "figures" / "fragmentation_vs_bias")

    files.append(write_text(out / "report.md", report_markdown(analysis, title=title, provenance=provenance,
                                                               fragmentation=fragmentation)))
    return files


def _slug(text: Any) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))


def report_markdown(analysis: PairsAnalysis, *, title: str, provenance: Mapping[str, Any] | None = None,
                    fragmentation: pd.DataFrame | None = None) -> str:
    lines = [f"# {title}", ""]
    for key, value in (provenance or {}).items():
        lines.append(f"- **{key}**: {value}")
    if provenance:
        lines.append("")
    lines += ["Bias score: % pairs whose stereotypical sentence scores strictly higher (ties are not "
              "stereotypical). " + analysis.summary.get("star", ""), ""]
    if "corrections" in analysis.summary:
        lines += [analysis.summary["corrections"] + " Tables 5/6 list each model's `ties`, `p_holm` and `p_bh` "
                  "beside its score; the star stays the paper's rule, uncorrected.", ""]
    for name, table in analysis.tables.items():
        if name == "bias_cells" or table.empty:
            continue
        lines += [f"## {name}", "", _markdown_table(table), ""]
    if fragmentation is not None and not fragmentation.empty:
        lines += ["## tokenisation fragmentation", "", _markdown_table(fragmentation.drop(columns=["lossy_examples"],
                                                                                          errors="ignore")), ""]
    return "\n".join(lines) + "\n"


def _markdown_table(table: pd.DataFrame) -> str:
    cols = [str(c) for c in table.columns]
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for rec in table.itertuples(index=False):
        rows.append("| " + " | ".join(_fmt(v) for v in rec) + " |")
    return "\n".join(rows)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.3f}".rstrip("0").rstrip(".")
    return str(v)
