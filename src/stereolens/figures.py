"""Figure helpers shared by every study: PNG + SVG written atomically, and the bias bar chart."""

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
    """Horizontal bars of the tested share per group (``share_untied``: stereotypical wins among the
    untied pairs, the share the interval, the star and the p are of) with its CI whiskers and the 50%
    no-preference line; each label gives the group's pairs and ties.  Without ties the share is the bias score."""
    data = table.sort_values("share_untied")
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(data) + 1.5))
    y = range(len(data))
    err = [data["share_untied"] - data["ci_low"], data["ci_high"] - data["share_untied"]]
    colors = ["#444444" if g == "all" else "#4c72b0" for g in data["group"]]
    ax.barh(list(y), data["share_untied"] * 100, xerr=[e * 100 for e in err], color=colors, capsize=3)
    ax.axvline(50, color="#c44e52", linestyle="--", linewidth=1, label="no preference (50%)")
    ax.set_yticks(list(y), [f"{g} (n={n}, ties={t})" for g, n, t in zip(data["group"], data["n"], data["ties"])])
    ax.set_xlabel("% of untied pairs where the stereotypical sentence is more likely (95% BCa)")
    ax.set_xlim(0, 100)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, stem)
