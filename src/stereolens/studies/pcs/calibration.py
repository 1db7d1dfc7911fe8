"""The synthetic calibration set of the pcs judge panel (Fifteen Percent Fluency appendix B.1): contrastive
high/low exemplars per rubric feature, generated once, stored and versioned.

Its own module, read only from ``scenarios.csv`` and ``rubrics.yaml``, so that the
DVC stage building it depends on nothing else: editing a translation review, the
marker list or the judging code does not regenerate (and so silently change) the
set the panel is validated on.  The validate stage records the set's sha256 in
reports/pcs/gates.json, so every gate result names the exact set it was measured on.

Two sources: ``template`` writes each exemplar from the rubric anchor itself (the
minimal signal any usable judge must see; no model needed), ``model`` asks a
generator model for a short reply that shows the anchored behaviour.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pandas as pd

from stereolens.studies.pcs.scenarios import RubricFeature, load_rubrics, read_scenarios
from stereolens.errors import ConfigError, DataError
from stereolens.models.base import GenerationRequest, LanguageModel

CALIBRATION_COLUMNS = ("pair_id", "dimension", "feature", "pole", "scenario_id", "language", "scenario", "response", "source")


def load_calibration_inputs(
    bank_dir: str | os.PathLike,
    *,
    language: str = "en",
    dimensions: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, dict[str, tuple[RubricFeature, ...]]]:
    """The neutral scenarios in ``language`` and the rubrics, from scenarios.csv and rubrics.yaml only."""
    bank_dir = Path(bank_dir)
    path = bank_dir / "scenarios.csv"
    rubrics = load_rubrics(bank_dir / "rubrics.yaml")
    # the same schema as every other reader of the bank, before any generator model loads
    scenarios = read_scenarios(path, rubrics.keys())
    if dimensions:
        unknown = sorted(set(dimensions) - set(rubrics))
        if unknown:
            raise ConfigError(f"calibration dimensions {unknown} are not in {bank_dir / 'rubrics.yaml'} (have: {sorted(rubrics)})")
        rubrics = {d: rubrics[d] for d in dimensions}
    base = scenarios.loc[scenarios["language"] == language]
    if base.empty:
        raise DataError(f"{path} has no scenario in calibration language {language!r}")
    return base.reset_index(drop=True), rubrics


def template_exemplar(feature: RubricFeature, pole: Literal["high", "low"]) -> str:
    """A response written from the anchor itself: the minimal signal any usable judge must see."""
    anchor = feature.anchors[7 if pole == "high" else 1].rstrip(".")
    return f"Here is how I would handle it. My approach: {anchor[0].lower() + anchor[1:]}."


def exemplar_prompt(scenario: str, feature: RubricFeature, pole: Literal["high", "low"], language_name: str) -> str:
    anchor = feature.anchors[7 if pole == "high" else 1]
    return (
        f"Write a short first-person reply (3-5 sentences, in {language_name}) to the scenario below. "
        f"The reply must clearly show this behaviour for \"{feature.label}\": {anchor} "
        f"Do not name the behaviour; just show it.\n\nScenario: {scenario}"
    )


def build_calibration_set(
    scenarios: pd.DataFrame,
    rubrics: dict[str, tuple[RubricFeature, ...]],
    *,
    pairs_per_feature: int = 1,
    source: Literal["template", "model"] = "template",
    generator: LanguageModel | None = None,
    language: str = "en",
    language_name: str = "English",
    max_tokens: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """Contrastive high/low exemplars per feature, on the first scenarios of the feature's dimension.

    Columns: pair_id, dimension, feature, pole, scenario_id, language, scenario, response, source.
    """
    if source not in ("template", "model"):
        raise ConfigError(f"study.pcs.calibration.source={source!r} is not template or model")
    if source == "model" and generator is None:
        raise ConfigError("calibration source 'model' needs a generator model")
    base = scenarios.loc[scenarios["language"] == language].sort_values("scenario_id")
    rows = []
    for dim, features in rubrics.items():
        pool = base.loc[base["dimension"] == dim]
        if pool.empty:
            continue
        for f_idx, feature in enumerate(features):
            for p in range(pairs_per_feature):
                scen = pool.iloc[(f_idx + p) % len(pool)]
                for pole in ("high", "low"):
                    rows.append(
                        {
                            "pair_id": f"{dim}-{feature.name}-{p}",
                            "dimension": dim,
                            "feature": feature.name,
                            "pole": pole,
                            "scenario_id": scen["scenario_id"],
                            "language": language,
                            "scenario": scen["prompt_a"],
                            "response": template_exemplar(feature, pole) if source == "template" else None,
                            "source": "template" if source == "template" else f"model:{generator.identity}",
                        }
                    )
    out = pd.DataFrame(rows, columns=list(CALIBRATION_COLUMNS))
    if out.empty:
        raise DataError(f"no calibration exemplar: no {language} scenario of dimension(s) {', '.join(rubrics)}")
    if source == "model":
        feats = {(f.dimension, f.name): f for fs in rubrics.values() for f in fs}
        reqs = [
            GenerationRequest(
                prompt=exemplar_prompt(r.scenario, feats[(r.dimension, r.feature)], r.pole, language_name),
                max_tokens=max_tokens, temperature=0.0, seed=seed,
            )
            for r in out.itertuples()
        ]
        out["response"] = [g.text.strip() for g in generator.generate(reqs)]
    return out


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (the calibration set's version)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()
