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
from stereolens.stages.common import executor_config, languages_to_run, load_params, model_cache_dir
from stereolens.stages.registry import stage
from stereolens.studies.leakage.methods import ALL_METHODS
from stereolens.tracking import declare_run

HUMAN_RUN = declare_run("leakage", "human", params=("study",),
                        metrics=("max_abs_diff_{language}", "annotators_passed_{language}"))
SCORES_RUN = declare_run("leakage", "scores", params=("model", "study"), metrics=("{method}_seconds",))
FIT_RUN = declare_run("leakage", "fit", params=("fit", "method"),
                      metrics=("alpha_{term}", "p_{term}", "n_edges", "n_obs"))
REPORT_RUN = declare_run("leakage", "report", params=("study",), metrics=("n_edges", "n_fits"))

HUMAN_DIR = Path("data/processed/leakage/human")
SCORES_DIR = Path("data/processed/leakage/scores")
FIT_DIR = Path("data/processed/leakage/fit")
REPORT_DIR = Path("reports/leakage")
# the leakage-human gate reports: a declared output of that stage (dvc.yaml), so `dvc checkout` restores them
HUMAN_GATES_DIR = REPORT_DIR / "quality"
STUDY_KEY = "study.leakage"


def _lang_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--language", required=True, help="language code, e.g. hi")


def _study(args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    return load_params(STUDY_KEY, *extra, path=args.params)


# --------------------------------------------------------------------------- human matrices


@stage("leakage-human")
def leakage_human(args: argparse.Namespace) -> None:
    """Build H_<LANG> (traits x groups): the published survey (checked against the published files) for
    its four languages, or, for languages in ``study.leakage.judgements``, new judgements through QC."""
    from stereolens.studies.leakage.matrices import LANGUAGE_FILES
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
        if published:
            provenance.update(_published_matrices(Path(study["survey"]), published, run, min_annotators_per_group(study)))
        if survey_qc:
            provenance.update(_write_judgement_matrices(survey_qc, judg, run))
        write_json(HUMAN_DIR / "provenance.json", {lang: provenance[lang] for lang in langs})
        for lang in langs:
            run.log_dataset(HUMAN_DIR / f"H_{lang}.csv", name=f"H_{lang}", context="training")
    print(f"human matrices: {', '.join(f'H_{k}' for k in langs)} -> {HUMAN_DIR}"
          + (f" ({', '.join(from_judgements)} from judgements through QC)" if from_judgements else ""))


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


def _published_matrices(survey: Path, langs: list[str], run: Any, minimum: int) -> dict[str, Any]:
    """The seed 001 survey files -> H matrices, gated on reproducing the published aggregated files, then the
    study's minimum of annotators per group applied (the published files keep thinner shared groups)."""
    from stereolens.studies.leakage.matrices import (apply_min_annotators, read_matrix, survey_annotation_counts,
                                                     survey_file, survey_to_matrices, write_matrix)
    from stereolens.quality.gates import Expectation, run_gate

    reproduced = survey_to_matrices(survey, languages=langs)
    counts = survey_annotation_counts(survey, languages=langs)
    matrices, blanked = apply_min_annotators(reproduced, counts, minimum)
    rows = []
    for lang, m in reproduced.items():
        write_matrix(matrices[lang], HUMAN_DIR / f"H_{lang}.csv")
        published = survey / f"aggregated_data_{lang}.csv"
        if published.exists():
            ref = read_matrix(published).reindex(index=m.index, columns=m.columns)
            both = m.notna() & ref.notna()
            diff = (m - ref).abs()[both]
            mine = blanked[blanked["language"] == lang]
            rows.append({"language": lang, "cells": int(m.size), "missing": int(m.isna().sum().sum()),
                         "missing_mismatch": int((m.isna() != ref.isna()).sum().sum()),
                         "max_abs_diff": float(diff.max().max()) if both.any().any() else 0.0,
                         "groups_below_min": len(mine), "cells_blanked_below_min": int(len(mine) * len(m.index))})
    check = pd.DataFrame(rows, columns=["language", "cells", "missing", "missing_mismatch", "max_abs_diff",
                                        "groups_below_min", "cells_blanked_below_min"])
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
                   "min_annotators_per_group": minimum,
                   "groups_below_min": [f"{r.group} (n = {r.n_annotators})"
                                        for r in blanked[blanked["language"] == lang].itertuples()]}
            for lang in matrices}


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


def _write_judgement_matrices(survey_qc: Any, judg: dict[str, Any], run: Any) -> dict[str, Any]:
    """H matrices and the QC tables (annotators, passing per language, annotators per group)."""
    from stereolens.studies.leakage.matrices import write_matrix
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
    provenance = {}
    for r in summary.itertuples():
        provenance[r.language] = {
            "source": "judgements", "path": str(judg["path"]), "annotation_source": survey_qc.sources[r.language],
            "n_annotators": int(r.n_annotators), "n_annotators_passed": int(r.n_passed),
            "n_groups_rated": int(r.n_groups_rated), "n_groups_kept": int(r.n_groups_kept),
            "min_annotators_per_group": survey_qc.min_annotations_per_group,
        }
    return provenance


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
    from stereolens.studies.leakage.choice import choice_scores, same_polarity_pairs
    from stereolens.studies.leakage.choice_order import first_listed_wins
    from stereolens.studies.leakage.ilps import ilps_scores
    from stereolens.studies.leakage.items import to_matrix
    from stereolens.studies.leakage.lexicon import select_groups
    from stereolens.studies.leakage.set_score import set_scores

    done: dict[str, Any] = {}
    templates = _templates(study, language)
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


@stage("leakage-scores", configure=_lang_arg)
def leakage_scores(args: argparse.Namespace) -> None:
    """Association matrices (32 x 30) of every configured model for one language (+ the baseline if any)."""
    from stereolens.models import load_model, spec_from_config
    from stereolens.models.cache import ResponseCache
    from stereolens.studies.leakage.items import to_matrix
    from stereolens.studies.leakage.lexicon import load_lexicon
    from stereolens.studies.leakage.methods import methods_for_kind
    from stereolens.studies.leakage.set_score import set_scores
    from stereolens.tracking import stage_run

    p = _study(args, "model", "language", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    language = args.language.lower()
    out_root = SCORES_DIR / language
    if language not in languages_to_run([lang.lower() for lang in study["languages"]], p["language"]):
        write_json(out_root / "manifest.json", {"language": language, "skipped": "excluded by language.include"})
        print(f"leakage scores: {language} excluded by language.include; nothing scored")
        return
    lex = load_lexicon(study["seed_dir"])
    cache = ResponseCache(model_cache_dir())
    executor = executor_config(args.params)
    manifest: dict[str, Any] = {"language": language, "models": {}, "baseline": None,
                                "translation_status": lex.translation_status(language)}
    for model_cfg in model_configs(p):
        methods = list((study.get("methods") or {}).get(model_cfg["kind"]) or methods_for_kind(model_cfg["kind"]))
        with stage_run(tracking, SCORES_RUN, model=model_cfg["id"], language=language,
                       params={"model": model_cfg, "study": study}, axes={"method": ALL_METHODS},
                       tags={"translation_status": "authored" if language != "en" else "original+authored"}) as run:
            t0 = time.time()
            lm = load_model(spec_from_config(model_cfg), cache=cache, executor=executor)
            out_dir = out_root / model_cfg["id"]
            done = score_model(lm, model_cfg["kind"], methods, lex, language, study, cache, out_dir)
            manifest["models"][model_cfg["id"]] = {"kind": model_cfg["kind"], "methods": done,
                                                   "identity": getattr(lm, "identity", None),
                                                   "seconds": round(time.time() - t0, 1)}
            run.log_metrics({f"{m}_seconds": done[m]["seconds"] if m in done else None for m in ALL_METHODS})
            for m in done:
                run.log_artifact(out_dir / f"{m}.csv")
    baseline = (study.get("baselines") or {}).get(language)
    if baseline:
        spec = spec_from_config({"name": baseline, "kind": "masked", "backend": "hf"} if isinstance(baseline, str) else baseline)
        lm = load_model(spec, cache=cache, executor=executor)
        s = study.get("set", {})
        long = set_scores(lm, lex, language, template_ids=_templates(study, language),
                            piece_aggregation=s.get("piece_aggregation", "sum"),
                            template_aggregation=study.get("template_aggregation", "median"),
                            guard=s.get("guard", "clip"), cache=cache)
        write_csv(out_root / "baseline.csv", to_matrix(long, lex.trait_order, lex.group_order).reset_index())
        manifest["baseline"] = spec.name
    write_json(out_root / "manifest.json", manifest)
    runs = [f"{m}/{method}" for m, info in manifest["models"].items() for method in info["methods"]]
    print(f"leakage-scores {language}: {len(runs)} matrices ({', '.join(runs)}"
          + (f", baseline {manifest['baseline']}" if manifest["baseline"] else "")
          + f") in {sum(info['seconds'] for info in manifest['models'].values()):.0f}s -> {out_root}")


# --------------------------------------------------------------------------- fits


@stage("leakage-fit", configure=_lang_arg)
def leakage_fit(args: argparse.Namespace) -> None:
    """Mixed-effects leakage fit for every (model, method) scored in one target language."""
    from stereolens.studies.leakage.fit import MISSING_TREATMENTS, fit_leakage, human_term, leakage_edges
    from stereolens.studies.leakage.matrices import read_human_dir, read_score_matrix
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
    human, source = read_human_dir(HUMAN_DIR), _human_source(_read_human_provenance())
    baseline_path = SCORES_DIR / language / "baseline.csv"
    baseline = read_score_matrix(baseline_path, "baseline matrix") if manifest.get("baseline") else None
    terms = [human_term(lang) for lang in sorted(study["languages"], key=str.upper)]
    missing = fit_cfg.get("missing", "zero")
    if missing not in MISSING_TREATMENTS:
        raise ConfigError(f"study.leakage.fit.missing must be one of {', '.join(MISSING_TREATMENTS)} "
                          f"(zero: the reference code's treatment; drop: leave the cells out), got {missing!r}")
    alpha = float(fit_cfg.get("alpha", 0.05))
    for model_id, info in manifest["models"].items():
        for method in info["methods"]:
            if method not in (fit_cfg.get("methods") or [method]):
                continue
            target = read_score_matrix(SCORES_DIR / language / model_id / f"{method}.csv", "model score matrix")
            with stage_run(tracking, FIT_RUN, model=model_id, language=language, variant=method,
                           params={"fit": fit_cfg, "method": method}, annotation_source=source,
                           axes={"term": terms}) as run:
                out = out_root / model_id / method
                entry: dict[str, Any] = {"model": model_id, "method": method}
                # the configured treatment of missing human cells is the reported one; the other is fitted beside
                # it (alternative_missing/) so the report can show both edge sets
                for treatment in (missing, *[t for t in MISSING_TREATMENTS if t != missing]):
                    where = out if treatment == missing else out / "alternative_missing"
                    fit = fit_leakage(target, human, language, baseline=baseline, scale=fit_cfg.get("scale", "raw"),
                                      missing=treatment, alpha=alpha)
                    edges = leakage_edges(fit, alpha=alpha, model=f"{model_id}/{method}", converged_only=False)
                    write_csv(where / "coefficients.csv", fit.coefficients)
                    write_json(where / "edges.json", edges)
                    write_json(where / "fit.json", fit.summary())
                    n_edges = sum(e["converged"] for e in edges)
                    if treatment == missing:
                        primary_fit, primary_edges = fit, n_edges
                        entry.update({"dir": str(out), "missing": treatment, "n_edges": n_edges})
                    else:
                        entry["alternative"] = {"dir": str(where), "missing": treatment, "n_edges": n_edges}
                # a human term the fit left out (constant in this language) is NaN, not absent
                by_term = primary_fit.coefficients.set_index("term")
                run.log_metrics({f"alpha_{t}": by_term["estimate"].get(t) for t in terms}
                                | {f"p_{t}": by_term["p"].get(t) for t in terms}
                                | {"n_edges": primary_edges, "n_obs": primary_fit.n_obs})
                run.log_artifact(out / "coefficients.csv")
                summary["fits"].append(entry)
            print(f"  fit {model_id}/{method} -> {language.upper()}: {primary_edges} edge(s) with missing human cells "
                  f"{missing}, {entry['alternative']['n_edges']} with {entry['alternative']['missing']}"
                  f"{'' if primary_fit.converged else ' (NOT converged: edges not reported)'}; terms {primary_fit.terms}")
    write_json(out_root / "summary.json", summary)
    print(f"leakage-fit {language}: {len(summary['fits'])} fit(s), "
          f"{sum(f['n_edges'] for f in summary['fits'])} edge(s) -> {out_root}")


# --------------------------------------------------------------------------- report


def scores_coverage(manifest: dict[str, Any]) -> dict[str, Any]:
    """Per model and method of one language's scores manifest: templates used; for choice the mode,
    design and groups asked about (the report must say what the matrices cover)."""
    out: dict[str, Any] = {}
    if manifest.get("skipped"):
        return {"skipped": manifest["skipped"]}
    keys = ("templates", "mode_requested", "mode", "design", "both_orders", "pairs_per_group", "n_groups", "groups",
            "queries", "n_samples", "nonmatching", "first_listed_wins", "cells")
    for model_id, info in (manifest.get("models") or {}).items():
        for method, done in (info.get("methods") or {}).items():
            out[f"{model_id}/{method}"] = {k: done[k] for k in keys if k in done}
    if manifest.get("baseline"):
        out["baseline"] = {"model": manifest["baseline"]}
    return out


def _read_human_provenance() -> dict[str, Any]:
    path = HUMAN_DIR / "provenance.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


@stage("leakage-report")
def leakage_report(args: argparse.Namespace) -> None:
    """Coefficient table, leakage edges, beta table, flow figure, qualitative table, report page."""
    from stereolens.stats.multiple import family_description
    from stereolens.studies.leakage.fit import (MISSING_TREATMENTS, beta_table, family_size, qualitative_table,
                                                with_edge_corrections)
    from stereolens.studies.leakage.matrices import read_human_dir, read_score_matrix
    from stereolens.studies.leakage.report import edges_label, flow_figure, position_bias_by_panel, report_markdown
    from stereolens.studies.leakage.lexicon import load_lexicon
    from stereolens.tracking import stage_run

    p = _study(args, "model.id", "tracking")
    study, tracking = p[STUDY_KEY], p["tracking"]
    top_k = int((study.get("report") or {}).get("qualitative_top_k", 20))
    lex = load_lexicon(study["seed_dir"])
    human = read_human_dir(HUMAN_DIR)
    coef_frames, edges, fit_summaries, qual_frames, nonmatch = [], [], [], [], []
    beta_inputs: dict[tuple[str, str], pd.DataFrame] = {}
    coverage: dict[str, Any] = {}
    panels: list[str] = []
    languages = [lang.lower() for lang in study["languages"]]
    for language in languages:
        manifest_path = SCORES_DIR / language / "manifest.json"
        if manifest_path.exists():
            coverage[language.upper()] = scores_coverage(json.loads(manifest_path.read_text(encoding="utf-8")))
        summary_path = FIT_DIR / language / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        for f in summary.get("fits", []):
            panel = f"{f['model']}/{f['method']}"
            if panel not in panels:
                panels.append(panel)
            fits_of_panel = [(Path(f["dir"]), True)]
            if f.get("alternative"):
                fits_of_panel.append((Path(f["alternative"]["dir"]), False))
            for out, configured in fits_of_panel:
                coef = pd.read_csv(out / "coefficients.csv")
                fs = json.loads((out / "fit.json").read_text(encoding="utf-8"))
                if configured:
                    beta_inputs[(panel, language)] = coef
                    fit_summaries.append({"panel": panel, **fs})
                coef = coef.assign(converged=bool(fs.get("converged", False)), missing=fs["missing"], configured=configured)
                coef.insert(0, "target", language.upper())
                coef.insert(0, "panel", panel)
                coef_frames.append(coef)
                edges.extend({"panel": panel, **{k: v for k, v in e.items() if k != "model"}, "configured": configured}
                             for e in json.loads((out / "edges.json").read_text(encoding="utf-8")))
        for nm in (SCORES_DIR / language).glob("*/choice_nonmatching.csv"):
            df = pd.read_csv(nm)
            df.insert(0, "model", nm.parent.name)
            nonmatch.append(df)
    if not coef_frames:
        raise DataError(f"no leakage fits found under {FIT_DIR}: run the leakage-fit stages first")
    alpha = float((study.get("fit") or {}).get("alpha", 0.05))
    coefficients, edges = with_edge_corrections(pd.concat(coef_frames, ignore_index=True), edges, alpha=alpha)
    reported = [e for e in edges if e["configured"] and e["converged"]]
    n_unconverged_edges = sum(1 for e in edges if e["configured"] and not e["converged"])
    for e in reported:
        language = e["target"].lower()
        model_id, method = e["panel"].rsplit("/", 1)
        target = read_score_matrix(SCORES_DIR / language / model_id / f"{method}.csv", "model score matrix")
        q = qualitative_table(target, human, e["source"], e["target"], top_k=top_k, traits=lex.traits)
        q.insert(0, "panel", e["panel"])
        qual_frames.append(q)
    beta = beta_table(beta_inputs, languages)
    qualitative = pd.concat(qual_frames, ignore_index=True) if qual_frames else pd.DataFrame(
        columns=["panel", "source", "target", "trait", "group", "model_z", "source_human_z", "target_human_z", "leak_score"])
    # an empty table (with its columns) when nothing was sampled: the file is a declared stage output
    nonmatching = pd.concat(nonmatch, ignore_index=True) if nonmatch else pd.DataFrame(
        columns=["model", "language", "group", "n_generations", "n_nonmatching", "share_nonmatching"])
    human_provenance = _read_human_provenance()
    # the edges are leakage in Equation 1's sense only where every fit had its monolingual baseline
    baseline_available = all(s["baseline_available"] for s in fit_summaries)
    label = edges_label(baseline_available)
    configured_missing = fit_summaries[0]["missing"]
    n_family = family_size(coefficients, configured_missing)
    correction_legend = family_description(n_family, alpha)
    bias = position_bias_by_panel(coverage)
    with stage_run(tracking, REPORT_RUN, model=p["model.id"], params={"study": study},
                   annotation_source=_human_source(human_provenance)) as run:
        write_csv(REPORT_DIR / "coefficients.csv", coefficients)
        write_json(REPORT_DIR / "edges.json", edges)
        write_csv(REPORT_DIR / "beta_table.csv", beta)
        write_csv(REPORT_DIR / "qualitative.csv", qualitative)
        write_csv(REPORT_DIR / "choice_nonmatching.csv", nonmatching)
        figs = flow_figure(reported, panels, languages, REPORT_DIR / "flow",
                           title=f"{label[0].upper()}{label[1:]} (human source language -> target language in the model)")
        status = {lang: lex.translation_status(lang) for lang in languages}
        note = ("English templates and prompt are authored around the survey's own wording; Russian, Chinese and Hindi "
                f"words, templates and prompts are authored, unreviewed translations ({json.dumps(status, ensure_ascii=False)}).")
        md = report_markdown(model_id=p["model.id"], coefficients=coefficients, edges=edges, beta=beta,
                             qualitative=qualitative, fit_summaries=fit_summaries, nonmatching=nonmatching,
                             provenance={"translation_note": note, "human": human_provenance}, coverage=coverage,
                             alpha=alpha, correction_legend=correction_legend, position_bias=bias)
        write_text(REPORT_DIR / "report.md", md)
        other = [e for e in edges if not e["configured"] and e["converged"]]
        metrics = {"n_edges": len(reported), "n_fits": len(fit_summaries),
                   "edges_are": label,
                   "edges": [f"{e['panel']}: {e['source']}->{e['target']} ({e['estimate']:.3g}, p={e['p']:.2g}, "
                             f"p_holm={e['p_holm']:.2g}, p_bh={e['p_bh']:.2g})" for e in reported],
                   "missing_human_cells": {
                       "configured": configured_missing, "n_edges": len(reported),
                       "alternative": next((t for t in MISSING_TREATMENTS if t != configured_missing), None),
                       "n_edges_alternative": len(other),
                       "edges_alternative": [f"{e['panel']}: {e['source']}->{e['target']} ({e['estimate']:.3g}, "
                                             f"p={e['p']:.2g})" for e in other]},
                   "n_edges_not_converged": n_unconverged_edges,
                   "multiple_comparisons": {
                       "rule": f"paper's rule: alpha > 0 and p < {alpha:g}, per coefficient",
                       "family": f"every non-target human term of every fit with missing human cells {configured_missing}",
                       "n_tests": n_family, "legend": correction_legend,
                       "n_edges_holm": sum(bool(e["p_holm"] < alpha) for e in reported),
                       "n_edges_bh": sum(bool(e["p_bh"] < alpha) for e in reported)},
                   "position_bias": bias,
                   "terms": {f"{s['panel']}->{s['target_language']}": s["terms"] for s in fit_summaries},
                   "baseline_available": any(s["baseline_available"] for s in fit_summaries),
                   "baseline_available_all_fits": baseline_available,
                   "fits": [{"panel": s["panel"], "target": s["target_language"], "n_obs": s["n_obs"],
                             "missing_human": s["missing"],
                             "n_dropped_missing_human": s.get("n_dropped_missing_human"),
                             "n_zero_filled_missing_human": s.get("n_zero_filled_missing_human"),
                             "converged": s.get("converged"), "optimiser": s.get("optimiser")}
                            for s in fit_summaries],
                   "coverage": coverage,
                   "human": human_provenance,
                   "translation_status": status,
                   # the report site's contract (README, "The report")
                   "headline": {label: len(reported), "fits": len(fit_summaries),
                                "converged fits": sum(bool(s.get("converged")) for s in fit_summaries)},
                   "provenance": {"annotation_source": _human_source(human_provenance),
                                  "translation_status": {k: sum(by.get(k, 0) for by in status.values())
                                                         for k in sorted({k for by in status.values() for k in by})},
                                  "machine_generated": False,
                                  "notes": [note]}}
        write_json(REPORT_DIR / "summary.json", metrics)
        run.log_metrics({"n_edges": len(reported), "n_fits": len(fit_summaries)})
        run.set_tags({"translation_status": "authored (unreviewed) for ru/zh/hi"})
        for path in [REPORT_DIR / "coefficients.csv", REPORT_DIR / "report.md", *figs]:
            run.log_artifact(path)
    print(f"leakage report: {len(reported)} {label} over {len(fit_summaries)} fit(s)"
          + (f" ({n_unconverged_edges} more from fits that did not converge, not reported)" if n_unconverged_edges else "")
          + f" -> {REPORT_DIR}")
