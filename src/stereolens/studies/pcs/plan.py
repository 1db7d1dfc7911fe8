"""How many model requests the pcs collect and judge stages issue for a composed config (``stereolens plan``)."""

from __future__ import annotations

from typing import Any

from stereolens.studies.pcs.judging import SCALE
from stereolens.studies.pcs.scenarios import triad_prompts
from stereolens.stages.kit import model_label
from stereolens.studies.pcs.stages import _bank, judge_panel, responders


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Responses from the stage's own scenario selection and triad prompts; judge calls per panel member.

    Judge counts are for first attempts on every response (a JSON judge retries an invalid
    answer ``retries`` times more at most; the calibration exemplars add a few hundred).
    """
    p = {"model": params["model"], "language": params.get("language"), "seed": params.get("seed", 0),
         "cfg": params["study"]["pcs"]}
    cfg = p["cfg"]
    bank = _bank(p)
    prompts = triad_prompts(bank, tuple(cfg.get("conditions", ("A", "B", "C"))))
    samples = int(cfg.get("collection", {}).get("samples", 4))
    per_prompt = len(prompts) * samples
    features = sum(samples * len(bank.rubrics[d]) for d in prompts["dimension"])
    people = responders(p)
    rows = []
    for model in people:
        rows.append({"study": "pcs", "stage": "pcs_collect", "model": model_label(model), "language": "all",
                     "request": "generations", "count": per_prompt,
                     "note": f"{len(prompts)} prompts (scenario x language x condition) x {samples} samples"})
    responses = per_prompt * len(people)
    for spec, model in judge_panel(p):
        if spec.mode == "json":
            count, what = responses, "judge calls (JSON, all features at once)"
        elif spec.logprob_method == "top_logprobs":
            count, what = features * len(people), "judge calls (one token, top log-probabilities, per feature)"
        else:
            count, what = features * len(people) * len(SCALE), "continuation scores (per feature x 7 digits)"
        rows.append({"study": "pcs", "stage": "pcs_judge", "model": spec.id, "language": "all",
                     "request": what, "count": count, "note": f"{responses} responses"})
    return rows
