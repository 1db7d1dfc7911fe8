"""How many model requests the pcs collect and judge stages issue for a composed config (``stereolens plan``)."""

from __future__ import annotations

from typing import Any

from stereolens.config.models import run_models
from stereolens.studies.pcs.judging import SCALE
from stereolens.studies.pcs.scenarios import triad_prompts
from stereolens.stages.kit import model_label
from stereolens.studies.pcs.stages import _bank, judge_panel, responders


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Per model of the run, the ``pcs_collect@<model id>`` and ``pcs_judge@<model id>`` stages (dvc.yaml's):
    responses from the stage's own scenario selection and triad prompts (the primary model's stage collects
    ``study.pcs.responders``, a compared model's its own), and judge calls per panel member (a member without
    a model of its own is the measured model, as in the stage).

    Judge counts are for first attempts on every response (a JSON judge retries an invalid
    answer ``retries`` times more at most; the calibration exemplars add a few hundred).
    """
    models = run_models(params)
    cfg = params["study"]["pcs"]
    rows = []
    bank = prompts = None
    for model in models:
        p = {"model": model, "language": params.get("language"), "seed": params.get("seed", 0), "cfg": cfg,
             "compared": model["id"] != models[0]["id"]}
        if bank is None:  # the scenarios and prompts do not depend on the model: built once
            bank = _bank(p)
            prompts = triad_prompts(bank, tuple(cfg.get("conditions", ("A", "B", "C"))))
        samples = int(cfg.get("collection", {}).get("samples", 4))
        per_prompt = len(prompts) * samples
        features = sum(samples * len(bank.rubrics[d]) for d in prompts["dimension"])
        people = responders(p)
        for responder in people:
            rows.append({"study": "pcs", "stage": f"pcs_collect@{model['id']}", "model": model_label(responder),
                         "language": "all", "request": "generations", "count": per_prompt,
                         "note": f"{len(prompts)} prompts (scenario x language x condition) x {samples} samples"})
        responses = per_prompt * len(people)
        for spec, _judge in judge_panel(p):
            if spec.mode == "json":
                count, what = responses, "judge calls (JSON, all features at once)"
            elif spec.logprob_method == "top_logprobs":
                count, what = features * len(people), "judge calls (one token, top log-probabilities, per feature)"
            else:
                count, what = features * len(people) * len(SCALE), "continuation scores (per feature x 7 digits)"
            rows.append({"study": "pcs", "stage": f"pcs_judge@{model['id']}", "model": spec.id, "language": "all",
                         "request": what, "count": count, "note": f"{responses} responses"})
    return rows
