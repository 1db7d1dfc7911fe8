"""Figure for pairwise bias scores by group."""

from __future__ import annotations

import os

import pandas as pd

from stereolens.report.figures import plt, save_figure


def bias_bar_figure(table: pd.DataFrame, stem: str | os.PathLike, *, title: str) -> None:
    """Horizontal bars of bias score per group with CI whiskers and the 50% no-bias line."""
    data = table.sort_values("bias_score")
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(data) + 1.5))
    y = range(len(data))
    err = [data["bias_score"] - data["ci_low"], data["ci_high"] - data["bias_score"]]
    colors = ["#444444" if g == "all" else "#4c72b0" for g in data["group"]]
    ax.barh(list(y), data["bias_score"] * 100, xerr=[e * 100 for e in err], color=colors, capsize=3)
    ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1, label="no preference (50%)")
    ax.set_yticks(list(y), [f"{g} (n={n})" for g, n in zip(data["group"], data["n"])])
    ax.set_xlabel("bias score: % pairs where the stereotypical sentence is more likely")
    ax.set_xlim(0, 100)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, stem)
