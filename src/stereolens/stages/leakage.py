"""DVC stages of the leakage study (seed 001): human matrices, model scores, fits, report.

    leakage-human                      data/raw/stereotype_leakage -> data/processed/leakage/human/H_<LANG>.csv
    leakage-scores --language L        models -> data/processed/leakage/scores/<l>/<model>/<method>.csv
    leakage-fit --language L           -> data/processed/leakage/fit/<l>/<model>/<method>/coefficients.csv ...
    leakage-report                     -> reports/leakage/ (coefficients, edges, beta table, flow figure, ...)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import write_csv, write_json, write_text
from stereolens.stages.common import languages_to_run, load_params, model_cache_dir
from stereolens.stages.registry import stage

HUMAN_DIR = Path("data/processed/leakage/human")
SCORES_DIR = Path("data/processed/leakage/scores")
FIT_DIR = Path("data/processed/leakage/fit")
REPORT_DIR = Path("reports/leakage")
STUDY_KEY = "study.leakage"


def _lang_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--language", required=True, help="language code, e.g. hi")


def _study(args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    return load_params(STUDY_KEY, *extra, path=args.params)


# --------------------------------------------------------------------------- human matrices


@stage("leakage-human")
def leakage_human(args: argparse.Namespace) -> None:
    """Build H_<LANG> (32 traits x 30 groups) from the survey and check them against the published files."""
    from stereolens.annotation.aggregate import read_matrix, survey_annotation_counts, survey_to_matrices, write_matrix
    from stereolens.quality.gates import Expectation, run_gate
    from stereolens.tracking import stage_run

    p = _study(args, "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    survey = Path(study["survey"])
    langs = [lang.upper() for lang in study["languages"]]
    with stage_run(tracking, study="leakage", stage="human", params={"study": study},
                   annotation_source="human") as run:
        matrices = survey_to_matrices(survey, languages=langs)
        rows = []
        for lang, m in matrices.items():
            write_matrix(m, HUMAN_DIR / f"H_{lang}.csv")
            published = survey / f"aggregated_data_{lang}.csv"
            if published.exists():
                ref = read_matrix(published).reindex(index=m.index, columns=m.columns)
                both = m.notna() & ref.notna()
                diff = (m - ref).abs()[both]
                rows.append({"language": lang, "cells": int(m.size), "missing": int(m.isna().sum().sum()),
                             "missing_mismatch": int((m.isna() != ref.isna()).sum().sum()),
                             "max_abs_diff": float(diff.max().max()) if both.any().any() else 0.0})
        check = pd.DataFrame(rows)
        write_csv(HUMAN_DIR / "published_check.csv", check)
        write_csv(HUMAN_DIR / "annotation_counts.csv", survey_annotation_counts(survey, languages=langs))
        if not check.empty:
            run_gate(check, [
                Expectation("expect_column_max_to_be_between", column="max_abs_diff", min_value=0, max_value=1e-6),
                Expectation("expect_column_max_to_be_between", column="missing_mismatch", min_value=0, max_value=0),
            ], study="leakage", artefact=str(HUMAN_DIR), suite="leakage_human_reproduces_published")
            run.log_metrics({f"max_abs_diff_{r['language']}": r["max_abs_diff"] for r in rows})
        for lang in matrices:
            run.log_dataset(HUMAN_DIR / f"H_{lang}.csv", name=f"H_{lang}", context="training")
    print(f"human matrices: {', '.join(f'H_{k}' for k in matrices)} -> {HUMAN_DIR}")


# --------------------------------------------------------------------------- model scores


def model_configs(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The configured model first, then the study's extra models (each a model config mapping with an id)."""
    models = [params["model"]] + list(params[STUDY_KEY].get("extra_models") or [])
    ids = [m.get("id") for m in models]
    if any(not i for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"study.leakage.extra_models: every model needs a distinct id (got {ids})")
    return models


def _templates(study: dict[str, Any], language: str) -> list[str] | None:
    chosen = (study.get("templates") or {}).get(language)
    return list(chosen) if chosen else None


def score_model(lm: Any, kind: str, methods: list[str], lex: Any, language: str, study: dict[str, Any],
                cache: Any, out_dir: Path) -> dict[str, Any]:
    """Every configured method for one model and language; matrices and long tables under out_dir."""
    from stereolens.scoring import association as A

    done: dict[str, Any] = {}
    templates = _templates(study, language)
    agg = study.get("template_aggregation", "median")
    batch_tokens = study.get("batch_tokens")
    for method in methods:
        t0 = time.time()
        extra: dict[str, Any] = {}
        if method == "set":
            s = study.get("set", {})
            long = A.set_scores(lm, lex, language, template_ids=templates, piece_aggregation=s.get("piece_aggregation", "sum"),
                                template_aggregation=agg, guard=s.get("guard", "clip"), cache=cache)
        elif method == "ilps":
            i = study.get("ilps", {})
            red = i.get("causal_reduction", "sum") if kind == "causal" else i.get("seq2seq_reduction", "mean")
            long = A.ilps_scores(lm, lex, language, kind=kind, template_ids=templates, reduction=red,
                                 template_aggregation=agg, cache=cache, batch_tokens=batch_tokens)
        elif method == "choice":
            c = study.get("choice", {})
            long, per_query, nonmatching = A.choice_scores(
                lm, lex, language, mode=c.get("mode", "logprob"), design=c.get("design", "all"), opponents=c.get("opponents"),
                both_orders=bool(c.get("both_orders", False)), n_samples=int(c.get("n_samples", 10)),
                temperature=float(c.get("temperature", 1.0)), groups=c.get("groups"), cache=cache,
                batch_tokens=batch_tokens,
            )
            write_csv(out_dir / "choice_queries.csv", per_query)
            if nonmatching is not None:
                write_csv(out_dir / "choice_nonmatching.csv", nonmatching)
                extra["nonmatching"] = int(nonmatching["n_nonmatching"].sum())
            extra["queries"] = int(len(per_query))
        else:
            raise ConfigError(f"unknown leakage method {method!r} (set, ilps, choice)")
        matrix = A.to_matrix(long, lex.trait_order, lex.group_order)
        write_csv(out_dir / f"{method}_long.csv", long)
        write_csv(out_dir / f"{method}.csv", matrix.reset_index())
        done[method] = {"seconds": round(time.time() - t0, 1), "cells": int(matrix.notna().sum().sum()), **extra}
        print(f"  {language} {method}: {done[method]}")
    return done


@stage("leakage-scores", configure=_lang_arg)
def leakage_scores(args: argparse.Namespace) -> None:
    """Association matrices (32 x 30) of every configured model for one language (+ the baseline if any)."""
    from stereolens.models import load_model, spec_from_config
    from stereolens.models.cache import ResponseCache
    from stereolens.scoring import association as A
    from stereolens.tracking import stage_run

    p = _study(args, "model", "language", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    language = args.language.lower()
    out_root = SCORES_DIR / language
    if language not in languages_to_run([lang.lower() for lang in study["languages"]], p["language"]):
        write_json(out_root / "manifest.json", {"language": language, "skipped": "excluded by language.include"})
        print(f"leakage scores: {language} excluded by language.include; nothing scored")
        return
    lex = A.load_lexicon(study["seed_dir"])
    cache = ResponseCache(model_cache_dir())
    manifest: dict[str, Any] = {"language": language, "models": {}, "baseline": None,
                                "translation_status": lex.translation_status(language)}
    for model_cfg in model_configs(p):
        methods = list((study.get("methods") or {}).get(model_cfg["kind"]) or A.methods_for_kind(model_cfg["kind"]))
        with stage_run(tracking, study="leakage", stage="scores", model=model_cfg["id"], language=language,
                       params={"model": model_cfg, "study": study},
                       tags={"translation_status": "authored" if language != "en" else "original+authored"}) as run:
            t0 = time.time()
            lm = load_model(spec_from_config(model_cfg), cache=cache)
            out_dir = out_root / model_cfg["id"]
            done = score_model(lm, model_cfg["kind"], methods, lex, language, study, cache, out_dir)
            manifest["models"][model_cfg["id"]] = {"kind": model_cfg["kind"], "methods": done,
                                                   "identity": getattr(lm, "identity", None),
                                                   "seconds": round(time.time() - t0, 1)}
            run.log_metrics({f"{m}_seconds": d["seconds"] for m, d in done.items()})
            for m in done:
                run.log_artifact(out_dir / f"{m}.csv")
    baseline = (study.get("baselines") or {}).get(language)
    if baseline:
        spec = spec_from_config({"name": baseline, "kind": "masked", "backend": "hf"} if isinstance(baseline, str) else baseline)
        lm = load_model(spec, cache=cache)
        s = study.get("set", {})
        long = A.set_scores(lm, lex, language, template_ids=_templates(study, language),
                            piece_aggregation=s.get("piece_aggregation", "sum"),
                            template_aggregation=study.get("template_aggregation", "median"),
                            guard=s.get("guard", "clip"), cache=cache)
        write_csv(out_root / "baseline.csv", A.to_matrix(long, lex.trait_order, lex.group_order).reset_index())
        manifest["baseline"] = spec.name
    write_json(out_root / "manifest.json", manifest)


# --------------------------------------------------------------------------- fits


@stage("leakage-fit", configure=_lang_arg)
def leakage_fit(args: argparse.Namespace) -> None:
    """Mixed-effects leakage fit for every (model, method) scored in one target language."""
    from stereolens.analysis.leakage import fit_leakage, leakage_edges
    from stereolens.analysis.leakage_cli import read_human_dir, read_score_matrix
    from stereolens.tracking import stage_run

    p = _study(args, "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    fit_cfg = study.get("fit", {})
    language = args.language.lower()
    manifest = json.loads((SCORES_DIR / language / "manifest.json").read_text(encoding="utf-8"))
    out_root = FIT_DIR / language
    summary: dict[str, Any] = {"language": language, "fits": []}
    if manifest.get("skipped"):
        summary["skipped"] = manifest["skipped"]
        write_json(out_root / "summary.json", summary)
        return
    human = read_human_dir(HUMAN_DIR)
    baseline_path = SCORES_DIR / language / "baseline.csv"
    baseline = read_score_matrix(baseline_path, "baseline matrix") if manifest.get("baseline") else None
    for model_id, info in manifest["models"].items():
        for method in info["methods"]:
            if method not in (fit_cfg.get("methods") or [method]):
                continue
            target = read_score_matrix(SCORES_DIR / language / model_id / f"{method}.csv", "model score matrix")
            with stage_run(tracking, study="leakage", stage="fit", model=model_id, language=language,
                           params={"study.fit": fit_cfg, "method": method}, annotation_source="human") as run:
                fit = fit_leakage(target, human, language, baseline=baseline, scale=fit_cfg.get("scale", "raw"),
                                  missing=fit_cfg.get("missing", "drop"), alpha=float(fit_cfg.get("alpha", 0.05)))
                edges = leakage_edges(fit, alpha=float(fit_cfg.get("alpha", 0.05)), model=f"{model_id}/{method}")
                out = out_root / model_id / method
                write_csv(out / "coefficients.csv", fit.coefficients)
                write_json(out / "edges.json", edges)
                write_json(out / "fit.json", fit.summary())
                run.log_metrics({f"alpha_{r.term}": r.estimate for r in fit.coefficients.itertuples() if r.term.startswith("H_")}
                                | {f"p_{r.term}": r.p for r in fit.coefficients.itertuples() if r.term.startswith("H_")}
                                | {"n_edges": len(edges), "n_obs": fit.n_obs})
                run.log_artifact(out / "coefficients.csv")
                summary["fits"].append({"model": model_id, "method": method, "dir": str(out), "n_edges": len(edges)})
            print(f"  fit {model_id}/{method} -> {language.upper()}: {len(edges)} edge(s); terms {fit.terms}")
    write_json(out_root / "summary.json", summary)


# --------------------------------------------------------------------------- report


@stage("leakage-report")
def leakage_report(args: argparse.Namespace) -> None:
    """Coefficient table, leakage edges, beta table, flow figure, qualitative table, report page."""
    from stereolens.analysis.leakage import qualitative_table
    from stereolens.analysis.leakage_cli import read_human_dir, read_score_matrix
    from stereolens.report.leakage import flow_figure, report_markdown
    from stereolens.scoring.association import load_lexicon
    from stereolens.tracking import stage_run

    p = _study(args, "model.id", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    top_k = int((study.get("report") or {}).get("qualitative_top_k", 20))
    lex = load_lexicon(study["seed_dir"])
    human = read_human_dir(HUMAN_DIR)
    coef_frames, edges, fit_summaries, beta_rows, qual_frames, nonmatch = [], [], [], {}, [], []
    panels: list[str] = []
    languages = [lang.lower() for lang in study["languages"]]
    for language in languages:
        summary_path = FIT_DIR / language / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        for f in summary.get("fits", []):
            panel = f"{f['model']}/{f['method']}"
            if panel not in panels:
                panels.append(panel)
            out = Path(f["dir"])
            coef = pd.read_csv(out / "coefficients.csv")
            coef.insert(0, "target", language.upper())
            coef.insert(0, "panel", panel)
            coef_frames.append(coef)
            fs = json.loads((out / "fit.json").read_text(encoding="utf-8"))
            fit_summaries.append({"panel": panel, **fs})
            lm = coef[coef["term"] == f"LM_{language.upper()}"]
            beta_rows.setdefault(panel, {})[language.upper()] = float(lm["estimate"].iloc[0]) if len(lm) else float("nan")
            for e in json.loads((out / "edges.json").read_text(encoding="utf-8")):
                e = {"panel": panel, **{k: v for k, v in e.items() if k != "model"}}
                edges.append(e)
                target = read_score_matrix(SCORES_DIR / language / f["model"] / f"{f['method']}.csv", "model score matrix")
                q = qualitative_table(target, human, e["source"], e["target"], top_k=top_k, traits=lex.traits)
                q.insert(0, "panel", panel)
                qual_frames.append(q)
        for nm in (SCORES_DIR / language).glob("*/choice_nonmatching.csv"):
            df = pd.read_csv(nm)
            df.insert(0, "model", nm.parent.name)
            nonmatch.append(df)
    if not coef_frames:
        raise DataError(f"no leakage fits found under {FIT_DIR}: run the leakage-fit stages first")
    coefficients = pd.concat(coef_frames, ignore_index=True)
    beta = pd.DataFrame.from_dict(beta_rows, orient="index").reindex(columns=[lang.upper() for lang in languages])
    beta.index.name = "model"
    beta = beta.reset_index()
    qualitative = pd.concat(qual_frames, ignore_index=True) if qual_frames else pd.DataFrame(
        columns=["panel", "source", "target", "trait", "group", "model_z", "source_human_z", "target_human_z", "leak_score"])
    nonmatching = pd.concat(nonmatch, ignore_index=True) if nonmatch else None
    with stage_run(tracking, study="leakage", stage="report", model=p["model.id"], params={"study": study},
                   annotation_source="human") as run:
        write_csv(REPORT_DIR / "coefficients.csv", coefficients)
        write_json(REPORT_DIR / "edges.json", edges)
        write_csv(REPORT_DIR / "beta_table.csv", beta)
        write_csv(REPORT_DIR / "qualitative.csv", qualitative)
        if nonmatching is not None:
            write_csv(REPORT_DIR / "choice_nonmatching.csv", nonmatching)
        figs = flow_figure(edges, panels, languages, REPORT_DIR / "flow")
        status = {lang: lex.translation_status(lang) for lang in languages}
        note = ("English templates and prompt are authored around the survey's own wording; Russian, Chinese and Hindi "
                f"words, templates and prompts are authored, unreviewed translations ({json.dumps(status, ensure_ascii=False)}).")
        md = report_markdown(model_id=p["model.id"], coefficients=coefficients, edges=edges, beta=beta,
                             qualitative=qualitative, fit_summaries=fit_summaries, nonmatching=nonmatching,
                             provenance={"translation_note": note})
        write_text(REPORT_DIR / "report.md", md)
        metrics = {"n_edges": len(edges), "n_fits": len(fit_summaries),
                   "edges": [f"{e['panel']}: {e['source']}->{e['target']} ({e['estimate']:.3g}, p={e['p']:.2g})" for e in edges],
                   "terms": {f"{s['panel']}->{s['target_language']}": s["terms"] for s in fit_summaries},
                   "baseline_available": any(s["baseline_available"] for s in fit_summaries),
                   "translation_status": status}
        write_json(REPORT_DIR / "summary.json", metrics)
        run.log_metrics({"n_edges": len(edges), "n_fits": len(fit_summaries)})
        run.set_tags({"translation_status": "authored (unreviewed) for ru/zh/hi"})
        for path in [REPORT_DIR / "coefficients.csv", REPORT_DIR / "report.md", *figs]:
            run.log_artifact(path)
    print(f"leakage report: {len(edges)} edge(s) over {len(fit_summaries)} fit(s) -> {REPORT_DIR}")
