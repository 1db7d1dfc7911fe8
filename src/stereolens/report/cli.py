"""``stereolens profile``: every model across every study, from the summaries under ``reports/``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

_DESCRIPTION = """\
One row per model, a column group per study (crows, leakage, pairs, stereo, pcs, heads),
read from reports/<study>/<model_id>/summary.json, or reports/<study>/summary.json where a
study has no per-model folders.  The terminal shows a block per study, a row per model and
a column per measure (cut to 100 columns); every cell shows its value and interval, and a
cell without a value shows n/a [k], note k under the block saying why (study not run,
skipped for this model, undefined for this run).  The CSV (--csv) has one row per model:
a column <study>.<measure> per cell holding the number in the study's own scale (shares
0-1; stereo's ss and lms in percent), its interval, verdict and reason in columns
<study>.<measure>.low / .high / .verdict / .reason, and the provenance (human, authored,
simulated, llm_panel, machine, authored translation) and study page (relative to the
reports folder) in <study>.provenance and <study>.link."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("profile", help="every model across every study, one table (terminal or CSV)",
                                   description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", default="reports", help="the reports folder the studies wrote (default: reports)")
    parser.add_argument("--csv", metavar="FILE", default=None,
                        help="also write the profile as CSV: one row per model, a column <study>.<measure> per cell "
                             "(numbers kept as numbers) with its interval, verdict, reason, provenance and link "
                             "in columns of their own")
    parser.add_argument("--params", default=None,
                        help="composed parameters naming the run's models, primary first (default: params.yaml where "
                             "there is one, else the models are the ones found under --reports; a file named here "
                             "must exist)")
    parser.add_argument("--model", action="append", default=[],
                        help="a model id to show even where no study measured it (repeatable; listed first)")
    parser.set_defaults(func=_profile)


def run_models(params_path: str | Path | None) -> tuple[list[str], str | None]:
    """The models a composed params file names (``models``, primary first, else ``model``) and its primary.
    ``None`` reads ``params.yaml`` where there is one (none: no models named); a file named on purpose must
    exist.  A file that is not YAML is refused in one line naming its line and column."""
    from stereolens.errors import ConfigError
    from stereolens.stages.common import read_params_file

    path = Path(params_path or "params.yaml")
    if params_path is not None and not path.is_file():
        what = "a folder, not a params file" if path.is_dir() else "not found"
        raise ConfigError(f"--params {params_path}: {what} (compose one with `stereolens config compose`, or leave "
                          "--params out to use the models found under --reports)")
    params: dict[str, Any] = read_params_file(path) if path.is_file() else {}
    primary = (params.get("model") or {}).get("id") if isinstance(params.get("model"), dict) else None
    models = list(params["models"]) if isinstance(params.get("models"), dict) else []
    return list(dict.fromkeys([*([primary] if primary else []), *models])), primary


def _profile(args: argparse.Namespace) -> int:
    from stereolens.errors import DataError
    from stereolens.io import write_csv
    from stereolens.report.contract import stale_line, stale_pages
    from stereolens.report.identity import run_identity
    from stereolens.report.profile import build_profile, profile_frame, profile_text

    if not Path(args.reports).is_dir():
        raise DataError(f"--reports {args.reports}: no such folder (run the pipeline, or point at a reports folder)")
    models, primary = run_models(args.params)
    profile = build_profile(args.reports, models=[*args.model, *models], default_model=primary)
    print(profile_text(profile))
    # the workspace the summaries lie in, as the report pages name their run: the two lines agree while no
    # stage the report reads has run again since
    print(f"\nrun: {run_identity(Path(args.reports).resolve().parent).source_words()}")
    stale = stale_pages(args.reports)
    if stale:  # the summaries above are newer than what reports/index.html shows
        print(stale_line(args.reports, stale))
    if args.csv:
        write_csv(args.csv, profile_frame(profile))
        print(f"profile: {len(profile.models)} model(s) x {len(profile.columns())} cell(s) -> {args.csv}")
    return 0
