"""The crows_paired stage and what the per-model reports take from it: a difference planted between two models'
stored scores is found by McNemar's test on the pairs both scored (and missed by the two unpaired intervals), the
paired file follows the issue-32 contract, each model's summary carries its comparisons and robustness block, and
both MLflow runs log the difference."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.cli import main
from stereolens.stats.bias import bias_score

TYPES = ("gender", "age")


def _scores(wins: np.ndarray) -> pd.DataFrame:
    n = len(wins)
    return pd.DataFrame({"id": np.arange(n), "bias_type": [TYPES[i % 2] for i in range(n)],
                         "sent_stereo": "x", "sent_anti": "y",
                         "score_stereo": np.where(wins, -10.0, -12.0), "score_anti": -11.0,
                         "n_tokens_stereo": 5, "n_tokens_anti": 5})


def _write_run(root, models: dict[str, np.ndarray], *, tracking: bool = True) -> None:
    configs = {m: {"id": m, "name": m, "kind": "causal", "backend": "hf"} for m in models}
    first = next(iter(configs.values()))
    uri = f"sqlite:///{root}/mlruns/mlflow.db"
    params = {"model": first, "models": configs, "model_ids": list(models), "compare_with": [],
              "metric": {"name": "causal", "batch_tokens": 512, "truncate": False},
              "tracking": {"enabled": tracking, "tracking_uri": uri, "artifact_location": str(root / "mlruns/art"),
                           "experiment": "stereolens"},
              "study": {"crows": {"dataset": "crows_pairs", "sample": None, "seed": 0, "limit": None,
                                  "bootstrap_resamples": 1000, "alternative_metric_pass": False}}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    for model, wins in models.items():
        folder = root / "data/processed/crows" / model
        folder.mkdir(parents=True, exist_ok=True)
        _scores(wins).to_csv(folder / "scores.csv", index=False)
        (folder / "scoring.json").write_text(json.dumps({"model": model, "skipped": None}), encoding="utf-8")


def planted() -> dict[str, np.ndarray]:
    """300 pairs.  Model b: a seeded coin per pair.  Model a: b's outcomes, except 24 of the pairs b finds
    anti-stereotypical, which a finds stereotypical: a's bias score is b's + 0.08, on those items only."""
    rng = np.random.default_rng(11)
    b = rng.random(300) < 0.5
    a = b.copy()
    a[np.flatnonzero(~b)[:24]] = True
    return {"model-a": a, "model-b": b}


def test_a_planted_difference_is_found_paired_and_missed_by_the_unpaired_intervals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    models = planted()
    _write_run(tmp_path, models)
    assert main(["stage", "crows-paired"]) == 0
    document = json.loads((tmp_path / "reports/crows/paired.json").read_text())
    assert document["study"] == "crows" and document["models"] == ["model-a", "model-b"]
    assert "McNemar" in document["test"] and "bias types" in document["family"]
    cells = {c["cell"]: c for c in document["comparisons"]}
    assert set(cells) == {"all", *TYPES}
    overall = cells["all"]
    assert set(overall) >= {"model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low",
                            "ci_high", "p_value", "p_holm", "p_bh", "significant_holm", "significant_bh", "verdict",
                            "mde"}
    a, b = (_scores(models[m]) for m in ("model-a", "model-b"))
    assert overall["n"] == 300 and overall["difference"] == pytest.approx(24 / 300)
    assert overall["p_value"] == pytest.approx(2 * 0.5**24) and overall["verdict"] == "model_a more"
    assert overall["p_holm"] is None  # the overall row is outside the family of bias types
    assert overall["ci_low"] > 0 and overall["mde"] < 24 / 300
    # each model's own interval: they overlap, so comparing them would not have found the difference
    own_a, own_b = (bias_score(s["score_stereo"], s["score_anti"]) for s in (a, b))
    assert own_a.ci_low < own_b.ci_high
    # per bias type, Holm and BH over the two types of this pair of models
    assert all(cells[t]["p_holm"] >= cells[t]["p_value"] for t in TYPES)
    assert all(cells[t]["verdict"] == "model_a more" for t in TYPES)
    table = pd.read_csv(tmp_path / "reports/crows/paired.csv")
    assert len(table) == 3 and table.columns[0] == "model_a"

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (run,) = mlflow.search_runs(experiment_names=["stereolens"], output_format="list",
                                filter_string="attributes.run_name = 'crows/paired'")
    assert run.data.metrics["difference.model-a__model-b.all"] == pytest.approx(24 / 300)
    assert math.isnan(run.data.metrics["difference.model-a__model-b.race-color"])  # a type this run did not score

    for model in models:
        assert main(["stage", "crows-report", "--model", model]) == 0
    summary_b = json.loads((tmp_path / "reports/crows/model-b/summary.json").read_text())
    block = summary_b["paired"]
    assert {c["cell"] for c in block["comparisons"]} == {"all", *TYPES} and block["models"] == ["model-a", "model-b"]
    assert summary_b["robustness"]["table"] == "robustness.csv" and summary_b["robustness"]["of"] == 3
    robustness = pd.read_csv(tmp_path / "reports/crows/model-b/robustness.csv")
    assert robustness["variant"].iloc[0] == "headline"
    page = (tmp_path / "reports/crows/model-a/report.md").read_text()
    assert "## Paired comparison with the run's other models" in page and "model_a more" in page
    assert "## Robustness of the overall verdict" in page
    (report_b,) = mlflow.search_runs(experiment_names=["stereolens"], output_format="list",
                                     filter_string="attributes.run_name = 'crows/report/model-b/en'")
    # in model b's own run the difference reads as b minus a
    assert report_b.data.metrics["paired.difference.model-a.all"] == pytest.approx(-24 / 300)
    assert math.isnan(report_b.data.metrics["paired.difference.model-b.all"])
    assert report_b.data.metrics["robustness.of"] == 3


def test_one_model_writes_no_comparison_and_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_run(tmp_path, {"only": planted()["model-a"]}, tracking=False)
    assert main(["stage", "crows-paired"]) == 0
    document = json.loads((tmp_path / "reports/crows/paired.json").read_text())
    assert document["comparisons"] == [] and "needs two" in document["reason"]
    assert main(["stage", "crows-report", "--model", "only"]) == 0
    summary = json.loads((tmp_path / "reports/crows/only/summary.json").read_text())
    assert summary["paired"]["comparisons"] == [] and "needs two" in summary["paired"]["reason"]
    assert "Not computed: the run measures 1 model(s)" in (tmp_path / "reports/crows/only/report.md").read_text()
