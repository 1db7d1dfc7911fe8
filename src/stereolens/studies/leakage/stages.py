"""DVC stages of the leakage study (Cao et al. 2024): human matrices, model scores, fits, report.

    leakage-human                      data/raw/stereotype_leakage -> data/processed/leakage/human/H_<LANG>.csv
    leakage-scores --model M --language L  -> data/processed/leakage/<M>/scores/<l>/<model>/<method>.csv
    leakage-fit --model M --language L     -> data/processed/leakage/<M>/fit/<l>/<model>/<method>/coefficients.csv ...
    leakage-report --model M               -> reports/leakage/<M>/ (coefficients, edges, beta table, flow figure, ...)

(<model> is M itself, plus study.leakage.extra_models in the primary model's tree.)
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.io import write_csv, write_json, write_text
from stereolens.stages.common import languages_to_run, load_params, stage_params
from stereolens.stages.registry import stage
from stereolens.stages.kit import load_stage_model, model_dir, write_study_summary
from stereolens.studies.leakage.methods import ALL_METHODS
from stereolens.studies.leakage.report_inputs import read_human_provenance
from stereolens.studies.leakage.scores import STUDY_KEY
from stereolens.tracking import declare_run

HUMAN_RUN = declare_run("leakage", "human", params=("study",),
                        metrics=("max_abs_diff_{language}", "annotators_passed_{language}"))
SCORES_RUN = declare_run("leakage", "scores", params=("model", "study"), metrics=("{method}_seconds",))
FIT_RUN = declare_run("leakage", "fit", params=("fit", "method"),
                      metrics=("alpha_{term}", "p_{term}", "n_edges", "n_obs"))
REPORT_RUN = declare_run("leakage", "report", params=("study",),
                         metrics=("n_edges", "n_fits", "paired_difference.{other}.{cell}"))
PAIRED_RUN = declare_run("leakage", "paired", params=("study",), metrics=("difference.{pair}.{cell}",))

PROCESSED = Path("data/processed/leakage")
HUMAN_DIR = PROCESSED / "human"
REPORT_DIR = Path("reports/leakage")
# every model's coefficient differences from every other's, edge by edge (leakage-paired; read by each report)
PAIRED_JSON = REPORT_DIR / "paired.json"
# the leakage-human gate reports: a declared output of that stage (dvc.yaml), so `dvc checkout` restores them
HUMAN_GATES_DIR = REPORT_DIR / "quality"


def _lang_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--language", required=True, help="language code, e.g. hi")


def _study(args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    return load_params(STUDY_KEY, *extra, path=args.params)


def _scores_dir(model_id: str) -> Path:
    return model_dir(PROCESSED, model_id) / "scores"


def _fit_dir(model_id: str) -> Path:
    return model_dir(PROCESSED, model_id) / "fit"


# --------------------------------------------------------------------------- human matrices


@stage("leakage-human")
def leakage_human(args: argparse.Namespace) -> None:
    """Build H_<LANG> (traits x groups): the published survey (checked against the published files) for
    its four languages, or, for languages in ``study.leakage.judgements``, new judgements through QC."""
    from stereolens.studies.leakage.matrices import LANGUAGE_FILES, THIN_GROUPS_COLUMNS, write_thin_groups
    from stereolens.tracking import stage_run

    p = _study(args, "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    langs = [lang.upper() for lang in study["languages"]]
    judg = study.get("judgements") or {}
    survey_qc = _judgement_matrices(study, judg, langs) if judg.get("path") else None
    from_judgements = list(survey_qc.matrices) if survey_qc else []
    published = [lang for lang in langs if lang not in from_judgements]
    unknown = [lang for lang in published if lang not in LANGUAGE_FILES]
    if unknown:
        raise ConfigError(
            f"study.leakage.languages: {', '.join(unknown)} not in the published survey ({', '.join(LANGUAGE_FILES)}) "
            f"and not in study.leakage.judgements.path ({judg.get('path') or 'not set'})"
        )
    source = least_human_source(survey_qc.sources.values() if survey_qc else [])
    HUMAN_GATES_DIR.mkdir(parents=True, exist_ok=True)  # a declared output, even when no gate applies
    with stage_run(tracking, HUMAN_RUN, params={"study": study}, annotation_source=source,
                   axes={"language": langs}) as run:
        # a language's matrix comes either from the published survey or from new judgements: the other's
        # metric is NaN in its run
        run.log_metrics({f"max_abs_diff_{lang}": None for lang in from_judgements}
                        | {f"annotators_passed_{lang}": None for lang in published})
        provenance: dict[str, Any] = {}
        thin: list[pd.DataFrame] = []
        if published:
            prov, published_thin = _published_matrices(Path(study["survey"]), published, run,
                                                       min_annotators_per_group(study))
            provenance.update(prov)
            thin.append(published_thin)
        if survey_qc:
            prov, judged_thin = _write_judgement_matrices(survey_qc, judg, run)
            provenance.update(prov)
            thin.append(judged_thin)
        # the groups rated by too few annotators, kept in H (not missing): read by leakage-fit for its thin rule
        thin = [t for t in thin if not t.empty]
        thin_table = pd.concat(thin, ignore_index=True) if thin else pd.DataFrame(columns=THIN_GROUPS_COLUMNS)
        write_thin_groups(thin_table, HUMAN_DIR)
        write_json(HUMAN_DIR / "provenance.json", {lang: provenance[lang] for lang in langs})
        for lang in langs:
            run.log_dataset(HUMAN_DIR / f"H_{lang}.csv", name=f"H_{lang}", context="training")
    print(f"human matrices: {', '.join(f'H_{k}' for k in langs)} -> {HUMAN_DIR}"
          + (f" ({', '.join(from_judgements)} from judgements through QC)" if from_judgements else "")
          + (f"; thin groups kept with their values and listed: "
             + ", ".join(f"{r.language} {r.group} (n = {r.n_annotators})" for r in thin_table.itertuples())
             if len(thin_table) else ""))


def least_human_source(sources: Any) -> str:
    """The one MLflow ``annotation_source`` for results resting on several H matrices: the least human
    source present, so a simulated survey is never logged as human (provenance.json keeps each language's)."""
    present = {part for src in sources for part in str(src).split("+")}
    return next((s for s in ("simulated", "llm_panel") if s in present), "human")


def _human_source(provenance: dict[str, Any]) -> str:
    """annotation_source of the H matrices (their provenance.json), for the stages downstream of leakage-human;
    the published survey's languages carry no ``annotation_source`` and are human."""
    return least_human_source(v.get("annotation_source", "human") for v in provenance.values())


def min_annotators_per_group(study: dict[str, Any]) -> int:
    """The study's one minimum of annotators per group (both the published and the new-survey path)."""
    from stereolens.studies.leakage.matrices import MIN_ANNOTATORS_PER_GROUP

    value = study.get("min_annotators_per_group", MIN_ANNOTATORS_PER_GROUP)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"study.leakage.min_annotators_per_group must be an integer >= 1, got {value!r}")
    return value


def _published_matrices(survey: Path, langs: list[str], run: Any, minimum: int) -> tuple[dict[str, Any], pd.DataFrame]:
    """The Cao et al. 2024 survey files -> H matrices, gated on reproducing the published aggregated files.

    The published files keep two shared groups rated by fewer than the study's minimum (Hindi: immigrant n = 1,
    Asian person n = 4) and the reference fit uses their values: they stay in H with those values and are listed
    in ``thin_groups.csv`` (the fit's own rule, ``study.leakage.fit.thin_groups``, decides how they enter), never
    blanked into the missing (999) cells that the fit fills with 0.  Returns (provenance, thin groups)."""
    from stereolens.studies.leakage.matrices import (read_matrix, survey_annotation_counts, survey_file,
                                                     survey_to_matrices, thin_groups_table, write_matrix)
    from stereolens.quality.gates import Expectation, run_gate

    matrices = survey_to_matrices(survey, languages=langs)
    counts = survey_annotation_counts(survey, languages=langs)
    thin = thin_groups_table(matrices, counts, minimum)
    rows = []
    for lang, m in matrices.items():
        write_matrix(m, HUMAN_DIR / f"H_{lang}.csv")
        published = survey / f"aggregated_data_{lang}.csv"
        if published.exists():
            ref = read_matrix(published).reindex(index=m.index, columns=m.columns)
            both = m.notna() & ref.notna()
            diff = (m - ref).abs()[both]
            mine = thin[thin["language"] == lang]
            rows.append({"language": lang, "cells": int(m.size), "missing": int(m.isna().sum().sum()),
                         "missing_mismatch": int((m.isna() != ref.isna()).sum().sum()),
                         "max_abs_diff": float(diff.max().max()) if both.any().any() else 0.0,
                         "groups_below_min": len(mine), "cells_below_min": int(len(mine) * len(m.index))})
    check = pd.DataFrame(rows, columns=["language", "cells", "missing", "missing_mismatch", "max_abs_diff",
                                        "groups_below_min", "cells_below_min"])
    write_csv(HUMAN_DIR / "published_check.csv", check)
    write_csv(HUMAN_DIR / "annotation_counts.csv", counts)
    if not check.empty:
        run_gate(check, [
            Expectation("expect_column_max_to_be_between", column="max_abs_diff", min_value=0, max_value=1e-6),
            Expectation("expect_column_max_to_be_between", column="missing_mismatch", min_value=0, max_value=0),
        ], study="leakage", artefact=str(HUMAN_DIR), suite="leakage_human_reproduces_published",
           report_dir=HUMAN_GATES_DIR)
    checked = {r["language"]: r["max_abs_diff"] for r in rows}
    run.log_metrics({f"max_abs_diff_{lang}": checked.get(lang) for lang in langs})
    return {lang: {"source": "published survey", "path": str(survey_file(survey, lang)),
                   "min_annotators_per_group": minimum, "groups_below_min": _below_min(thin, lang)}
            for lang in matrices}, thin


def _below_min(thin: pd.DataFrame, lang: str) -> list[str]:
    """A language's thin groups as provenance.json lists them: "immigrant (n = 1)"."""
    return [f"{r.group} (n = {r.n_annotators})" for r in thin[thin["language"] == lang].itertuples()]


def _judgement_matrices(study: dict[str, Any], judg: dict[str, Any], langs: list[str]) -> Any:
    from stereolens.studies.leakage.survey import judgements_to_matrices, qc_config, read_survey_judgements
    from stereolens.io import read_csv_checked
    from stereolens.studies.leakage.lexicon import load_lexicon

    unknown = sorted(set(judg) - {"path", "checks", "qc"})
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in study.leakage.judgements (known: path, checks, qc)")
    lex = load_lexicon(study["seed_dir"])
    judgements = read_survey_judgements(judg["path"], lex.trait_order, lex.group_order)
    checks = None
    if judg.get("checks"):
        checks = read_csv_checked(judg["checks"], ["annotator_id"], what="attention-check table",
                                  dtype={"annotator_id": str, "check_id": str})
    qc = dict(judg.get("qc") or {})
    if "min_annotations_per_group" in qc:
        raise ConfigError("study.leakage.judgements.qc.min_annotations_per_group: set "
                          "study.leakage.min_annotators_per_group instead (one rule for the published and new surveys)")
    qc["min_annotations_per_group"] = min_annotators_per_group(study)
    out = judgements_to_matrices(judgements, languages=langs, traits=lex.trait_order, groups=lex.group_order,
                                 qc=qc_config(qc), checks=checks)
    if out.ignored_languages:
        print(f"note: judgements for {', '.join(out.ignored_languages)} ignored (not in study.leakage.languages)")
    return out


def _write_judgement_matrices(survey_qc: Any, judg: dict[str, Any], run: Any) -> tuple[dict[str, Any], pd.DataFrame]:
    """H matrices and the QC tables (annotators, passing per language, annotators per group); returns
    (provenance, thin groups: rated by fewer passing annotators than the minimum, kept in H and flagged)."""
    from stereolens.studies.leakage.matrices import thin_groups_table, write_matrix
    from stereolens.quality.gates import Expectation, run_gate

    qc_dir = HUMAN_DIR / "qc"
    for lang, m in survey_qc.matrices.items():
        write_matrix(m, HUMAN_DIR / f"H_{lang}.csv")
    write_csv(qc_dir / "annotators.csv", survey_qc.annotators)
    write_csv(qc_dir / "per_language.csv", survey_qc.per_language)
    write_csv(qc_dir / "groups.csv", survey_qc.groups)
    kept = survey_qc.groups.groupby("language").agg(n_groups_rated=("rated", "sum"), n_groups_kept=("meets_min", "sum"))
    summary = survey_qc.per_language.set_index("language").join(kept).reset_index()
    # a language whose every group fell below the minimum would enter the fit as an all-missing term
    run_gate(summary, [Expectation("expect_column_min_to_be_between", column="n_groups_kept", min_value=1)],
             study="leakage", artefact=str(qc_dir), suite="leakage_human_judgements_qc", report_dir=HUMAN_GATES_DIR)
    run.log_metrics({f"annotators_passed_{r.language}": int(r.n_passed) for r in summary.itertuples()})
    thin = thin_groups_table(survey_qc.matrices, survey_qc.groups, survey_qc.min_annotations_per_group)
    provenance = {}
    for r in summary.itertuples():
        provenance[r.language] = {
            "source": "judgements", "path": str(judg["path"]), "annotation_source": survey_qc.sources[r.language],
            "n_annotators": int(r.n_annotators), "n_annotators_passed": int(r.n_passed),
            "n_groups_rated": int(r.n_groups_rated), "n_groups_kept": int(r.n_groups_kept),
            "min_annotators_per_group": survey_qc.min_annotations_per_group,
            "groups_below_min": _below_min(thin, r.language),
        }
    return provenance, thin


# --------------------------------------------------------------------------- model scores


@stage("leakage-scores", configure=_lang_arg, per_model=True)
def leakage_scores(args: argparse.Namespace) -> None:
    """Association matrices (32 x 30) of every configured model for one language (+ the baseline if any)."""
    from stereolens.studies.leakage.lexicon import load_lexicon
    from stereolens.studies.leakage.methods import methods_for_kind
    from stereolens.scoring import scoring_setup
    from stereolens.studies.leakage.scores import baseline_config, baseline_set_matrix, model_configs, score_model
    from stereolens.tracking import stage_run

    p = stage_params(args, STUDY_KEY, "model", "language", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    language = args.language.lower()
    out_root = _scores_dir(p["model"]["id"]) / language
    if language not in languages_to_run([lang.lower() for lang in study["languages"]], p["language"]):
        write_json(out_root / "manifest.json", {"language": language, "skipped": "excluded by language.include"})
        print(f"leakage scores: {language} excluded by language.include; nothing scored")
        return
    lex = load_lexicon(study["seed_dir"])
    manifest: dict[str, Any] = {"language": language, "models": {}, "baseline": None,
                                "translation_status": lex.translation_status(language)}
    elapsed = 0.0
    # the study's extra_models are scored once, beside the primary model (--model names a compared one otherwise)
    for model_cfg in model_configs(p, with_extra_models=args.model is None or args.model == _primary_id(args)):
        methods = list((study.get("methods") or {}).get(model_cfg["kind"]) or methods_for_kind(model_cfg["kind"]))
        with stage_run(tracking, SCORES_RUN, model=model_cfg["id"], language=language, scoring_model=model_cfg,
                       params={"model": model_cfg, "study": study}, axes={"method": ALL_METHODS},
                       tags={"translation_status": "authored" if language != "en" else "original+authored"}) as run:
            t0 = time.time()
            lm = load_stage_model(model_cfg, params_path=args.params)
            run.set_tags(scoring_setup(lm, batch_tokens=study.get("batch_tokens")))  # how passes were packed
            out_dir = out_root / model_cfg["id"]
            done = score_model(lm, model_cfg["kind"], methods, lex, language, study, lm.cache, out_dir)
            # times say how the run went, not what was scored: MLflow and the printed line keep them,
            # manifest.json (a DVC output) does not, so a rerun from the cache writes the same bytes
            method_seconds = {m: info.pop("seconds") for m, info in done.items()}
            elapsed += time.time() - t0
            manifest["models"][model_cfg["id"]] = {"kind": model_cfg["kind"], "methods": done,
                                                   "identity": getattr(lm, "identity", None)}
            run.log_metrics({f"{m}_seconds": method_seconds.get(m) for m in ALL_METHODS})
            for m in done:
                run.log_artifact(out_dir / f"{m}.csv")
    baseline = (study.get("baselines") or {}).get(language)
    if baseline:
        lm = load_stage_model(baseline_config(baseline), params_path=args.params, key=f"{STUDY_KEY}.baselines.{language}")
        write_csv(out_root / "baseline.csv", baseline_set_matrix(lm, lex, language, study, lm.cache).reset_index())
        manifest["baseline"] = lm.spec.name
    write_json(out_root / "manifest.json", manifest)
    runs = [f"{m}/{method}" for m, info in manifest["models"].items() for method in info["methods"]]
    print(f"leakage-scores {language}: {len(runs)} matrices ({', '.join(runs)}"
          + (f", baseline {manifest['baseline']}" if manifest["baseline"] else "")
          + f") in {elapsed:.0f}s -> {out_root}")


# --------------------------------------------------------------------------- fits


@stage("leakage-fit", configure=_lang_arg, per_model=True)
def leakage_fit(args: argparse.Namespace) -> None:
    """Mixed-effects leakage fit for every (model, method) scored in one target language."""
    from stereolens.studies.leakage.fit import (check_missing_treatment, check_thin_rule, fit_missing_treatments,
                                                human_term)
    from stereolens.studies.leakage.inference import add_cluster_intervals
    from stereolens.studies.leakage.matrices import read_human_dir, read_score_matrix, read_thin_groups
    from stereolens.studies.leakage.robustness import variant_fits
    from stereolens.tracking import stage_run

    p = stage_params(args, STUDY_KEY, "model.id", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    fit_cfg = study.get("fit", {})
    language = args.language.lower()
    scores_dir = _scores_dir(p["model.id"])
    manifest = json.loads((scores_dir / language / "manifest.json").read_text(encoding="utf-8"))
    out_root = _fit_dir(p["model.id"]) / language
    summary: dict[str, Any] = {"language": language, "fits": []}
    if manifest.get("skipped"):
        summary["skipped"] = manifest["skipped"]
        write_json(out_root / "summary.json", summary)
        return
    human, source = read_human_dir(HUMAN_DIR), _human_source(read_human_provenance(HUMAN_DIR))
    thin = read_thin_groups(HUMAN_DIR)
    baseline_path = scores_dir / language / "baseline.csv"
    baseline = read_score_matrix(baseline_path, "baseline matrix") if manifest.get("baseline") else None
    terms = [human_term(lang) for lang in sorted(study["languages"], key=str.upper)]
    missing = check_missing_treatment(fit_cfg.get("missing", "zero"))
    thin_rule = check_thin_rule(fit_cfg.get("thin_groups", "keep"))
    alpha = float(fit_cfg.get("alpha", 0.05))
    resamples, seed = cluster_settings(fit_cfg)
    for model_id, info in manifest["models"].items():
        for method in [m for m in info["methods"] if m in (fit_cfg.get("methods") or [m])]:
            target = read_score_matrix(scores_dir / language / model_id / f"{method}.csv", "model score matrix")
            with stage_run(tracking, FIT_RUN, model=model_id, language=language, variant=method,
                           params={"fit": fit_cfg, "method": method}, annotation_source=source,
                           axes={"term": terms}) as run:
                out = out_root / model_id / method
                scale = fit_cfg.get("scale", "raw")
                fits = fit_missing_treatments(target, human, language, baseline=baseline, missing=missing, alpha=alpha,
                                              scale=scale, model=f"{model_id}/{method}",
                                              thin=thin, thin_rule=thin_rule)
                for _, fit, _ in fits:  # the clustered interval beside MixedLM's, under both treatments
                    add_cluster_intervals(fit, resamples=resamples, seed=seed, alpha=alpha)
                queries = scores_dir / language / model_id / "choice_queries.csv"
                variants = variant_fits(target, human, language, configured=fits[0][1], baseline=baseline, scale=scale,
                                        missing=missing, alpha=alpha, thin=thin, thin_rule=thin_rule, method=method,
                                        per_query=pd.read_csv(queries) if method == "choice" and queries.is_file()
                                        else None)
                entry = {"model": model_id, "method": method, **_write_fits(fits, out),
                         "variants": _write_variants(variants, out, alpha=alpha, model=f"{model_id}/{method}")}
                primary_fit = fits[0][1]
                # a human term the fit left out (constant in this language) is NaN, not absent
                by_term = primary_fit.coefficients.set_index("term")
                run.log_metrics({f"alpha_{t}": by_term["estimate"].get(t) for t in terms}
                                | {f"p_{t}": by_term["p"].get(t) for t in terms}
                                | {"n_edges": entry["n_edges"], "n_obs": primary_fit.n_obs})
                run.log_artifact(out / "coefficients.csv")
                summary["fits"].append(entry)
            print(f"  fit {model_id}/{method} -> {language.upper()}: {entry['n_edges']} edge(s) with missing human cells "
                  f"{missing}, {entry['alternative']['n_edges']} with {entry['alternative']['missing']}"
                  f"{'' if primary_fit.converged else ' (NOT converged: edges not reported)'}; terms {primary_fit.terms}")
    write_json(out_root / "summary.json", summary)
    print(f"leakage-fit {language}: {len(summary['fits'])} fit(s), "
          f"{sum(f['n_edges'] for f in summary['fits'])} edge(s) -> {out_root}")


def _primary_id(args: argparse.Namespace) -> str:
    return str(load_params("model.id", path=args.params)["model.id"])


def cluster_settings(fit_cfg: dict[str, Any]) -> tuple[int, int]:
    """(resamples, seed) of the cluster bootstrap, ``study.leakage.fit.cluster``."""
    from stereolens.studies.leakage.inference import DEFAULT_RESAMPLES, DEFAULT_SEED

    cfg = fit_cfg.get("cluster") or {}
    unknown = sorted(set(cfg) - {"resamples", "seed"})
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in study.leakage.fit.cluster (known: resamples, seed)")
    resamples, seed = cfg.get("resamples", DEFAULT_RESAMPLES), cfg.get("seed", DEFAULT_SEED)
    for name, value, low in (("resamples", resamples, 2), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"study.leakage.fit.cluster.{name} must be an integer >= {low}, got {value!r}")
    return resamples, seed


def _write_fits(fits: list[tuple[str, Any, list[dict[str, Any]]]], out: Path) -> dict[str, Any]:
    """Coefficients, edges, fit summary and the fitted rows (``design.csv``, what the paired stage resamples) of
    each treatment (the first, configured one in ``out``, the other in ``out/alternative_missing``); the summary
    entry of the fit."""
    entry: dict[str, Any] = {}
    for k, (treatment, fit, edges) in enumerate(fits):
        where = out if k == 0 else out / "alternative_missing"
        write_csv(where / "coefficients.csv", fit.coefficients)
        write_json(where / "edges.json", edges)
        write_json(where / "fit.json", fit.summary())
        write_csv(where / "design.csv", fit.design)
        n_edges = sum(e["converged"] for e in edges)
        if k == 0:
            entry.update({"dir": str(out), "missing": treatment, "n_edges": n_edges})
        else:
            entry["alternative"] = {"dir": str(where), "missing": treatment, "n_edges": n_edges}
    return entry


def _write_variants(variants: list[Any], out: Path, *, alpha: float, model: str) -> list[dict[str, Any]]:
    """Each robustness variant's coefficients, edges and fit summary under ``out/variants/<slug>``; one summary
    entry per variant, with the reason where it was not run."""
    from stereolens.studies.leakage.fit import leakage_edges

    entries = []
    for v in variants:
        entry: dict[str, Any] = {"choice": v.choice, "variant": v.variant, "ran": v.ran}
        if v.ran:
            where = out / "variants" / v.slug
            edges = leakage_edges(v.fit, alpha=alpha, model=model, converged_only=False)
            write_csv(where / "coefficients.csv", v.fit.coefficients)
            write_json(where / "edges.json", edges)
            write_json(where / "fit.json", v.fit.summary())
            entry.update({"dir": str(where), "n_edges": sum(e["converged"] for e in edges)})
        else:
            entry["reason"] = v.reason
        entries.append(entry)
    return entries


# --------------------------------------------------------------------------- paired comparisons


@stage("leakage-paired")
def leakage_paired(args: argparse.Namespace) -> None:
    """Every pair of the run's models: the difference of their coefficients edge by edge (paired bootstrap)."""
    from stereolens.studies.leakage.paired import (compare_panels, configured_cells, find_panels, paired_document,
                                                   run_models)
    from stereolens.tracking import stage_run

    p = load_params(STUDY_KEY, "models", "tracking", path=args.params)
    study, tracking = p[STUDY_KEY], p["tracking"]
    fit_cfg = study.get("fit") or {}
    alpha = float(fit_cfg.get("alpha", 0.05))
    resamples, seed = cluster_settings(fit_cfg)
    models = run_models(p["models"], study)
    ids = [m for m, _ in models]
    languages = [lang.lower() for lang in study["languages"]]
    panels = find_panels(PROCESSED, list(p["models"]), languages)
    table = compare_panels(panels, languages, order=ids, alpha=alpha, resamples=resamples, seed=seed)
    reason = "" if len(ids) > 1 else f"one model in this run ({ids[0]}): nothing to compare"
    doc = paired_document(table, ids, alpha=alpha, resamples=resamples, seed=seed, reason=reason)
    cells = configured_cells(study, [k for _, k in models]) or ["none"]
    # the report runs log one metric per other model and cell: the same keys in every run, from the configuration
    doc["metric_cells"] = cells
    pairs = [f"{a}__{b}" for a, b in itertools.combinations(ids, 2)] or ["none"]
    with stage_run(tracking, PAIRED_RUN, params={"study": study}, annotation_source=_human_source(
            read_human_provenance(HUMAN_DIR)), axes={"pair": pairs, "cell": cells}) as run:
        write_csv(REPORT_DIR / "paired.csv", table)
        write_json(PAIRED_JSON, doc)
        values: dict[str, Any] = {f"difference.{pair}.{cell}": None for pair in pairs for cell in cells}
        for row in table.itertuples():
            key = f"difference.{row.model_a}__{row.model_b}.{row.method}.{row.source}_to_{row.target}"
            if key in values:
                values[key] = row.difference
        run.log_metrics(values)
        run.log_artifact(REPORT_DIR / "paired.csv")
    verdicts = table["verdict"].value_counts().to_dict() if len(table) else {}
    print(f"leakage paired: {len(table)} comparison(s) of {len(ids)} model(s)"
          + (f" ({', '.join(f'{n} {v}' for v, n in verdicts.items())})" if verdicts else f" ({doc.get('reason')})")
          + f" -> {REPORT_DIR / 'paired.csv'}, {PAIRED_JSON}")


# --------------------------------------------------------------------------- report


@stage("leakage-report", per_model=True)
def leakage_report(args: argparse.Namespace) -> None:
    """Coefficient table, leakage edges, beta table, flow figure, qualitative table, report page."""
    from stereolens.studies.leakage.lexicon import load_lexicon
    from stereolens.studies.leakage.matrices import read_human_dir
    from stereolens.studies.leakage.paired import difference_metrics
    from stereolens.studies.leakage.report import flow_figure
    from stereolens.studies.leakage.report_contents import build_report
    from stereolens.studies.leakage.report_inputs import collect_fits
    from stereolens.tracking import stage_run

    p = stage_params(args, STUDY_KEY, "model.id", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    languages = [lang.lower() for lang in study["languages"]]
    scores_dir, report_dir = _scores_dir(p["model.id"]), model_dir(REPORT_DIR, p["model.id"])
    human_provenance = read_human_provenance(HUMAN_DIR)
    source = _human_source(human_provenance)
    if not PAIRED_JSON.is_file():
        raise DataError(f"{PAIRED_JSON} not found: run the leakage-paired stage before leakage-report")
    paired = json.loads(PAIRED_JSON.read_text(encoding="utf-8"))
    report = build_report(
        collect_fits(_fit_dir(p["model.id"]), scores_dir, languages), read_human_dir(HUMAN_DIR), load_lexicon(study["seed_dir"]),
        languages, model_id=p["model.id"], scores_dir=scores_dir, human_provenance=human_provenance,
        annotation_source=source, alpha=float((study.get("fit") or {}).get("alpha", 0.05)),
        top_k=int((study.get("report") or {}).get("qualitative_top_k", 20)), paired=paired)
    others, cells = list(paired.get("models") or [p["model.id"]]), list(paired.get("metric_cells") or ["none"])
    with stage_run(tracking, REPORT_RUN, model=p["model.id"], params={"study": study}, annotation_source=source,
                   axes={"other": others, "cell": cells}) as run:
        write_csv(report_dir / "coefficients.csv", report.coefficients)
        write_csv(report_dir / "robustness.csv", report.robustness)
        write_json(report_dir / "edges.json", report.edges)
        write_csv(report_dir / "beta_table.csv", report.beta)
        write_csv(report_dir / "qualitative.csv", report.qualitative)
        write_csv(report_dir / "choice_nonmatching.csv", report.nonmatching)
        figs = flow_figure(report.reported, report.panels, languages, report_dir / "flow",
                           title=f"{report.label[0].upper()}{report.label[1:]} (human source language -> target language in the model)")
        write_text(report_dir / "report.md", report.markdown)
        write_study_summary(report_dir / "summary.json", report.summary)
        run.log_metrics({"n_edges": report.summary["n_edges"], "n_fits": report.summary["n_fits"],
                         **difference_metrics(paired, p["model.id"], others, cells)})
        run.set_tags({"translation_status": "authored (unreviewed) for ru/zh/hi"})
        for path in [report_dir / "coefficients.csv", report_dir / "report.md", *figs]:
            run.log_artifact(path)
    print(f"leakage report: {len(report.reported)} {report.label} over {report.summary['n_fits']} fit(s)"
          + (f" ({report.n_unconverged_edges} more from fits that did not converge, not reported)"
             if report.n_unconverged_edges else "")
          + f" -> {report_dir}")
