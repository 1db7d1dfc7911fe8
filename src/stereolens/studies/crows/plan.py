"""How many model requests the crows stages issue for a composed config (``stereolens plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stereolens.config.models import run_models
from stereolens.datasets.crows_pairs import crows_pairs_table
from stereolens.errors import ConfigError
from stereolens.stages.common import languages_to_run
from stereolens.studies.crows.scoring import crows_scoring_route


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model of the run (``crows_score@<model id>``, dvc.yaml's stage), counted with the
    crows-score stage's own selection and scoring route.

    Reads ``data/raw/<dataset>`` (run ``dvc repro ingest`` first), as the stage does.
    """
    study, metric = params["study"]["crows"], params["metric"]
    pairs = crows_pairs_table(Path("data/raw") / study["dataset"] / "crows_pairs_anonymized.csv", study.get("limit"),
                              sample=study.get("sample"), seed=int(study.get("seed") or 0))
    english = bool(languages_to_run(["en"], params.get("language")))
    # a causal pass scores a whole sentence; a pseudo-log-likelihood masks each scored token in its own copy
    unit = "sentence scores (one pass each)" if metric["name"] == "causal" else "sentence scores (one pass per scored token)"
    rows = []
    for model in run_models(params):
        try:
            route, skip_reason = crows_scoring_route(metric["name"], model)
        except ConfigError as exc:  # the stage stops on this model: say so instead of counting
            route, skip_reason = "skip", f"the stage refuses this model: {exc}"
        if not english:
            skip_reason = skip_reason or "the language filter excludes English"
        n = 0 if route == "skip" or not english else 2 * len(pairs)
        rows.append({"study": "crows", "stage": f"crows_score@{model['id']}", "model": model["id"], "language": "en",
                     "request": unit, "count": n, "note": skip_reason or ""})
    return rows
