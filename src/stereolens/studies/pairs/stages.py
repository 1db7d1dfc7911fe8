"""DVC stages of the pairs study (AmchiBias): construction, scoring, report.

attributes -> validate -> sentences -> pairs -> translate -> evaluate -> report.
Each stage reads only its declared params, calls one function of the study's modules with typed
arguments, writes what it returns and logs the run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import load_params, run_model_ids, stage_params
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY = "pairs"
ATTRIBUTES_RUN = declare_run(STUDY, "attributes", params=("attributes", "groups"),
                             metrics=("groups", "tuples", "groups_without_attributes"))
VALIDATE_RUN = declare_run(STUDY, "validate", params=("validation",), metrics=("fleiss_kappa", "tuples", "tuples_kept"))
SENTENCES_RUN = declare_run(STUDY, "sentences", params=("sentences",), metrics=("generated", "kept", "removed"))
PAIRS_RUN = declare_run(STUDY, "pairs", params=("contrast",), metrics=("pairs", "refused"))
TRANSLATE_RUN = declare_run(STUDY, "translate", params=("translation",), metrics=("rows", "flagged_not_minimal"))
EVALUATE_RUN = declare_run(STUDY, "evaluate", params=("metric", "evaluation"),
                           metrics=("{set}.pairs", "{set}.cache_hits", "{set}.cache_misses", "seconds"))
# one run per evaluation set (the variant); its cells are the set's languages x dimensions, NaN where empty
REPORT_RUN = declare_run(STUDY, "report", params=("evaluation",),
                         metrics=("bias_score.{language}.{dimension}", "n.{language}.{dimension}",
                                  "lms.{language}.{dimension}", "robustness.survives.{language}",
                                  "robustness.of.{language}", "paired.difference.{versus}.{language}.{dimension}"))
# one run over every pair of the run's models: the difference of their bias scores per pair and cell
PAIRED_RUN = declare_run(STUDY, "paired", params=("models", "evaluation"),
                         metrics=("comparisons", "difference.{pair}.{cell}"))
SEED = Path("data/seed/pairs")
INTERIM = Path("data/interim/pairs")
PROCESSED = Path("data/processed/pairs")
REPORTS = Path("reports/pairs")
# the run's models compared on the pairs both scored: reports/pairs/paired.{json,csv}
PAIRED = REPORTS / "paired.json"


def _generator(p: dict[str, Any], params_path: str):
    """The generator: ``study.pairs.generator`` (a model config) or, when null, the default model."""
    from stereolens.stages.kit import load_stage_model

    cfg = p.get("study.pairs.generator") or p["model"]
    return cfg, load_stage_model(cfg, params_path=params_path, key="study.pairs.generator", generator=True)


def _all_groups(p: dict[str, Any]):
    """The configured groups with their surface forms from the seed table."""
    from stereolens.studies.pairs.minimal_pairs import groups_from_config, read_group_forms

    return groups_from_config(p["study.pairs.groups"], read_group_forms(SEED / "group_forms.csv"))


def _groups(p: dict[str, Any]):
    groups = _all_groups(p)
    subset = p.get("study.pairs.construct_groups")
    if subset:
        unknown = sorted(set(subset) - {g.name for g in groups})
        if unknown:
            raise ConfigError(f"study.pairs.construct_groups names unknown group(s) {unknown}")
    return groups, (set(subset) if subset else None)


# ---------------------------------------------------------------- 1. attributes


@stage("pairs-attributes")
def attributes(args: argparse.Namespace) -> None:
    """Stereotypical attributes per group from the generator (AmchiBias appendix B), parsed robustly."""
    from stereolens.stages.kit import model_label
    from stereolens.studies.pairs.generation import generate_attributes
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.construct_groups",
                    "study.pairs.region", "study.pairs.attributes", "tracking", path=args.params)
    cfg = p["study.pairs.attributes"]
    n = int(cfg["n"])
    groups, subset = _groups(p)
    chosen = [g for g in groups if subset is None or g.name in subset]
    gen_cfg, lm = _generator(p, args.params)
    generator = model_label(gen_cfg)
    start = time.perf_counter()
    table, raw = generate_attributes(lm, chosen, region=p["study.pairs.region"], n=n,
                                     max_tokens=int(cfg.get("max_tokens", 96)),
                                     generator=generator)
    write_csv(INTERIM / "attributes.csv", table)
    write_json(INTERIM / "attributes_raw.json", {"generator": generator, "n_requested": n, "outputs": raw})
    empty = [r["group"] for r in raw if not r["parsed"]]
    with stage_run(p["tracking"], ATTRIBUTES_RUN, model=generator,
                   params={"attributes": cfg, "groups": [g.name for g in chosen]},
                   tags={"generator": generator, "source": "generator"}) as run:
        run.log_metrics({"groups": len(chosen), "tuples": len(table), "groups_without_attributes": len(empty)})
    print(f"pairs-attributes: {len(table)} (group, attribute) tuples from {len(chosen)} groups "
          f"({len(empty)} without a parsable list) in {time.perf_counter() - start:.1f}s")


# ---------------------------------------------------------------- 2. validation


@stage("pairs-validate")
def validate(args: argparse.Namespace) -> None:
    """Three annotators judge each tuple yes/no; keep >= 2 yes; Fleiss' kappa, Landis-Koch label, kappa gate."""
    from stereolens.studies.pairs.validation import annotation_config, validate_tuples
    from stereolens.tracking import stage_run

    p = load_params("annotation", "study.pairs.validation", "study.pairs.region", "tracking", "seed", path=args.params)
    vcfg = p["study.pairs.validation"]
    acfg = annotation_config(p["annotation"], vcfg)
    tuples = read_csv_checked(INTERIM / "attributes.csv", ["tuple_id", "group", "attribute"], what="pairs attributes",
                              dtype=str, keep_default_na=False)
    enforce = bool(vcfg.get("enforce_gate", True))
    result = validate_tuples(tuples, acfg, region=p["study.pairs.region"]["name"],
                             judgements_path=vcfg.get("judgements"),
                             valid_share=float(vcfg.get("simulated_valid_share", 0.85)), seed=int(p["seed"]),
                             min_yes=int(vcfg.get("min_yes", 2)), enforce_gate=enforce,
                             judgements_out=INTERIM / "tuple_judgements.csv", report_dir=REPORTS / "validation",
                             study=STUDY)
    summary = result.summary
    write_csv(INTERIM / "tuples.csv", result.tuples)
    write_json(REPORTS / "validation" / "summary.json", summary)
    with stage_run(p["tracking"], VALIDATE_RUN, annotation_source=acfg.source,
                   params={"validation": vcfg}, tags={"annotations_simulated": acfg.source == "simulated",
                                                      "gate_passed": summary["gate_passed"]}) as run:
        run.log_metrics({"fleiss_kappa": summary["fleiss_kappa"], "tuples": summary["tuples"],
                         "tuples_kept": summary["kept"]})
    print(f"pairs-validate ({acfg.source}): kept {summary['kept']} of {summary['tuples']} tuples, Fleiss' kappa "
          f"{summary['fleiss_kappa']:.3f} ({summary['landis_koch']}), gate {summary['kappa_gate']} "
          f"{'passed' if summary['gate_passed'] else 'FAILED (reported, not enforced)'}")


# ---------------------------------------------------------------- 3. sentences


@stage("pairs-sentences")
def sentences(args: argparse.Namespace) -> None:
    """Sentences per kept tuple (AmchiBias appendix A), automatic filters with reasons, the review file."""
    from stereolens.stages.kit import model_label
    from stereolens.studies.pairs.generation import generate_sentences
    from stereolens.studies.pairs.review import curate_sentences
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.region",
                    "study.pairs.sentences", "tracking", path=args.params)
    cfg = p["study.pairs.sentences"]
    k, max_words = int(cfg["per_tuple"]), int(cfg.get("max_words", 15))
    tuples = read_csv_checked(INTERIM / "tuples.csv", ["tuple_id", "dimension", "group", "attribute", "keep"],
                              what="validated tuples")
    tuples = tuples[tuples["keep"].astype(str).str.lower() == "true"]
    gen_cfg, lm = _generator(p, args.params)
    generator = model_label(gen_cfg)
    region = p["study.pairs.region"]
    generated = generate_sentences(lm, tuples, context=region["adjective"], k=k, max_words=max_words,
                                   max_tokens=int(cfg.get("max_tokens", 24 * k)),
                                   generator=generator)
    group_terms = {g.name: [*g.surface(), region["name"], region["adjective"]] for g in _all_groups(p)}
    review_path = cfg.get("review")
    kept, removed, summary = curate_sentences(
        generated, max_words=max_words, min_words=int(cfg.get("min_words", 3)),
        near_duplicate_ratio=float(cfg.get("near_duplicate_ratio", 0.9)), synonyms=cfg.get("synonyms") or {},
        group_terms=group_terms, review_dir=REPORTS / "sentences" / "review", review_path=review_path)
    write_csv(INTERIM / "sentences_generated.csv", generated)
    write_csv(INTERIM / "sentences_removed.csv", removed)
    write_csv(INTERIM / "sentences.csv", kept)
    write_json(REPORTS / "sentences" / "filter_summary.json", summary)
    with stage_run(p["tracking"], SENTENCES_RUN, model=generator, params={"sentences": cfg},
                   tags={"generator": generator, "sentences_reviewed": bool(review_path)}) as run:
        run.log_metrics({"generated": len(generated), "kept": len(kept), "removed": len(removed)})
    print(f"pairs-sentences: {len(generated)} generated, {len(removed)} removed by filters/review, {len(kept)} kept "
          f"({'reviewed' if review_path else 'unreviewed'})")


# ---------------------------------------------------------------- 4. minimal pairs


@stage("pairs-pairs")
def pairs(args: argparse.Namespace) -> None:
    """Minimal pairs from the contrast map with the occupation-coupling lists and the token-diff check."""
    from stereolens.studies.pairs.minimal_pairs import read_group_classes
    from stereolens.studies.pairs.minimal_pairs import Coupling, construct_pairs
    from stereolens.tracking import stage_run

    p = load_params("study.pairs.groups", "study.pairs.construct_groups", "study.pairs.contrast",
                    "study.pairs.coupling", "tracking", path=args.params)
    groups, _ = _groups(p)
    contrast = p["study.pairs.contrast"]
    sents = read_csv_checked(INTERIM / "sentences.csv", ["sentence_id", "dimension", "group", "attribute", "sentence",
                                                         "review_status"], what="pairs sentences")
    classes = read_group_classes(SEED / "group_classes.csv")
    built = construct_pairs(sents, groups, contrast, Coupling.from_config(p["study.pairs.coupling"]), classes)
    write_csv(PROCESSED / "constructed_en.csv", built.pairs)
    write_csv(INTERIM / "pairs_refused.csv", built.refused)
    write_json(REPORTS / "construction" / "pairs_summary.json", built.summary)
    write_csv(REPORTS / "construction" / "table2_pairs_per_dimension.csv", built.table2)
    with stage_run(p["tracking"], PAIRS_RUN, params={"contrast": contrast}) as run:
        run.log_metrics({"pairs": len(built.pairs), "refused": len(built.refused)})
    by_reason = ", ".join(f"{k} {v}" for k, v in built.summary["refusals_by_reason"].items()) or "none"
    print(f"pairs-pairs: {len(built.pairs)} minimal pairs, {len(built.refused)} refused ({by_reason}; reasons in "
          f"{INTERIM / 'pairs_refused.csv'})")


# ---------------------------------------------------------------- 5. translation


@stage("pairs-translate")
def translate(args: argparse.Namespace) -> None:
    """Machine translation through the model layer (marked machine); reviewed translations imported."""
    from stereolens.stages.kit import model_label
    from stereolens.studies.pairs.minimal_pairs import read_case_suffixes
    from stereolens.studies.pairs.translation import translate_pairs
    from stereolens.tracking import stage_run

    p = load_params("model", "study.pairs.generator", "study.pairs.groups", "study.pairs.translation", "tracking",
                    path=args.params)
    cfg = p["study.pairs.translation"]
    en = read_csv_checked(PROCESSED / "constructed_en.csv", ["pair_id", "sent_stereo", "sent_anti"],
                          what="constructed pairs")
    suffixes = read_case_suffixes(SEED / "case_suffixes.csv")   # before the generator loads: a bad row costs nothing
    gen_cfg, lm = _generator(p, args.params)
    generator = model_label(gen_cfg)
    out, summary = translate_pairs(lm, en, targets=cfg["targets"], groups=_all_groups(p),
                                   max_tokens=int(cfg.get("max_tokens", 48)),
                                   generator=generator, reviewed_path=cfg.get("reviewed"), suffixes=suffixes)
    write_csv(PROCESSED / "constructed.csv", out)
    write_json(REPORTS / "construction" / "translation.json", summary)
    flagged = summary["flagged_not_minimal"]
    with stage_run(p["tracking"], TRANSLATE_RUN, model=generator, params={"translation": cfg},
                   tags={"translation_status": "machine+reviewed" if cfg.get("reviewed") else "machine"}) as run:
        run.log_metrics({"rows": len(out), "flagged_not_minimal": flagged})
    print(f"pairs-translate: {len(en)} pairs into {', '.join(t['language'] for t in cfg['targets'])} "
          f"(machine, {flagged} flagged as not minimal; reviewed rows used: "
          f"{summary['review_rows_used']} of {summary['review_rows']})")


# ---------------------------------------------------------------- 6. evaluation


@stage("pairs-evaluate", per_model=True)
def evaluate(args: argparse.Namespace) -> None:
    """Score every pair and control with the configured model; identity-term fragmentation per language."""
    from stereolens.scoring import scoring_setup
    from stereolens.stages.kit import load_stage_model, model_dir, model_label
    from stereolens.studies.pairs.analysis import EVALUATION_SETS
    from stereolens.scoring.types import alternative_metrics
    from stereolens.studies.pairs.evaluation import evaluation_sets, fragmentation_table, pairs_metric, score_sets
    from stereolens.tracking import stage_run

    p = stage_params(args, "model", "metric", "study.pairs.evaluation", "study.pairs.groups", "tracking")
    model_cfg, model = p["model"], model_label(p["model"])
    processed = model_dir(PROCESSED, model)
    metric = pairs_metric(model_cfg)
    table = evaluation_sets(p["study.pairs.evaluation"], model)
    lm = load_stage_model(model_cfg, params_path=args.params)
    start = time.perf_counter()
    batch_tokens = int(p["metric"].get("batch_tokens", 8192))
    # the robustness table's second masked-LM metric, where the config asks for the extra pass
    alternatives = alternative_metrics(metric) if p["study.pairs.evaluation"].get("alternative_metric_pass") else []
    scores, stats = score_sets(lm, table, metric, model=model, batch_tokens=batch_tokens,
                               truncate=bool(p["metric"].get("truncate", False)), alternatives=alternatives)
    write_csv(processed / "scores.csv", scores)
    write_csv(processed / "fragmentation.csv", fragmentation_table(lm.tokenizer, table, model=model))
    elapsed = time.perf_counter() - start
    # time and cache use say how the run went, not what was scored: MLflow and the printed line keep them,
    # scoring.json (a DVC output) keeps only each set's pair count, so a rerun from the cache writes the same bytes
    write_json(processed / "scoring.json", {"model": model, "identity": lm.identity, "metric": metric,
                                           "sets": {name: {k: counts[k] for k in ("pairs", "pairs_fp32") if k in counts}
                                                    for name, counts in stats.items()},
                                           "bias_score_uses": "summed log-likelihood" if metric == "causal"
                                           else "PLL-word-l2r summed over all words (AmchiBias Eq. 1)"})
    with stage_run(p["tracking"], EVALUATE_RUN, model=model, axes={"set": EVALUATION_SETS}, scoring_model=model_cfg,
                   params={"metric": metric, "evaluation": p["study.pairs.evaluation"]}) as run:
        run.set_tags(scoring_setup(lm, batch_tokens=batch_tokens))  # how the passes were packed, for the lineage
        # a set with nothing to score (crows not run, no constructed pairs) is NaN, not absent
        run.log_metrics({f"{k}.{m}": stats.get(k, {}).get(m) for k in EVALUATION_SETS
                         for m in ("pairs", "cache_hits", "cache_misses")})
        run.log_metrics({"seconds": elapsed})
    crows_note = f", CrowS-Pairs cache hits {stats['crows']['cache_hits']} misses {stats['crows']['cache_misses']}" \
        if "crows" in stats else ""
    print(f"pairs-evaluate: {len(scores)} pairs scored with {model} ({metric}) in {elapsed:.1f}s{crows_note}")


# ---------------------------------------------------------------- 7. report


@stage("pairs-report", per_model=True)
def report(args: argparse.Namespace) -> None:
    """Bias scores, BCa, binomial, LMS, hyperlocal gap, fragmentation; tables 3-6, figures, reports/pairs/."""
    from stereolens.stages.kit import model_dir
    from stereolens.stats.paired import paired_block
    from stereolens.stats.robustness import TABLE_FILE, robustness_block
    from stereolens.studies.pairs.analysis import robustness_rows
    from stereolens.studies.pairs.report import empty_sets, report_line, report_sets, study_summary, write_study_report

    p = stage_params(args, "model.id", "annotation.source", "study.pairs.evaluation", "tracking", "seed")
    ev = p["study.pairs.evaluation"]
    processed, reports_dir = model_dir(PROCESSED, p["model.id"]), model_dir(REPORTS, p["model.id"])
    scores = read_csv_checked(processed / "scores.csv", ["set", "id", "dimension", "score_stereo", "score_anti"],
                              what="pairs scores")
    frag = read_csv_checked(processed / "fragmentation.csv", [], what="fragmentation") \
        if (processed / "fragmentation.csv").stat().st_size > 1 else pd.DataFrame()
    scoring = json.loads((processed / "scoring.json").read_text(encoding="utf-8"))
    source = p["annotation.source"]
    reports = report_sets(scores, frag, model=p["model.id"], metric=scoring["metric"], annotation_source=source,
                          n_resamples=int(ev.get("bootstrap_resamples", 1000)), seed=int(p["seed"]),
                          alpha=float(ev.get("alpha", 0.05)), output=reports_dir)
    robustness = robustness_rows(scores, metric=scoring["metric"], alpha=float(ev.get("alpha", 0.05)),
                                 reference_resamples=int(ev.get("bootstrap_resamples", 1000)),
                                 n_resamples=int(ev.get("bootstrap_resamples", 1000)), seed=int(p["seed"]))
    summary = study_summary(reports, scores, model=p["model.id"], scoring=scoring, annotation_source=source)
    summary["robustness"] = robustness_block(robustness)
    summary["paired"] = paired_block(PAIRED, p["model.id"], stage="pairs_paired", models=run_model_ids(args.params))
    for name, part in scores.groupby("set", sort=False):
        _log_report_run(p["tracking"], reports[name], part, model=p["model.id"], evaluation=ev,
                        annotation_source=source, output=reports_dir, summary=summary)
    write_csv(reports_dir / TABLE_FILE, robustness)
    write_study_report(summary, empty_sets(reports, source), reports_dir, robustness=robustness)
    print("pairs-report: " + report_line(summary))


def _log_report_run(tracking: dict[str, Any], set_report, part: pd.DataFrame, *, model: str,
                    evaluation: dict[str, Any], annotation_source: str, output: Path, summary: dict[str, Any]) -> None:
    """One run per evaluation set: every language x dimension cell, NaN where the set has none; the set's
    robustness counts per language and this model's paired differences with every model of the run."""
    from stereolens.stats.paired import paired_metrics
    from stereolens.studies.pairs.analysis import ALL
    from stereolens.tracking import stage_run

    analysis, provenance = set_report
    name = provenance["set"]
    languages = sorted(set(part["language"].astype(str)))
    dimensions = [ALL, *sorted(set(part["dimension"].astype(str)) - {ALL})]  # ALL: the cell over every dimension
    versus = summary["paired"]["models"]
    with stage_run(tracking, REPORT_RUN, model=model, variant=name, params={"evaluation": evaluation},
                   axes={"language": languages, "dimension": dimensions, "versus": versus},
                   annotation_source=annotation_source if name == "constructed" else None,
                   tags={"set": name, "source": provenance["source"],
                         "translation_status": provenance["translation_status"]}) as run:
        cells = {f"{r['language']}.{r['dimension']}": r for r in analysis.cells.to_dict("records")}
        for language in languages:
            for dimension in dimensions:
                key = f"{language}.{dimension}"
                r = cells.get(key, {})
                run.log_metrics({f"bias_score.{key}": r.get("bias_score"), f"n.{key}": r.get("n"),
                                 f"lms.{key}": r.get("lms") if r.get("lms_n") else None})
        by_cell = summary["robustness"].get("by_cell", {})
        for language in languages:
            counts = by_cell.get(f"{name}.{language}", {})
            run.log_metrics({f"robustness.survives.{language}": counts.get("survives"),
                             f"robustness.of.{language}": counts.get("of")})
        # this model's bias score minus each other model's on the pairs both scored (NaN: itself, or not compared)
        cells = {f"{name}.{language}.{dimension}": f"{language}.{dimension}" for language in languages
                 for dimension in dimensions}
        run.log_metrics(paired_metrics(summary["paired"], model, cells))
        run.log_artifact(output / name)


@stage("pairs-paired")
def paired(args: argparse.Namespace) -> None:
    """Every pair of the run's models on the pairs both scored: the difference of their bias scores per
    evaluation set, language and dimension, McNemar's exact test, Holm / BH per set; one MLflow run."""
    from stereolens.stages.kit import model_dir
    from stereolens.stages.paired import paired_line, write_paired
    from stereolens.stats.paired import COMPARISON_FIELDS, comparison_records
    from stereolens.studies.pairs.analysis import PAIRED_FAMILY, check_scores, paired_by_set

    p = load_params("models", "study.pairs.evaluation", "tracking", "seed", path=args.params)
    ev, model_ids = p["study.pairs.evaluation"], list(p["models"] or {})
    frames, not_compared = [], {}
    for model in model_ids:
        path = model_dir(PROCESSED, model) / "scores.csv"
        scores = read_csv_checked(path, ["set", "id", "language", "dimension", "score_stereo", "score_anti"],
                                  what=f"pairs scores of {model}")
        if scores.empty:
            not_compared[model] = "scored no pair"
            continue
        frames.append(check_scores(scores, what=str(path)).assign(model=model))
    compared = [m for m in model_ids if m not in not_compared]
    table = pd.DataFrame()
    if len(compared) >= 2:
        table = paired_by_set(pd.concat(frames, ignore_index=True), compared, alpha=float(ev.get("alpha", 0.05)),
                              n_resamples=int(ev.get("bootstrap_resamples", 1000)), seed=int(p["seed"]))
    extra = ("set", "language", "dimension", "n_a_only", "n_b_only", "margin_difference", "margin_ci_low",
             "margin_ci_high", "p_margin")
    comparisons = comparison_records(table, cell_col="cell", extra=extra) if not table.empty else []
    document = write_paired(PAIRED, study="pairs", model_ids=model_ids, compared=compared, comparisons=comparisons,
                            columns=[*COMPARISON_FIELDS, *extra], family=PAIRED_FAMILY, not_compared=not_compared,
                            tracking=p["tracking"], schema=PAIRED_RUN, params={"models": model_ids, "evaluation": ev},
                            cells=sorted({c["cell"] for c in comparisons}))
    print(paired_line("pairs-paired", document, overall=lambda c: c["dimension"] == "all"))
