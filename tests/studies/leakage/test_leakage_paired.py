"""The leakage stages on planted inputs (no language model): two models' score matrices built from synthetic human
matrices with a known difference, through leakage-fit, leakage-paired and leakage-report as DVC runs them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.studies.leakage.lexicon import load_lexicon
from stereolens.studies.leakage.matrices import THIN_GROUPS_COLUMNS, write_matrix

REPO = Path(__file__).resolve().parents[3]
SEED_DIR = REPO / "data" / "seed" / "leakage"
THIN = "immigrant"  # listed as thin in Hindi, as the published survey lists it


def _frame(values: np.ndarray, traits: list[str], groups: list[str]) -> pd.DataFrame:
    return pd.DataFrame(values, index=pd.Index(traits, name="Traits"), columns=groups)


def planted_run(root: Path, models: list[str], *, seed: int = 3) -> None:
    """H_EN, H_HI and the ILPS matrices of ``models`` in both target languages, as the human and scores stages
    write them.  Every model's Hindi scores are 0.3 H_EN + a large component all models share + a small one of
    their own; the second model's slope on H_EN is 0.1 lower on half of the groups (0.05 on average).  English
    scores follow H_HI with the same slope in every model."""
    lex = load_lexicon(SEED_DIR)
    traits, groups = lex.trait_order, lex.group_order
    rng = np.random.default_rng(seed)
    human = {lang: _frame(rng.uniform(0, 40, (len(traits), len(groups))), traits, groups) for lang in ("EN", "HI")}
    human["EN"].iloc[:, -4:] = np.nan  # groups English annotators did not rate (the 999 cells)
    human_dir = root / "data/processed/leakage/human"
    for lang, m in human.items():
        write_matrix(m, human_dir / f"H_{lang}.csv")
    pd.DataFrame([{"language": "HI", "group": THIN, "n_annotators": 1, "min_annotators_per_group": 5}],
                 columns=THIN_GROUPS_COLUMNS).to_csv(human_dir / "thin_groups.csv", index=False)
    half = np.isin(np.arange(len(groups)), np.arange(0, len(groups), 2))[None, :]
    for target, source in (("hi", "EN"), ("en", "HI")):
        shared = rng.normal(0, 10, (len(traits), len(groups))) + rng.normal(0, 1, (len(traits), 1))
        h = human[source].fillna(0).to_numpy()
        for k, model in enumerate(models):
            slope = 0.3 - (0.1 * half if (k == 1 and target == "hi") else 0.0)
            scores = slope * h + shared + rng.normal(0, 0.5, h.shape)
            out = root / f"data/processed/leakage/{model}/scores/{target}"
            write_matrix(_frame(scores, traits, groups), out / model / "ilps.csv")
            manifest = {"language": target, "baseline": None,
                        "models": {model: {"kind": "causal", "methods": {"ilps": {"templates": ["planted"],
                                                                                 "cells": int(scores.size)}}}}}
            (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def write_params(root: Path, models: list[str]) -> None:
    study = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    study.update({"languages": ["en", "hi"], "seed_dir": str(SEED_DIR), "templates": {"en": None, "hi": None}})
    study["fit"]["cluster"] = {"resamples": 400, "seed": 0}
    configs = {m: {"id": m, "name": f"models/{m}", "kind": "causal", "backend": "hf"} for m in models}
    params = {"model": configs[models[0]], "models": configs, "model_ids": models, "language": {"include": None},
              "tracking": {"enabled": False}, "study": {"leakage": study}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


@pytest.mark.slow
def test_a_planted_difference_is_found_by_leakage_paired_and_reported(tmp_path, monkeypatch):
    from stereolens.cli import main
    from stereolens.studies.leakage.paired import COLUMNS
    from stereolens.studies.leakage.robustness import ROBUSTNESS_COLUMNS

    models = ["alpha-lm", "beta-lm"]
    planted_run(tmp_path, models)
    write_params(tmp_path, models)
    monkeypatch.chdir(tmp_path)
    for model in models:
        for lang in ("en", "hi"):
            assert main(["stage", "leakage-fit", "--model", model, "--language", lang]) == 0
    assert main(["stage", "leakage-paired"]) == 0
    doc = json.loads(Path("reports/leakage/paired.json").read_text())
    assert doc["models"] == models and doc["study"] == "leakage" and "paired cluster bootstrap" in doc["test"]
    table = pd.read_csv("reports/leakage/paired.csv")
    assert list(table.columns) == COLUMNS and len(table) == 2  # ilps EN->HI and ilps HI->EN
    cells = {c["cell"]: c for c in doc["comparisons"]}
    planted = cells["ilps EN->HI"]
    assert (planted["model_a"], planted["model_b"]) == tuple(models)
    assert planted["difference"] == pytest.approx(0.05, abs=0.015)
    assert planted["verdict"] == "model_a more" and planted["p_value"] < 1e-3 and planted["significant_holm"]
    assert planted["ci_low"] > 0 and planted["mde"] < planted["difference"]
    assert planted["n"] == 32 * 30 and planted["n_clusters"] == 30
    # the two models' own (MixedLM) intervals of that coefficient overlap: comparing them would miss it
    own = [pd.read_csv(f"data/processed/leakage/{m}/fit/hi/{m}/ilps/coefficients.csv").set_index("term").loc["H_EN"]
           for m in models]
    assert own[0]["ci_low"] < own[1]["ci_high"] and own[1]["ci_low"] < own[0]["ci_high"]
    assert planted["se_independent"] > 3 * planted["se_difference"]
    # the cell with no planted difference
    assert cells["ilps HI->EN"]["verdict"] == "no difference detected"

    for model in models:
        assert main(["stage", "leakage-report", "--model", model]) == 0
    report = Path("reports/leakage/alpha-lm")
    summary = json.loads((report / "summary.json").read_text())
    assert [c["cell"] for c in summary["paired"]["comparisons"]] == ["ilps HI->EN", "ilps EN->HI"]
    text = (report / "report.md").read_text(encoding="utf-8")
    assert "Paired comparisons with the run's other models" in text and "model_a more (alpha-lm - beta-lm)" in text
    # MDE and clustered columns on the leakage tests of the coefficient table
    coefficients = pd.read_csv(report / "coefficients.csv")
    tests = coefficients[coefficients["p_holm"].notna()]
    assert tests[["mde", "mde_adjusted", "se_cluster", "ci_low_cluster", "ci_high_cluster"]].notna().all().all()
    assert (tests["mde_adjusted"] > tests["mde"]).all()
    assert tests["mde"].to_numpy() == pytest.approx(2.801585 * tests["se"].to_numpy(), rel=1e-6)
    assert coefficients.loc[coefficients["p_holm"].isna(), "mde"].isna().all()
    assert summary["minimum_detectable"]["alpha_adjusted"] == pytest.approx(0.05 / 2)
    assert summary["clustered_intervals"]["unit"] == "group" and "cluster unit: the group" in text
    # robustness: the headline first, the thin rule re-fitted, the choice task not run in this configuration
    robustness = pd.read_csv(report / "robustness.csv")
    assert list(robustness.columns) == ROBUSTNESS_COLUMNS and robustness.iloc[0]["variant"] == "headline"
    by_choice = robustness.set_index("choice")
    thin = by_choice.loc["minimum annotators per group"]
    assert bool(thin["ran"]) and thin["variant"].startswith("thin groups dropped")
    assert not robustness.loc[robustness["choice"] == "choice task orders", "ran"].astype(bool).any()
    ran = robustness[robustness["ran"].astype(bool) & (robustness["variant"] != "headline")]
    assert summary["robustness"] == {"headline_decision": robustness.iloc[0]["decision"],
                                     "survives": int(ran["agrees"].astype(bool).sum()), "of": len(ran),
                                     "not_run": 2, "table": "robustness.csv"}
    assert "Robustness: does the edge set survive" in text
    # the thin variant's fit left out the Hindi thin group's 32 rows
    thin_fit = json.loads(Path("data/processed/leakage/alpha-lm/fit/hi/alpha-lm/ilps/variants/thin_drop/fit.json").read_text())
    configured = json.loads(Path("data/processed/leakage/alpha-lm/fit/hi/alpha-lm/ilps/fit.json").read_text())
    assert configured["n_obs"] - thin_fit["n_obs"] == 32 and thin_fit["thin_rule"] == "drop"
    assert configured["cluster"]["n_clusters"] == 30 and configured["cluster"]["resamples"] == 400


@pytest.mark.slow
def test_one_model_gives_an_empty_comparison_list_with_a_reason(tmp_path, monkeypatch):
    from stereolens.cli import main

    planted_run(tmp_path, ["solo"])
    write_params(tmp_path, ["solo"])
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "leakage-fit", "--model", "solo", "--language", "hi"]) == 0
    assert main(["stage", "leakage-paired"]) == 0
    doc = json.loads(Path("reports/leakage/paired.json").read_text())
    assert doc["comparisons"] == [] and doc["reason"] == "one model in this run (solo): nothing to compare"
    assert pd.read_csv("reports/leakage/paired.csv").empty and doc["models"] == ["solo"]
