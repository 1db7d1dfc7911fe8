"""Save figures as PNG + SVG, atomically."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on CI or servers

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
