"""DVC stages of the heads study: probe, Shapley values and pruning sweeps per country, then the report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from stereolens.stages.common import stage_params
from stereolens.stages.kit import model_dir
from stereolens.stages.registry import stage
from stereolens.studies.heads.config import check_heads_config
from stereolens.tracking import declare_run

# the report's per-country StereoSet columns: present only when the pruning sweeps scored StereoSet
PRUNING_STEREOSET = ("ss_before", "ss_all_pruned", "lms_before", "lms_all_pruned", "icat_before", "icat_all_pruned")
PROBE_RUN = declare_run("heads", "probe", params=("model", "study"),
                        metrics=("{country}.probe_test_{value}", "{country}.probe_train_accuracy",
                                 "{country}.shapley_seconds", "{country}.sweep_seconds", "{country}.stability_seconds",
                                 "seconds"))
REPORT_RUN = declare_run("heads", "report", params=("study",),
                         metrics=("{country}.train_instances", "{country}.shapley_instances",
                                  "{country}.pruning_instances", "{country}.probe_train_acc", "{country}.probe_test_{value}",
                                  *(f"{{country}}.{k}" for k in PRUNING_STEREOSET),
                                  # how many robustness estimates of the rankings agree with their headline (issue 32)
                                  "robustness.survives", "robustness.of", "robustness.not_run"))

# per model: <root>/<model_id>/ (dvc.yaml runs heads on the primary model only)
OUT_DATA = Path("data/processed/heads")
OUT_REPORT = Path("reports/heads")


@stage("heads-probe", per_model=True)
def heads_probe(args: argparse.Namespace) -> None:
    """Per country: train the stereotype-detection probe, Shapley value per head, pruning sweeps."""
    import torch

    from stereolens.io import write_csv, write_json
    from stereolens.stages.kit import load_stage_model, model_label
    from stereolens.studies.heads.attribution import analyse_countries, study_settings
    from stereolens.studies.heads.inputs import model_layer_count, read_instances
    from stereolens.tracking import stage_run

    p = stage_params(args, "model", "study.heads", "tracking", "seed")
    out_data = model_dir(OUT_DATA, p["model"])
    model_cfg, cfg, tracking = p["model"], p["study.heads"], p["tracking"]
    check_heads_config(cfg, n_layers=model_layer_count(model_cfg["name"]))
    instances_path = Path(cfg["instances"])
    instances = read_instances(instances_path, cfg.get("countries"), cfg.get("max_instances_per_country"))
    study, probe_settings, shapley = study_settings(cfg, seed=int(p["seed"]))
    torch.set_num_threads(max(1, int(cfg.get("threads") or torch.get_num_threads())))
    sources = sorted(set(instances["source"].astype(str)))
    countries = sorted(set(instances["country"].astype(str)))
    with stage_run(tracking, PROBE_RUN, model=model_label(model_cfg), scoring_model=model_cfg,
                   axes={"country": countries, "value": [shapley.value]}, params={"model": model_cfg, "study": cfg},
                   tags={"instance_sources": ",".join(sources)}) as run:
        run.log_dataset(instances_path, name="stereo_instances")
        start = time.perf_counter()
        # Never the Ray executor: the head gates are hooks on this process's attention modules, and the
        # probe trains on (and may fine-tune) the model object itself; a remote actor offers neither.
        lm = load_stage_model(model_cfg, executor=False)
        shap_table, sweep_table, summaries, stability_table = analyse_countries(
            lm.model, lm.tokenizer, model_cfg["kind"], instances, study, probe_settings, shapley)
        elapsed = time.perf_counter() - start
        # times say how the run went, not what was measured: MLflow and the printed line keep them,
        # probe.json (a DVC output) does not, so a rerun elsewhere writes the same bytes
        timings = [{key: s.pop(key) for key in ("shapley_seconds", "sweep_seconds", "stability_seconds")}
                   for s in summaries]
        write_csv(out_data / "shapley.csv", shap_table)
        write_csv(out_data / "shapley_stability.csv", stability_table)
        write_csv(out_data / "sweeps.csv", sweep_table)
        write_json(out_data / "probe.json", {
            "model": model_label(model_cfg), "kind": model_cfg["kind"], "instances": str(instances_path),
            "instance_sources": sources, "countries": summaries,
        })
        for s, timing in zip(summaries, timings):
            run.log_metrics({f"{s['country']}.probe_test_{shapley.value}": s["test_value_all_heads"],
                             f"{s['country']}.probe_train_accuracy": s["train_accuracy"],
                             **{f"{s['country']}.{key}": seconds for key, seconds in timing.items()}})
        run.log_metrics({"seconds": elapsed})
        run.log_artifact(out_data / "shapley.csv")
        run.log_artifact(out_data / "sweeps.csv")
    print(f"heads-probe: {len(summaries)} countries, {shap_table.groupby('country').size().iloc[0]} heads each, "
          f"{shapley.permutations} permutations, {elapsed:.1f}s")


@stage("heads-report", per_model=True)
def heads_report(args: argparse.Namespace) -> None:
    """Tables, Figures 2/F1-F6 shapes, summary.json and report.md of the heads study."""
    from stereolens.studies.heads.inputs import read_probe_outputs
    from stereolens.studies.heads.report import write_report
    from stereolens.tracking import stage_run

    p = stage_params(args, "model.id", "study.heads", "tracking")
    out_data, out_report = model_dir(OUT_DATA, p["model.id"]), model_dir(OUT_REPORT, p["model.id"])
    shap, sweeps, probe, stability = read_probe_outputs(out_data)
    summary = write_report(shap, sweeps, probe, p["study.heads"], out_report, model_id=p["model.id"],
                           stability=stability)
    countries = [c["country"] for c in probe["countries"]]
    with stage_run(p["tracking"], REPORT_RUN, model=p["model.id"], params={"study": p["study.heads"]},
                   axes={"country": countries, "value": [p["study.heads"]["shapley"]["value"]]},
                   tags={"instance_sources": ",".join(probe.get("instance_sources", []))}) as run:
        run.log_dataset(out_data / "shapley.csv", name="heads_shapley")
        # the pruning StereoSet columns exist only when the sweeps scored StereoSet: NaN otherwise
        run.log_metrics({f"{c}.{k}": None for c in countries for k in PRUNING_STEREOSET} | summary["metrics"]
                        | {f"robustness.{k}": summary["robustness"][k] for k in ("survives", "of", "not_run")})
        run.log_artifact(out_report)
    print(f"heads-report: {summary['headline']}")
