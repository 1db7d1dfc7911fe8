"""DVC stages of the heads study: probe, Shapley values and pruning sweeps per country, then the report."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from stereolens.stages.common import load_params
from stereolens.stages.registry import stage
from stereolens.studies.heads.config import check_heads_config
from stereolens.tracking import declare_run

# the report's per-country StereoSet columns: present only when the pruning sweeps scored StereoSet
PRUNING_STEREOSET = ("ss_before", "ss_all_pruned", "lms_before", "lms_all_pruned", "icat_before", "icat_all_pruned")
PROBE_RUN = declare_run("heads", "probe", params=("model", "study"),
                        metrics=("{country}.probe_test_{value}", "{country}.probe_train_accuracy", "seconds"))
REPORT_RUN = declare_run("heads", "report", params=("study",),
                         metrics=("{country}.train_instances", "{country}.shapley_instances",
                                  "{country}.pruning_instances", "{country}.probe_train_acc", "{country}.probe_test_{value}",
                                  *(f"{{country}}.{k}" for k in PRUNING_STEREOSET)))

OUT_DATA = Path("data/processed/heads")
OUT_REPORT = Path("reports/heads")
INSTANCE_COLUMNS = ("id", "country", "category", "target", "stereotype_id", "context", "sent_stereo", "sent_anti",
                    "sent_unrelated", "source")


def read_instances(path: Path, countries: list[str] | None, max_per_country: int | None):
    """The stereo study's instances, restricted to ``countries`` and the first ``max_per_country`` of each."""
    from stereolens.errors import DataError
    from stereolens.io import read_csv_checked

    table = read_csv_checked(path, INSTANCE_COLUMNS, what="stereo instances", dtype={"id": str, "country": str})
    for column in ("context", "sent_stereo", "sent_anti", "sent_unrelated"):
        blank = table[column].isna() | (table[column].astype(str).str.strip() == "")
        if blank.any():
            row = int(blank.to_numpy().nonzero()[0][0])
            raise DataError(f"{path} line {row + 2}, column {column}: empty sentence")
    if countries:
        missing = sorted(set(countries) - set(table["country"]))
        if missing:
            raise DataError(f"{path}: column country has no rows for {missing} (has {sorted(set(table['country']))})")
        table = table[table["country"].isin(countries)]
    if max_per_country:
        table = table.groupby("country", sort=True, group_keys=False).head(int(max_per_country))
    return table.reset_index(drop=True)


def model_layer_count(name: str) -> int | None:
    """The model's number of layers from its config.json (no weights), or None when the config cannot be
    read here (loading the model then reports the problem)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError):
        return None
    config = getattr(config, "text_config", None) or config
    layers = getattr(config, "num_hidden_layers", None)
    return int(layers) if layers else None


def study_settings(cfg: dict, *, seed: int):
    """(study, probe, Shapley) settings from a checked ``study.heads`` section; ``seed`` seeds the probe."""
    from stereolens.studies.heads.attribution import ShapleySettings, SplitSettings, StudySettings
    from stereolens.studies.heads.probe import ProbeSettings

    probe_cfg, shap_cfg, prune_cfg, split_cfg = cfg["probe"], cfg["shapley"], cfg["pruning"], cfg["split"]
    split = SplitSettings(shapley_fraction=float(split_cfg["shapley_fraction"]),
                          pruning_fraction=float(split_cfg["pruning_fraction"]), seed=int(split_cfg["seed"]))
    study = StudySettings(layers=shap_cfg.get("layers"), pooling=probe_cfg["pooling"],
                          reuse_prefix=bool(shap_cfg["reuse_prefix"]), max_length=int(probe_cfg["max_length"]),
                          split=split, prune_step=int(prune_cfg["step"]),
                          stereoset_items=prune_cfg.get("stereoset_items_per_country"),
                          batch_size=int(prune_cfg["batch_size"]))
    probe = ProbeSettings(learning_rate=float(probe_cfg["learning_rate"]), epochs=int(probe_cfg["epochs"]),
                          batch_size=int(probe_cfg["batch_size"]), weight_decay=float(probe_cfg["weight_decay"]),
                          finetune=bool(probe_cfg["finetune"]), seed=seed)
    shapley = ShapleySettings(permutations=int(shap_cfg["permutations"]), antithetic=bool(shap_cfg["antithetic"]),
                              step=shap_cfg.get("step"), max_rows=int(shap_cfg["max_rows"]), value=shap_cfg["value"],
                              seed=int(shap_cfg["seed"]))
    return study, probe, shapley


@stage("heads-probe")
def heads_probe(args: argparse.Namespace) -> None:
    """Per country: train the stereotype-detection probe, Shapley value per head, pruning sweeps."""
    import torch

    from stereolens.io import write_csv, write_json
    from stereolens.models import load_model, spec_from_config
    from stereolens.studies.heads.attribution import analyse_countries
    from stereolens.tracking import stage_run

    p = load_params("model", "study.heads", "tracking", "seed", path=args.params)
    model_cfg, cfg, tracking = p["model"], p["study.heads"], p["tracking"]
    check_heads_config(cfg, n_layers=model_layer_count(model_cfg["name"]))
    instances_path = Path(cfg["instances"])
    instances = read_instances(instances_path, cfg.get("countries"), cfg.get("max_instances_per_country"))
    study, probe_settings, shapley = study_settings(cfg, seed=int(p["seed"]))
    torch.set_num_threads(max(1, int(cfg.get("threads") or torch.get_num_threads())))
    sources = sorted(set(instances["source"].astype(str)))
    countries = sorted(set(instances["country"].astype(str)))
    with stage_run(tracking, PROBE_RUN, model=model_cfg["id"], axes={"country": countries, "value": [shapley.value]},
                   params={"model": model_cfg, "study": cfg}, tags={"instance_sources": ",".join(sources)}) as run:
        run.log_dataset(instances_path, name="stereo_instances")
        start = time.perf_counter()
        lm = load_model(spec_from_config(model_cfg))
        shap_table, sweep_table, summaries = analyse_countries(
            lm.model, lm.tokenizer, model_cfg["kind"], instances, study, probe_settings, shapley)
        elapsed = time.perf_counter() - start
        write_csv(OUT_DATA / "shapley.csv", shap_table)
        write_csv(OUT_DATA / "sweeps.csv", sweep_table)
        write_json(OUT_DATA / "probe.json", {
            "model": model_cfg["id"], "kind": model_cfg["kind"], "instances": str(instances_path),
            "instance_sources": sources, "seconds": elapsed, "countries": summaries,
        })
        for s in summaries:
            run.log_metrics({f"{s['country']}.probe_test_{shapley.value}": s["test_value_all_heads"],
                             f"{s['country']}.probe_train_accuracy": s["train_accuracy"]})
        run.log_metrics({"seconds": elapsed})
        run.log_artifact(OUT_DATA / "shapley.csv")
        run.log_artifact(OUT_DATA / "sweeps.csv")
    print(f"heads-probe: {len(summaries)} countries, {shap_table.groupby('country').size().iloc[0]} heads each, "
          f"{shapley.permutations} permutations, {elapsed:.1f}s")


@stage("heads-report")
def heads_report(args: argparse.Namespace) -> None:
    """Tables, Figures 2/F1-F6 shapes, summary.json and report.md of the heads study."""
    from stereolens.io import read_csv_checked
    from stereolens.studies.heads.report import write_report
    from stereolens.tracking import stage_run

    p = load_params("model.id", "study.heads", "tracking", path=args.params)
    shap = read_csv_checked(OUT_DATA / "shapley.csv", ("country", "layer", "head", "shapley", "se", "rank"),
                            what="heads Shapley table")
    sweeps = read_csv_checked(OUT_DATA / "sweeps.csv", ("country", "direction", "n_removed", "probe_value"),
                              what="heads sweeps table")
    probe = json.loads((OUT_DATA / "probe.json").read_text(encoding="utf-8"))
    summary = write_report(shap, sweeps, probe, p["study.heads"], OUT_REPORT, model_id=p["model.id"])
    countries = [c["country"] for c in probe["countries"]]
    with stage_run(p["tracking"], REPORT_RUN, model=p["model.id"], params={"study": p["study.heads"]},
                   axes={"country": countries, "value": [p["study.heads"]["shapley"]["value"]]},
                   tags={"instance_sources": ",".join(probe.get("instance_sources", []))}) as run:
        run.log_dataset(OUT_DATA / "shapley.csv", name="heads_shapley")
        # the pruning StereoSet columns exist only when the sweeps scored StereoSet: NaN otherwise
        run.log_metrics({f"{c}.{k}": None for c in countries for k in PRUNING_STEREOSET} | summary["metrics"])
        run.log_artifact(OUT_REPORT)
    print(f"heads-report: {summary['headline']}")
