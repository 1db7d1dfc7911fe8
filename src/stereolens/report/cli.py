"""``stereolens profile``: every model across every study, from the summaries under ``reports/``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

_DESCRIPTION = """\
One row per model, a column group per study (crows, leakage, pairs, stereo, pcs, heads),
read from reports/<study>/<model_id>/summary.json, or reports/<study>/summary.json where a
study has no per-model folders.  Every cell shows its value and interval; the CSV adds its
provenance (human, authored, simulated, llm_panel, machine, authored translation), the
study page it links to (relative to the reports folder) and, for a cell without a value,
why (study not run, skipped for this model, undefined for this run)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("profile", help="every model across every study, one table (terminal or CSV)",
                                   description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", default="reports", help="the reports folder the studies wrote (default: reports)")
    parser.add_argument("--csv", metavar="FILE", default=None,
                        help="also write the profile as CSV, one row per model and cell, numbers kept as numbers")
    parser.add_argument("--params", default="params.yaml",
                        help="composed parameters naming the run's models, primary first (default: params.yaml; "
                             "optional: without it the models are the ones found under --reports)")
    parser.add_argument("--model", action="append", default=[],
                        help="a model id to show even where no study measured it (repeatable; listed first)")
    parser.set_defaults(func=_profile)


def run_models(params_path: str | Path) -> tuple[list[str], str | None]:
    """The models a composed params.yaml names (``models``, primary first, else ``model``) and its primary."""
    import yaml

    path = Path(params_path)
    params: dict[str, Any] = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
    primary = (params.get("model") or {}).get("id") if isinstance(params.get("model"), dict) else None
    models = list(params["models"]) if isinstance(params.get("models"), dict) else []
    return list(dict.fromkeys([*([primary] if primary else []), *models])), primary


def _profile(args: argparse.Namespace) -> int:
    from stereolens.errors import DataError
    from stereolens.io import write_csv
    from stereolens.report.profile import build_profile, profile_frame, profile_text

    if not Path(args.reports).is_dir():
        raise DataError(f"--reports {args.reports}: no such folder (run the pipeline, or point at a reports folder)")
    models, primary = run_models(args.params)
    profile = build_profile(args.reports, models=[*args.model, *models], default_model=primary)
    print(profile_text(profile))
    if args.csv:
        write_csv(args.csv, profile_frame(profile))
        print(f"profile: {len(profile.models)} model(s) x {len(profile.columns())} cell(s) -> {args.csv}")
    return 0
