"""``stereolens pcs analyze``: the seed 004 analysis of any judged-score table, outside DVC.

    stereolens pcs analyze --scores scores.csv --output DIR [--min-gain-steps 0.25] [--rubrics rubrics.yaml] [--human prefs.csv]

Input columns: ``model,language,scenario_id,dimension,feature,condition,score``
(condition A, B or C); ``judge`` and ``sample`` columns, when present, are
averaged in that order; an ``invalid_reason`` column (as the collect stage writes
it: empty = valid) leaves the invalid responses out of every analysis.  Output: ``summary.json`` (pcs, cap_util, n_excluded,
by_dimension, ldi, hud), ``statistics.json`` (tests and counts), ``tables/*.csv``
(shaped like seed 004 Tables 1-2 and 8-17), ``figures/*.png|svg`` and ``report.md``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stereolens.studies.pcs import DEFAULT_MIN_GAIN_STEPS

if TYPE_CHECKING:  # the analysis (pandas, scipy) loads when a command runs, not when the parser is built
    import pandas as pd

    from stereolens.studies.pcs.analysis import PCSAnalysis

DEFAULT_RUBRICS = "data/seed/pcs/rubrics.yaml"


def report_contract(summary: Mapping[str, Any], configuration: Mapping[str, Any] | None, human_source: str | None,
                    gates: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report site's ``headline`` and ``provenance`` blocks (README, "The report")."""
    # "authored (machine-written translation, unreviewed): 12, source (English original): 6" -> counts per status
    status = str((configuration or {}).get("prompt translation status", ""))
    counts = {label: int(n) for label, n in re.findall(r"(\w+)(?: \([^)]*\))?: (\d+)", status)}
    return {
        "headline": {"PCS": summary.get("pcs"),
                     "capability utilisation": summary.get("cap_util") if summary.get("cap_util") is not None
                     else summary.get("cap_util_note") or None,
                     "excluded cells": summary.get("n_excluded"),
                     "judge gates": "passed" if (gates or {}).get("all_passed") else "FAILED" if gates else "not run"},
        "provenance": {"annotation_source": ", ".join(filter(None, ["llm_panel", human_source])),
                       "translation_status": counts, "machine_generated": False,
                       "notes": ["scores come from the configured judge panel (language models)"]
                       + ([f"human-validation preferences: {human_source}"] if human_source else [])},
    }


def write_analysis(
    scores: pd.DataFrame,
    output: str | os.PathLike,
    *,
    min_gain_steps: float = DEFAULT_MIN_GAIN_STEPS,
    hindi: str = "hi",
    urdu: str = "ur",
    human: pd.DataFrame | None = None,
    configuration: Mapping[str, Any] | None = None,
    gates: Mapping[str, Any] | None = None,
    validity: pd.DataFrame | None = None,
    waterfall_cell: Mapping[str, Any] | None = None,
) -> tuple[PCSAnalysis, list[Path]]:
    """Analyse ``scores`` and write summary, statistics, tables, figures and report under ``output``.

    ``human`` may carry a ``source`` column (human / simulated / llm_panel); the
    report says so in a visible line when the preferences are not human.
    """
    from stereolens.io import write_csv, write_json, write_text
    from stereolens.studies.pcs.analysis import analyze_scores
    from stereolens.studies.pcs.report import report_markdown, write_figures

    out = Path(output)
    human_source = human_sources(human)
    analysis = analyze_scores(scores, min_gain_steps=min_gain_steps, hindi=hindi, urdu=urdu, human=human)
    if human_source:
        analysis.statistics["human_validation_source"] = human_source
    files = [write_json(out / "summary.json", {**analysis.summary, **report_contract(analysis.summary, configuration,
                                                                                 human_source, gates)})]
    statistics = dict(analysis.statistics)
    if configuration:
        statistics["configuration"] = dict(configuration)
    if gates:
        statistics["gates"] = gates
    files.append(write_json(out / "statistics.json", statistics))
    for name, table in analysis.tables.items():
        files.append(write_csv(out / "tables" / f"{name}.csv", table))
    config = dict(configuration or {"config": "ad hoc (stereolens pcs analyze)", "min_gain_steps": min_gain_steps})
    note = "; ".join(f"{k}={v}" for k, v in config.items() if k in ("config", "responders", "judges"))
    if gates and not gates.get("all_passed", True):
        note += "; JUDGE GATES NOT PASSED"
    if human_source and human_source != "human":
        note += f"; human-validation preferences: {human_source}"
    figures = write_figures(analysis.tables, analysis.cells, out / "figures", note=note or None,
                            waterfall_cell=waterfall_cell)
    files += figures
    md = report_markdown(configuration=config, summary=analysis.summary, statistics=analysis.statistics, gates=gates,
                         tables=analysis.tables, validity=validity, human_source=human_source,
                         figures=[str(f.relative_to(out)) for f in figures if f.suffix == ".png"])
    files.append(write_text(out / "report.md", md))
    return analysis, files


def human_sources(human: pd.DataFrame | None) -> str | None:
    """The ``source`` of human-validation preferences ("human" when the table has no source column)."""
    if human is None or not len(human):
        return None
    if "source" not in human.columns:
        return "human"
    return ", ".join(sorted(human["source"].dropna().astype(str).unique())) or "human"


def rubric_features(path: str | os.PathLike | None) -> dict[str, list[str]] | None:
    """Dimension -> feature names from a rubrics file, or None when no file is given."""
    if not path:
        return None
    from stereolens.studies.pcs.scenarios import load_rubrics

    return {dim: [f.name for f in feats] for dim, feats in load_rubrics(path).items()}


def _analyze(args: argparse.Namespace) -> int:
    from stereolens.io import check_writable, read_csv_checked
    from stereolens.studies.pcs.analysis import REQUIRED_COLUMNS, validate_scores

    check_writable(Path(args.output) / "summary.json")
    scores = read_csv_checked(args.scores, REQUIRED_COLUMNS, what="judged scores", allow_empty=False)
    rubrics = args.rubrics if args.rubrics != DEFAULT_RUBRICS or Path(args.rubrics).exists() else None
    features = rubric_features(rubrics)
    what = f"judged scores {args.scores}"
    # refused before anything is written over an earlier analysis
    validate_scores(scores, what=what, features=features)
    human = None
    if args.human:
        human = read_csv_checked(args.human, ["language", "comparison", "preference"], what="human preferences")
    analysis, _ = write_analysis(scores, args.output, min_gain_steps=args.min_gain_steps, hindi=args.hindi, urdu=args.urdu,
                                 human=human)
    s = analysis.summary
    pcs = "n/a" if s["pcs"] is None else f"{s['pcs']:.3f}"
    cap = s["cap_util_note"] if s["cap_util"] is None else f"{s['cap_util']:.3f}"
    print(f"PCS {pcs}, capability utilisation {cap}, excluded {s['n_excluded']} "
          f"(minimum gain {args.min_gain_steps:g} scale steps) "
          f"-> {args.output}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from stereolens.cli_support import get_or_create_subparser

    sub = get_or_create_subparser(subparsers, "pcs", help="pragmatic context sensitivity (seed 004) tools")
    analyze = sub.add_parser("analyze", help="LDI, PCS, capability utilisation, HUD and tests from judged scores")
    analyze.add_argument("--scores", required=True, help="CSV: model,language,scenario_id,dimension,feature,condition,score[,judge,sample]")
    analyze.add_argument("--output", required=True, help="output directory")
    analyze.add_argument("--min-gain-steps", type=float, default=DEFAULT_MIN_GAIN_STEPS,
                         help="exclude scenario-features whose B - A is not above this many steps of the judges' "
                              f"scale (1 step = 1 point on 1-7; default {DEFAULT_MIN_GAIN_STEPS:g}, ours, as the "
                              "pipeline's stage); capability utilisation is undefined when mean B - mean A is not")
    analyze.add_argument("--rubrics", default=DEFAULT_RUBRICS,
                         help=f"rubrics YAML: features outside it are refused (default {DEFAULT_RUBRICS}, when present)")
    analyze.add_argument("--human", default=None, help="optional CSV of human preferences: language,comparison,preference")
    analyze.add_argument("--hindi", default="hi", help="language code treated as Hindi for HUD (default hi)")
    analyze.add_argument("--urdu", default="ur", help="language code treated as Urdu for HUD (default ur)")
    analyze.set_defaults(func=_analyze)
