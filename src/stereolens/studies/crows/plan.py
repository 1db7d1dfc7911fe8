"""How many model requests the crows stages issue for a composed config (``stereolens plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stereolens.datasets.crows_pairs import crows_pairs_table
from stereolens.stages.common import languages_to_run
from stereolens.studies.crows.scoring import crows_scoring_route


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kind of request, counted with the crows-score stage's own selection.

    Reads ``data/raw/<dataset>`` (run ``dvc repro ingest`` first), as the stage does.
    """
    study, model, metric = params["study"]["crows"], params["model"], params["metric"]
    route, skip_reason = crows_scoring_route(metric["name"], model)
    pairs = crows_pairs_table(Path("data/raw") / study["dataset"] / "crows_pairs_anonymized.csv", study.get("limit"),
                              sample=study.get("sample"), seed=int(study.get("seed") or 0))
    if not languages_to_run(["en"], params.get("language")):
        pairs, skip_reason = pairs.head(0), skip_reason or "the language filter excludes English"
    n = 0 if route == "skip" else 2 * len(pairs)
    # a causal pass scores a whole sentence; a pseudo-log-likelihood masks each scored token in its own copy
    unit = "sentence scores (one pass each)" if metric["name"] == "causal" else "sentence scores (one pass per scored token)"
    return [{"study": "crows", "stage": "crows_score", "model": model["id"], "language": "en",
             "request": unit, "count": n, "note": skip_reason or ""}]
