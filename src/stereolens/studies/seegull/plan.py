"""How many model requests the seegull-associate stage issues for a composed config (``stereolens plan``)."""

from __future__ import annotations

from typing import Any

from stereolens.scoring.ilps import ILPS_KINDS
from stereolens.studies.seegull.associations import request_counts, study_tuples
from stereolens.studies.seegull.templates import load_templates


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model and locale, counted with the stage's own tuple selection and items.

    Reads ``data/raw/seegull_multilingual`` (run ``dvc repro ingest@seegull_multilingual`` first), as the stage does.
    """
    study = params["study"]["seegull"]
    counts = request_counts(study_tuples(study), load_templates(study["seed_dir"]),
                            (study.get("association") or {}).get("templates"))
    models = params.get("models") or {params["model"]["id"]: params["model"]}
    rows = []
    for model_id, model in models.items():
        skipped = model.get("kind") not in ILPS_KINDS
        for r in counts.itertuples(index=False):
            rows.append({"study": "seegull", "stage": "seegull_associate", "model": model_id, "language": r.locale,
                         "request": "continuation scores", "count": 0 if skipped else r.identity_scores + r.generic_scores,
                         "note": f"ILPS needs a causal or seq2seq model ({model.get('kind')})" if skipped else
                         f"{r.tuples} tuples; {r.identity_scores} identity + {r.generic_scores} generic sentences "
                         f"(the generic ones shared by locales of one language), {r.contexts} distinct contexts"})
    return rows
