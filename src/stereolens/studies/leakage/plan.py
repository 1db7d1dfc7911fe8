"""How many model requests the leakage-scores stages issue for a composed config (``stereolens plan``)."""

from __future__ import annotations

from functools import cache
from typing import Any

from stereolens.config.models import run_models
from stereolens.stages.common import languages_to_run
from stereolens.studies.leakage.choice import choice_queries, resolve_choice_mode, same_polarity_pairs
from stereolens.studies.leakage.items import build_items
from stereolens.studies.leakage.lexicon import load_lexicon, select_groups
from stereolens.studies.leakage.methods import methods_for_kind
from stereolens.studies.leakage.scores import STUDY_KEY, model_configs, study_templates


def _choice_mode(requested: str, kind: str) -> str:
    # resolve_choice_mode asks the loaded model; before loading, a chat endpoint is the one kind
    # that cannot score given continuations (auto sends it to sampling)
    if requested != "auto":
        return resolve_choice_mode(None, requested)
    return "sample" if kind == "chat" else "logprob"


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (stage, model, language, request kind, count) built with the stage's own item and query builders:
    one ``leakage_scores@<model id>-<language>`` stage per model of the run and language (dvc.yaml's matrix),
    each scoring its model and, in the primary model's stage, the study's extra models; the monolingual
    baseline of a language in every model's stage.  The items and queries depend on the language only, so
    each is built once per language, whatever the number of models and methods."""
    study = params["study"]["leakage"]
    lex = load_lexicon(study["seed_dir"])
    languages = [lang.lower() for lang in study["languages"]]
    chosen = languages_to_run(languages, params.get("language"))

    @cache
    def items(language: str) -> tuple[int, int]:
        built = build_items(lex, language, template_ids=study_templates(study, language), groups=select_groups(lex, None))
        return len(built), len({(i.template_id, i.group, i.prefix) for i in built})

    @cache
    def queries(language: str) -> int:
        c = study.get("choice", {})
        pairs = same_polarity_pairs(lex, design=c.get("design", "all"), opponents=c.get("opponents"),
                                    both_orders=bool(c.get("both_orders", True)))
        return len(choice_queries(lex, language, pairs, select_groups(lex, c.get("groups"))))

    models = run_models(params)
    primary = models[0]["id"]
    rows = []
    for run_model in models:
        for language in languages:
            if language not in chosen:
                continue
            stage = f"leakage_scores@{run_model['id']}-{language}"
            # the study's extra models are scored once, beside the primary model (as the stage does)
            for model in model_configs({"model": run_model, STUDY_KEY: study}, with_extra_models=run_model["id"] == primary):
                kind = model["kind"]
                methods = list((study.get("methods") or {}).get(kind) or methods_for_kind(kind))
                base = {"study": "leakage", "stage": stage, "model": model["id"], "language": language}
                for method in methods:
                    if method in ("ilps", "set"):
                        n_items, contexts = items(language)
                        what = "continuation scores" if method == "ilps" else "masked trait scores"
                        rows.append({**base, "request": f"{method}: {what}", "count": n_items,
                                     "note": f"{contexts} distinct contexts"})
                    elif method == "choice":
                        c = study.get("choice", {})
                        n_queries = queries(language)
                        if _choice_mode(c.get("mode", "auto"), kind) == "logprob":
                            rows.append({**base, "request": "choice: continuation scores", "count": 3 * n_queries,
                                         "note": f"{n_queries} queries x 3 options"})
                        else:
                            n = int(c.get("n_samples", 10))
                            rows.append({**base, "request": "choice: generations", "count": n * n_queries,
                                         "note": f"{n_queries} queries x {n} samples"})
            baseline = (study.get("baselines") or {}).get(language)
            if baseline:
                n_items, _ = items(language)
                rows.append({"study": "leakage", "stage": stage, "model": baseline, "language": language,
                             "request": "set: masked trait scores (monolingual baseline)", "count": n_items,
                             "note": "every model's stage for this language scores it: after the first, from the "
                                     "shared response cache" if len(models) > 1 else ""})
    return rows
