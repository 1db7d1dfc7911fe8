"""Figure helpers shared by every study: PNG + SVG written atomically, and the bias-score bar chart."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")  # no display on CI or servers
# fixed SVG element ids: without a salt matplotlib draws random ones, and every rerun changes the file
matplotlib.rcParams["svg.hashsalt"] = "stereolens"

import matplotlib.pyplot as plt  # noqa: E402

from stereolens.io import atomic_path  # noqa: E402


def save_figure(fig, stem: str | os.PathLike, *, dpi: int = 150) -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.svg`` and close the figure."""
    stem = Path(stem)
    written = []
    for ext in ("png", "svg"):
        dest = stem.with_name(f"{stem.name}.{ext}")
        with atomic_path(dest) as tmp:
            # matplotlib picks the format from the suffix, which the temp name lacks
            fig.savefig(tmp, format=ext, dpi=dpi, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
        written.append(dest)
    plt.close(fig)
    return written


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
