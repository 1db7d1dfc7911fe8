"""DVC stages of the pcs study (Fifteen Percent Fluency): collect -> calibration set -> judge -> validate -> analyze.

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
* ``pcs-paired``: the run's models compared scenario by scenario (paired differences of PCS per
  language) -> reports/pcs/paired.json, paired.csv.
* ``pcs-analyze``: every metric, table and figure -> reports/pcs/ (with the paired comparisons that
  involve the model and the robustness table).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.errors import ConfigError, GateFailed
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import languages_to_run, load_params, stage_params
from stereolens.stages.kit import load_stage_model, model_dir, model_label, require_generator
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY = "pcs"
# model-independent: INTERIM/calibration_set.csv; per model measured: INTERIM/<model_id>/, REPORTS/<model_id>/
INTERIM = Path("data/interim/pcs")
REPORTS = Path("reports/pcs")
JUDGES_KEY = "study.pcs.judges.panel"
PARAM_KEYS = ("model", "language", "tracking", "seed", "study.pcs")
# the judge scores are annotations by a panel of models, whichever models they are
JUDGE_SOURCE = "llm_panel"
COLLECT_RUN = declare_run(STUDY, "collect", params=("study",),
                          metrics=("n_responses", "validity_rate", "seconds", "cached_share"))
JUDGE_RUN = declare_run(STUDY, "judge", params=("study",), metrics=("n_judgements", "failure_rate", "seconds"))
VALIDATE_RUN = declare_run(STUDY, "validate", params=("study",), metrics=("gate_{gate}", "gates_passed"))
# the agreement measures and the kept / decided counts of an annotation round (RoundReview.metrics)
AGREEMENT_MEASURES = ("krippendorff_alpha", "fleiss_kappa", "raw_agreement")
HUMAN_VALIDATION_RUN = declare_run(
    STUDY, "human_validation", params=("annotation", "human_validation"),
    metrics=("{measure}", "{measure}_ci_low", "{measure}_ci_high", "annotators", "annotators_passed",
             "failing_annotator_share", "items", "items_kept", "items_decided", "n_decided", "n_undecided"))
# difference.<model_a>__<model_b>.<cell>: the paired comparisons of the run's models (pcs_paired), per language and all
ANALYZE_RUN = declare_run(STUDY, "analyze", params=("study",),
                          metrics=("pcs", "cap_util", "n_excluded", "pcs_{dimension}", "validity_rate",
                                   "difference.{pair}.{cell}"))
PAIRED_RUN = declare_run(STUDY, "paired", params=("study",), metrics=("difference.{pair}.{cell}",))
PAIRED_FILE = REPORTS / "paired.json"
# the paired-comparison metrics of a report run when the run has one model (an axis needs a value; logged NaN)
NO_PAIR = "none"

log = logging.getLogger(__name__)


def warn_sampling(collection: dict[str, Any]) -> str | None:
    """Log (and return) a warning when several samples are drawn greedily: they are copies, not samples."""
    samples = int(collection.get("samples", 4))
    temperature = float(collection.get("temperature", 0.7))
    if samples > 1 and temperature == 0:
        msg = (f"study.pcs.collection: samples={samples} with temperature=0 decodes the same answer {samples} times; "
               f"the mean over samples adds no information (raise the temperature or set samples: 1)")
        log.warning(msg)
        return msg
    return None


# ---------------------------------------------------------------- config helpers


def _params(args: argparse.Namespace) -> dict[str, Any]:
    """The declared params; ``model`` is the model this run measures (``--model``, else the primary)."""
    p = stage_params(args, *PARAM_KEYS)
    return {"model": p["model"], "language": p["language"], "tracking": p["tracking"], "seed": p["seed"], "cfg": p["study.pcs"],
            "compared": getattr(args, "model", None) is not None and args.model != _primary_id(args)}


def _primary_id(args: argparse.Namespace) -> str:
    return str(load_params("model.id", path=args.params)["model.id"])


def _dirs(p: dict[str, Any]) -> tuple[Path, Path]:
    """(data/interim/pcs/<model_id>, reports/pcs/<model_id>) of the model the stage measures."""
    return model_dir(INTERIM, p["model"]), model_dir(REPORTS, p["model"])


def _model_cfg(entry: dict[str, Any] | None, default_model: dict[str, Any]) -> dict[str, Any]:
    """A responder/judge ``model`` entry: null means the top-level ``model`` config."""
    if entry is None:
        return dict(default_model)
    if not isinstance(entry, dict):
        raise ConfigError(f"study.pcs: model entry must be a mapping or null, got {entry!r}")
    return dict(entry)


def responders(p: dict[str, Any]) -> list[dict[str, Any]]:
    """``study.pcs.responders`` (null: the measured model) in the primary model's run; a compared model's
    run (``--model``) collects that model's responses alone."""
    entries = (None if p.get("compared") else p["cfg"].get("responders")) or [None]
    return [_model_cfg(e, p["model"]) for e in entries]


def judge_panel(p: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(JudgeSpec, model config) per panel member of ``study.pcs.judges.panel``."""
    from stereolens.studies.pcs.judging import JudgeSpec

    panel = (p["cfg"].get("judges") or {}).get("panel") or []
    if not panel:
        raise ConfigError("study.pcs.judges.panel is empty: a judge panel needs at least one judge")
    out = []
    for member in panel:
        member = dict(member)
        model_cfg = _model_cfg(member.pop("model", None), p["model"])
        if not member.get("id"):
            member["id"] = model_label(model_cfg)
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
    from stereolens.studies.pcs.scenarios import load_bank

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


def configuration_label(p: dict[str, Any], scores: pd.DataFrame | None = None) -> dict[str, Any]:
    """What the report states about the run's configuration.

    Dimensions, domains and the scenario count are read from the scored data
    when given (what actually ran), else from the config.
    """
    cfg = p["cfg"]
    coll = cfg.get("collection", {})
    panel = (cfg.get("judges") or {}).get("panel") or []
    gates_enforced = bool(cfg.get("gates", {}).get("enforce", True))

    def listed(col: str, configured: Any) -> str:
        if scores is not None and col in scores.columns:
            return ", ".join(sorted(scores[col].dropna().astype(str).unique()))
        return ", ".join(map(str, configured)) if configured else "all in the bank"

    if scores is not None and "scenario_id" in scores.columns:
        n_scen = int(scores["scenario_id"].nunique())
        selection = cfg.get("scenario_ids") or f"first {cfg.get('per_dimension_domain') or 'all'} per dimension x domain"
        scenarios = f"{n_scen} ({selection})"
    else:
        scenarios = cfg.get("scenario_ids") or f"{cfg.get('per_dimension_domain') or 'all'} per dimension x domain"
    return {
        "config": cfg.get("name", "?"),
        "responders": ", ".join(model_label(m) for m in responders(p)),
        "judges": ", ".join(
            f"{m.get('id') or model_label(_model_cfg(m.get('model'), p['model']))} ({m.get('mode', 'logprob')})" for m in panel
        ),
        "languages": ", ".join(languages_to_run(list(cfg["languages"]), p["language"])),
        "dimensions": listed("dimension", cfg.get("dimensions")),
        "domains": listed("domain", cfg.get("domains")),
        "scenarios": scenarios,
        "samples": coll.get("samples"),
        "temperature": coll.get("temperature"),
        "max_tokens": coll.get("max_tokens"),
        "minimum explicit-prompt gain (ours)": f"{cfg.get('analysis', {}).get('min_gain_steps')} steps of the judges' scale",
        "excluded from the analysis": "every invalid response (empty, refusal, wrong_language), judged or not",
        "excluded from judging": ", ".join(cfg.get("validity", {}).get("exclude", ["empty", "refusal", "wrong_language"])) or "nothing",
        "gates_enforced": gates_enforced,
        "gates": "enforced (a failing gate stops the analysis)" if gates_enforced
        else "reported, not enforced (a failing gate does not stop the analysis)",
    }


def _tracking(p: dict[str, Any], schema: Any, *, annotation_source: str | None, **kw: Any):
    """An MLflow run tagged with the source of the annotations it rests on (None: the collect stage has none)."""
    from stereolens.tracking import stage_run

    return stage_run(p["tracking"], schema, params={"study": p["cfg"]}, annotation_source=annotation_source, **kw)


# ---------------------------------------------------------------- collect


@stage("pcs-collect", per_model=True)
def collect(args: argparse.Namespace) -> None:
    """Collect triad responses through the model layer and check their validity."""
    from stereolens.studies.pcs.scenarios import review_summary, triad_prompts
    from stereolens.studies.pcs.responses import (
        check_validity,
        collect_responses,
        collection_settings_from_config,
        validity_settings_from_config,
        validity_summary,
    )

    p = _params(args)
    interim, reports = _dirs(p)
    cfg = p["cfg"]
    # refuse an uncheckable language before any model is loaded
    vsettings = validity_settings_from_config(cfg.get("validity"), languages_to_run(list(cfg["languages"]), p["language"]))
    warn_sampling(cfg.get("collection", {}))
    bank = _bank(p)
    prompts = triad_prompts(bank, tuple(cfg.get("conditions", ("A", "B", "C"))))
    settings = collection_settings_from_config(cfg.get("collection"), seed=int(p["seed"]))
    frames = []
    for model_cfg in responders(p):
        label = model_label(model_cfg)
        started = time.time()
        with _tracking(p, COLLECT_RUN, model=label, annotation_source=None) as run:
            model = load_stage_model(model_cfg, params_path=args.params, key="study.pcs.responders", generator=True)
            responses = check_validity(collect_responses(model, label, prompts, settings), vsettings)
            frames.append(responses)
            run.log_metrics({
                "n_responses": len(responses),
                "validity_rate": float(responses["valid"].mean()),
                "seconds": time.time() - started,
                "cached_share": float(responses["cached"].mean()),
            })
        print(f"pcs-collect: {label}: {len(responses)} responses ({int(responses['cached'].sum())} from the cache), "
              f"validity {responses['valid'].mean():.3f}")
    # whether an answer came from the cache says how the run went, not what was collected: a run resumed
    # after a kill must write the same bytes as an uninterrupted one (it is logged to MLflow above instead)
    responses = pd.concat(frames, ignore_index=True).drop(columns=["cached"])
    write_csv(interim / "responses.csv", responses)
    write_csv(reports / "validity.csv", validity_summary(responses))
    write_csv(reports / "translation_reviews.csv", review_summary(bank))


# ---------------------------------------------------------------- calibration set


@stage("pcs-calibration-set")
def calibration_set(args: argparse.Namespace) -> None:
    """Build the synthetic contrastive calibration set (once; a versioned DVC output).

    Reads only scenarios.csv and rubrics.yaml (see stereolens.studies.pcs.calibration).
    """
    from stereolens.studies.pcs.calibration import build_calibration_set, file_sha256, load_calibration_inputs
    from stereolens.studies.pcs.responses import LANGUAGE_NAMES

    p = _params(args)
    cfg = p["cfg"]
    ccfg = cfg.get("calibration", {})
    lang = ccfg.get("language", "en")
    scenarios, rubrics = load_calibration_inputs(cfg.get("bank", "data/seed/pcs"), language=lang,
                                                 dimensions=cfg.get("dimensions"))
    source = ccfg.get("source", "template")
    generator = (load_stage_model(_model_cfg(ccfg.get("generator"), p["model"]), params_path=args.params,
                                  key="study.pcs.calibration.generator", generator=True)
                 if source == "model" else None)
    calib = build_calibration_set(
        scenarios, rubrics, pairs_per_feature=int(ccfg.get("pairs_per_feature", 1)), source=source,
        generator=generator, language=lang, language_name=LANGUAGE_NAMES.get(lang, lang),
        max_tokens=int(ccfg.get("max_tokens", 200)), seed=int(p["seed"]),
    )
    path = write_csv(INTERIM / "calibration_set.csv", calib)
    print(f"pcs-calibration-set: {len(calib)} exemplars ({source}), sha256 {file_sha256(path)[:12]}")


# ---------------------------------------------------------------- judge


@stage("pcs-judge", per_model=True)
def judge(args: argparse.Namespace) -> None:
    """Score every valid response and every calibration exemplar with every judge of the panel."""
    from stereolens.studies.pcs.judging import judge_calibration, judge_items, judge_items_for, scores_table

    p = _params(args)
    panel = judge_panel(p)
    for _, model_cfg in panel:
        # a judge scores from the tokens it would generate: refuse a masked LM before anything is read or loaded
        require_generator(model_cfg, key=JUDGES_KEY)
    interim, _ = _dirs(p)
    bank = _bank(p)
    responses = read_csv_checked(interim / "responses.csv", ["response_id", "judged", "response"], what="pcs responses",
                                 keep_default_na=False)
    responses = responses.loc[responses["judged"].astype(str).str.lower() == "true"]
    calib = read_csv_checked(INTERIM / "calibration_set.csv", ["pair_id", "pole", "response"], what="calibration set",
                             keep_default_na=False)
    items = judge_items_for(responses, bank)
    score_frames, calib_frames = [], []
    for spec, model_cfg in panel:
        started = time.time()
        # named by the model whose responses are judged, then the judge
        with _tracking(p, JUDGE_RUN, model=model_label(p["model"]), variant=spec.id, annotation_source=JUDGE_SOURCE) as run:
            model = load_stage_model(model_cfg, params_path=args.params, key=JUDGES_KEY)
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
    write_csv(interim / "scores.csv", scores_table(score_frames, responses))
    write_csv(interim / "calibration_scores.csv", pd.concat(calib_frames, ignore_index=True))


# ---------------------------------------------------------------- validate (gates)


def failing_gates(result: dict[str, Any]) -> str:
    """Every gate that did not pass, with its observed value and threshold ('n/a' when not computable)."""
    parts = []
    for name, g in result.get("gates", {}).items():
        if g.get("passed") is True:
            continue
        observed = g.get("observed")
        why = "below" if g.get("passed") is False else "not computable"
        parts.append(f"{name} observed {_short(observed)} vs threshold {g.get('threshold')} ({why})")
    return "; ".join(parts) or "none"


@stage("pcs-validate", per_model=True)
def validate(args: argparse.Namespace) -> None:
    """Judge-panel gates: construct validity, inter-judge alpha, calibration accuracy."""
    from stereolens.quality.gates import Expectation, run_gate
    from stereolens.studies.pcs.gates import calibration_set_version, evaluate_gates

    p = _params(args)
    interim, reports = _dirs(p)
    gates_cfg = p["cfg"].get("gates", {})
    scores = read_csv_checked(interim / "scores.csv", ["judge", "score"], what="pcs scores")
    calib = read_csv_checked(interim / "calibration_scores.csv", ["pair_id", "pole", "score"], what="calibration scores")
    result = evaluate_gates(scores, calib, gates_cfg)
    result["calibration_set"] = calibration_set_version(calib, INTERIM / "calibration_set.csv",
                                                        interim / "calibration_scores.csv")
    write_json(reports / "gates.json", result)
    row, expectations = {}, []
    for name, g in result["gates"].items():
        if g["passed"] is None:
            continue  # not computable here (e.g. alpha with one judge): recorded as not applicable
        row[name] = g["observed"]
        expectations.append(Expectation("expect_column_min_to_be_between", column=name, min_value=g["threshold"]))
    with _tracking(p, VALIDATE_RUN, model=model_label(p["model"]), annotation_source=JUDGE_SOURCE, axes={"gate": list(result["gates"])}) as run:
        # a gate not computable here (alpha with one judge) is NaN, so every run has every gate's key
        run.log_metrics({f"gate_{k}": g["observed"] for k, g in result["gates"].items()})
        run.log_metrics({"gates_passed": float(result["all_passed"])})
        run.set_tags({"gates_enforced": result["enforced"], "gates_passed": result["all_passed"]})
        if expectations:
            # the GX report is written either way; the error below names every failing gate, the
            # not-computable ones included, which a GX failure message cannot
            run_gate(pd.DataFrame([row]), expectations, study=STUDY, artefact=str(interim / "scores.csv"),
                     suite="pcs_judge_panel", report_dir=reports / "quality", raise_on_failure=False)
        else:
            write_json(reports / "quality" / "pcs__pcs_judge_panel.json",
                       {"study": STUDY, "suite": "pcs_judge_panel", "success": None, "results": [],
                        "note": "no gate figure could be computed"})
        if result["enforced"] and not result["all_passed"]:
            raise GateFailed(f"[{STUDY}] judge panel gate(s) not passed: {failing_gates(result)}; "
                             f"see {reports / 'gates.json'} and {reports / 'quality' / 'pcs__pcs_judge_panel.json'}")
    status = "passed" if result["all_passed"] else ("FAILED (enforced)" if result["enforced"] else "FAILED (reported, not enforced)")
    print(f"pcs-validate: gates {status}: " + ", ".join(f"{k}={_short(g['observed'])}/{g['threshold']}" for k, g in result["gates"].items()))


def _short(v: Any) -> str:
    """A number in a printed line, as the report writes it (report/markdown.py)."""
    from stereolens.report.markdown import format_cell

    return format_cell(v)


# ---------------------------------------------------------------- human validation

HUMAN_VALIDATION = "human_validation"  # a folder in each model's interim and reports folders
HV_KEYS = ("model.id", "annotation", "seed", "tracking", "study.pcs.human_validation")


@stage("pcs-human-validation", per_model=True)
def human_validation(args: argparse.Namespace) -> None:
    """Pairwise human-validation preferences (Fifteen Percent Fluency appendix J) from the annotation layer."""
    from stereolens.studies.pcs.analysis import human_validation as binomial_tests
    from stereolens.studies.pcs.human_validation import human_validation_round

    p = stage_params(args, *HV_KEYS)
    hv = p["study.pcs.human_validation"] or {}
    interim, reports = model_dir(INTERIM, p["model.id"]), model_dir(REPORTS, p["model.id"])
    source = (p["annotation"] or {}).get("source")
    # invalid_reason: an invalid response (a wrong-language reply above all) is never shown to annotators
    responses = read_csv_checked(interim / "responses.csv", ["response_id", "response", "prompt", "invalid_reason"],
                                 what="pcs responses", keep_default_na=False)
    scores = read_csv_checked(interim / "scores.csv", ["response_id", "feature", "score"], what="pcs scores")
    from stereolens.tracking import stage_run

    with stage_run(p["tracking"], HUMAN_VALIDATION_RUN, model=p["model.id"], annotation_source=source,
                   axes={"measure": AGREEMENT_MEASURES},
                   params={"annotation": p["annotation"], "human_validation": hv},
                   tags={"preferences_simulated": source == "simulated"}) as run:
        items, judgements, review, prefs, excluded = human_validation_round(
            responses, scores, p["annotation"], hv, seed=int(p["seed"]), interim=interim / HUMAN_VALIDATION,
            reports=reports / HUMAN_VALIDATION, report_dir=reports / "quality")
        decided = prefs.loc[prefs["decided"]]
        _, tests = binomial_tests(decided, excluded=excluded) if len(decided) else (None, {})
        summary = {"source": source, "n_items": int(len(items)), "n_judgements": int(len(judgements)),
                   "n_decided": int(len(decided)), "n_undecided": int((~prefs["decided"]).sum()),
                   "n_pairs_excluded_invalid": int(len(excluded)),
                   "excluded_invalid": {f"{lang} {comp} {why}": int(n) for (lang, comp, why), n in
                                        excluded.groupby(["language", "comparison", "invalid_reason"]).size().items()},
                   "metrics": review.metrics(), "binomial_tests": tests}
        write_json(reports / HUMAN_VALIDATION / "summary.json", summary)
        # a measure the scale does not define (kappa on an open scale) and an absent count are NaN
        run.log_metrics({m: None for m in AGREEMENT_MEASURES} | {f"{m}_ci_{end}": None for m in AGREEMENT_MEASURES
                                                                 for end in ("low", "high")}
                        | {"items_kept": None, "items_decided": None} | review.metrics())
        run.log_metrics({"n_decided": summary["n_decided"], "n_undecided": summary["n_undecided"]})
    alpha = review.agreement.get("krippendorff_alpha")
    print(f"pcs-human-validation: {source}: {len(items)} pairs ({len(excluded)} left out for an invalid response), "
          f"{len(judgements)} judgements, "
          f"alpha {_short(alpha.value if alpha else None)}, {summary['n_decided']} decided -> {interim / HUMAN_VALIDATION / 'preferences.csv'}")


# ---------------------------------------------------------------- paired comparisons of the run's models

PAIRED_KEYS = ("model_ids", "language", "tracking", "seed", "study.pcs.languages", "study.pcs.analysis")


def difference_metrics(comparisons: list[dict[str, Any]], pairs: list[str], cells: list[str]) -> dict[str, Any]:
    """``difference.<a>__<b>.<cell>`` for every pair and cell of the run's axes (None where not compared)."""
    from stereolens.studies.pcs.paired import pair_key

    found = {(pair_key(c["model_a"], c["model_b"]), str(c["cell"])): c.get("difference") for c in comparisons}
    return {f"difference.{pair}.{cell}": found.get((pair, cell)) for pair in pairs for cell in cells}


def read_model_scores(model_id: str, *, interim: Path = INTERIM) -> pd.DataFrame:
    """One model's judged scores with each response's ``invalid_reason`` (from its responses.csv when present)."""
    from stereolens.studies.pcs.analysis import validate_scores
    from stereolens.studies.pcs.inputs import read_responses, with_invalid_reasons

    folder = model_dir(interim, model_id)
    scores = read_csv_checked(folder / "scores.csv", ["score"], what=f"pcs scores of {model_id}")
    validate_scores(scores, what=f"pcs scores {folder / 'scores.csv'}")
    responses = read_responses(folder / "responses.csv")
    return scores if responses is None else with_invalid_reasons(scores, responses)


@stage("pcs-paired")
def paired(args: argparse.Namespace) -> None:
    """Compare the run's models scenario by scenario: paired differences of PCS per language (reports/pcs/paired.json)."""
    from stereolens.studies.pcs.analysis import DEFAULT_MIN_GAIN_STEPS
    from stereolens.studies.pcs.paired import ALL, comparisons_frame, model_pairs, paired_comparisons
    from stereolens.tracking import stage_run

    p = load_params(*PAIRED_KEYS, path=args.params)
    models = [str(m) for m in p["model_ids"] or []]
    languages = languages_to_run(list(p["study.pcs.languages"]), p["language"])
    analysis = p["study.pcs.analysis"] or {}
    result = paired_comparisons({m: read_model_scores(m) for m in models}, models=models, languages=languages,
                                min_gain_steps=float(analysis.get("min_gain_steps", DEFAULT_MIN_GAIN_STEPS)),
                                seed=int(p["seed"]))
    write_json(PAIRED_FILE, result)
    write_csv(REPORTS / "paired.csv", comparisons_frame(result))
    if len(models) >= 2:  # one model: nothing to compare and no metric to log (the file says why)
        pairs, cells = model_pairs(models), [*languages, ALL]
        params = {"study": {"languages": p["study.pcs.languages"], "analysis": analysis}}
        with stage_run(p["tracking"], PAIRED_RUN, params=params, annotation_source=JUDGE_SOURCE,
                       axes={"pair": pairs, "cell": cells}) as run:
            run.log_metrics(difference_metrics(result["comparisons"], pairs, cells))
            run.log_artifact(PAIRED_FILE)
    decided = [c for c in result["comparisons"] if c["verdict"] in ("model_a more", "model_b more")]
    print(f"pcs-paired: {len(result['comparisons'])} comparisons of {len(models)} models, {len(decided)} with a "
          f"difference found{'; ' + result['reason'] if result['reason'] else ''} -> {PAIRED_FILE}")


# ---------------------------------------------------------------- analyze


def _with_responses(p: dict[str, Any], scores: pd.DataFrame, responses_csv: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The scores with each response's invalidity reason, and the report's configuration lines (domains and the
    prompts' translation status come from the responses); without responses.csv, the scores as they are."""
    from stereolens.studies.pcs.inputs import read_responses, translation_status_line, with_domains, with_invalid_reasons

    responses = read_responses(responses_csv)
    if responses is None:
        return scores, configuration_label(p, scores)
    configuration = configuration_label(p, with_domains(scores, responses))
    configuration["prompt translation status"] = translation_status_line(responses)
    return with_invalid_reasons(scores, responses), configuration


@stage("pcs-analyze", per_model=True)
def analyze(args: argparse.Namespace) -> None:
    """Every metric, table and figure of Fifteen Percent Fluency from the judged scores."""
    from stereolens.studies.pcs.analysis import DEFAULT_MIN_GAIN_STEPS, validate_scores
    from stereolens.studies.pcs.inputs import read_excluded_pairs, read_preferences
    from stereolens.studies.pcs.outputs import write_analysis
    from stereolens.studies.pcs.paired import ALL, model_pairs, paired_block

    p = _params(args)
    interim, reports = _dirs(p)
    cfg = p["cfg"]
    acfg = cfg.get("analysis", {})
    if "min_gap" in acfg:
        raise ConfigError("study.pcs.analysis.min_gap is replaced by min_gain_steps (the minimum B - A in steps of the "
                          "judges' scale, B - A at or below it excluded): rename the key")
    gates = json.loads((reports / "gates.json").read_text(encoding="utf-8"))
    if gates["enforced"] and not gates["all_passed"]:
        raise GateFailed(f"pcs-analyze: judge panel gate(s) not passed: {failing_gates(gates)} "
                         f"(see {reports / 'gates.json'})")
    scores = read_csv_checked(interim / "scores.csv", ["score"], what="pcs scores")
    validate_scores(scores, what=f"pcs scores {interim / 'scores.csv'}")
    if acfg.get("human_preferences"):
        raise ConfigError("study.pcs.analysis.human_preferences is replaced by the pcs_human_validation stage: "
                          "set annotation=human and study.pcs.human_validation.judgements to a completed CSV")
    human, human_source = read_preferences(interim / HUMAN_VALIDATION / "preferences.csv")
    human_excluded = read_excluded_pairs(interim / HUMAN_VALIDATION / "excluded_pairs.csv") if human_source else None
    validity = pd.read_csv(reports / "validity.csv") if (reports / "validity.csv").exists() else None
    scores, configuration = _with_responses(p, scores, interim / "responses.csv")
    if human_source:
        configuration["human-validation preferences"] = (
            f"{human_source}" + (" (NOT human judgements)" if human_source != "human" else "")
        )
    tags = {"gates_passed": gates["all_passed"], "config": configuration["config"],
            "translation_status": configuration.get("prompt translation status", ""),
            "judge_source": JUDGE_SOURCE, "human_validation_source": human_source or "none"}
    # the analysis rests on the judges' scores and, where present, the human-validation preferences:
    # the run is tagged with the latter's source, so a simulated round is never mistaken for a human one
    source = human_source if human_source in ("human", "llm_panel", "simulated") else JUDGE_SOURCE
    dimensions = sorted(set(scores["dimension"].astype(str))) if "dimension" in scores else ["all"]
    paired = json.loads(PAIRED_FILE.read_text(encoding="utf-8")) if PAIRED_FILE.exists() else None
    block = paired_block(paired, model_label(p["model"]))
    cells = [*languages_to_run(list(cfg["languages"]), p["language"]), ALL]
    pairs = model_pairs((paired or {}).get("models") or []) or [NO_PAIR]
    axes = {"dimension": dimensions, "pair": pairs, "cell": cells}
    with _tracking(p, ANALYZE_RUN, model=model_label(p["model"]), annotation_source=source, tags=tags, axes=axes) as run:
        analysis, files = write_analysis(
            scores, reports, min_gain_steps=float(acfg.get("min_gain_steps", DEFAULT_MIN_GAIN_STEPS)),
            hindi=acfg.get("hindi", "hi"),
            urdu=acfg.get("urdu", "ur"), human=human, human_excluded=human_excluded, configuration=configuration,
            gates=gates, validity=validity,
            waterfall_cell=acfg.get("waterfall"), seed=int(p["seed"]), paired=block,
        )
        metrics = {k: analysis.summary[k] for k in ("pcs", "cap_util", "n_excluded")}
        metrics.update({f"pcs_{k}": analysis.summary["by_dimension"].get(k) for k in dimensions})
        metrics["validity_rate"] = (float(validity.loc[validity["model"] == "all", "validity_rate"].iloc[0])
                                    if validity is not None else None)
        # the differences this model is part of; the run's other pairs (and a run of one model) log NaN
        metrics.update(difference_metrics(block["comparisons"], pairs, cells))
        run.log_metrics(metrics)
        run.log_dataset(interim / "scores.csv", name="pcs_scores", context="evaluation")
        for f in files:
            run.log_artifact(f)
    from stereolens.report.markdown import format_cell

    summary = analysis.summary
    print(f"pcs-analyze: PCS "
          f"{format_cell(summary['pcs']) + ' (' + summary['pcs_decision'] + ')' if summary['pcs'] is not None else 'undefined'}"
          f", capability utilisation "
          f"{format_cell(summary['cap_util']) if summary['cap_util'] is not None else 'undefined'}, robustness: "
          f"survives {summary['robustness']['survives']} of {summary['robustness']['of']}, "
          f"gates {'passed' if gates['all_passed'] else 'FAILED'} -> {reports}")
