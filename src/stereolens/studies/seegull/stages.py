"""DVC stages of the seegull study, per model of the run:

    seegull-associate --model M   data/raw/seegull_multilingual + data/seed/seegull/templates.csv
                                  -> data/processed/seegull/<M>/{associations.csv, template_scores.csv, scoring.json}
    seegull-report --model M      -> reports/seegull/<M>/ (by_locale.csv, cross_locale.csv, aligned.csv, templates.csv,
                                     figures/, report.md, summary.json, headline.json)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from stereolens.io import read_csv_checked, write_csv, write_json
from stereolens.stages.common import stage_params
from stereolens.stages.kit import load_stage_model, model_dir, model_label, write_study_summary
from stereolens.stages.registry import stage
from stereolens.tracking import declare_run

STUDY_KEY = "study.seegull"
ASSOCIATE_RUN = declare_run("seegull", "associate", params=("model", "study"),
                            metrics=("n_tuples_{locale}", "seconds", "cache_hits", "cache_misses"))
# one run per model and locale
REPORT_RUN = declare_run("seegull", "report", params=("study",),
                         metrics=("auc", "auc_low", "auc_high", "spearman", "spearman_p", "n_stereotype", "n_not",
                                  "n_tuples", "auc_offensive", "auc_not_offensive", "beta_other_{other}"))
PROCESSED = Path("data/processed/seegull")
REPORTS = Path("reports/seegull")


def dataset_record(folder: str | Path) -> dict[str, Any]:
    """Licence, attribution and upstream commit of the ingested dataset (its ``PROVENANCE.json``), for the report."""
    from stereolens.datasets.ingest import PROVENANCE

    record = Path(folder) / PROVENANCE
    if not record.is_file():
        return {"license": None, "attribution": None, "upstream_commit": None, "record": None}
    data = json.loads(record.read_text(encoding="utf-8"))
    return {"license": data.get("license"), "attribution": data.get("attribution"),
            "upstream_commit": data.get("upstream_commit"), "record": str(record)}


def sample_description(study: dict[str, Any]) -> str:
    per_verdict = (study.get("sample") or {}).get("per_verdict")
    if per_verdict is None:
        return "every tuple of each locale"
    return (f"per locale, {per_verdict} tuples drawn from each majority verdict (stereotype, not a stereotype; all of "
            f"a verdict with fewer), seed {(study.get('sample') or {}).get('seed', 0)}; no-majority tuples left out")


@stage("seegull-associate", per_model=True)
def seegull_associate(args: argparse.Namespace) -> None:
    """ILPS association of every tuple of the run's locales (a seeded sample by default) for one model."""
    from stereolens.scoring.ilps import ILPS_KINDS
    from stereolens.studies.seegull.associations import (ASSOCIATION_COLUMNS, TEMPLATE_SCORE_COLUMNS, score_associations,
                                                         study_tuples)
    from stereolens.studies.seegull.templates import load_templates, templates_for
    from stereolens.tracking import stage_run

    p = stage_params(args, "model", STUDY_KEY, "tracking")
    model_cfg, study = p["model"], p[STUDY_KEY]
    label = model_label(model_cfg)
    out = model_dir(PROCESSED, label)
    association = study.get("association") or {}
    # every input checked before the model loads: a bad file or a language without templates changes nothing
    tuples = study_tuples(study)
    templates = load_templates(study["seed_dir"])
    for language in dict.fromkeys(tuples["language"]):
        templates_for(templates, language, (association.get("templates") or {}).get(language))
    kind = model_cfg.get("kind")
    skipped = None if kind in ILPS_KINDS else (f"ILPS needs a causal or seq2seq model's log-probabilities; "
                                               f"{label} is {kind!r}")
    locales = list(study["locales"])
    with stage_run(p["tracking"], ASSOCIATE_RUN, model=label, scoring_model=model_cfg, axes={"locale": locales},
                   params={"model": model_cfg, "study": study}, annotation_source="human",
                   tags={"skipped": skipped, "template_source": "authored"}) as run:
        started, identity, hits, misses = time.perf_counter(), None, 0, 0
        if skipped:
            scored = pd.DataFrame(columns=list(ASSOCIATION_COLUMNS))
            per_template = pd.DataFrame(columns=list(TEMPLATE_SCORE_COLUMNS))
        else:
            lm = load_stage_model(model_cfg, params_path=args.params)
            scored, per_template = score_associations(
                lm, kind, tuples, templates, chosen=association.get("templates"), reduction=association.get("reduction"),
                aggregation=association.get("aggregation", "median"), cache=lm.cache,
                batch_tokens=association.get("batch_tokens"))
            identity, hits, misses = getattr(lm, "identity", None), lm.cache.hits, lm.cache.misses
        seconds = time.perf_counter() - started
        write_csv(out / "associations.csv", scored)
        write_csv(out / "template_scores.csv", per_template)
        # what was scored, not how long it took (MLflow and the printed line keep that): a rerun from the cache
        # writes the same bytes
        write_json(out / "scoring.json", {
            "model": label, "kind": kind, "identity": identity, "skipped": skipped,
            "reduction": association.get("reduction") or {"causal": "sum", "seq2seq": "mean"}.get(str(kind)),
            "aggregation": association.get("aggregation", "median"),
            "templates": {lang: [t.template_id for t in templates_for(templates, lang,
                                                                       (association.get("templates") or {}).get(lang))]
                          for lang in dict.fromkeys(tuples["language"])},
            "tuples": {loc: int((tuples["locale"] == loc).sum()) for loc in locales}})
        run.log_metrics({f"n_tuples_{loc}": int((scored["locale"] == loc).sum()) for loc in locales}
                        | {"seconds": seconds, "cache_hits": hits, "cache_misses": misses})
        run.log_artifact(out / "associations.csv")
    print(f"seegull-associate {label}: " + (f"skipped ({skipped})" if skipped else
          f"{len(scored)} tuples over {len(locales)} locale(s) in {seconds:.0f}s (cache hits {hits}, misses {misses})")
          + f" -> {out}")


@stage("seegull-report", per_model=True)
def seegull_report(args: argparse.Namespace) -> None:
    """Per locale: AUC (stereotype vs not-stereotype majority) with its identity-bootstrap interval, Spearman with
    the vote share, both split by offensiveness; the cross-locale regressions; a figure per locale; one MLflow run
    per locale."""
    from stereolens.datasets.seegull import read_seegull
    from stereolens.studies.seegull.analysis import REQUIRED_COLUMNS, checked_associations, locale_pairs
    from stereolens.studies.seegull.report import evaluate
    from stereolens.studies.seegull.templates import load_templates, template_table
    from stereolens.tracking import stage_run

    p = stage_params(args, "model.id", f"{STUDY_KEY}.data", f"{STUDY_KEY}.seed_dir", f"{STUDY_KEY}.locales",
                     f"{STUDY_KEY}.sample", f"{STUDY_KEY}.analysis", "tracking")
    label = p["model.id"]
    study = {k.rsplit(".", 1)[1]: v for k, v in p.items() if k.startswith(STUDY_KEY)}
    analysis = study["analysis"]
    source = model_dir(PROCESSED, label)
    scoring = json.loads((source / "scoring.json").read_text(encoding="utf-8"))
    raw = read_csv_checked(source / "associations.csv", REQUIRED_COLUMNS, what="seegull associations", dtype=str,
                           keep_default_na=False)
    associations = checked_associations(raw, f"seegull associations {source / 'associations.csv'}")
    pairs = locale_pairs(study["locales"], analysis.get("cross_locale"))
    partners = list(dict.fromkeys(b for _, b in pairs))
    # the partner locale's verdicts come from all its tuples, not only the ones this run sampled
    verdicts = read_seegull(study["data"], partners, key=f"{STUDY_KEY}.analysis.cross_locale") if partners else None
    templates = template_table(load_templates(study["seed_dir"]))
    used = [(lang, t) for lang, ids in (scoring.get("templates") or {}).items() for t in ids]
    templates = templates[[(lang, t) in used for lang, t in zip(templates["language"], templates["template_id"])]]
    reports = model_dir(REPORTS, label)
    summary = evaluate(associations, reports, model=label, verdicts=verdicts, pairs=pairs,
                       resamples=int(analysis["resamples"]), confidence=float(analysis["confidence"]),
                       seed=int(analysis["seed"]), offensive_cut=float(analysis["offensive_cut"]),
                       min_aligned=int(analysis["min_aligned"]),
                       method={"reduction": scoring.get("reduction"), "aggregation": scoring.get("aggregation")},
                       templates=templates.reset_index(drop=True), dataset=dataset_record(study["data"]),
                       sample=sample_description(study), skipped=scoring.get("skipped"), locales=study["locales"])
    write_study_summary(reports / "summary.json", summary)
    locales = list(study["locales"])
    for locale in locales:
        block = summary["by_locale"].get(locale) or {}
        betas = {c["other_locale"]: (c.get("other locale's verdict") or {}).get("estimate")
                 for c in summary["cross_locale"] if c["locale"] == locale}
        with stage_run(p["tracking"], REPORT_RUN, model=label, language=locale, axes={"other": locales},
                       params={"study": study}, annotation_source="human",
                       tags={"skipped": summary["skipped"], "template_source": "authored"}) as run:
            run.log_metrics({k: block.get(k) for k in ("auc", "auc_low", "auc_high", "spearman", "spearman_p",
                                                        "n_stereotype", "n_not", "n_tuples")}
                            | {"auc_offensive": (block.get("offensive") or {}).get("auc"),
                               "auc_not_offensive": (block.get("not_offensive") or {}).get("auc")}
                            | {f"beta_other_{o}": betas.get(o) for o in locales})
            if (reports / "figures" / f"association_{locale}.png").is_file():
                run.log_artifact(reports / "figures" / f"association_{locale}.png")
    shown = ", ".join(f"{loc} AUC {b['auc']:.3f}" if b.get("auc") is not None else f"{loc} AUC n/a"
                      for loc, b in summary["by_locale"].items())
    print(f"seegull-report {label}: " + (f"skipped ({summary['skipped']})" if summary["skipped"] else shown)
          + f" -> {reports}")
