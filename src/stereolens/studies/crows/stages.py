"""DVC stages of the CrowS-Pairs slice: score every pair, then report the bias score."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from stereolens.datasets.crows_pairs import CROWS_BIAS_TYPES, crows_pairs_table
from stereolens.errors import ConfigError
from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import executor_config, languages_to_run, load_params, model_cache_dir
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

SCORE_RUN = declare_run("crows", "score", params=("model", "metric", "study"),
                        metrics=("pairs", "seconds", "sentences_per_second", "cache_hits", "cache_misses"))
REPORT_RUN = declare_run("crows", "report", params=("model", "metric", "study"),
                         metrics=("bias_score", "bias_ci_low", "bias_ci_high", "n_pairs", "bias_score.{bias_type}"))

MASKED_METRICS = ("pll", "pll_word_l2r", "crows")


def crows_scoring_route(metric: str, model_cfg: dict) -> tuple[str, str | None]:
    """How the slice scores this model: ``("engine", None)``, ``("loglikelihood", None)``
    through the model layer (OpenAI-compatible completions with echoed log-probabilities),
    or ``("skip", reason)`` for a model that cannot give sentence log-likelihoods at all.
    A metric that contradicts the model's kind is a configuration error."""
    kind = model_cfg.get("kind")
    if kind == "masked" and metric in MASKED_METRICS or kind == "causal" and metric == "causal":
        return "engine", None
    if kind in ("masked", "causal"):
        fits = "causal" if kind == "causal" else "one of " + ", ".join(MASKED_METRICS)
        raise ConfigError(
            f"metric {metric!r} does not fit model {model_cfg.get('id')!r} ({kind} LM); use metric={fits}"
        )
    if kind == "completion" and metric == "causal":
        if (model_cfg.get("extra") or {}).get("supports_loglikelihood", True):
            return "loglikelihood", None
        return "skip", f"{kind} endpoint {model_cfg.get('id')!r} gives no echoed log-probabilities"
    # chat endpoints score only what they generate, and CrowS has no seq2seq form
    return "skip", f"CrowS-Pairs needs sentence log-likelihoods, which a {kind} model does not give"


@stage("crows-score")
def crows_score(args: argparse.Namespace) -> None:
    """Score every CrowS-Pairs pair with the configured model and metric."""
    from stereolens.models.cache import ResponseCache
    from stereolens.tracking import stage_run

    p = load_params("model", "metric", "study.crows.dataset", "study.crows.limit", "tracking", "language",
                    path=args.params)
    model_cfg, metric_cfg, tracking = p["model"], p["metric"], p["tracking"]
    study = {"dataset": p["study.crows.dataset"], "limit": p["study.crows.limit"]}
    route, skip_reason = crows_scoring_route(metric_cfg["name"], model_cfg)
    raw = Path("data/raw") / study["dataset"] / "crows_pairs_anonymized.csv"
    pairs = crows_pairs_table(raw, study.get("limit"))
    out_csv = Path("data/processed/crows/scores.csv")
    if not languages_to_run(["en"], p["language"]):
        # CrowS-Pairs is English only: a language filter without English leaves nothing to score
        pairs, skip_reason = pairs.head(0), skip_reason or "the language filter excludes English"

    with stage_run(tracking, SCORE_RUN, model=model_cfg["id"], language="en",
                   params={"model": model_cfg, "metric": metric_cfg, "study": study}) as run:
        run.log_dataset(raw, name=study["dataset"])
        start = time.perf_counter()
        cache = ResponseCache(model_cache_dir())
        identity = None
        if route == "skip":
            scored = pairs.head(0).assign(score_stereo=pd.Series(dtype=float), score_anti=pd.Series(dtype=float))
        else:
            from stereolens.models import load_model, spec_from_config

            lm = load_model(spec_from_config(model_cfg), cache=cache, executor=executor_config(args.params))
            identity = lm.identity
            scored = _score_crows(lm, pairs, route, metric_cfg, cache)
        elapsed = time.perf_counter() - start
        write_csv(out_csv, scored)
        stats = {"pairs": len(scored), "seconds": elapsed, "sentences_per_second": 2 * len(scored) / max(elapsed, 1e-9),
                 "cache_hits": cache.hits, "cache_misses": cache.misses}
        write_json("data/processed/crows/scoring.json", {"model": model_cfg["id"], "identity": identity,
                                                         "metric": metric_cfg["name"], "route": route,
                                                         "skipped": skip_reason, **stats})
        run.log_metrics(stats)
        run.set_tags({"skipped": skip_reason})
        run.log_artifact(out_csv)
    if skip_reason:
        print(f"crows-score skipped: {skip_reason}")
    else:
        print(f"scored {len(scored)} pairs in {elapsed:.1f}s (cache hits {cache.hits}, misses {cache.misses})")


def _score_crows(lm, pairs: pd.DataFrame, route: str, metric_cfg: dict, cache) -> pd.DataFrame:
    if route == "engine":
        from stereolens.scoring import score_pairs

        # the backend itself (not its network): an executor-backed model shards the pairs
        return score_pairs(
            lm, None, pairs, metric_cfg["name"], batch_tokens=metric_cfg.get("batch_tokens", 8192),
            truncate=bool(metric_cfg.get("truncate", False)), cache=cache, identity=lm.identity, progress=True,
        )
    from stereolens.models.base import LoglikelihoodRequest

    sentences = list(pairs["sent_stereo"]) + list(pairs["sent_anti"])
    results = lm.loglikelihood([LoglikelihoodRequest(context="", continuation=s) for s in sentences])
    n = len(pairs)
    return pairs.assign(
        score_stereo=[r.logprob for r in results[:n]], score_anti=[r.logprob for r in results[n:]],
        n_tokens_stereo=[r.n_tokens for r in results[:n]], n_tokens_anti=[r.n_tokens for r in results[n:]],
    )


@stage("crows-report")
def crows_report(args: argparse.Namespace) -> None:
    """Bias score overall and per bias type with exact BCa intervals, Holm / BH columns, and the
    length-controlled view beside it; tables, figure, MLflow run."""
    from stereolens.studies.crows.analysis import bias_by_type, length_control, length_table
    from stereolens.tables import scored_pairs_schema, validate_table
    from stereolens.figures import bias_bar_figure
    from stereolens.tracking import stage_run

    p = load_params("model.id", "metric.name", "study.crows", "tracking", path=args.params)
    model_cfg, metric_cfg = {"id": p["model.id"]}, {"name": p["metric.name"]}
    study, tracking = p["study.crows"], p["tracking"]
    scores_csv = Path("data/processed/crows/scores.csv")
    scores = read_csv_checked(scores_csv, ("id", "score_stereo", "score_anti", "bias_type"), what="CrowS scores")
    # a NaN or positive log-probability would move the bias score silently: refuse it with its line
    validate_table(scores, scored_pairs_schema(), f"CrowS scores {scores_csv}")
    # the interval is exact; the resample count says how near 50% a bound must be to read as borderline
    table, corrections = bias_by_type(scores, reference_resamples=int(study["bootstrap_resamples"]))
    length = length_control(scores)
    scoring_json = Path("data/processed/crows/scoring.json")
    skipped = json.loads(scoring_json.read_text(encoding="utf-8")).get("skipped") if scoring_json.exists() else None
    out = Path("reports/crows")
    write_csv(out / "bias_by_type.csv", table)
    overall = table.iloc[0].to_dict()
    write_csv(out / "length_control.csv", length_table(length, overall))
    tests = ("bias_score", "ci_low", "ci_high", "n", "ties", "p_value", "significant", "borderline",
             "p_holm", "p_bh", "significant_holm", "significant_bh")
    summary = {
        "model": model_cfg["id"],
        "metric": metric_cfg["name"],
        "dataset": study["dataset"],
        "n": int(overall["n"]),
        "bias_score": overall["bias_score"],
        "ci_low": overall["ci_low"],
        "ci_high": overall["ci_high"],
        "ties": int(overall["ties"]),
        "p_value": overall["p_value"],
        "significant": bool(overall["significant"]),
        "borderline": bool(overall["borderline"]),
        "by_bias_type": {r["group"]: r["bias_score"] for r in table.iloc[1:].to_dict("records")},
        "by_bias_type_tests": {r["group"]: {k: r[k] for k in tests} for r in table.iloc[1:].to_dict("records")},
        "corrections": corrections,
        # ours, beyond the reference: the headline stays the reference metric
        "beyond_reference": {"length_control": length},
        "skipped": skipped,
        "definition": "share of pairs with score(sent_more) > score(sent_less); ties not stereotypical "
                      "(lm-evaluation-harness pct_stereotype); 95% BCa interval, exact from the binomial bootstrap "
                      "distribution; p_value: exact binomial sign test over the untied pairs",
        # the report site's contract (README, "The report"): headline figures and what they rest on
        "headline": {"bias score": overall["bias_score"], "95% BCa low": overall["ci_low"],
                     "95% BCa high": overall["ci_high"], "pairs": int(overall["n"]), "binomial p": overall["p_value"]},
        "provenance": {"annotation_source": "human", "translation_status": "source",
                       "machine_generated": False,
                       "notes": ["CrowS-Pairs sentence pairs written and validated by crowd workers (Nangia et al. 2020)"]},
    }
    write_json(out / "summary.json", summary)
    title = f"CrowS-Pairs bias score, {model_cfg['id']} ({metric_cfg['name']})"
    bias_bar_figure(table, out / "bias_by_type", title=title if not skipped else f"{title}: skipped, {skipped}")
    with stage_run(tracking, REPORT_RUN, model=model_cfg["id"], language="en", axes={"bias_type": CROWS_BIAS_TYPES},
                   params={"model": {"id": model_cfg["id"]}, "metric": {"name": metric_cfg["name"]}, "study": study},
                   tags={"skipped": skipped}) as run:
        run.log_dataset(scores_csv, name="crows_scores")
        run.log_metrics({"bias_score": summary["bias_score"], "bias_ci_low": summary["ci_low"],
                         "bias_ci_high": summary["ci_high"], "n_pairs": summary["n"]})
        # every CrowS bias type, NaN where this run scored none of its pairs (a limit, a skipped model)
        run.log_metrics({f"bias_score.{k}": summary["by_bias_type"].get(k) for k in CROWS_BIAS_TYPES}
                        | {f"bias_score.{k}": v for k, v in summary["by_bias_type"].items()})
        run.log_artifact(out)
    if skipped:
        print(f"crows-report: nothing scored ({skipped})")
        return
    print(f"bias score {summary['bias_score']:.3f} [{summary['ci_low']:.3f}, {summary['ci_high']:.3f}] over {summary['n']} pairs")

