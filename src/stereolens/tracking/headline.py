"""The compact headline metrics file DVC compares across experiments (``headline.json``).

A study's ``summary.json`` holds everything its report needs (nested config, provenance strings,
per-country cells): declared as a DVC metric it gave ``dvc metrics show`` / ``dvc exp show``
several hundred columns.  ``summary.json`` stays a plain output; beside it each study writes
``headline.json``, the few numbers a researcher lines up between experiments, declared as the
stage's ``metrics``.  Each study's function below picks them from its summary; a summary that is
not the study's top-level one (the pairs report's per-set summaries) yields nothing, and no file.

Values are numbers, booleans or ``null`` (a quantity the run could not define, e.g. a PCS with no
valid cell): DVC shows ``null`` as ``-``, so the column set stays the same across experiments.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HEADLINE_FILE = "headline.json"

Headline = dict[str, float | int | bool | None]


def _number(value: Any) -> float | int | bool | None:
    """A headline value: numbers and booleans as they are; anything else (text, NaN) as null."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()  # a numpy scalar, as pandas and scipy hand them back
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return None if math.isnan(value) or math.isinf(value) else float(value)  # not valid JSON for DVC
    return None


def _top_level(summary: Mapping[str, Any], keys: tuple[str, ...]) -> Headline:
    """``keys`` of a summary that holds the first of them (a summary without it is not the study's top-level one)."""
    if keys[0] not in summary:
        return {}
    return {key: _number(summary.get(key)) for key in keys}


def crows_headline(summary: Mapping[str, Any]) -> Headline:
    # the interval is of share_untied, the share the row tests (equal to bias_score when no pair ties)
    return _top_level(summary, ("bias_score", "share_untied", "ci_low", "ci_high"))


def pairs_headline(summary: Mapping[str, Any]) -> Headline:
    """The bias score of every evaluated set and language (``<set>.<language>.bias_score``)."""
    sets = summary.get("sets")
    if not isinstance(sets, Mapping):
        return {}
    found: Headline = {}
    for set_name, block in sets.items():
        runs = block.get("runs") if isinstance(block, Mapping) else None
        if isinstance(runs, list):
            for run in runs:
                found[f"{set_name}.{run.get('language')}.bias_score"] = _number(run.get("bias_score"))
        elif isinstance(block, Mapping) and "bias_score" in block:
            found[f"{set_name}.{block.get('language', 'en')}.bias_score"] = _number(block.get("bias_score"))
    return found


def stereo_headline(summary: Mapping[str, Any]) -> Headline:
    return _top_level(summary, ("ss", "lms", "icat"))


def heads_headline(summary: Mapping[str, Any]) -> Headline:
    """Per country: the probe's held-out accuracy and the stereotype score before and after pruning every
    selected head (the effect the study is about)."""
    countries = summary.get("countries")
    if not isinstance(countries, list):
        return {}
    found: Headline = {}
    for row in countries:
        for key in ("probe_test_accuracy", "ss_before", "ss_all_pruned"):
            found[f"{row.get('country')}.{key}"] = _number(row.get(key))
    return found


def leakage_headline(summary: Mapping[str, Any]) -> Headline:
    if "n_edges" not in summary:
        return {}
    corrected = summary.get("multiple_comparisons") or {}
    return {"n_edges": _number(summary.get("n_edges")), "n_edges_holm": _number(corrected.get("n_edges_holm")),
            "n_fits": _number(summary.get("n_fits"))}


def pcs_headline(summary: Mapping[str, Any]) -> Headline:
    if "pcs" not in summary:
        return {}
    gates = (summary.get("headline") or {}).get("judge gates")
    return {"pcs": _number(summary.get("pcs")), "cap_util": _number(summary.get("cap_util")),
            "hud": _number((summary.get("hud") or {}).get("overall")), "n_excluded": _number(summary.get("n_excluded")),
            # the report's headline says passed / FAILED / not run: only the first two are a yes or no
            "judge_gates_passed": {"passed": True, "FAILED": False}.get(str(gates))}


def seegull_headline(summary: Mapping[str, Any]) -> Headline:
    """Per locale: the AUC of the association for stereotype- against not-stereotype-majority tuples and Spearman
    with the vote share (the intervals stay in summary.json); per cross-locale pair, the other locale's verdict
    coefficient."""
    by_locale = summary.get("by_locale")
    if not isinstance(by_locale, Mapping):
        return {}
    found: Headline = {}
    # every locale of the run, measured or not (a skipped model's are null), so the columns match across models
    for locale in dict.fromkeys([*(summary.get("locales") or []), *by_locale]):
        for key in ("auc", "spearman"):
            found[f"{locale}.{key}"] = _number((by_locale.get(locale) or {}).get(key))
    for fit in summary.get("cross_locale") or []:
        other = (fit.get("other locale's verdict") or {}) if isinstance(fit, Mapping) else {}
        found[f"{fit.get('locale')}~{fit.get('other_locale')}.other_verdict"] = _number(other.get("estimate"))
    return found


HEADLINES: dict[str, Callable[[Mapping[str, Any]], Headline]] = {
    "crows": crows_headline,
    "pairs": pairs_headline,
    "stereo": stereo_headline,
    "heads": heads_headline,
    "leakage": leakage_headline,
    "pcs": pcs_headline,
    "seegull": seegull_headline,
}


def study_of(summary_path: str | os.PathLike) -> str | None:
    """The study a summary belongs to: the folder right under ``reports/`` (``reports/<study>/...``)."""
    parts = Path(summary_path).parts
    if "reports" not in parts:
        return None
    index = len(parts) - 1 - parts[::-1].index("reports")
    return parts[index + 1] if index + 2 < len(parts) else None


def headline_record(summary_path: str | os.PathLike, headline: Headline) -> dict[str, Any]:
    """The headline as ``headline.json`` holds it: under the study and, in the per-model layout
    (``reports/<study>/<model>/``), the model, so that DVC names its columns ``crows.gemma3-270m.bias_score``.

    DVC prefixes a metric name that more than one file holds with the file's whole path
    (``reports/crows/gemma3-270m/headline.json:bias_score``, 51 characters): with every model writing the same
    keys, ``dvc exp show`` had room for three or four columns at 200 characters.  Names unique by
    construction keep a study's columns short and let ``--keep '^crows\\.'`` pick a study."""
    folder, study = Path(summary_path).parent, study_of(summary_path)
    record: dict[str, Any] = dict(headline)
    if folder.name != study:
        record = {folder.name: record}
    return {study: record}


def write_headline(summary_path: str | os.PathLike, summary: Mapping[str, Any]) -> Path | None:
    """Write ``headline.json`` beside ``summary_path`` when the summary is a study's top-level one."""
    from stereolens.io import write_json

    pick = HEADLINES.get(study_of(summary_path) or "")
    headline = pick(summary) if pick else {}
    if not headline:
        return None
    return write_json(Path(summary_path).with_name(HEADLINE_FILE), headline_record(summary_path, headline))
