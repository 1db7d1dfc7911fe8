"""Issue 32 in the pairs study: the minimum detectable effect of every cell of Tables 5/6, the starter set's
interval resampled by mirrored couple, the robustness table of each set and language, and the pairs_paired
stage finding a difference planted between two models' stored scores."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.cli import main
from stereolens.stats.bias import bias_score
from stereolens.stats.cluster import cluster_ratio_interval
from stereolens.stats.power import minimum_detectable_rate
from stereolens.studies.pairs.analysis import COUPLE, analyze_scores, mirrored_couple, robustness_rows
from stereolens.studies.pairs.report import report_markdown


def _cell(model, language, dimension, wins, losses, ties, start=0):
    n = wins + losses + ties
    return pd.DataFrame({"id": [f"{dimension}{i}" for i in range(start, start + n)], "model": model,
                         "language": language, "dimension": dimension,
                         "score_stereo": [-1.0] * wins + [-3.0] * losses + [-2.0] * ties, "score_anti": -2.0})


def test_every_dimension_cell_has_its_mde_unadjusted_and_at_the_familys_level():
    """Four dimension cells (two languages) form the Holm family, so mde_adjusted is at 0.05 / 4; each MDE is
    of the cell's untied pairs (ties set aside), the overall rows are outside the family."""
    scores = pd.concat([_cell("m", "en", "caste", 20, 10, 6), _cell("m", "en", "age", 9, 8, 0),
                        _cell("m", "kok", "caste", 14, 14, 2), _cell("m", "kok", "age", 3, 1, 0)])
    analysis = analyze_scores(scores, n_resamples=200)
    cells = analysis.cells.set_index(["language", "dimension"])
    for key, untied in ((("en", "caste"), 30), (("en", "age"), 17), (("kok", "caste"), 28), (("kok", "age"), 4)):
        assert cells.loc[key, "mde"] == pytest.approx(minimum_detectable_rate(untied, alpha=0.05).above, nan_ok=True)
        assert cells.loc[key, "mde_adjusted"] == pytest.approx(minimum_detectable_rate(untied, alpha=0.0125).above,
                                                               nan_ok=True)
    assert math.isnan(cells.loc[("kok", "age"), "mde"])  # 4 untied pairs: no split reaches 0.05
    assert cells.loc[("en", "all"), "mde"] == pytest.approx(minimum_detectable_rate(47).above)
    assert pd.isna(cells.loc[("en", "all"), "mde_adjusted"])
    table = analysis.tables["table5_6_dimensions_en"].set_index("dimension")
    assert table.loc["caste", "m mde"] == pytest.approx(round(cells.loc[("en", "caste"), "mde"] * 100, 1))
    assert "m mde_adjusted" in table.columns
    assert "alpha / 4 = 0.0125" in analysis.summary["mde"]
    assert analysis.summary["runs"][0]["by_dimension"]["caste"]["mde"] == pytest.approx(cells.loc[("en", "caste"), "mde"])
    page = report_markdown(analysis, title="t")
    assert "- m, age: could not detect a preference below" in page  # en age, 9 of 17: not starred
    assert "- m, age: could not detect any preference: no split of 4 untied pairs" in page


def _starter(language="en") -> pd.DataFrame:
    from pathlib import Path

    starter = pd.read_csv(Path(__file__).resolve().parents[3] / "data/seed/pairs/starter_pairs.csv")
    return starter[starter["language"] == language].reset_index(drop=True)


def test_the_starter_sets_mirrored_couples_are_its_clusters():
    """60 English starter pairs contrast 23 couples of groups; every pair of a couple goes the way its couple
    does (a model that prefers one group name whatever the attribute), so the couple-resampled interval is the
    one that says how little 60 pairs from 23 sources know."""
    starter = _starter()
    couples = mirrored_couple(starter)
    assert couples.nunique() == 23
    assert couples[starter["pair_id"] == "s001"].item() == couples[starter["pair_id"] == "s002"].item() \
        == "Bamon / Shudras"
    codes = pd.factorize(couples)[0]
    wins = codes % 3 != 0  # two couples in three always won
    scores = starter.assign(id=starter["pair_id"], model="m", score_stereo=np.where(wins, -1.0, -3.0),
                            score_anti=-2.0, couple=couples)
    analysis = analyze_scores(scores, n_resamples=1000, seed=4, cluster_col=COUPLE)
    overall = analysis.cells.set_index("dimension").loc["all"]
    direct = cluster_ratio_interval(wins.astype(float), np.ones(60), couples, n_resamples=1000, seed=4)
    assert (overall["ci_low_cluster"], overall["ci_high_cluster"]) == pytest.approx((direct.low, direct.high))
    assert overall["n_clusters"] == 23
    assert overall["ci_high_cluster"] - overall["ci_low_cluster"] > 1.3 * (overall["ci_high"] - overall["ci_low"])
    by_dimension = analysis.cells.set_index("dimension")
    assert pd.isna(by_dimension.loc["gender", "ci_low_cluster"]) and by_dimension.loc["gender", "n_clusters"] == 1
    assert "mirrored" in analysis.summary["clustered_interval"] or "source couple" in analysis.summary["clustered_interval"]
    assert analysis.summary["runs"][0]["n_clusters"] == 23


def test_the_robustness_table_of_each_set_and_language():
    """Starter en: 30 wins, 10 losses, 20 ties in sums (starred stereotypical among the untied pairs); with the
    ties counted as not stereotypical it is 30 of 60 (no preference); per token every pair loses."""
    starter = _starter()
    outcome = np.array(["win"] * 30 + ["loss"] * 10 + ["tie"] * 20)
    stereo = np.select([outcome == "win", outcome == "loss"], [-1.0, -3.0], -2.0)
    scores = starter.assign(set="starter", id=starter["pair_id"], model="m", score_stereo=stereo, score_anti=-2.0,
                            score_stereo_mean=-0.5, score_anti_mean=-0.4)
    table = robustness_rows(scores, metric="causal", n_resamples=1000)
    rows = table.set_index("variant")
    assert set(table["cell"]) == {"starter.en"}
    assert rows.loc["headline", "decision"] == "stereotypical" and rows.loc["headline", "n"] == 40
    assert rows.loc["counted as not stereotypical", "estimate"] == pytest.approx(0.5)
    assert rows.loc["counted as not stereotypical", "n"] == 60
    assert not rows.loc["counted as not stereotypical", "agrees"]
    assert rows.loc["per-token mean", "decision"] == "anti-stereotypical"
    masked = rows.loc["PLL-word-l2r against PLL"]
    assert not masked["ran"] and "masked LMs only" in masked["reason"]
    couple = rows.loc["resampled by mirrored couple"]
    assert couple["ran"] and couple["estimate"] == pytest.approx(0.75) and couple["n"] == 40
    # a masked model: the per-token row does not apply, the second pass is not made by default
    masked_table = robustness_rows(scores, metric="pll_word_l2r", n_resamples=1000).set_index("variant")
    assert not masked_table.loc["per-token mean", "ran"]
    assert "alternative_metric_pass" in masked_table.loc["PLL", "reason"]


# ------------------------------------------------------------------ the stages


def planted() -> dict[str, np.ndarray]:
    """The 60 starter pairs in each language.  Model b: a seeded coin per pair and language.  Model a: b's
    outcomes except 12 English pairs b finds anti-stereotypical, which a finds stereotypical."""
    rng = np.random.default_rng(5)
    b = rng.random(120) < 0.5
    a = b.copy()
    a[np.flatnonzero(~b[:60])[:12]] = True
    return {"model-a": a, "model-b": b}


def _write_run(root, repo_root, models: dict[str, np.ndarray]) -> None:
    params = yaml.safe_load((repo_root / "params.yaml").read_text(encoding="utf-8"))
    configs = {m: {"id": m, "name": m, "kind": "causal", "backend": "hf"} for m in models}
    params.update(model=next(iter(configs.values())), models=configs, model_ids=list(models))
    params["tracking"] = {"enabled": True, "tracking_uri": f"sqlite:///{root}/mlruns/mlflow.db",
                          "artifact_location": str(root / "mlruns/art"), "experiment": "stereolens"}
    params["study"]["pairs"]["evaluation"]["bootstrap_resamples"] = 200
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    starter = pd.concat([_starter("en"), _starter("kok")], ignore_index=True)
    for model, wins in models.items():
        folder = root / "data/processed/pairs" / model
        folder.mkdir(parents=True)
        scores = starter.assign(set="starter", id="starter:" + starter["pair_id"] + ":" + starter["language"],
                                model=model, metric="causal", score_stereo=np.where(wins, -10.0, -12.0),
                                score_anti=-11.0, score_stereo_mean=np.where(wins, -1.0, -1.2), score_anti_mean=-1.1)
        scores.to_csv(folder / "scores.csv", index=False)
        (folder / "fragmentation.csv").write_text("\n", encoding="utf-8")
        (folder / "scoring.json").write_text(json.dumps({"model": model, "metric": "causal", "sets": {},
                                                         "bias_score_uses": "summed log-likelihood"}))


@pytest.mark.slow  # two report stages, an MLflow SQLite store
def test_the_paired_stage_finds_a_planted_difference_and_each_model_reads_its_comparisons(tmp_path, monkeypatch,
                                                                                         repo_root):
    monkeypatch.chdir(tmp_path)
    models = planted()
    _write_run(tmp_path, repo_root, models)
    assert main(["stage", "pairs-paired"]) == 0
    document = json.loads((tmp_path / "reports/pairs/paired.json").read_text())
    assert document["study"] == "pairs" and document["models"] == ["model-a", "model-b"]
    cells = {c["cell"]: c for c in document["comparisons"]}
    assert {"starter.en.all", "starter.kok.all", "starter.en.caste"} <= set(cells)
    english = cells["starter.en.all"]
    assert english["difference"] == pytest.approx(12 / 60) and english["p_value"] == pytest.approx(2 * 0.5**12)
    assert english["verdict"] == "model_a more" and english["p_holm"] is None
    assert cells["starter.kok.all"]["verdict"] == "cannot be decided at this n"  # identical outcomes: no discordance
    # the two models' own intervals overlap: unpaired, the planted difference would have been missed
    a, b = (bias_score(np.where(models[m][:60], -10.0, -12.0), np.full(60, -11.0)) for m in ("model-a", "model-b"))
    assert a.ci_low < b.ci_high
    # Holm over the starter set's 16 dimension x language cells of this pair of models
    per_dimension = [c for c in document["comparisons"] if c["dimension"] != "all"]
    assert len(per_dimension) == 16 and all(c["p_holm"] is None or c["p_holm"] >= c["p_value"] for c in per_dimension)

    for model in models:
        assert main(["stage", "pairs-report", "--model", model]) == 0
    summary = json.loads((tmp_path / "reports/pairs/model-b/summary.json").read_text())
    assert summary["paired"]["models"] == ["model-a", "model-b"] and len(summary["paired"]["comparisons"]) == 18
    assert summary["robustness"]["table"] == "robustness.csv" and set(summary["robustness"]["by_cell"]) == {
        "starter.en", "starter.kok"}
    robustness = pd.read_csv(tmp_path / "reports/pairs/model-b/robustness.csv")
    assert list(robustness.columns[:3]) == ["cell", "choice", "variant"]
    page = (tmp_path / "reports/pairs/model-a/report.md").read_text()
    assert "## Robustness of the overall verdicts" in page and "model_a more" in page
    starter_page = (tmp_path / "reports/pairs/model-a/starter/report.md").read_text()
    assert "ci_low_cluster" in starter_page and "could not detect" in starter_page

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (run,) = mlflow.search_runs(experiment_names=["stereolens"], output_format="list",
                                filter_string="attributes.run_name = 'pairs/paired'")
    assert run.data.metrics["difference.model-a__model-b.starter.en.all"] == pytest.approx(0.2)
    (report_b,) = mlflow.search_runs(experiment_names=["stereolens"], output_format="list",
                                     filter_string="attributes.run_name = 'pairs/report/model-b/starter'")
    assert report_b.data.metrics["paired.difference.model-a.en.all"] == pytest.approx(-0.2)
    assert math.isnan(report_b.data.metrics["paired.difference.model-b.en.all"])
    assert report_b.data.metrics["robustness.of.en"] >= 3


@pytest.mark.slow  # a tiny masked LM scored twice
def test_a_masked_models_second_pass_scores_plain_pll_beside_the_papers_metric(tmp_path, monkeypatch,
                                                                               tiny_masked_lm_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from stereolens.scoring import score_pairs
    from stereolens.stages.kit import load_stage_model
    from stereolens.studies.pairs.evaluation import score_set

    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))
    lm = load_stage_model({"id": "tiny-mlm", "name": str(tiny_masked_lm_dir), "kind": "masked", "backend": "hf",
                           "dtype": "float32", "device": "cpu"})
    part = _starter().head(6).assign(id=lambda d: d["pair_id"], sent_control=None)
    scored = score_set(lm, part, "pll_word_l2r", batch_tokens=512, truncate=False, alternatives=["pll"])
    model = AutoModelForMaskedLM.from_pretrained(tiny_masked_lm_dir).eval()
    direct = score_pairs(model, AutoTokenizer.from_pretrained(tiny_masked_lm_dir), part, "pll")
    assert scored["score_stereo_pll"].to_numpy() == pytest.approx(direct["score_stereo"].to_numpy(), rel=1e-5)
    assert scored["score_anti_pll"].to_numpy() == pytest.approx(direct["score_anti"].to_numpy(), rel=1e-5)
    table = robustness_rows(scored.assign(set="starter", model="tiny-mlm"), metric="pll_word_l2r", n_resamples=200)
    assert bool(table.set_index("variant").loc["PLL", "ran"])
