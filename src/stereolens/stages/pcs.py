"""DVC stages of the pcs study (seed 004): collect -> calibration set -> judge -> validate -> analyze.

Each stage reads ``study.pcs`` (plus ``model``, ``language``, ``tracking``,
``seed``) from params.yaml, calls the library and writes its outputs:

* ``pcs-collect``: responses per responder x language x scenario x condition x
  sample, with validity checks -> data/interim/pcs/responses.csv.
* ``pcs-calibration-set``: the synthetic contrastive calibration exemplars,
  generated once and versioned as a DVC output -> data/interim/pcs/calibration_set.csv.
* ``pcs-judge``: every judge of the panel scores every valid response and every
  calibration exemplar -> data/interim/pcs/scores.csv, calibration_scores.csv.
* ``pcs-validate``: construct validity, inter-judge alpha and calibration
  accuracy as Great Expectations gates -> reports/pcs/gates.json.  With
  ``gates.enforce`` a failing gate stops the pipeline (GateFailed names the
  figure); without it the failure is recorded and reported.
* ``pcs-analyze``: every metric, table and figure -> reports/pcs/.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, DataError, GateFailed
from stereolens.io import read_csv_checked, write_csv, write_json, write_text
from stereolens.stages.common import languages_to_run, load_params, model_cache_dir
from stereolens.stages.registry import stage

STUDY = "pcs"
INTERIM = Path("data/interim/pcs")
REPORTS = Path("reports/pcs")
PARAM_KEYS = ("model", "language", "tracking", "seed", "study.pcs")


# ---------------------------------------------------------------- config helpers


def _params(args: argparse.Namespace) -> dict[str, Any]:
    p = load_params(*PARAM_KEYS, path=args.params)
    return {"model": p["model"], "language": p["language"], "tracking": p["tracking"], "seed": p["seed"], "cfg": p["study.pcs"]}


def _model_cfg(entry: dict[str, Any] | None, default_model: dict[str, Any]) -> dict[str, Any]:
    """A responder/judge ``model`` entry: null means the top-level ``model`` config."""
    if entry is None:
        return dict(default_model)
    if not isinstance(entry, dict):
        raise ConfigError(f"study.pcs: model entry must be a mapping or null, got {entry!r}")
    return dict(entry)


def _load(model_cfg: dict[str, Any]):
    from stereolens.models import ResponseCache, load_model, spec_from_config

    return load_model(spec_from_config(model_cfg), cache=ResponseCache(model_cache_dir()))


def _label(model_cfg: dict[str, Any]) -> str:
    return str(model_cfg.get("id") or model_cfg["name"])


def responders(p: dict[str, Any]) -> list[dict[str, Any]]:
    entries = p["cfg"].get("responders") or [None]
    return [_model_cfg(e, p["model"]) for e in entries]


def judge_panel(p: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(JudgeSpec, model config) per panel member of ``study.pcs.judges.panel``."""
    from stereolens.scoring.judging import JudgeSpec

    panel = (p["cfg"].get("judges") or {}).get("panel") or []
    if not panel:
        raise ConfigError("study.pcs.judges.panel is empty: a judge panel needs at least one judge")
    out = []
    for member in panel:
        member = dict(member)
        model_cfg = _model_cfg(member.pop("model", None), p["model"])
        if not member.get("id"):
            member["id"] = _label(model_cfg)
        try:
            spec = JudgeSpec(**member)
        except TypeError as exc:
            raise ConfigError(f"study.pcs.judges.panel entry {member.get('id')!r}: {exc}") from None
        out.append((spec, model_cfg))
    ids = [s.id for s, _ in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"study.pcs.judges.panel has duplicate judge ids: {ids}")
    return out


def _bank(p: dict[str, Any]):
    from stereolens.construction.scenarios import load_bank

    cfg = p["cfg"]
    langs = languages_to_run(list(cfg["languages"]), p["language"])
    if not langs:
        raise ConfigError(f"study.pcs.languages {cfg['languages']} and language.include leave no language to run")
    return load_bank(
        cfg.get("bank", "data/seed/pcs"),
        languages=langs,
        scenario_ids=cfg.get("scenario_ids"),
        per_dimension_domain=cfg.get("per_dimension_domain"),
        dimensions=cfg.get("dimensions"),
        domains=cfg.get("domains"),
    )


def configuration_label(p: dict[str, Any]) -> dict[str, Any]:
    """What the report states about the run's configuration."""
    cfg = p["cfg"]
    coll = cfg.get("collection", {})
    panel = (cfg.get("judges") or {}).get("panel") or []
    return {
        "config": cfg.get("name", "?"),
        "responders": ", ".join(_label(m) for m in responders(p)),
        "judges": ", ".join(
            f"{m.get('id') or _label(_model_cfg(m.get('model'), p['model']))} ({m.get('mode', 'logprob')})" for m in panel
        ),
        "languages": ", ".join(languages_to_run(list(cfg["languages"]), p["language"])),
        "scenarios": cfg.get("scenario_ids") or f"{cfg.get('per_dimension_domain') or 'all'} per dimension x domain",
        "samples": coll.get("samples"),
        "temperature": coll.get("temperature"),
        "max_tokens": coll.get("max_tokens"),
        "min_gap": cfg.get("analysis", {}).get("min_gap"),
        "excluded from judging": ", ".join(cfg.get("validity", {}).get("exclude", ["empty", "refusal", "wrong_language"])) or "nothing",
        "gates_enforced": bool(cfg.get("gates", {}).get("enforce", True)),
    }


def _tracking(p: dict[str, Any], stage_name: str, *, annotation_source: str | None = "llm_panel", **kw: Any):
    """An MLflow run; the scores are annotations by an LLM panel (the collect stage has none)."""
    from stereolens.tracking import stage_run

    return stage_run(p["tracking"], study=STUDY, stage=stage_name, params=p["cfg"],
                     annotation_source=annotation_source, **kw)


# ---------------------------------------------------------------- collect


@stage("pcs-collect")
def collect(args: argparse.Namespace) -> None:
    """Collect triad responses through the model layer and check their validity."""
    from stereolens.construction.scenarios import review_summary, triad_prompts
    from stereolens.scoring.responses import (
        CollectionSettings,
        ValiditySettings,
        check_validity,
        collect_responses,
        validity_summary,
    )

    p = _params(args)
    cfg = p["cfg"]
    bank = _bank(p)
    prompts = triad_prompts(bank, tuple(cfg.get("conditions", ("A", "B", "C"))))
    coll = cfg.get("collection", {})
    settings = CollectionSettings(
        temperature=float(coll.get("temperature", 0.7)),
        max_tokens=int(coll.get("max_tokens", 2000)),
        samples=int(coll.get("samples", 4)),
        base_seed=int(p["seed"]),
        stop=tuple(coll.get("stop") or ()),
        **({"system_prompt": coll["system_prompt"]} if coll.get("system_prompt") else {}),
        **({"language_names": {**CollectionSettings().language_names, **coll["language_names"]}} if coll.get("language_names") else {}),
    )
    vcfg = cfg.get("validity", {})
    exclude = tuple(vcfg.get("exclude", ("empty", "refusal", "wrong_language")))
    unknown = sorted(set(exclude) - {"empty", "refusal", "wrong_language"})
    if unknown:
        raise ConfigError(f"study.pcs.validity.exclude: unknown reason(s) {unknown} (use empty, refusal, wrong_language)")
    vsettings = ValiditySettings(min_script_share=float(vcfg.get("min_script_share", 0.5)), exclude=exclude)
    frames = []
    for model_cfg in responders(p):
        label = _label(model_cfg)
        started = time.time()
        with _tracking(p, "collect", model=label, annotation_source=None) as run:
            model = _load(model_cfg)
            responses = check_validity(collect_responses(model, label, prompts, settings), vsettings)
            frames.append(responses)
            summary = validity_summary(responses)
            run.log_metrics({
                "n_responses": len(responses),
                "validity_rate": float(responses["valid"].mean()),
                "seconds": time.time() - started,
                "cached_share": float(responses["cached"].mean()),
            })
        print(f"pcs-collect: {label}: {len(responses)} responses, validity {responses['valid'].mean():.3f}")
    responses = pd.concat(frames, ignore_index=True)
    write_csv(INTERIM / "responses.csv", responses)
    write_csv(REPORTS / "validity.csv", validity_summary(responses))
    write_csv(REPORTS / "translation_reviews.csv", review_summary(bank))


# ---------------------------------------------------------------- calibration set


@stage("pcs-calibration-set")
def calibration_set(args: argparse.Namespace) -> None:
    """Build the synthetic contrastive calibration set (once; a versioned DVC output)."""
    from stereolens.construction.scenarios import load_bank
    from stereolens.scoring.judging import build_calibration_set
    from stereolens.scoring.responses import LANGUAGE_NAMES

    p = _params(args)
    cfg = p["cfg"]
    ccfg = cfg.get("calibration", {})
    bank = load_bank(cfg.get("bank", "data/seed/pcs"), languages=[ccfg.get("language", "en")], dimensions=cfg.get("dimensions"))
    source = ccfg.get("source", "template")
    generator = _load(_model_cfg(ccfg.get("generator"), p["model"])) if source == "model" else None
    lang = ccfg.get("language", "en")
    calib = build_calibration_set(
        bank.scenarios, dict(bank.rubrics), pairs_per_feature=int(ccfg.get("pairs_per_feature", 1)), source=source,
        generator=generator, language=lang, language_name=LANGUAGE_NAMES.get(lang, lang),
        max_tokens=int(ccfg.get("max_tokens", 200)), seed=int(p["seed"]),
    )
    write_csv(INTERIM / "calibration_set.csv", calib)
    print(f"pcs-calibration-set: {len(calib)} exemplars ({source})")


# ---------------------------------------------------------------- judge


def judge_items_for(responses: pd.DataFrame, bank) -> list:
    from stereolens.scoring.judging import JudgeItem

    neutral = {(r.scenario_id, r.language): r.prompt_a for r in bank.scenarios.itertuples()}
    items = []
    for r in responses.itertuples():
        items.append(
            JudgeItem(r.response_id, r.dimension, neutral[(r.scenario_id, r.language)], str(r.response), bank.features(r.dimension))
        )
    return items


@stage("pcs-judge")
def judge(args: argparse.Namespace) -> None:
    """Score every valid response and every calibration exemplar with every judge of the panel."""
    from stereolens.scoring.judging import judge_calibration, judge_items

    p = _params(args)
    bank = _bank(p)
    responses = read_csv_checked(INTERIM / "responses.csv", ["response_id", "judged", "response"], what="pcs responses",
                                 keep_default_na=False)
    responses = responses.loc[responses["judged"].astype(str).str.lower() == "true"]
    calib = read_csv_checked(INTERIM / "calibration_set.csv", ["pair_id", "pole", "response"], what="calibration set",
                             keep_default_na=False)
    items = judge_items_for(responses, bank)
    meta = responses.set_index("response_id")[["model", "language", "scenario_id", "dimension", "condition", "sample"]]
    score_frames, calib_frames = [], []
    for spec, model_cfg in judge_panel(p):
        started = time.time()
        with _tracking(p, "judge", model=spec.id) as run:
            model = _load(model_cfg)
            scored = judge_items(model, spec, items)
            cal = judge_calibration(model, spec, calib, dict(bank.rubrics))
            run.log_metrics({
                "n_judgements": len(scored),
                "failure_rate": float((scored["status"] == "failed").mean()) if len(scored) else math.nan,
                "seconds": time.time() - started,
            })
        print(f"pcs-judge: {spec.id}: {len(scored)} feature scores, {int((scored['status'] == 'failed').sum())} failed")
        score_frames.append(scored)
        calib_frames.append(cal)
    scores = pd.concat(score_frames, ignore_index=True)
    scores = scores.join(meta, on="item_id").rename(columns={"item_id": "response_id"})
    cols = ["model", "language", "scenario_id", "dimension", "feature", "condition", "sample", "judge", "score",
            "digit_mass", "status", "rationale", "error", "response_id"]
    write_csv(INTERIM / "scores.csv", scores[cols])
    write_csv(INTERIM / "calibration_scores.csv", pd.concat(calib_frames, ignore_index=True))


# ---------------------------------------------------------------- validate (gates)


def evaluate_gates(scores: pd.DataFrame, calib_scores: pd.DataFrame, gates_cfg: dict[str, Any]) -> dict[str, Any]:
    """The three appendix B.1 figures and whether each passes its configured threshold."""
    from stereolens.analysis.pcs import cell_scores, check_scores
    from stereolens.scoring.judging import calibration_accuracy, construct_validity, inter_judge_alpha

    checked = check_scores(scores)
    cv = construct_validity(cell_scores(checked))
    alpha = inter_judge_alpha(checked, n_boot=int(gates_cfg.get("alpha_bootstrap", 200)))
    cal = calibration_accuracy(calib_scores.dropna(subset=["score"]))
    cal_min = min(cal["by_dimension"].values()) if cal["by_dimension"] else math.nan

    def gate(observed: float, threshold: float) -> dict[str, Any]:
        passed = None if observed is None or (isinstance(observed, float) and math.isnan(observed)) else bool(observed >= threshold)
        return {"observed": observed, "threshold": threshold, "passed": passed}

    gates = {
        "construct_validity": {**gate(cv["construct_validity"], float(gates_cfg.get("construct_validity_min", 0.8))), "n": cv["n"]},
        "inter_judge_alpha": {**gate(alpha["alpha"], float(gates_cfg.get("alpha_min", 0.6))), **{k: v for k, v in alpha.items() if k != "alpha"}},
        "calibration_accuracy": {**gate(cal_min, float(gates_cfg.get("calibration_min", 0.9))),
                                 "overall": cal["accuracy"], "by_dimension": cal["by_dimension"],
                                 "by_judge": cal.get("by_judge", {}), "n_pairs": cal["n_pairs"]},
    }
    # a gate that cannot be computed (one judge: no alpha) passes only if the config allows it
    allow_na = bool(gates_cfg.get("allow_not_applicable", True))
    all_passed = all(g["passed"] is True or (g["passed"] is None and allow_na) for g in gates.values())
    return {"enforced": bool(gates_cfg.get("enforce", True)), "all_passed": all_passed, "gates": gates}


@stage("pcs-validate")
def validate(args: argparse.Namespace) -> None:
    """Judge-panel gates: construct validity, inter-judge alpha, calibration accuracy."""
    from stereolens.quality.gates import Expectation, run_gate

    p = _params(args)
    gates_cfg = p["cfg"].get("gates", {})
    scores = read_csv_checked(INTERIM / "scores.csv", ["judge", "score"], what="pcs scores")
    calib = read_csv_checked(INTERIM / "calibration_scores.csv", ["pair_id", "pole", "score"], what="calibration scores")
    result = evaluate_gates(scores, calib, gates_cfg)
    write_json(REPORTS / "gates.json", _json_safe(result))
    row, expectations = {}, []
    for name, g in result["gates"].items():
        if g["passed"] is None:
            continue  # not computable here (e.g. alpha with one judge): recorded as not applicable
        row[name] = g["observed"]
        expectations.append(Expectation("expect_column_min_to_be_between", column=name, min_value=g["threshold"]))
    with _tracking(p, "validate") as run:
        run.log_metrics({f"gate_{k}": g["observed"] for k, g in result["gates"].items() if g["observed"] is not None
                         and not (isinstance(g["observed"], float) and math.isnan(g["observed"]))})
        run.log_metrics({"gates_passed": float(result["all_passed"])})
        run.set_tags({"gates_enforced": result["enforced"], "gates_passed": result["all_passed"]})
        if expectations:
            run_gate(pd.DataFrame([row]), expectations, study=STUDY, artefact=str(INTERIM / "scores.csv"),
                     suite="pcs_judge_panel", report_dir="reports/quality", raise_on_failure=result["enforced"])
        else:
            write_json(Path("reports/quality") / "pcs__pcs_judge_panel.json",
                       {"study": STUDY, "suite": "pcs_judge_panel", "success": None, "results": [],
                        "note": "no gate figure could be computed"})
        if result["enforced"] and not result["all_passed"]:
            failing = [k for k, g in result["gates"].items() if g["passed"] is not True]
            raise GateFailed(f"[{STUDY}] judge panel gate(s) {', '.join(failing)} not passed and not computable "
                             f"(allow_not_applicable is false); see {REPORTS / 'gates.json'}")
    status = "passed" if result["all_passed"] else ("FAILED (enforced)" if result["enforced"] else "FAILED (reported, not enforced)")
    print(f"pcs-validate: gates {status}: " + ", ".join(f"{k}={_short(g['observed'])}/{g['threshold']}" for k, g in result["gates"].items()))


def _short(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _json_safe(obj: Any) -> Any:
    from stereolens.analysis.pcs import _clean

    return _clean(obj)


# ---------------------------------------------------------------- analyze


@stage("pcs-analyze")
def analyze(args: argparse.Namespace) -> None:
    """Every metric, table and figure of seed 004 from the judged scores."""
    from stereolens.analysis.pcs_cli import write_analysis

    p = _params(args)
    cfg = p["cfg"]
    acfg = cfg.get("analysis", {})
    gates = json.loads((REPORTS / "gates.json").read_text(encoding="utf-8"))
    if gates["enforced"] and not gates["all_passed"]:
        failing = [k for k, g in gates["gates"].items() if g["passed"] is False]
        raise GateFailed(f"pcs-analyze: judge panel failed gate(s) {', '.join(failing)} (see {REPORTS / 'gates.json'})")
    scores = read_csv_checked(INTERIM / "scores.csv", ["score"], what="pcs scores")
    human = None
    if acfg.get("human_preferences"):
        human = read_csv_checked(acfg["human_preferences"], ["language", "comparison", "preference"], what="human preferences")
    validity = pd.read_csv(REPORTS / "validity.csv") if (REPORTS / "validity.csv").exists() else None
    configuration = configuration_label(p)
    responses_path = INTERIM / "responses.csv"
    if responses_path.exists():
        # provenance: machine-translated prompts that no reviewer has seen are labelled as such
        status = pd.read_csv(responses_path, usecols=["translation_status"], keep_default_na=False)["translation_status"]
        labels = {"authored": "authored (machine-written translation, unreviewed)", "source": "source (English original)"}
        configuration["prompt translation status"] = ", ".join(
            f"{labels.get(k, k)}: {v}" for k, v in status.value_counts().items()
        )
    tags = {"gates_passed": gates["all_passed"], "config": configuration["config"],
            "translation_status": configuration.get("prompt translation status", "")}
    with _tracking(p, "analyze", tags=tags) as run:
        analysis, files = write_analysis(
            scores, REPORTS, min_gap=float(acfg.get("min_gap", 1e-9)), hindi=acfg.get("hindi", "hi"),
            urdu=acfg.get("urdu", "ur"), human=human, configuration=configuration, gates=gates, validity=validity,
            waterfall_cell=acfg.get("waterfall"),
        )
        metrics = {k: analysis.summary[k] for k in ("pcs", "cap_util", "n_excluded") if analysis.summary[k] is not None}
        metrics.update({f"pcs_{k}": v for k, v in analysis.summary["by_dimension"].items() if v is not None})
        if validity is not None:
            metrics["validity_rate"] = float(validity.loc[validity["model"] == "all", "validity_rate"].iloc[0])
        run.log_metrics(metrics)
        run.log_dataset(INTERIM / "scores.csv", name="pcs_scores", context="evaluation")
        for f in files:
            run.log_artifact(f)
    print(f"pcs-analyze: PCS {_short(analysis.summary['pcs'])}, cap util {_short(analysis.summary['cap_util'])}, "
          f"gates {'passed' if gates['all_passed'] else 'FAILED'} -> {REPORTS}")
