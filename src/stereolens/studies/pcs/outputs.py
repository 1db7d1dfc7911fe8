"""The files of one pcs analysis: ``summary.json`` (with the report site's headline and provenance
blocks, the robustness block and, from the stage, the paired comparisons with the run's other models),
``statistics.json``, ``tables/*.csv``, ``robustness.csv``, ``figures/`` and ``report.md``.  The pipeline's
``pcs-analyze`` stage and ``stereolens pcs analyze`` both write through :func:`write_analysis`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.io import finite_json, write_csv, write_json, write_text
from stereolens.stages.kit import write_study_summary
from stereolens.studies.pcs import DEFAULT_MIN_GAIN_STEPS, SENSITIVITY_GAIN_STEPS
from stereolens.studies.pcs.analysis import PCSAnalysis, analyze_scores
from stereolens.studies.pcs.report import report_markdown, write_figures
from stereolens.studies.pcs.robustness import robustness_block, robustness_table

ROBUSTNESS_FILE = "robustness.csv"


def report_contract(summary: Mapping[str, Any], configuration: Mapping[str, Any] | None, human_source: str | None,
                    gates: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report site's ``headline`` and ``provenance`` blocks (docs/report.md)."""
    # "authored (machine-written translation, unreviewed): 12, source (English original): 6" -> counts per status
    status = str((configuration or {}).get("prompt translation status", ""))
    counts = {label: int(n) for label, n in re.findall(r"(\w+)(?: \([^)]*\))?: (\d+)", status)}
    hindi_urdu = summary.get("hindi_urdu") or {}
    robustness = summary.get("robustness") or {}
    return {
        # PCS and capability utilisation are ratios (shares of a gain that can be negative or above 1): plain numbers
        "headline": {"PCS": summary.get("pcs") if summary.get("pcs") is not None else summary.get("pcs_note") or None,
                     "PCS decision (95% interval resampling scenarios)": summary.get("pcs_decision"),
                     "capability utilisation": summary.get("cap_util") if summary.get("cap_util") is not None
                     else summary.get("cap_util_note") or None,
                     "excluded cells": summary.get("n_excluded"),
                     "judge gates": "passed" if (gates or {}).get("all_passed") else "FAILED" if gates else "not run",
                     # both Hindi-Urdu p-values, the one the headline rests on named (summary.json hindi_urdu)
                     "Hindi-Urdu p (headline: the paper's response-level t-test)":
                         _p_or_why(hindi_urdu.get("response_level")),
                     "Hindi-Urdu p (matched scenarios, paired t-test)": _p_or_why(hindi_urdu.get("scenario_level")),
                     "robustness": (f"survives {robustness['survives']} of {robustness['of']} analysis choices"
                                    f" ({robustness['not_run']} not run; {ROBUSTNESS_FILE})") if robustness else None},
        "provenance": {"annotation_source": ", ".join(filter(None, ["llm_panel", human_source])),
                       "translation_status": counts, "machine_generated": False,
                       "notes": ["scores come from the configured judge panel (language models)"]
                       + ([f"human-validation preferences: {human_source}"] if human_source else [])},
    }


def _p_or_why(test: Mapping[str, Any] | None) -> float | str | None:
    """A test's p, or why it was not computed (the headline says why a figure is missing)."""
    test = test or {}
    return test.get("p") if test.get("p") is not None else test.get("note") or None


def write_analysis(
    scores: pd.DataFrame,
    output: str | os.PathLike,
    *,
    min_gain_steps: float = DEFAULT_MIN_GAIN_STEPS,
    hindi: str = "hi",
    urdu: str = "ur",
    human: pd.DataFrame | None = None,
    human_excluded: pd.DataFrame | None = None,
    configuration: Mapping[str, Any] | None = None,
    gates: Mapping[str, Any] | None = None,
    validity: pd.DataFrame | None = None,
    waterfall_cell: Mapping[str, Any] | None = None,
    seed: int = 0,
    paired: Mapping[str, Any] | None = None,
) -> tuple[PCSAnalysis, list[Path]]:
    """Analyse ``scores`` and write summary, statistics, tables, robustness table, figures and report under
    ``output``.

    ``human`` may carry a ``source`` column (human / simulated / llm_panel); the
    report says so in a visible line when the preferences are not human.  ``human_excluded``: the
    round's pairs left out for an invalid response (counted in Table 17).  ``seed``: of the bootstrap
    intervals.  ``paired``: the comparisons with the run's other models that involve this model (the
    stage's ``paired_block``), put in summary.json and on the page.
    """
    out = Path(output)
    human_source = human_sources(human)
    analysis = analyze_scores(scores, min_gain_steps=min_gain_steps, hindi=hindi, urdu=urdu, human=human,
                              human_excluded=human_excluded, seed=seed)
    robustness = robustness_table(analysis.judged, min_gain_steps=min_gain_steps,
                                  sensitivity_steps=SENSITIVITY_GAIN_STEPS, hindi=hindi, urdu=urdu, seed=seed)
    analysis.summary["robustness"] = finite_json(robustness_block(robustness, ROBUSTNESS_FILE))
    if paired is not None:
        analysis.summary["paired"] = finite_json(dict(paired))
    if human_source:
        analysis.statistics["human_validation_source"] = human_source
    files = [write_study_summary(out / "summary.json", {**analysis.summary, **report_contract(
        analysis.summary, configuration, human_source, gates)})]
    files.append(write_csv(out / ROBUSTNESS_FILE, robustness))
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
                         figures=[str(f.relative_to(out)) for f in figures if f.suffix == ".png"],
                         robustness=robustness)
    files.append(write_text(out / "report.md", md))
    return analysis, files


def human_sources(human: pd.DataFrame | None) -> str | None:
    """The ``source`` of human-validation preferences ("human" when the table has no source column)."""
    if human is None or not len(human):
        return None
    if "source" not in human.columns:
        return "human"
    return ", ".join(sorted(human["source"].dropna().astype(str).unique())) or "human"
