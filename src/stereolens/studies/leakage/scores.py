"""Model association matrices of one language: every configured method of every model (the leakage-scores
stage's work), and the monolingual baseline's SeT matrix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from stereolens.errors import ConfigError
from stereolens.io import write_csv
from stereolens.studies.leakage.choice import choice_scores, same_polarity_pairs
from stereolens.studies.leakage.choice_order import first_listed_wins
from stereolens.studies.leakage.ilps import ilps_scores
from stereolens.studies.leakage.items import to_matrix
from stereolens.studies.leakage.lexicon import Lexicon, select_groups
from stereolens.studies.leakage.set_score import set_scores

STUDY_KEY = "study.leakage"


def model_configs(params: dict[str, Any], *, with_extra_models: bool = True) -> list[dict[str, Any]]:
    """The configured model first, then (``with_extra_models``) the study's extra models (each a model config
    mapping with an id)."""
    models = [params["model"]] + (list(params[STUDY_KEY].get("extra_models") or []) if with_extra_models else [])
    ids = [m.get("id") for m in models]
    if any(not i for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"study.leakage.extra_models: every model needs a distinct id (got {ids})")
    return models


def study_templates(study: dict[str, Any], language: str) -> list[str] | None:
    chosen = (study.get("templates") or {}).get(language)
    return list(chosen) if chosen else None


def score_model(lm: Any, kind: str, methods: list[str], lex: Any, language: str, study: dict[str, Any],
                cache: Any, out_dir: Path) -> dict[str, Any]:
    """Every configured method for one model and language; matrices and long tables under out_dir."""
    done: dict[str, Any] = {}
    templates = study_templates(study, language)
    agg = study.get("template_aggregation", "median")
    batch_tokens = study.get("batch_tokens")
    for method in methods:
        t0 = time.time()
        extra: dict[str, Any] = {}
        if method == "set":
            s = study.get("set", {})
            long = set_scores(lm, lex, language, template_ids=templates, piece_aggregation=s.get("piece_aggregation", "sum"),
                                template_aggregation=agg, guard=s.get("guard", "clip"), cache=cache)
        elif method == "ilps":
            i = study.get("ilps", {})
            red = i.get("causal_reduction", "sum") if kind == "causal" else i.get("seq2seq_reduction", "mean")
            long = ilps_scores(lm, lex, language, kind=kind, template_ids=templates, reduction=red,
                                 template_aggregation=agg, cache=cache, batch_tokens=batch_tokens)
        elif method == "choice":
            c = study.get("choice", {})
            requested = c.get("mode", "auto")
            groups = select_groups(lex, c.get("groups"))
            long, per_query, nonmatching = choice_scores(
                lm, lex, language, mode=requested, design=c.get("design", "all"), opponents=c.get("opponents"),
                both_orders=bool(c.get("both_orders", True)), n_samples=int(c.get("n_samples", 10)),
                temperature=float(c.get("temperature", 1.0)), groups=groups, cache=cache,
                batch_tokens=batch_tokens,
            )
            write_csv(out_dir / "choice_queries.csv", per_query)
            extra["first_listed_wins"] = first_listed_wins(per_query)
            # choice_scores returns non-matching counts exactly when it sampled
            used = "logprob" if nonmatching is None else "sample"
            if nonmatching is not None:
                write_csv(out_dir / "choice_nonmatching.csv", nonmatching)
                extra["nonmatching"] = int(nonmatching["n_nonmatching"].sum())
            n_pairs = len(same_polarity_pairs(lex, design=c.get("design", "all"), opponents=c.get("opponents"),
                                                both_orders=bool(c.get("both_orders", True))))
            extra.update({
                "mode_requested": requested, "mode": used, "design": c.get("design", "all"),
                "both_orders": bool(c.get("both_orders", True)), "pairs_per_group": n_pairs,
                "n_groups": len(groups), "groups": groups,
                "n_samples": int(c.get("n_samples", 10)) if used == "sample" else None,
                "queries": n_pairs * len(groups),
            })
        else:
            raise ConfigError(f"unknown leakage method {method!r} (set, ilps, choice)")
        if method in ("set", "ilps"):
            extra["templates"] = list(templates) if templates else sorted(
                set(lex.templates.loc[lex.templates["language"] == language, "template_id"]))
        matrix = to_matrix(long, lex.trait_order, lex.group_order)
        write_csv(out_dir / f"{method}_long.csv", long)
        write_csv(out_dir / f"{method}.csv", matrix.reset_index())
        done[method] = {"seconds": round(time.time() - t0, 1), "cells": int(matrix.notna().sum().sum()), **extra}
        print(f"  {language} {method}: {done[method]}")
    return done


def baseline_config(baseline: str | dict[str, Any]) -> dict[str, Any]:
    """The model config of ``study.leakage.baselines.<language>``: a bare name is an HF masked LM."""
    return {"name": baseline, "kind": "masked", "backend": "hf"} if isinstance(baseline, str) else dict(baseline)


def baseline_set_matrix(lm: Any, lex: Lexicon, language: str, study: dict[str, Any], cache: Any) -> Any:
    """The monolingual baseline LM_tgt of Equation 1: SeT of the baseline model, traits x groups."""
    s = study.get("set", {})
    long = set_scores(lm, lex, language, template_ids=study_templates(study, language),
                      piece_aggregation=s.get("piece_aggregation", "sum"),
                      template_aggregation=study.get("template_aggregation", "median"),
                      guard=s.get("guard", "clip"), cache=cache)
    return to_matrix(long, lex.trait_order, lex.group_order)
