"""DVC stages of the CrowS-Pairs slice: score every pair, then report the bias score."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from stereolens.datasets.crows_pairs import CROWS_BIAS_TYPES, crows_pairs_table
from stereolens.io import read_csv_checked, write_csv, write_json, write_text
from stereolens.stages.common import languages_to_run, load_params, run_model_ids, stage_params
from stereolens.stages.kit import load_stage_model, model_dir, model_label, write_study_summary
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

SCORE_RUN = declare_run("crows", "score", params=("model", "metric", "study"),
                        metrics=("pairs", "seconds", "sentences_per_second", "cache_hits", "cache_misses"))
REPORT_RUN = declare_run("crows", "report", params=("model", "metric", "study"),
                         metrics=("bias_score", "share_untied", "bias_ci_low", "bias_ci_high", "ties", "n_pairs",
                                  "bias_score.{bias_type}", "robustness.survives", "robustness.of",
                                  "paired.difference.{versus}.{cell}"))
# one run over every pair of the run's models: the difference of their bias scores per pair and cell
PAIRED_RUN = declare_run("crows", "paired", params=("models",), metrics=("comparisons", "difference.{pair}.{cell}"))
# per model: data/processed/crows/<model_id>/{scores.csv,scoring.json}, reports/crows/<model_id>/
PROCESSED = Path("data/processed/crows")
REPORTS = Path("reports/crows")
# the run's models compared on the pairs both scored: reports/crows/paired.{json,csv}
PAIRED = REPORTS / "paired.json"
# the cells of the paired comparison: every pair, then each bias type
PAIRED_CELLS = ("all", *CROWS_BIAS_TYPES)


@stage("crows-score", per_model=True)
def crows_score(args: argparse.Namespace) -> None:
    """Score every CrowS-Pairs pair with the configured model and metric."""
    from stereolens.scoring import scoring_setup
    from stereolens.scoring.types import alternative_metrics
    from stereolens.studies.crows.scoring import crows_scoring_route, score_crows
    from stereolens.tracking import stage_run

    p = stage_params(args, "model", "metric", "study.crows", "tracking", "language")
    model_cfg, metric_cfg, tracking = p["model"], p["metric"], p["tracking"]
    model = model_label(model_cfg)
    scores_path, scoring_path = model_dir(PROCESSED, model) / "scores.csv", model_dir(PROCESSED, model) / "scoring.json"
    # the keys dvc.yaml declares for this stage; a params file written before `sample` existed scores every pair
    crows = p["study.crows"]
    study = {"dataset": crows["dataset"], "sample": crows.get("sample"), "seed": crows.get("seed", 0),
             "limit": crows.get("limit"), "alternative_metric_pass": bool(crows.get("alternative_metric_pass", False))}
    route, skip_reason = crows_scoring_route(metric_cfg["name"], model_cfg)
    raw = Path("data/raw") / study["dataset"] / "crows_pairs_anonymized.csv"
    pairs = crows_pairs_table(raw, study.get("limit"), sample=study.get("sample"), seed=int(study.get("seed") or 0))
    if not languages_to_run(["en"], p["language"]):
        # CrowS-Pairs is English only: a language filter without English leaves nothing to score
        pairs, skip_reason = pairs.head(0), skip_reason or "the language filter excludes English"

    with stage_run(tracking, SCORE_RUN, model=model, language="en", scoring_model=model_cfg,
                   params={"model": model_cfg, "metric": metric_cfg, "study": study}) as run:
        run.log_dataset(raw, name=study["dataset"])
        start = time.perf_counter()
        identity, hits, misses = None, 0, 0
        if route == "skip":
            scored = pairs.head(0).assign(score_stereo=pd.Series(dtype=float), score_anti=pd.Series(dtype=float))
        else:
            lm = load_stage_model(model_cfg, params_path=args.params)
            batch_tokens = int(metric_cfg.get("batch_tokens", 8192))
            # how the passes were packed, for the run's lineage (the scores do not depend on it)
            run.set_tags(scoring_setup(lm, batch_tokens=batch_tokens))
            # the robustness table's second masked-LM metric, where the config asks for the extra pass
            alternatives = alternative_metrics(metric_cfg["name"]) if study["alternative_metric_pass"] else []
            scored = score_crows(lm, pairs, route, metric_cfg["name"], batch_tokens=batch_tokens,
                                 truncate=bool(metric_cfg.get("truncate", False)), alternatives=alternatives)
            identity, hits, misses = lm.identity, lm.cache.hits, lm.cache.misses
        elapsed = time.perf_counter() - start
        write_csv(scores_path, scored)
        # time and cache use say how the run went, not what was scored: MLflow and the printed line keep
        # them, scoring.json (a DVC output) does not, so a rerun from the cache writes the same bytes
        run_facts = {"seconds": elapsed, "sentences_per_second": 2 * len(scored) / max(elapsed, 1e-9),
                     "cache_hits": hits, "cache_misses": misses}
        # under model.verify: how many pairs carry float32 scores (absent otherwise: a float32 run writes what it did)
        verified = {k: v for k, v in scored.attrs.items() if k.startswith("precision")}
        write_json(scoring_path, {"model": model, "identity": identity, "metric": metric_cfg["name"], "route": route,
                                  "skipped": skip_reason, "pairs": len(scored), **verified})
        if verified:
            run.set_tags({"precision.pairs_fp32": verified["precision"]["groups_fp32"]})
        run.log_metrics({"pairs": len(scored), **run_facts})
        run.set_tags({"skipped": skip_reason})
        run.log_artifact(scores_path)
    if skip_reason:
        print(f"crows-score skipped: {skip_reason}")
    else:
        print(f"scored {len(scored)} pairs in {elapsed:.1f}s (cache hits {hits}, misses {misses})")


@stage("crows-report", per_model=True)
def crows_report(args: argparse.Namespace) -> None:
    """Bias score overall and per bias type with exact BCa intervals, Holm / BH columns, and the
    length-controlled view beside it; tables, figure, MLflow run."""
    from stereolens.figures import bias_bar_figure
    from stereolens.stats.paired import paired_block, paired_metrics
    from stereolens.stats.robustness import TABLE_FILE, robustness_block
    from stereolens.studies.crows.analysis import (bias_by_type, crows_summary, length_control, length_table,
                                                   robustness_rows)
    from stereolens.studies.crows.report import report_markdown
    from stereolens.tables import scored_pairs_schema, validate_table
    from stereolens.tracking import stage_run

    p = stage_params(args, "model.id", "metric.name", "study.crows", "tracking")
    model, metric, study = p["model.id"], p["metric.name"], p["study.crows"]
    scores_path, scoring_path = model_dir(PROCESSED, model) / "scores.csv", model_dir(PROCESSED, model) / "scoring.json"
    reports = model_dir(REPORTS, model)
    scores = read_csv_checked(scores_path, ("id", "score_stereo", "score_anti", "bias_type"), what="CrowS scores")
    # a NaN or positive log-probability would move the bias score silently: refuse it with its line
    validate_table(scores, scored_pairs_schema(), f"CrowS scores {scores_path}")
    # the interval is exact; the resample count says how near 50% a bound must be to read as borderline
    resamples = int(study["bootstrap_resamples"])
    table, legend = bias_by_type(scores, reference_resamples=resamples)
    length = length_control(scores, reference_resamples=resamples)
    scoring = json.loads(scoring_path.read_text(encoding="utf-8")) if scoring_path.exists() else {}
    skipped = scoring.get("skipped")
    summary = crows_summary(table, legend, length, model=model, metric=metric, dataset=study["dataset"],
                            skipped=skipped)
    if "precision" in scoring:  # model.verify: how many pairs carry float32 scores
        summary["precision"] = scoring["precision"]
    lengths = length_table(length, table.iloc[0].to_dict())
    robustness = robustness_rows(scores, table.iloc[0].to_dict(), length, metric=metric, reference_resamples=resamples)
    summary["robustness"] = robustness_block(robustness)
    summary["paired"] = paired_block(PAIRED, model, stage="crows_paired", models=run_model_ids(args.params))
    write_csv(reports / "bias_by_type.csv", table)
    write_csv(reports / "length_control.csv", lengths)
    write_csv(reports / TABLE_FILE, robustness)
    write_study_summary(reports / "summary.json", summary)
    # the table's legend on the report page, not only in summary.json
    write_text(reports / "report.md", report_markdown(summary, table, lengths, robustness))
    title = f"CrowS-Pairs bias score, {model} ({metric})"
    bias_bar_figure(table, reports / "bias_by_type", title=title if not skipped else f"{title}: skipped, {skipped}")
    axes = {"bias_type": CROWS_BIAS_TYPES, "versus": summary["paired"]["models"], "cell": PAIRED_CELLS}
    with stage_run(p["tracking"], REPORT_RUN, model=model, language="en", axes=axes,
                   params={"model": {"id": model}, "metric": {"name": metric}, "study": study},
                   tags={"skipped": skipped}) as run:
        run.log_dataset(scores_path, name="crows_scores")
        # the interval is of share_untied (the row's test), which equals bias_score when nothing ties
        run.log_metrics({"bias_score": summary["bias_score"], "share_untied": summary["share_untied"],
                         "ties": summary["ties"], "bias_ci_low": summary["ci_low"],
                         "bias_ci_high": summary["ci_high"], "n_pairs": summary["n"]})
        # every CrowS bias type, NaN where this run scored none of its pairs (a limit, a skipped model)
        run.log_metrics({f"bias_score.{k}": summary["by_bias_type"].get(k) for k in CROWS_BIAS_TYPES}
                        | {f"bias_score.{k}": v for k, v in summary["by_bias_type"].items()})
        run.log_metrics({"robustness.survives": summary["robustness"]["survives"],
                         "robustness.of": summary["robustness"]["of"]})
        # this model's bias score minus each other model's, on the pairs both scored (NaN: itself, or not compared)
        run.log_metrics(paired_metrics(summary["paired"], model, list(PAIRED_CELLS)))
        run.log_artifact(reports)
    if skipped:
        print(f"crows-report: nothing scored ({skipped})")
        return
    from stereolens.report.markdown import format_cell, format_estimate  # as the report writes them

    print(f"bias score {format_estimate(summary['bias_score'], unit='share')} over {summary['n']} pairs "
          f"({summary['ties']} ties); untied pairs: "
          f"{format_estimate(summary['share_untied'], summary['ci_low'], summary['ci_high'], unit='share')}, "
          f"p {format_cell(summary['p_value'])}")


@stage("crows-paired")
def crows_paired(args: argparse.Namespace) -> None:
    """Every pair of the run's models on the CrowS-Pairs pairs both scored: the difference of their bias
    scores overall and per bias type, McNemar's exact test, Holm / BH over the bias types; one MLflow run."""
    from stereolens.stages.paired import paired_line, write_paired
    from stereolens.stats.paired import COMPARISON_FIELDS, comparison_records, paired_table
    from stereolens.studies.crows.analysis import paired_family
    from stereolens.tables import scored_pairs_schema, validate_table

    p = load_params("models", "tracking", path=args.params)
    model_ids = list(p["models"] or {})
    frames, not_compared = [], {}
    for model in model_ids:
        folder = model_dir(PROCESSED, model)
        scores = read_csv_checked(folder / "scores.csv", ("id", "score_stereo", "score_anti", "bias_type"),
                                  what=f"CrowS scores of {model}")
        validate_table(scores, scored_pairs_schema(), f"CrowS scores {folder / 'scores.csv'}")
        skipped = json.loads((folder / "scoring.json").read_text(encoding="utf-8")).get("skipped") \
            if (folder / "scoring.json").exists() else None
        if skipped or scores.empty:
            not_compared[model] = skipped or "scored no pair"
            continue
        frames.append(scores.assign(model=model))
    compared = [m for m in model_ids if m not in not_compared]
    table = pd.DataFrame()
    if len(compared) >= 2:
        table = paired_table(pd.concat(frames, ignore_index=True), by="bias_type", models=compared)
    extra = ("n_a_only", "n_b_only", "margin_difference", "margin_ci_low", "margin_ci_high", "p_margin")
    comparisons = comparison_records(table, extra=extra) if not table.empty else []
    document = write_paired(PAIRED, study="crows", model_ids=model_ids, compared=compared, comparisons=comparisons,
                            columns=[*COMPARISON_FIELDS, *extra], family=paired_family(), not_compared=not_compared,
                            tracking=p["tracking"], schema=PAIRED_RUN, params={"models": model_ids},
                            cells=PAIRED_CELLS)
    print(paired_line("crows-paired", document, overall=lambda c: c["cell"] == "all"))
