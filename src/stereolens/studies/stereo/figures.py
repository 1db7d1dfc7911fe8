"""The stereo study's figures (PNG + SVG): the retrieval's saturation curve and each model's scores per country.
Apart from the report page's text (``report.py``), so that drawing a figure imports no statistics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from stereolens.figures import save_figure


def saturation_figure(curve: pd.DataFrame, stem: Path) -> None:
    """Cumulative new stereotypes per round (new to that point of view), one line per country x category x point of view."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (c, k, v), part in curve.groupby(["country", "category", "pov"], sort=True):
        ax.plot(part["round"], part["cumulative"], marker="o", label=f"{c} / {k} / {v}")
    ax.set_xlabel("round")
    ax.set_ylabel("new to its point of view (cumulative, after merging)")
    ax.set_title("Retrieval saturation (generator output: machine)")
    if len(curve):
        ax.set_xticks(range(1, int(curve["round"].max()) + 1))
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
    save_figure(fig, stem)


def evaluation_figure(by_country: pd.DataFrame, stem: Path, *, title: str) -> None:
    """ss, lms and icat per country with their bootstrap intervals; ss = 50 is no preference."""
    import matplotlib.pyplot as plt
    import numpy as np

    data = by_country.reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = np.arange(len(data))
    for j, name in enumerate(("ss", "lms", "icat")):
        err = [data[name] - data[f"{name}_ci_low"], data[f"{name}_ci_high"] - data[name]] if f"{name}_ci_low" in data else None
        ax.bar(x + (j - 1) * 0.27, data[name], width=0.27, yerr=err, capsize=2, label=name)
    ax.axhline(50, color="#c44e52", linestyle="--", linewidth=1)
    ax.set_xticks(x, data["country"].astype(str))
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8)
    save_figure(fig, stem)
