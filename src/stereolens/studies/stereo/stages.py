"""DVC stages of the stereo study (EspanStereo): retrieve -> validate -> instantiate -> overlap, evaluate -> report.

* ``stereo-retrieve``: prompts per country x category x point of view until saturation;
  raw responses, extracted stereotypes, saturation curve, refusal counts.
* ``stereo-validate``: Figure D1 questionnaire export, five annotators per country x category
  panel (simulated by default), median <= 2 discarded; Tables 7, E1-E5, D1-D10 shapes.
* ``stereo-instantiate``: StereoSet triples per validated stereotype (generator and/or annotators)
  plus the authored starter set, each with an irrelevant sentence -> data/processed/stereo/instances.csv.
* ``stereo-calibrate``: the labelled calibration set of the overlap's "same meaning" threshold
  (pcs translations, CrowS-Pairs near-misses), scored by trigrams and the configured similarity model.
* ``stereo-overlap``: Tables 1-5 and 11-12.
* ``stereo-evaluate``: candidate scores given the context, ss / lms / icat per country.
* ``stereo-report``: reports/stereo/report.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import load_params, run_model_ids, stage_model
from stereolens.stages.kit import (
    load_stage_model,
    model_dir,
    model_label,
    require_generator,
    write_study_summary,
)
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY = "stereo"
RETRIEVE_METRICS = ("n_requests", "n_refusals", "n_empty", "n_stereotypes", "n_without_target", "mean_rounds_per_pov",
                    "saturated_cells", "round_cap_cells", "refused_cells", "no_output_cells", "refused_rounds",
                    "no_output_rounds", "cached_responses", "extraction_parse_failures")
VALIDATE_METRICS = ("n_items", "n_judgements", "n_validated", "validation_rate")
RUNS = {
    "retrieve": declare_run(STUDY, "retrieve", params=("study",), metrics=RETRIEVE_METRICS),
    "validate": declare_run(STUDY, "validate", params=("study",), metrics=VALIDATE_METRICS),
    # n_machine, n_human, n_authored: every instance source, 0 when none came from it
    "instantiate": declare_run(STUDY, "instantiate", params=("study",), metrics=("n_instances", "n_{source}", "cached_responses")),
    "calibrate": declare_run(STUDY, "calibrate", params=("study",),
                             metrics=("threshold", "precision", "recall", "f1", "lexical_f1")),
    "overlap": declare_run(STUDY, "overlap", params=("study",)),
    "evaluate": declare_run(STUDY, "evaluate", params=("study",), metrics=("ss", "lms", "icat")),
    # one metric per model pair and cell: the difference of the two models' shares (model_a minus model_b)
    "paired": declare_run(STUDY, "paired", params=("study",), metrics=("difference.{pair}.{cell}",)),
    # the report of one model: its differences from every model of the run, and its robustness counts
    "report": declare_run(STUDY, "report", params=("study",),
                          metrics=("paired.difference.{other}.{cell}", "robustness.survives", "robustness.of",
                                   "robustness.not_run")),
}
INTERIM = Path("data/interim/stereo")
PROCESSED = Path("data/processed/stereo")
REPORTS = Path("reports/stereo")
GENERATOR_KEY = "study.stereo.generator"

log = logging.getLogger(__name__)


def _params(args: argparse.Namespace, top: tuple[str, ...], study: tuple[str, ...]) -> dict[str, Any]:
    """The declared top-level keys, and the declared ``study.stereo`` keys gathered under ``"study.stereo"``."""
    loaded = load_params(*top, *(f"study.stereo.{k}" for k in study), path=args.params)
    out = {k: loaded[k] for k in top}
    out["study.stereo"] = {k: loaded[f"study.stereo.{k}"] for k in study}
    return out


def _progress() -> bool:
    return sys.stderr.isatty()


def _generator_cfg(cfg: dict[str, Any], top_model: dict[str, Any]) -> dict[str, Any]:
    """``study.stereo.generator``, else the top-level model; refused unless it can generate posts."""
    gen = dict(cfg.get("generator") or top_model)
    require_generator(gen, key=GENERATOR_KEY)
    return gen


def _prompts(cfg: dict[str, Any]):
    from stereolens.studies.stereo.prompts import load_prompts

    return load_prompts(Path(cfg["seed_dir"]) / "prompts.yaml", cfg["language"])


def _run(p: dict[str, Any], stage_name: str, *, model: str | None = None, annotation_source: str | None = None,
         tags: dict[str, Any] | None = None, axes: dict[str, Any] | None = None,
         scoring_model: dict[str, Any] | None = None):
    from stereolens.tracking import stage_run

    return stage_run(p["tracking"], RUNS[stage_name], model=model, language=p["study.stereo"]["language"],
                     params={"study": p["study.stereo"]}, annotation_source=annotation_source, tags=tags, axes=axes,
                     scoring_model=scoring_model)


def without_run_facts(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` without its ``cached`` column: whether an answer came from the cache says how the run went,
    not what was collected, so a rerun from the cache writes the cold run's bytes (MLflow and the printed
    line carry the count instead)."""
    return table.drop(columns=["cached"])


def _cache_use(sim: Any) -> dict[str, int]:
    """How much of the similarity model's work came from the cache: a run fact for MLflow tags and the printed line."""
    from stereolens.studies.stereo.similarity import JudgeSimilarity

    if isinstance(sim, JudgeSimilarity):
        return {"judge_answers_cached": sum(bool(a["cached"]) for a in sim.answers), "judge_answers": len(sim.answers)}
    if hasattr(sim, "n_cached"):
        return {"embeddings_cached": sim.n_cached, "embeddings_computed": sim.n_computed}
    return {}


# ---------------------------------------------------------------- retrieve


@stage("stereo-retrieve")
def retrieve(args: argparse.Namespace) -> None:
    """Retrieve stereotypes from the generator until saturation (raw responses kept)."""
    from stereolens.studies.stereo import retrieval as rt
    from stereolens.studies.stereo.figures import saturation_figure

    p = _params(args, ("model", "seed", "tracking"),
                ("language", "seed_dir", "countries", "categories", "points_of_view", "generator", "retrieval"))
    cfg = p["study.stereo"]
    settings = rt.settings_from_config(cfg, int(p["seed"]))
    prompts = _prompts(cfg)
    rt.check_cells(prompts, settings)
    gen_cfg = _generator_cfg(cfg, p["model"])
    started = time.perf_counter()
    model = load_stage_model(gen_cfg, params_path=args.params, key=GENERATOR_KEY, generator=True)
    result = rt.retrieve(model, prompts, settings, model_label=model_label(gen_cfg), progress=_progress())
    out = INTERIM / "retrieval"
    n_cached = int(result.responses["cached"].sum())
    write_csv(out / "responses.csv", without_run_facts(result.responses))
    write_csv(out / "stereotypes.csv", result.stereotypes)
    write_csv(out / "saturation_curve.csv", result.curve)
    write_csv(out / "extractions.csv", without_run_facts(result.extractions))
    write_csv(REPORTS / "retrieval" / "refusals.csv", result.refusals)
    write_csv(REPORTS / "retrieval" / "saturation_curve.csv", result.curve)
    saturation_figure(result.curve, REPORTS / "retrieval" / "saturation_curve")
    summary = rt.retrieval_summary(result, settings, generator=model_label(gen_cfg))
    write_json(REPORTS / "retrieval" / "summary.json", summary)
    tag = "model (ours), rule fallback" if settings.extraction == "model" else "rule-based (ours)"
    with _run(p, "retrieve", model=model_label(gen_cfg), tags={"generator_source": "machine", "extraction": tag}) as run:
        run.log_metrics({**{k: summary[k] for k in RETRIEVE_METRICS if k in summary},
                         "cached_responses": n_cached, "extraction_parse_failures": summary["extraction"]["parse_failures"]})
        for f in ("responses.csv", "stereotypes.csv", "saturation_curve.csv", "extractions.csv"):
            run.log_artifact(out / f)
        run.log_artifact(REPORTS / "retrieval" / "refusals.csv")
    print(f"stereo-retrieve: {summary['n_stereotypes']} stereotypes from {summary['n_requests']} responses "
          f"({n_cached} from the cache, {summary['n_refusals']} refusals, {summary['no_output_rounds']} rounds without a readable "
          f"post, {summary['mean_rounds_per_pov']:.1f} rounds per point of view) "
          f"in {time.perf_counter() - started:.0f}s")


# ---------------------------------------------------------------- validate


@stage("stereo-validate")
def validate(args: argparse.Namespace) -> None:
    """Export the Figure D1 questionnaire, import (or simulate) five validators per panel, apply the median rule."""
    from stereolens.annotation.tasks import export_tasks, judgements_file
    from stereolens.studies.stereo import validation as v

    p = _params(args, ("annotation", "model", "seed", "tracking"), ("language", "seed_dir", "countries", "categories", "validation"))
    cfg = p["study.stereo"]
    vcfg = cfg.get("validation", {})
    source = p["annotation"].get("source", "simulated")
    prompts = _prompts(cfg)
    stereotypes = read_csv_checked(INTERIM / "retrieval" / "stereotypes.csv",
                                   ["stereotype_id", "country", "category", "target", "stereotype", "examples", "source"],
                                   what="retrieved stereotypes", dtype=str)
    items = v.questionnaire(stereotypes, prompts, n_examples=int(vcfg.get("n_examples", 3)))
    out = INTERIM / "validation"
    scale = v.likert_scale([t.format(country="<country>") for t in prompts.likert_display])

    def collect():
        return v.collect_judgements(
            source, items, scale, prompts, annotation=p["annotation"], validation=vcfg, default_model=p["model"],
            load_member=lambda m: load_stage_model(m, params_path=args.params, key="annotation.panel.models"),
            tasks_dir=out / "tasks", seed=int(p["seed"]))

    # human judgements are read and checked before the task files are rewritten (as pairs-validate does), so a bad
    # export leaves every earlier output as it was; a round with no judgements yet gets its task files first
    judged_first = source == "human" and judgements_file(vcfg.get("judgements"),
                                                         key="study.stereo.validation.judgements") is not None
    if judged_first:
        judgements, annotators = collect()
    if len(items):
        # each task shows the options with its own country's name (a dynamic Choices control)
        export_tasks(items, scale, "¿Cuál de estas afirmaciones describe mejor la validez del estereotipo?", out / "tasks",
                     name="validation", item_choices=v.option_texts(items, prompts))
    if not judged_first:
        judgements, annotators = collect()
    decisions, unanswered = v.decide_answered(judgements, source)
    validated = v.keep_validated(stereotypes, decisions, source)
    write_csv(out / "judgements.csv", judgements)
    write_csv(out / "annotators.csv", annotators)
    write_csv(out / "decisions.csv", decisions)
    write_csv(out / "validated.csv", validated)
    rep = REPORTS / "validation"
    t7 = v.validation_rates(stereotypes, decisions, cfg["countries"], cfg["categories"])
    t7["annotation_source"] = source
    write_csv(rep / "table7_validation_rates.csv", t7)
    for c in cfg["countries"]:
        write_csv(rep / f"tableE_vote_ratios_{c}.csv", v.vote_ratio_table(stereotypes, decisions, c, cfg["categories"]).assign(annotation_source=source))
        if len(annotators) and source != "llm_panel":  # models have no demographics
            write_csv(rep / f"tableD_demographics_{c}_validation.csv", v.demographics_table(annotators, c, cfg["categories"]).assign(annotation_source=source))
    summary = v.validation_summary(source, items, judgements, annotators, validated, unanswered)
    write_json(rep / "summary.json", summary)
    with _run(p, "validate", annotation_source=source) as run:
        run.log_metrics({k: summary[k] for k in VALIDATE_METRICS})
        run.log_artifact(rep / "table7_validation_rates.csv")
    print(f"stereo-validate: {summary['n_validated']} of {summary['n_items']} stereotypes validated ({source} validators)")


# ---------------------------------------------------------------- instantiate


@stage("stereo-instantiate")
def instantiate(args: argparse.Namespace) -> None:
    """StereoSet triples per validated stereotype plus the starter set, each with an irrelevant sentence."""
    from stereolens.studies.stereo import instantiation as ins

    p = _params(args, ("model", "seed", "tracking"), ("language", "seed_dir", "generator", "instantiation"))
    cfg = p["study.stereo"]
    icfg = cfg["instantiation"]
    validated = read_csv_checked(INTERIM / "validation" / "validated.csv",
                                 ["stereotype_id", "country", "category", "target", "stereotype", "examples"],
                                 what="validated stereotypes", dtype=str, keep_default_na=False)
    label = model = settings = None
    if icfg.get("generate", True) and len(validated):
        gen_cfg = _generator_cfg(cfg, p["model"])
        label = model_label(gen_cfg)
        settings = ins.settings_from_config(icfg, int(p["seed"]))
        model = load_stage_model(gen_cfg, params_path=args.params, key=GENERATOR_KEY, generator=True)
    result = ins.instantiate(validated, corpus=icfg["corpus"], stopwords=icfg["stopwords"], human=icfg.get("human"),
                             annotators=icfg.get("annotators"), starter=icfg.get("starter"), model=model,
                             prompts=_prompts(cfg) if model is not None else None, settings=settings, progress=_progress())
    instances = result.instances
    write_csv(PROCESSED / "instances.csv", instances)
    write_csv(PROCESSED / "instances_provenance.csv", result.provenance)
    n_cached = int(result.responses["cached"].sum())
    write_csv(INTERIM / "instantiation" / "responses.csv", without_run_facts(result.responses))
    summary = ins.instantiation_summary(result, validated, generator=label, corpus=icfg["corpus"])
    if len(result.annotators):
        # Tables D1-D10 shape for the annotators who wrote triples (one column per category they wrote for)
        from stereolens.studies.stereo.validation import demographics_table

        annotators = result.annotators
        write_csv(INTERIM / "instantiation" / "annotators.csv", annotators)
        for c in sorted(annotators["country"].unique()):
            write_csv(REPORTS / "instantiation" / f"tableD_demographics_{c}_instantiation.csv",
                      demographics_table(annotators, c, sorted(annotators["category"].unique())).assign(annotation_source="human"))
    write_json(REPORTS / "instantiation" / "summary.json", summary)
    with _run(p, "instantiate", model=label, axes={"source": ins.SOURCES}, tags={"instance_sources": ",".join(k for k, n in summary["by_source"].items() if n)}) as run:
        run.log_metrics({"n_instances": len(instances), "cached_responses": n_cached,
                         **{f"n_{k}": n for k, n in summary["by_source"].items()}})
        run.log_artifact(PROCESSED / "instances.csv")
    print(f"stereo-instantiate: {len(instances)} instances ({', '.join(f'{n} {k}' for k, n in summary['by_source'].items())}; "
          f"{n_cached} generator responses from the cache)")


# ---------------------------------------------------------------- overlap

CALIBRATION = REPORTS / "calibration"


def _similarity_model(p: dict[str, Any], args: argparse.Namespace, scfg: dict[str, Any]):
    """The configured similarity model of "same meaning" (``study.stereo.overlap.similarity``)."""
    from stereolens.models import ResponseCache
    from stereolens.stages.common import model_cache_dir
    from stereolens.studies.stereo.similarity import build_similarity

    method = scfg.get("method", "lexical")
    sim_model_cfg = None if method in ("lexical", "offline") else dict(scfg.get("model") or p["model"])
    # the cache holds embeddings, which read the encoder's hidden states in this process (no executor);
    # the judge only generates, so it loads on the configured executor
    return build_similarity(scfg, model_cfg=sim_model_cfg, cache=ResponseCache(model_cache_dir()),
                            prompts=_prompts(p["study.stereo"]) if method == "judge" else None, seed=int(p["seed"]),
                            load_judge=lambda m: load_stage_model(m, params_path=args.params,
                                                                  key="study.stereo.overlap.similarity.model"))


@stage("stereo-calibrate")
def calibrate(args: argparse.Namespace) -> None:
    """The overlap's calibration set, scored by trigrams and the configured similarity model, with the threshold picked on it."""
    from stereolens.studies.stereo import calibration as cal
    from stereolens.studies.stereo.similarity import LexicalSimilarity

    p = _params(args, ("model", "seed", "tracking"), ("language", "seed_dir", "overlap"))
    ocfg = p["study.stereo"]["overlap"]
    ccfg = dict(ocfg.get("calibration") or {})
    scenarios = read_csv_checked(ccfg.get("scenarios") or "data/seed/pcs/scenarios.csv",
                                 ["scenario_id", "dimension", "language", "prompt_a"], what="pcs scenario bank", dtype=str)
    crows_path = ocfg.get("crows")
    crows = cal.load_crows_rows(crows_path) if crows_path and Path(crows_path).exists() else None
    pairs = cal.build_calibration_set(scenarios, crows, n_crows=int(ccfg.get("n_crows", 300)),
                                      seed=int(ccfg.get("seed", p["seed"])))
    scfg = dict(ocfg.get("similarity") or {})
    method = scfg.get("method", "lexical")
    models = [LexicalSimilarity()]
    if method in ("offline", "embedding"):  # the judge answers yes / no: it has no threshold to calibrate
        models.append(_similarity_model(p, args, scfg))
    started = time.perf_counter()
    scored, summary = cal.calibrate(pairs, models)
    summary["crows_pairs"] = crows_path if crows is not None else f"not available ({crows_path}): pcs pairs only"
    write_csv(CALIBRATION / "pairs.csv", scored)
    write_json(CALIBRATION / "summary.json", summary)
    configured = summary["methods"][cal.calibration_key(models[-1])]["chosen"]
    with _run(p, "calibrate", model=models[-1].describe()["model"] if len(models) > 1 else None,
              tags={"similarity_method": method}) as run:
        run.log_metrics({**{k: configured[k] for k in ("threshold", "precision", "recall", "f1")},
                         "lexical_f1": summary["methods"]["lexical"]["chosen"]["f1"]})
        run.log_artifact(CALIBRATION / "summary.json")
    print(f"stereo-calibrate: {len(pairs)} pairs ({summary['n_positive']} positive); "
          + "; ".join(f"{k}: threshold {m['chosen']['threshold']:.3f}, precision {m['chosen']['precision']:.3f}, "
                      f"recall {m['chosen']['recall']:.3f}" for k, m in summary["methods"].items())
          + f" in {time.perf_counter() - started:.0f}s")


def _threshold(scfg: dict[str, Any], sim: Any) -> tuple[float | None, dict[str, Any]]:
    """The threshold the overlap runs with (``calibrated``: the one stereo-calibrate picked for this model)
    and its precision / recall on the calibration set (None where the set was not scored with this model)."""
    from stereolens.studies.stereo import calibration as cal

    if sim.method == "judge":
        return None, {"status": "not applicable (the judge answers yes or no)"}
    key = cal.calibration_key(sim)
    summary_path, pairs_path = CALIBRATION / "summary.json", CALIBRATION / "pairs.csv"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
    configured = scfg.get("threshold", "calibrated")
    if configured == "calibrated":
        if key not in summary.get("methods", {}):
            raise ConfigError(f"study.stereo.overlap.similarity.threshold=calibrated: {summary_path} has no threshold for "
                              f"{key!r} (run `stereolens stage stereo-calibrate` with this similarity model, or give a number)")
        threshold = float(summary["methods"][key]["chosen"]["threshold"])
    else:
        try:
            threshold = float(configured)
        except (TypeError, ValueError):
            raise ConfigError(f"study.stereo.overlap.similarity.threshold must be a number or 'calibrated', "
                              f"got {configured!r}") from None
    at = cal.operating_at(pd.read_csv(pairs_path), key, threshold) if pairs_path.exists() else None
    info = {"status": "calibrated" if at else f"not calibrated (no {key!r} scores in {pairs_path})", "key": key,
            "threshold_from": "calibration" if configured == "calibrated" else "params", "rule": summary.get("rule"),
            **({"precision": at.precision, "recall": at.recall, "f1": at.f1, "n_pairs": at.tp + at.fp + at.fn + at.tn}
               if at else {})}
    return threshold, info


@stage("stereo-overlap")
def overlap(args: argparse.Namespace) -> None:
    """Tables 1-5 (between countries) and 11-12 (CrowS-Pairs, StereoSet)."""
    from stereolens.studies.stereo import overlap as ov
    from stereolens.studies.stereo.seegull_reference import seegull_overlaps
    from stereolens.studies.stereo.similarity import JudgeSimilarity

    p = _params(args, ("model", "seed", "tracking"), ("language", "seed_dir", "countries", "categories", "overlap"))
    cfg = p["study.stereo"]
    ocfg = cfg["overlap"]
    scfg = dict(ocfg.get("similarity") or {})
    validated = read_csv_checked(INTERIM / "validation" / "validated.csv", ["stereotype_id", "country", "category", "target", "stereotype"],
                                 what="validated stereotypes", dtype=str, keep_default_na=False)
    method = scfg.get("method", "lexical")
    sim = _similarity_model(p, args, scfg)
    threshold, calibration = _threshold(scfg, sim)
    matcher = ov.Matcher(threshold if threshold is not None else ov.Matcher.threshold, float(ocfg.get("target_threshold", 0.8)), sim)
    # every table row says which decision made it: method, threshold and the threshold's precision / recall
    decision = {"similarity_method": method, "threshold": threshold,
                "calibration_precision": calibration.get("precision"), "calibration_recall": calibration.get("recall")}
    adjudication = ov.load_adjudication(ocfg.get("adjudication"))
    rep = REPORTS / "overlap"
    started = time.perf_counter()
    shares, pairs = ov.country_overlap(validated, cfg["countries"], cfg["categories"], matcher, adjudication)
    # both overlaps before any file: an adjudicated CrowS-Pairs or StereoSet id that does not exist is refused by
    # the second, and a refusal leaves the earlier tables as they were
    tables, external = ov.external_overlaps(validated, {k: ocfg.get(k) for k in ("crows", "stereoset")}, cfg["countries"],
                                            cfg["categories"], matcher, adjudication)
    # the human reference of the same locales (Mexico: es-MX, Spain: es-ES), both directions; refusals before any file
    seegull_table, seegull_matches, external["seegull_multilingual"] = seegull_overlaps(
        validated, ocfg.get("seegull"), cfg["countries"], cfg["categories"], matcher, adjudication)
    write_csv(rep / "tables1_5_between_countries.csv", shares.assign(**decision))
    write_csv(rep / "matched_pairs.csv", pairs)
    for name, table in tables.items():
        write_csv(rep / f"table_{name}.csv", table.assign(**decision))
    if seegull_table is not None:
        write_csv(rep / "table_seegull.csv", seegull_table.assign(**decision))
        write_csv(rep / "seegull_matches.csv", seegull_matches)
    summary_method = ov.method_description(matcher, method, adjudication_path=ocfg.get("adjudication"),
                                           n_adjudicated=len(adjudication))
    summary_method["calibration"] = calibration
    described = summary_method["similarity"]
    if isinstance(sim, JudgeSimilarity):
        answers = pd.DataFrame(sim.answers, columns=["left_id", "right_id", "answer", "verdict", "cached"])
        write_csv(rep / "judge_answers.csv", without_run_facts(answers))
    write_json(rep / "summary.json", {"method": summary_method, "external": external, "n_validated": len(validated)})
    with _run(p, "overlap", model=described.get("model") if method != "lexical" else None,
              tags={"similarity_method": method, **_cache_use(sim)}) as run:
        run.log_artifact(rep / "tables1_5_between_countries.csv")
    seegull = external["seegull_multilingual"]
    print(f"stereo-overlap: {len(pairs)} shared pairs between countries ({method}); CrowS-Pairs {external['crows_pairs']['status']}, "
          f"StereoSet {external['stereoset']['status']}, SeeGULL {seegull['status']}"
          + "".join(f" ({c}: {e['study_in_seegull']['present']} of {e['study_in_seegull']['n']} present, "
                    f"{e['seegull_in_study']['present']} of {e['seegull_in_study']['n']} found)"
                    for c, e in (seegull.get("by_country") or {}).items())
          + f" in {time.perf_counter() - started:.0f}s"
          + "".join(f", {key.replace('_', ' ')} {n}" for key, n in _cache_use(sim).items()))


# ---------------------------------------------------------------- evaluate


def candidate_score(ecfg: dict[str, Any]) -> str:
    """``study.stereo.evaluation.score`` (mean, sum or stereoset_generative; default mean)."""
    from stereolens.stats.stereoset import DEFAULT_CANDIDATE_SCORE

    if "per_token" in ecfg:
        raise ConfigError("study.stereo.evaluation.per_token is replaced by study.stereo.evaluation.score: "
                          "mean (per token, the default), sum or stereoset_generative")
    return str(ecfg.get("score") or DEFAULT_CANDIDATE_SCORE)


def _scoring_setup(model: Any, score: str) -> dict[str, str]:
    """How the candidates' passes were packed, for the evaluate run's lineage: score_instances runs at the
    engine's default budget, StereoSet's generative score one text per pass as its reference does."""
    from stereolens.scoring import scoring_setup

    setup = scoring_setup(model)
    if score == "stereoset_generative":
        setup["scoring.batch_tokens"] = "one text per pass"
    return setup


@stage("stereo-evaluate", per_model=True)
def evaluate(args: argparse.Namespace) -> None:
    """ss / lms / icat per country for each evaluated model, candidates scored given the context; each country's
    test, MDE and clustered interval; the robustness table of the overall verdict."""
    from stereolens.stats.robustness import TABLE_FILE, robustness_block, robustness_table
    from stereolens.studies.stereo import evaluation as ev
    from stereolens.studies.stereo.inference import GENERATIVE, alternative_score_columns, robustness_rows
    from stereolens.studies.stereo.figures import evaluation_figure

    p = _params(args, ("seed", "tracking"), ("language", "evaluation"))
    p["model"] = stage_model(args)
    processed, reports = model_dir(PROCESSED, p["model"]), model_dir(REPORTS, p["model"])
    cfg = p["study.stereo"]
    ecfg = cfg["evaluation"]
    instances = read_csv_checked(PROCESSED / "instances.csv", [*ev.INSTANCE_COLUMNS, "source"],
                                 what="instances", dtype=str, keep_default_na=False)
    ev.refuse_duplicate_ids(instances, PROCESSED / "instances.csv")
    if not ecfg.get("include_starter", True):
        instances = instances[instances["source"] != "authored"]
    # evaluation.models (extra evaluated models) go with the primary model's run; --model names one model otherwise
    models = (ecfg.get("models") if args.model is None else None) or [p["model"]]
    score = candidate_score(ecfg)
    confidence = float(ecfg.get("confidence", 0.95))
    for mcfg in models:  # refuse a score a model cannot give before any model loads
        ev.check_candidate_score(mcfg["kind"], score)
    if instances.empty:
        # nothing validated was instantiated and the starter set is off: say so instead of stopping the report
        write_csv(processed / "scores.csv", pd.DataFrame(columns=["model", *instances.columns]))
        (reports / "evaluation").mkdir(parents=True, exist_ok=True)
        write_json(reports / "evaluation" / "summary.json", ev.NOTHING_EVALUATED)
        write_csv(reports / TABLE_FILE, robustness_table([]))  # the declared output, with its columns and no row
        print("stereo-evaluate: no instances to evaluate")
        return
    all_scores, summaries, robustness = [], {}, {}
    for mcfg in models:
        label = model_label(mcfg)
        started = time.perf_counter()
        # StereoSet's generative score (the headline's, or the robustness table's second pass) runs forward passes
        # on the model's own torch modules: in this process
        second_pass = generative_pass(ecfg, mcfg["kind"], score)
        model = load_stage_model(mcfg, params_path=args.params, key="study.stereo.evaluation.models",
                                 executor=score != GENERATIVE and not second_pass)
        scores = ev.score_instances(model, mcfg["kind"], instances, score=score, cache=model.cache, progress=_progress())
        if second_pass:
            generative = ev.score_instances(model, mcfg["kind"], instances, score=GENERATIVE)
            for column, stored in alternative_score_columns(GENERATIVE).items():
                scores[stored] = generative[column]
        scores.insert(0, "model", label)
        t = ev.tables(scores, n_resamples=int(ecfg.get("bootstrap", 1000)), seed=int(p["seed"]), confidence=confidence)
        out = reports / "evaluation" / label
        for name, table in t.items():
            write_csv(out / f"{name}.csv", table)
        robustness[label] = robustness_rows(scores, score=score, kind=mcfg["kind"], confidence=confidence)
        write_csv(out / TABLE_FILE, robustness[label])
        evaluation_figure(t["by_country"], out / "ss_lms_icat_by_country", title=f"{label}: StereoSet scores per country")
        s = ev.model_summary(t, kind=mcfg["kind"], score=score, instances=instances, confidence=confidence,
                             bootstrap=int(ecfg.get("bootstrap", 1000)))
        s["robustness"] = robustness_block(robustness[label], table_file=f"evaluation/{label}/{TABLE_FILE}")
        if "precision" in scores.attrs:  # model.verify: how many instances carry float32 scores
            s["precision"] = scores.attrs["precision"]
        summaries[label] = s
        all_scores.append(scores)
        with _run(p, "evaluate", model=label, scoring_model=mcfg,
                  tags={"instance_sources": ",".join(sorted(s["sources"])), "scoring": s["method"],
                        **_scoring_setup(model, score)}) as run:
            run.log_metrics({k: s[k] for k in ("ss", "lms", "icat")})
            run.log_artifact(out / "by_country.csv")
        from stereolens.report.markdown import format_cell, format_estimate  # as the report writes them

        print(f"stereo-evaluate: {label} ss {format_estimate(s['ss'], unit='percent')} "
              f"lms {format_estimate(s['lms'], unit='percent')} icat {format_cell(s['icat'])} on {s['n']} instances; "
              f"verdict {s['robustness']['headline_decision']}, survives {s['robustness']['survives']} of "
              f"{s['robustness']['of']} robustness variants ({s['robustness']['not_run']} not run) "
              f"in {time.perf_counter() - started:.0f}s")
    write_csv(processed / "scores.csv", pd.concat(all_scores, ignore_index=True))
    first = model_label(models[0])
    # the folder's model's table (the first evaluated model's) where every study keeps it
    write_csv(reports / TABLE_FILE, robustness[first])
    validated_by = read_csv_checked(PROCESSED / "instances_provenance.csv", ["id"], what="instance provenance", dtype=str,
                                    keep_default_na=False)
    validated_by = validated_by[validated_by["id"].isin(instances["id"])].get("validation_source", pd.Series(dtype=str))
    # the report stage adds the paired comparisons and writes reports/stereo/<model_id>/summary.json from this
    write_json(reports / "evaluation" / "summary.json",
               ev.study_summary(summaries, first, score=score,
                                provenance=ev.study_provenance(instances, list(validated_by))))


def generative_pass(ecfg: dict[str, Any], kind: str, score: str) -> bool:
    """Whether the evaluation scores the instances a second time with StereoSet's generative score (the robustness
    table's variant): asked for (``study.stereo.evaluation.generative_pass``), a causal model, and not the
    headline's own score already."""
    from stereolens.studies.stereo.inference import GENERATIVE

    return bool(ecfg.get("generative_pass", False)) and kind == "causal" and score != GENERATIVE


# ---------------------------------------------------------------- paired


@stage("stereo-paired")
def paired(args: argparse.Namespace) -> None:
    """Every two models of the run on the instances both scored: ss per country by McNemar's exact test, lms by a
    sign-flip test -> reports/stereo/paired.csv, paired.json."""
    from stereolens.studies.stereo.inference import paired_comparisons

    p = _params(args, ("models", "seed", "tracking"), ("language", "evaluation"))
    ecfg = p["study.stereo"]["evaluation"]
    long, models, note = read_run_scores(list(p["models"] or {}), score=candidate_score(ecfg))
    started = time.perf_counter()
    table, document = paired_comparisons(long, models, confidence=float(ecfg.get("confidence", 0.95)),
                                         seed=int(p["seed"]), note=note)
    write_csv(REPORTS / "paired.csv", table)
    write_json(REPORTS / "paired.json", document)
    cells = ["all", *sorted(long["country"].astype(str).unique())] if len(long) else ["all"]
    pairs = [f"{c['model_a']}__{c['model_b']}" for c in document["comparisons"]]
    # a run schema's axis needs a value: with fewer than two models the one metric is "difference.none.all" (NaN)
    axes = {"pair": list(dict.fromkeys(pairs)) or ["none"], "cell": cells}
    metrics = {f"difference.{pair}.{cell}": None for pair in axes["pair"] for cell in cells}
    metrics.update({f"difference.{c['model_a']}__{c['model_b']}.{c['cell']}": c["difference"]
                    for c in document["comparisons"]})
    with _run(p, "paired", axes=axes, tags={"models": ",".join(models)}) as run:
        run.log_metrics(metrics)
        run.log_artifact(REPORTS / "paired.csv")
        run.log_artifact(REPORTS / "paired.json")
    decided = [c for c in document["comparisons"] if c["verdict"] in ("model_a more", "model_b more")]
    print(f"stereo-paired: {len(models)} models, {len(document['comparisons'])} comparisons, "
          f"{len(decided)} with a difference detected" + ("" if document["comparisons"] else f" ({document['reason']})")
          + f" in {time.perf_counter() - started:.0f}s")


def read_run_scores(model_ids: list[str], *, score: str) -> tuple[pd.DataFrame, list[str], str | None]:
    """Every per-instance score of the run's models (``data/processed/stereo/<model_id>/scores.csv``, which may hold
    several evaluated models), one row per model and instance; the models in the order met; a note naming the
    models that scored nothing."""
    from stereolens.errors import DataError
    from stereolens.studies.stereo.scores import SCORE_INPUT_COLUMNS, check_scores

    frames, empty = [], []
    for model_id in model_ids:
        path = PROCESSED / model_id / "scores.csv"
        if not path.is_file():
            raise DataError(f"{path} not found: run `stereolens stage stereo-evaluate --model {model_id}` first")
        # a model that evaluated nothing (no instances) wrote a header without score columns: nothing to compare
        required = ["model", *SCORE_INPUT_COLUMNS] if _has_rows(path) else ["model", "id"]
        df = read_csv_checked(path, required, what="stereo scores", dtype=str, keep_default_na=False)
        if df.empty:
            empty.append(model_id)
            continue
        # one evaluated model at a time: an instance id repeats once per model the file holds
        for _, part in df.groupby("model", sort=False):
            frames.append(check_scores(part, str(path), score=score).assign(_file=str(path)))
    if not frames:
        return pd.DataFrame(columns=["model", *SCORE_INPUT_COLUMNS]), [], _empty_note(empty)
    long = pd.concat(frames, ignore_index=True)
    # one model scored in two files (an evaluated model that is also the run's own): the same scores, kept once
    twice = long.duplicated(["model", "id"], keep="first")
    if twice.any():
        columns = ["score_stereo", "score_anti", "score_unrelated"]
        firsts = long.loc[~twice].set_index(["model", "id"])[columns]
        repeats = long.loc[twice].set_index(["model", "id"])[columns]
        differ = (firsts.loc[repeats.index] != repeats).any(axis=1)
        if differ.any():
            model, item = differ.index[differ.argmax()]
            raise DataError(f"model {model!r} scored instance {item!r} differently in two scores files "
                            f"({', '.join(sorted(set(long.loc[long['model'] == model, '_file'])))})")
        long = long.loc[~twice]
    return long.drop(columns="_file"), list(dict.fromkeys(long["model"].astype(str))), _empty_note(empty)


def _has_rows(path: Path) -> bool:
    """Whether a CSV has a line below its header."""
    with open(path, encoding="utf-8-sig") as fh:
        return next(fh, None) is not None and next(fh, "").strip() != ""


def _empty_note(empty: list[str]) -> str | None:
    return f"no instance scored by {', '.join(empty)} (nothing to evaluate there)" if empty else None


# ---------------------------------------------------------------- report


@stage("stereo-report", per_model=True)
def report(args: argparse.Namespace) -> None:
    """reports/stereo/<model_id>/summary.json (the evaluation's, with the paired comparisons that involve the
    model) and report.md from every stage's outputs."""
    from stereolens.stats.paired import paired_metrics
    from stereolens.studies.stereo.report import model_summary, write_report

    p = _params(args, ("tracking",), ("name", "language", "countries", "categories", "points_of_view"))
    model_id = model_label(stage_model(args))
    reports = model_dir(REPORTS, model_id)
    evaluated = read_json_checked(reports / "evaluation" / "summary.json", what="stereo evaluation summary",
                                  stage=f"stereo-evaluate --model {model_id}")
    # the run's models name the paired metrics even before stereo-paired has run: every report run has the same keys
    summary = model_summary(evaluated, REPORTS / "paired.json", model_id, run_models=run_model_ids(args.params))
    write_study_summary(reports / "summary.json", summary)
    path = write_report(REPORTS, p["study.stereo"], reports)
    block, robustness = summary["paired"], summary.get("robustness") or {}
    cells = ["all", *sorted(summary.get("by_country") or {})]
    axes = {"other": block.get("models") or [model_id], "cell": cells}
    with _run(p, "report", model=model_id, axes=axes) as run:
        me = str(evaluated.get("model") or model_id)
        run.log_metrics({**paired_metrics(block, me, cells),
                         **{f"robustness.{k}": robustness.get(k) for k in ("survives", "of", "not_run")}})
        run.log_artifact(path)
    print(f"stereo-report: {path}")


def read_json_checked(path: Path, *, what: str, stage: str) -> dict[str, Any]:
    """A JSON object another stage wrote, or one line naming the file and the stage that writes it."""
    from stereolens.errors import DataError

    if not path.is_file():
        raise DataError(f"{what} {path} not found: run `stereolens stage {stage}` first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"{what} {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{what} {path}: a JSON object expected, got {type(data).__name__}")
    return data
