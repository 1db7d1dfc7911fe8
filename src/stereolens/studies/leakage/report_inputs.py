"""What the leakage report reads: the fits of every language (both missing-cell treatments), the scores
manifests (what each matrix covers), the choice task's non-matching counts and the H matrices' provenance."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import DataError

NONMATCHING_COLUMNS = ["model", "language", "group", "n_generations", "n_nonmatching", "share_nonmatching"]


@dataclass
class CollectedFits:
    """The leakage-fit outputs of every language, one entry per fit (configured and alternative treatment)."""

    coefficients: list[pd.DataFrame] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    fit_summaries: list[dict[str, Any]] = field(default_factory=list)  # the configured treatment's fits only
    beta_inputs: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)  # (panel, language) -> coefficients
    coverage: dict[str, Any] = field(default_factory=dict)  # language -> scores_coverage
    panels: list[str] = field(default_factory=list)  # model/method, in the order first met
    nonmatching: list[pd.DataFrame] = field(default_factory=list)
    # the robustness variants of every fit: panel, target, choice, variant, ran, reason and (where run) the
    # coefficient table in the stacked layout of ``coefficients``
    variants: list[dict[str, Any]] = field(default_factory=list)

    def nonmatching_table(self) -> pd.DataFrame:
        # an empty table (with its columns) when nothing was sampled: the file is a declared stage output
        return pd.concat(self.nonmatching, ignore_index=True) if self.nonmatching else pd.DataFrame(columns=NONMATCHING_COLUMNS)


def scores_coverage(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Per model and method of one language's scores manifest: templates used; for choice the mode,
    design and groups asked about (the report must say what the matrices cover)."""
    out: dict[str, Any] = {}
    if manifest.get("skipped"):
        return {"skipped": manifest["skipped"]}
    keys = ("templates", "mode_requested", "mode", "design", "both_orders", "pairs_per_group", "n_groups", "groups",
            "queries", "n_samples", "nonmatching", "first_listed_wins", "cells")
    for model_id, info in (manifest.get("models") or {}).items():
        for method, done in (info.get("methods") or {}).items():
            out[f"{model_id}/{method}"] = {k: done[k] for k in keys if k in done}
    if manifest.get("baseline"):
        out["baseline"] = {"model": manifest["baseline"]}
    return out


def read_human_provenance(human_dir: Path) -> dict[str, Any]:
    path = human_dir / "provenance.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def collect_fits(fit_dir: Path, scores_dir: Path, languages: Sequence[str]) -> CollectedFits:
    """Every language's fits, scores coverage and non-matching counts; DataError when no language has a fit."""
    found = CollectedFits()
    for language in languages:
        manifest_path = scores_dir / language / "manifest.json"
        if manifest_path.exists():
            found.coverage[language.upper()] = scores_coverage(json.loads(manifest_path.read_text(encoding="utf-8")))
        summary_path = fit_dir / language / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        for f in summary.get("fits", []):
            _add_panel_fits(found, f, language)
        for nm in (scores_dir / language).glob("*/choice_nonmatching.csv"):
            df = pd.read_csv(nm)
            df.insert(0, "model", nm.parent.name)
            found.nonmatching.append(df)
    if not found.coefficients:
        raise DataError(f"no leakage fits found under {fit_dir}: run the leakage-fit stages first")
    return found


def _add_panel_fits(found: CollectedFits, entry: Mapping[str, Any], language: str) -> None:
    """One (model, method) fit of ``language``: its configured treatment and, when fitted, the alternative."""
    panel = f"{entry['model']}/{entry['method']}"
    if panel not in found.panels:
        found.panels.append(panel)
    fits_of_panel = [(Path(entry["dir"]), True)]
    if entry.get("alternative"):
        fits_of_panel.append((Path(entry["alternative"]["dir"]), False))
    for out, configured in fits_of_panel:
        coef = pd.read_csv(out / "coefficients.csv")
        fs = json.loads((out / "fit.json").read_text(encoding="utf-8"))
        if configured:
            found.beta_inputs[(panel, language)] = coef
            found.fit_summaries.append({"panel": panel, **fs})
        found.coefficients.append(_stacked(coef, fs, panel, language, configured=configured))
        found.edges.extend({"panel": panel, **{k: v for k, v in e.items() if k != "model"}, "configured": configured}
                           for e in json.loads((out / "edges.json").read_text(encoding="utf-8")))
    for v in entry.get("variants") or []:
        variant = {"panel": panel, "target": language.upper(), "choice": v["choice"], "variant": v["variant"],
                   "ran": bool(v["ran"]), "reason": v.get("reason", ""), "coefficients": None}
        if v["ran"]:
            where = Path(v["dir"])
            fs = json.loads((where / "fit.json").read_text(encoding="utf-8"))
            variant["coefficients"] = _stacked(pd.read_csv(where / "coefficients.csv"), fs, panel, language,
                                               configured=False)
        found.variants.append(variant)


def _stacked(coef: pd.DataFrame, fit_summary: Mapping[str, Any], panel: str, language: str, *,
             configured: bool) -> pd.DataFrame:
    """One fit's coefficient table in the stacked layout: panel and target first, the fit's convergence, missing
    treatment and whether it is the configured one after."""
    coef = coef.assign(converged=bool(fit_summary.get("converged", False)), missing=fit_summary["missing"],
                       configured=configured)
    coef.insert(0, "target", language.upper())
    coef.insert(0, "panel", panel)
    return coef
