"""How many model requests the leakage-scores stage issues for a composed config (``stereolens plan``)."""

from __future__ import annotations

from typing import Any

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
    """Rows (model, language, request kind, count) built with the stage's own item and query builders."""
    study = params["study"]["leakage"]
    lex = load_lexicon(study["seed_dir"])
    rows = []
    for language in [lang.lower() for lang in study["languages"]]:
        if language not in languages_to_run([lang.lower() for lang in study["languages"]], params.get("language")):
            continue
        for model in model_configs({"model": params["model"], STUDY_KEY: study}):
            kind = model["kind"]
            methods = list((study.get("methods") or {}).get(kind) or methods_for_kind(kind))
            base = {"study": "leakage", "stage": f"leakage_scores@{language}", "model": model["id"], "language": language}
            for method in methods:
                if method in ("ilps", "set"):
                    items = build_items(lex, language, template_ids=study_templates(study, language),
                                          groups=select_groups(lex, None))
                    contexts = len({(i.template_id, i.group, i.prefix) for i in items})
                    what = "continuation scores" if method == "ilps" else "masked trait scores"
                    rows.append({**base, "request": f"{method}: {what}", "count": len(items),
                                 "note": f"{contexts} distinct contexts"})
                elif method == "choice":
                    c = study.get("choice", {})
                    pairs = same_polarity_pairs(lex, design=c.get("design", "all"), opponents=c.get("opponents"),
                                                  both_orders=bool(c.get("both_orders", True)))
                    queries = choice_queries(lex, language, pairs, select_groups(lex, c.get("groups")))
                    mode = _choice_mode(c.get("mode", "auto"), kind)
                    if mode == "logprob":
                        rows.append({**base, "request": "choice: continuation scores", "count": 3 * len(queries),
                                     "note": f"{len(queries)} queries x 3 options"})
                    else:
                        n = int(c.get("n_samples", 10))
                        rows.append({**base, "request": "choice: generations", "count": n * len(queries),
                                     "note": f"{len(queries)} queries x {n} samples"})
    return rows
