"""DVC stages of the stereo study (seed 003): retrieve -> validate -> instantiate -> overlap, evaluate -> report.

* ``stereo-retrieve``: prompts per country x category x point of view until saturation;
  raw responses, extracted stereotypes, saturation curve, refusal counts.
* ``stereo-validate``: Figure D1 questionnaire export, five annotators per country x category
  panel (simulated by default), median <= 2 discarded; Tables 7, E1-E5, D1-D10 shapes.
* ``stereo-instantiate``: StereoSet triples per validated stereotype (generator and/or annotators)
  plus the authored starter set, each with an irrelevant sentence -> data/processed/stereo/instances.csv.
* ``stereo-overlap``: Tables 1-5 and 11-12.
* ``stereo-evaluate``: candidate scores given the context, ss / lms / icat per country.
* ``stereo-report``: reports/stereo/report.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import load_params, model_cache_dir
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY = "stereo"
RETRIEVE_METRICS = ("n_requests", "n_refusals", "n_empty", "n_stereotypes", "n_without_target", "mean_rounds_per_pov",
                    "saturated_cells", "round_cap_cells", "refused_cells", "cached_responses", "extraction_parse_failures")
VALIDATE_METRICS = ("n_items", "n_judgements", "n_validated", "validation_rate")
RUNS = {
    "retrieve": declare_run(STUDY, "retrieve", params=("study",), metrics=RETRIEVE_METRICS),
    "validate": declare_run(STUDY, "validate", params=("study",), metrics=VALIDATE_METRICS),
    # n_machine, n_human, n_authored: every instance source, 0 when none came from it
    "instantiate": declare_run(STUDY, "instantiate", params=("study",), metrics=("n_instances", "n_{source}")),
    "overlap": declare_run(STUDY, "overlap", params=("study",)),
    "evaluate": declare_run(STUDY, "evaluate", params=("study",), metrics=("ss", "lms", "icat")),
}
INTERIM = Path("data/interim/stereo")
PROCESSED = Path("data/processed/stereo")
REPORTS = Path("reports/stereo")
GENERATIVE_KINDS = ("causal", "chat", "completion", "seq2seq")

log = logging.getLogger(__name__)


def _params(args: argparse.Namespace, top: tuple[str, ...], study: tuple[str, ...]) -> dict[str, Any]:
    """The declared top-level keys, and the declared ``study.stereo`` keys gathered under ``"study.stereo"``."""
    loaded = load_params(*top, *(f"study.stereo.{k}" for k in study), path=args.params)
    out = {k: loaded[k] for k in top}
    out["study.stereo"] = {k: loaded[f"study.stereo.{k}"] for k in study}
    return out


def _progress() -> bool:
    return sys.stderr.isatty()


def _load(model_cfg: dict[str, Any]):
    from stereolens.models import ResponseCache, load_model, spec_from_config

    return load_model(spec_from_config(model_cfg), cache=ResponseCache(model_cache_dir()))


def _label(model_cfg: dict[str, Any]) -> str:
    return str(model_cfg.get("id") or model_cfg["name"])


def _generator_cfg(cfg: dict[str, Any], top_model: dict[str, Any]) -> dict[str, Any]:
    gen = dict(cfg.get("generator") or top_model)
    if gen.get("kind") not in GENERATIVE_KINDS:
        raise ConfigError(f"study.stereo.generator: a {gen.get('kind')!r} model cannot generate posts; set study.stereo.generator "
                          f"to a model of kind {', '.join(GENERATIVE_KINDS)}")
    return gen


def _prompts(cfg: dict[str, Any]):
    from stereolens.studies.stereo.prompts import load_prompts

    return load_prompts(Path(cfg["seed_dir"]) / "prompts.yaml", cfg["language"])


def _run(p: dict[str, Any], stage_name: str, *, model: str | None = None, annotation_source: str | None = None,
         tags: dict[str, Any] | None = None, axes: dict[str, Any] | None = None):
    from stereolens.tracking import stage_run

    return stage_run(p["tracking"], RUNS[stage_name], model=model, language=p["study.stereo"]["language"],
                     params={"study": p["study.stereo"]}, annotation_source=annotation_source, tags=tags, axes=axes)


# ---------------------------------------------------------------- retrieve


@stage("stereo-retrieve")
def retrieve(args: argparse.Namespace) -> None:
    """Retrieve stereotypes from the generator until saturation (raw responses kept)."""
    from stereolens.studies.stereo.report import saturation_figure
    from stereolens.studies.stereo.retrieval import RetrievalSettings, SaturationRule, retrieve as run_retrieval

    p = _params(args, ("model", "seed", "tracking"),
                ("language", "seed_dir", "countries", "categories", "points_of_view", "generator", "retrieval"))
    cfg = p["study.stereo"]
    r = cfg["retrieval"]
    sat = r.get("saturation", {})
    settings = RetrievalSettings(
        countries=tuple(cfg["countries"]), categories=tuple(cfg["categories"]), points_of_view=tuple(cfg["points_of_view"]),
        mode=r.get("mode", "negative"), n_posts=int(r.get("n_posts", 10)), max_tokens=int(r.get("max_tokens", 256)),
        preamble_max_tokens=int(r.get("preamble_max_tokens", 64)), temperature=float(r.get("temperature", 0.8)),
        seed=int(p["seed"]), rule=SaturationRule(int(sat.get("k", 1)), int(sat.get("m", 1)), int(sat.get("max_rounds", 10))),
        near_duplicate_threshold=float(r.get("near_duplicate_threshold", 0.8)), min_words=int(r.get("min_words", 4)),
        stop=tuple(r.get("stop") or ()), extraction=str(r.get("extraction", "rule")),
        extraction_max_tokens=int(r.get("extraction_max_tokens", 96)),
    )
    prompts = _prompts(cfg)
    for c in settings.countries:  # refuse unknown names before loading a model
        prompts.country(c)
    for k in settings.categories:
        prompts.category(k)
    for v in settings.points_of_view:
        prompts.pov(v)
    gen_cfg = _generator_cfg(cfg, p["model"])
    started = time.perf_counter()
    model = _load(gen_cfg)
    result = run_retrieval(model, prompts, settings, model_label=_label(gen_cfg), progress=_progress())
    out = INTERIM / "retrieval"
    write_csv(out / "responses.csv", result.responses)
    write_csv(out / "stereotypes.csv", result.stereotypes)
    write_csv(out / "saturation_curve.csv", result.curve)
    write_csv(out / "extractions.csv", result.extractions)
    write_csv(REPORTS / "retrieval" / "refusals.csv", result.refusals)
    write_csv(REPORTS / "retrieval" / "saturation_curve.csv", result.curve)
    saturation_figure(result.curve, REPORTS / "retrieval" / "saturation_curve")
    rounds = result.curve.groupby(["country", "category", "pov"])["round"].max()
    ext = result.extractions
    summary = {"generator": _label(gen_cfg), "generator_source": "machine", "n_requests": len(result.responses),
               "n_refusals": int(result.responses["refusal"].sum()), "n_empty": int(result.responses["empty"].sum()),
               "n_stereotypes": len(result.stereotypes),
               "n_without_target": int((result.stereotypes["target"].fillna("") == "").sum()),
               "mean_rounds_per_pov": float(rounds.mean()), "saturated_cells": int((result.curve["stop"] == "saturated").sum()),
               "round_cap_cells": int((result.curve["stop"] == "round_cap").sum()),
               # cells whose every round was refused: no evidence of saturation either way
               "refused_cells": int((result.curve["stop"] == "refused").sum()), "mode": settings.mode,
               "rule": {"k": settings.rule.k, "m": settings.rule.m, "max_rounds": settings.rule.max_rounds},
               "cached_responses": int(result.responses["cached"].sum()),
               # the extraction step is ours (the paper does not describe it)
               "extraction": {"method": settings.extraction, "posts_read": len(ext),
                              "model_answers_parsed": int((ext["extraction"] == "model").sum()),
                              "parse_failures": int((ext["parsed"] == False).sum()),  # noqa: E712 (None = not asked)
                              "stereotypes_by_method": {k: int((result.stereotypes["extraction"] == k).sum())
                                                        for k in ("model", "rule")}}}
    write_json(REPORTS / "retrieval" / "summary.json", summary)
    tag = "model (ours), rule fallback" if settings.extraction == "model" else "rule-based (ours)"
    with _run(p, "retrieve", model=_label(gen_cfg), tags={"generator_source": "machine", "extraction": tag}) as run:
        run.log_metrics({**{k: summary[k] for k in RETRIEVE_METRICS if k != "extraction_parse_failures"},
                         "extraction_parse_failures": summary["extraction"]["parse_failures"]})
        for f in ("responses.csv", "stereotypes.csv", "saturation_curve.csv", "extractions.csv"):
            run.log_artifact(out / f)
        run.log_artifact(REPORTS / "retrieval" / "refusals.csv")
    print(f"stereo-retrieve: {summary['n_stereotypes']} stereotypes from {summary['n_requests']} responses "
          f"({summary['n_refusals']} refusals, {summary['mean_rounds_per_pov']:.1f} rounds per point of view) "
          f"in {time.perf_counter() - started:.0f}s")


# ---------------------------------------------------------------- validate


@stage("stereo-validate")
def validate(args: argparse.Namespace) -> None:
    """Export the Figure D1 questionnaire, import (or simulate) five validators per panel, apply the median rule."""
    from stereolens.annotation.tasks import export_tasks
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
    if len(items):
        export_tasks(items, scale, "¿Cuál de estas afirmaciones describe mejor la validez del estereotipo?", out / "tasks",
                     name="validation")
    if source == "simulated":
        sim = p["annotation"].get("simulator", {})
        if items.empty:
            judgements = pd.DataFrame(columns=["item_id", "annotator_id", "label", "truth", "source", "panel"])
            annotators = pd.DataFrame(columns=["annotator_id", "panel", "country", "category", *v.DEMOGRAPHIC_COLUMNS, "source"])
        else:
            judgements, annotators = v.simulate_panels(items, scale, n_annotators=int(sim.get("n_annotators", 5)),
                                                       reliability=float(sim.get("reliability", 0.8)),
                                                       bias=float(sim.get("bias", 0.0)), seed=int(p["seed"]))
    elif source == "human":
        if not vcfg.get("judgements") or not vcfg.get("annotators"):
            raise ConfigError("annotation=human: set study.stereo.validation.judgements and .annotators to the completed CSVs "
                              f"(tasks are in {out / 'tasks'})")
        judgements, annotators = v.import_panels(vcfg["judgements"], vcfg["annotators"], scale, items)
    elif source == "llm_panel":
        from stereolens.annotation.llm_panel import DEFAULT_TEMPLATE

        panel = p["annotation"].get("panel") or {}
        specs = panel.get("models") or [p["model"]]  # empty = the study's own (top-level) model
        members = {_label(dict(m)): _load(dict(m)) for m in specs}
        if items.empty:
            judgements = pd.DataFrame(columns=["item_id", "annotator_id", "label", "source", "panel"])
            annotators = pd.DataFrame(columns=["annotator_id", "panel", "model_identity", "country", "category", "source"])
        else:
            judgements, annotators = v.llm_panel_panels(members, items, prompts, template=panel.get("template", DEFAULT_TEMPLATE),
                                                        method=panel.get("method", "auto"), seed=int(panel.get("seed", 0)))
    else:
        raise ConfigError(f"study stereo validates with annotation=simulated, human or llm_panel, not {source!r}")
    unanswered = int(pd.to_numeric(judgements["label"], errors="coerce").isna().sum()) if len(judgements) else 0
    answered = judgements[pd.to_numeric(judgements["label"], errors="coerce").notna()] if len(judgements) else judgements
    decisions = v.decide(answered) if len(answered) else pd.DataFrame(
        columns=["item_id", "median", "n_annotators", "valid_votes", "invalid_votes", "validated", "vote_ratio"])
    decisions["source"] = source
    validated = stereotypes.merge(decisions[["item_id", "median", "vote_ratio", "validated"]], left_on="stereotype_id",
                                  right_on="item_id", how="inner")
    validated = validated[validated["validated"].astype(bool)].drop(columns=["item_id", "validated"])
    validated["validation_source"] = source
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
    summary = {"annotation_source": source, "n_items": len(items), "n_judgements": len(judgements),
               "n_unanswered": unanswered,  # labels no one could read (an LLM panel's unparseable replies): out of the median
               "n_validated": len(validated), "validation_rate": len(validated) / len(items) if len(items) else None,
               # the paper has five validators per panel; an import with another count is reported, not refused
               "annotators_per_panel": {str(k): int(n) for k, n in annotators.groupby("panel").size().items()} if len(annotators) else {}}
    if source == "llm_panel":
        summary["panel_models"] = sorted(annotators["annotator_id"].unique().tolist()) if len(annotators) else []
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
    from stereolens.studies.stereo.text import load_stopwords

    p = _params(args, ("model", "seed", "tracking"), ("language", "seed_dir", "generator", "instantiation"))
    cfg = p["study.stereo"]
    icfg = cfg["instantiation"]
    validated = read_csv_checked(INTERIM / "validation" / "validated.csv",
                                 ["stereotype_id", "country", "category", "target", "stereotype", "examples"],
                                 what="validated stereotypes", dtype=str, keep_default_na=False)
    parts, raw, review = [], pd.DataFrame(), None
    label = None
    if icfg.get("generate", True) and len(validated):
        gen_cfg = _generator_cfg(cfg, p["model"])
        label = _label(gen_cfg)
        settings = ins.InstantiationSettings(per_stereotype=int(icfg.get("per_stereotype", 5)),
                                             max_tokens=int(icfg.get("max_tokens", 256)),
                                             intro_max_tokens=int(icfg.get("intro_max_tokens", 48)),
                                             temperature=float(icfg.get("temperature", 0.0)), seed=int(p["seed"]),
                                             stop=tuple(icfg.get("stop") or ()))
        machine, raw = ins.generate_triples(_load(gen_cfg), _prompts(cfg), validated, settings, progress=_progress())
        parts.append(machine)
    annotators = pd.DataFrame()
    if icfg.get("human"):
        human, review, annotators = ins.import_human_triples(icfg["human"], validated, icfg.get("annotators"))
        parts.append(human)
    if icfg.get("starter"):
        starter = ins.load_starter(icfg["starter"])
        parts.append(starter)
    triples = pd.concat([x for x in parts if len(x)], ignore_index=True) if any(len(x) for x in parts) else pd.DataFrame()
    corpus = ins.load_corpus(icfg["corpus"])
    instances, prov = ins.assemble(triples, corpus, load_stopwords(icfg["stopwords"]))
    write_csv(PROCESSED / "instances.csv", instances)
    # who validated the stereotype each instance comes from (simulated / human / llm_panel), carried to the evaluation
    validated_by = validated.set_index("stereotype_id")["validation_source"] if "validation_source" in validated else pd.Series(dtype=str)
    prov["validation_source"] = (instances["stereotype_id"].map(validated_by).fillna("none (authored starter set)")
                                 if len(instances) else pd.Series(dtype=str))
    write_csv(PROCESSED / "instances_provenance.csv", prov)
    write_csv(INTERIM / "instantiation" / "responses.csv", raw if len(raw) else pd.DataFrame(columns=["stereotype_id", "response", "n_triples", "cached"]))
    counts = instances["source"].value_counts().to_dict() if len(instances) else {}
    summary = {"n_instances": len(instances), "by_source": {k: int(counts.get(k, 0)) for k in ins.SOURCES},
               "n_validated_stereotypes": len(validated), "generator": label,
               "generator_requests": len(raw), "generator_unparsed": int((raw["n_triples"] == 0).sum()) if len(raw) else 0,
               "human_review": review, "unrelated_corpus": icfg["corpus"],
               "unrelated_criterion": "no shared content word with the context (ours)"}
    if len(annotators):
        # Tables D1-D10 shape for the annotators who wrote triples (one column per category they wrote for)
        from stereolens.studies.stereo.validation import demographics_table

        write_csv(INTERIM / "instantiation" / "annotators.csv", annotators)
        for c in sorted(annotators["country"].unique()):
            write_csv(REPORTS / "instantiation" / f"tableD_demographics_{c}_instantiation.csv",
                      demographics_table(annotators, c, sorted(annotators["category"].unique())).assign(annotation_source="human"))
        summary["instantiation_annotators"] = {str(k): int(n) for k, n in
                                               annotators.drop_duplicates("annotator_id").groupby("country").size().items()}
    write_json(REPORTS / "instantiation" / "summary.json", summary)
    with _run(p, "instantiate", model=label, axes={"source": ins.SOURCES}, tags={"instance_sources": ",".join(k for k, n in summary["by_source"].items() if n)}) as run:
        run.log_metrics({"n_instances": len(instances), **{f"n_{k}": n for k, n in summary["by_source"].items()}})
        run.log_artifact(PROCESSED / "instances.csv")
    print(f"stereo-instantiate: {len(instances)} instances ({', '.join(f'{n} {k}' for k, n in summary['by_source'].items())})")


# ---------------------------------------------------------------- overlap


@stage("stereo-overlap")
def overlap(args: argparse.Namespace) -> None:
    """Tables 1-5 (between countries) and 11-12 (CrowS-Pairs, StereoSet)."""
    from stereolens.models import ResponseCache
    from stereolens.studies.stereo import overlap as ov
    from stereolens.studies.stereo.similarity import JudgeSimilarity, build_similarity

    p = _params(args, ("model", "seed", "tracking"), ("language", "seed_dir", "countries", "categories", "overlap"))
    cfg = p["study.stereo"]
    ocfg = cfg["overlap"]
    scfg = dict(ocfg.get("similarity") or {})
    validated = read_csv_checked(INTERIM / "validation" / "validated.csv", ["stereotype_id", "country", "category", "target", "stereotype"],
                                 what="validated stereotypes", dtype=str, keep_default_na=False)
    method = scfg.get("method", "lexical")
    sim_model_cfg = None if method == "lexical" else dict(scfg.get("model") or p["model"])
    sim = build_similarity(scfg, model_cfg=sim_model_cfg, cache=ResponseCache(model_cache_dir()),
                           prompts=_prompts(cfg) if method == "judge" else None, seed=int(p["seed"]))
    matcher = ov.Matcher(float(scfg.get("threshold", 0.6)), float(ocfg.get("target_threshold", 0.8)), sim)
    adjudication = ov.load_adjudication(ocfg.get("adjudication"))
    rep = REPORTS / "overlap"
    started = time.perf_counter()
    shares, pairs = ov.country_overlap(validated, cfg["countries"], cfg["categories"], matcher, adjudication)
    write_csv(rep / "tables1_5_between_countries.csv", shares.assign(similarity_method=method))
    write_csv(rep / "matched_pairs.csv", pairs)
    external = {}
    for name, key, loader in (("crows_pairs", "crows", ov.load_crows), ("stereoset", "stereoset", ov.load_stereoset)):
        path = ocfg.get(key)
        if not path or not Path(path).exists():
            external[name] = {"status": "not available", "path": path}
            continue
        table = ov.external_overlap(validated, loader(path), cfg["countries"], cfg["categories"], matcher, adjudication)
        write_csv(rep / f"table_{name}.csv", table.assign(similarity_method=method))
        overall = table[(table["country"] == "overall") & (table["category"] == "overall")].iloc[0]
        external[name] = {"status": "computed", "path": path, "present": int(overall["present"]), "n": int(overall["n"])}
    described = matcher.describe()
    rule = ("judge answers sí" if method == "judge" else f"{method} score >= {matcher.threshold}")
    summary_method = {
        "present": "same category, same target-group class (normalised match or target trigram cosine >= "
                   f"{matcher.target_threshold}) and same meaning (normalised match, else {rule}); adjudication overrides; "
                   "external datasets: category and meaning only",
        "similarity": described, "adjudication": ocfg.get("adjudication"), "n_adjudicated": len(adjudication)}
    if isinstance(sim, JudgeSimilarity):
        write_csv(rep / "judge_answers.csv", pd.DataFrame(sim.answers, columns=["left_id", "right_id", "answer", "verdict", "cached"]))
    write_json(rep / "summary.json", {"method": summary_method, "external": external, "n_validated": len(validated)})
    with _run(p, "overlap", model=described.get("model") if method != "lexical" else None,
              tags={"similarity_method": method}) as run:
        run.log_artifact(rep / "tables1_5_between_countries.csv")
    print(f"stereo-overlap: {len(pairs)} shared pairs between countries ({method}); CrowS-Pairs {external['crows_pairs']['status']}, "
          f"StereoSet {external['stereoset']['status']} in {time.perf_counter() - started:.0f}s")


# ---------------------------------------------------------------- evaluate


def candidate_score(ecfg: dict[str, Any]) -> str:
    """``study.stereo.evaluation.score`` (mean, sum or stereoset_generative; default mean)."""
    from stereolens.stats.stereoset import DEFAULT_CANDIDATE_SCORE

    if "per_token" in ecfg:
        raise ConfigError("study.stereo.evaluation.per_token is replaced by study.stereo.evaluation.score: "
                          "mean (per token, the default), sum or stereoset_generative")
    return str(ecfg.get("score") or DEFAULT_CANDIDATE_SCORE)


@stage("stereo-evaluate")
def evaluate(args: argparse.Namespace) -> None:
    """ss / lms / icat per country for each evaluated model, candidates scored given the context."""
    from stereolens.models import ResponseCache
    from stereolens.studies.stereo import evaluation as ev
    from stereolens.studies.stereo.report import evaluation_figure

    p = _params(args, ("model", "seed", "tracking"), ("language", "evaluation"))
    cfg = p["study.stereo"]
    ecfg = cfg["evaluation"]
    instances = read_csv_checked(PROCESSED / "instances.csv", [*ev.INSTANCE_COLUMNS, "source"],
                                 what="instances", dtype=str, keep_default_na=False)
    ev.refuse_duplicate_ids(instances, PROCESSED / "instances.csv")
    if not ecfg.get("include_starter", True):
        instances = instances[instances["source"] != "authored"]
    models = ecfg.get("models") or [p["model"]]
    score = candidate_score(ecfg)
    for mcfg in models:  # refuse a score a model cannot give before any model loads
        ev.check_candidate_score(mcfg["kind"], score)
    if instances.empty:
        # nothing validated was instantiated and the starter set is off: say so instead of stopping the report
        write_csv(PROCESSED / "scores.csv", pd.DataFrame(columns=["model", *instances.columns]))
        (REPORTS / "evaluation").mkdir(parents=True, exist_ok=True)
        write_json(REPORTS / "summary.json", {"status": "no instances to evaluate", "n": 0, "models": {},
                                              "by_country": {}, "ss": None, "lms": None, "icat": None})
        print("stereo-evaluate: no instances to evaluate")
        return
    all_scores, summaries = [], {}
    for mcfg in models:
        label = _label(mcfg)
        started = time.perf_counter()
        model = _load(mcfg)
        scores = ev.score_instances(model, mcfg["kind"], instances, score=score,
                                    cache=ResponseCache(model_cache_dir()), progress=_progress())
        scores.insert(0, "model", label)
        t = ev.tables(scores, n_resamples=int(ecfg.get("bootstrap", 1000)), seed=int(p["seed"]),
                      confidence=float(ecfg.get("confidence", 0.95)))
        out = REPORTS / "evaluation" / label
        for name, table in t.items():
            write_csv(out / f"{name}.csv", table)
        evaluation_figure(t["by_country"], out / "ss_lms_icat_by_country", title=f"{label}: StereoSet scores per country")
        s = ev.summary(t)
        s["method"] = ev.scoring_method(mcfg["kind"], score)
        s["candidate_score"] = score
        s["sources"] = instances["source"].value_counts().to_dict()
        summaries[label] = s
        all_scores.append(scores)
        with _run(p, "evaluate", model=label, tags={"instance_sources": ",".join(sorted(s["sources"])), "scoring": s["method"]}) as run:
            run.log_metrics({k: s[k] for k in ("ss", "lms", "icat")})
            run.log_artifact(out / "by_country.csv")
        print(f"stereo-evaluate: {label} ss {s['ss']:.1f} lms {s['lms']:.1f} icat {s['icat']:.1f} on {s['n']} instances "
              f"in {time.perf_counter() - started:.0f}s")
    write_csv(PROCESSED / "scores.csv", pd.concat(all_scores, ignore_index=True))
    first = summaries[_label(models[0])]
    sources = {str(k): int(v) for k, v in instances["source"].value_counts().items()}
    validated_by = read_csv_checked(PROCESSED / "instances_provenance.csv", ["id"], what="instance provenance", dtype=str,
                                    keep_default_na=False)
    validated_by = validated_by[validated_by["id"].isin(instances["id"])].get("validation_source", pd.Series(dtype=str))
    annotation_sources = sorted({str(x) for x in validated_by if str(x) in ("simulated", "human", "llm_panel")})
    provenance = {"machine_generated": sources.get("machine", 0) > 0,
                  # the validators of the stereotypes behind the evaluated instances (the starter set has none)
                  "annotation_source": ", ".join(annotation_sources),
                  "notes": ["instances by source: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))]}
    if sources.get("authored"):
        # the starter triples are authored by the project (not translations): their own unreviewed kind
        provenance["source"] = {"authored": sources["authored"]}
    headline = {"ss": round(first["ss"], 2), "lms": round(first["lms"], 2), "icat": round(first["icat"], 2),
                "instances": int(first["n"]), "candidate score": score}
    write_json(REPORTS / "summary.json", {**{k: first[k] for k in ("ss", "lms", "icat", "n", "by_country", "method",
                                                                   "candidate_score")},
                                          "model": _label(models[0]), "models": summaries, "headline": headline,
                                          "provenance": provenance})


# ---------------------------------------------------------------- report


@stage("stereo-report")
def report(args: argparse.Namespace) -> None:
    """reports/stereo/report.md from every stage's outputs."""
    from stereolens.studies.stereo.report import write_report

    p = _params(args, (), ("name", "language", "countries", "categories", "points_of_view"))
    path = write_report(REPORTS, p["study.stereo"])
    print(f"stereo-report: {path}")
