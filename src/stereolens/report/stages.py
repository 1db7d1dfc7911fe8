"""The last pipeline stage: the static report site."""

from __future__ import annotations

import argparse
from pathlib import Path

from stereolens.stages.common import load_params
from stereolens.stages.registry import stage


@stage("report")
def report(args: argparse.Namespace) -> None:
    """reports/index.html and one page per study from what the studies wrote under reports/."""
    from stereolens.report.site import build_site

    from stereolens.report.contract import model_folders

    p = load_params("model", "models", "study", path=args.params)
    studies = sorted(p["study"])
    pages = build_site(studies, {"model": p["model"], "models": p["models"], "study": p["study"]})
    present = sum(1 for s in studies if Path("reports", s, "summary.json").is_file() or model_folders(s, list(p["models"])))
    print(f"report: {len(pages)} page(s), {present} of {len(studies)} studies reported -> reports/index.html")
