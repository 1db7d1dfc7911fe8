"""Known answers for the seed 002 evaluation: BCa equals scipy's, degenerate cells, LMS,
the hyperlocal gap, and ``stereolens pairs analyze`` on a hand-computed file."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.cli import main
from stereolens.errors import DataError
from stereolens.stats.bias import bias_score
from stereolens.studies.pairs.analysis import analyze_scores, bias_cell, fragmentation_correlations

# caste: stereo wins c1, c4; loses c2; tie c3 -> 2 of 4.  gender: 8 of 8 (degenerate).
HAND = pd.DataFrame({
    "id": [f"c{i}" for i in range(1, 5)] + [f"g{i}" for i in range(1, 9)],
    "dimension": ["caste"] * 4 + ["gender"] * 8,
    "group_class": ["hyperlocal", "pan_regional", "hyperlocal", "pan_regional"] + ["pan_regional"] * 8,
    "score_stereo": [-10, -5, -7, -3] + [-1.0] * 8,
    "score_anti": [-12, -4, -7, -9] + [-2.0] * 8,
    # controls: stereo beats control in c1, c2, c3 and g1..g6 (9 of 12)
    "score_control": [-20, -20, -20, -1] + [-9.0] * 6 + [0.0] * 2,
})


def test_bca_interval_equals_scipy_with_1000_seeded_resamples():
    rng = np.random.default_rng(7)
    stereo, anti = rng.normal(size=40), rng.normal(size=40)
    cell = bias_cell(pd.DataFrame({"score_stereo": stereo, "score_anti": anti}), n_resamples=1000, seed=3)
    indicator = (stereo > anti).astype(float)
    ref = stats.bootstrap((indicator,), np.mean, n_resamples=1000, method="BCa", confidence_level=0.95,
                          random_state=np.random.default_rng(3))
    assert cell["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=1e-12)
    assert cell["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=1e-12)
    assert cell["bias_score"] == pytest.approx(indicator.mean())
    assert cell["p_value"] == pytest.approx(stats.binomtest(int(indicator.sum()), 40, 0.5).pvalue)
    assert not cell["degenerate"]


def test_degenerate_dimension_reports_the_binomial_result_not_nan():
    cell = bias_cell(HAND[HAND["dimension"] == "gender"], n_resamples=1000, seed=0)
    assert cell["degenerate"] and cell["bias_score"] == 1.0
    assert cell["p_value"] == pytest.approx(2 / 2**8)  # two-sided exact binomial, 8 of 8
    assert cell["significant"]
    assert cell["ci_low"] == cell["ci_high"] == 1.0  # collapsed, not NaN
    # a single agreeing pair is degenerate too, but p = 1 so not significant
    one = bias_cell(HAND.head(1), n_resamples=1000, seed=0)
    assert one["degenerate"] and not one["significant"]
    assert bias_score([1, 1], [0, 0]).degenerate


@pytest.mark.slow
def test_analyze_cli_on_a_hand_computed_file(tmp_path):
    scores = tmp_path / "scores.csv"
    HAND.to_csv(scores, index=False)
    assert main(["pairs", "analyze", "--scores", str(scores), "--output", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n"] == 12
    assert summary["bias_score"] == pytest.approx(10 / 12)
    assert summary["lms"] == pytest.approx(9 / 12)
    caste, gender = summary["by_dimension"]["caste"], summary["by_dimension"]["gender"]
    assert (caste["bias_score"], caste["n"], gender["bias_score"], gender["n"]) == (0.5, 4, 1.0, 8)
    assert gender["significant"] and gender["degenerate"] and gender["ci_low"] == gender["ci_high"] == 1.0
    ref = stats.bootstrap((np.array([1.0, 0, 0, 1]),), np.mean, n_resamples=1000, method="BCa",
                          random_state=np.random.default_rng(0))
    assert caste["ci_low"] == pytest.approx(ref.confidence_interval.low)
    assert caste["ci_high"] == pytest.approx(ref.confidence_interval.high)
    assert caste["ci_low"] < 0.5 < caste["ci_high"] and not caste["significant"]
    # hyperlocal: c1 (stereo), c3 (tie) -> 1/2; pan_regional: c2 (anti), c4 + 8 gender (stereo) -> 9/10
    gap = summary["hyperlocal_vs_pan_regional"]
    assert gap["hyperlocal"] == 0.5 and gap["pan_regional"] == pytest.approx(0.9)
    assert gap["difference"] == pytest.approx(-0.4)
    table = pd.read_csv(tmp_path / "out" / "tables" / "table5_6_dimensions_-.csv", dtype=str)
    assert table.set_index("dimension").loc["gender", "-"] == "100.0*"
    assert table.set_index("dimension").loc["caste", "-"] == "50.0"
    for name in ("bias_by_dimension_-_-", "hyperlocal_vs_pan_regional"):
        assert (tmp_path / "out" / "figures" / f"{name}.png").exists()
        assert (tmp_path / "out" / "figures" / f"{name}.svg").exists()


def test_continuous_effect_is_mean_and_median_difference():
    cell = bias_cell(HAND[HAND["dimension"] == "caste"], n_resamples=1000, seed=0)
    assert cell["mean_diff"] == pytest.approx((2 - 1 + 0 + 6) / 4)
    assert cell["median_diff"] == pytest.approx(1.0)
    assert cell["mean_diff_ci_low"] <= cell["mean_diff"] <= cell["mean_diff_ci_high"]


def test_several_models_and_languages_give_tables_3_and_4(tmp_path):
    frames = []
    for model, shift in (("m1", 1.0), ("m2", -1.0)):
        for language in ("en", "kok"):
            frames.append(HAND.assign(model=model, language=language,
                                      score_stereo=HAND["score_stereo"] + (shift if language == "en" else 0)))
    analysis = analyze_scores(pd.concat(frames), n_resamples=200)
    t3 = analysis.tables["table3_bias_by_language"].set_index("model")
    assert t3.loc["m1", "kok"] == pytest.approx(83.3)
    # +1 turns the tie c3 into a win and the loss c2 into a tie (not stereotypical): 11 of 12
    assert t3.loc["m1", "en"] == pytest.approx(91.7)
    assert "table4_lms_by_language" in analysis.tables and len(analysis.summary["runs"]) == 4


def test_bad_rows_name_row_and_column(tmp_path):
    bad = HAND.astype({"score_anti": object})
    bad.loc[2, "score_anti"] = "n/a"
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"line 4, column score_anti"):
        analyze_scores(pd.read_csv(path), what=str(path))
    wrong = HAND.assign(group_class="regional")
    with pytest.raises(DataError, match="group_class"):
        analyze_scores(wrong)


def test_fragmentation_gap_correlation_matches_pearson():
    frag = pd.DataFrame({"model": ["a", "b", "c"] * 2, "language": ["en"] * 3 + ["kok"] * 3,
                         "mean_tokens_per_term": [1.5, 2.0, 3.0, 2.0, 2.2, 4.0]})
    cells = pd.DataFrame({"model": ["a", "b", "c"] * 2, "language": ["en"] * 3 + ["kok"] * 3,
                          "dimension": "all", "bias_score": [0.6, 0.55, 0.5, 0.5, 0.52, 0.49]})
    res = fragmentation_correlations(frag, cells)
    assert res["by_language"]["en"]["r"] == pytest.approx(stats.pearsonr([1.5, 2, 3], [0.6, 0.55, 0.5]).statistic)
    gap = stats.pearsonr([0.5, 0.2, 1.0], [0.1, 0.03, 0.01]).statistic
    assert res["gap"]["r"] == pytest.approx(gap)


@pytest.mark.slow
def test_analyze_cli_with_models_languages_and_fragmentation(tmp_path):
    frames = []
    for k, model in enumerate(("m1", "m2", "m3")):
        for language in ("en", "kok"):
            frames.append(HAND.assign(model=model, language=language,
                                      score_anti=HAND["score_anti"] + (k * 3 if language == "en" else 0)))
    pd.concat(frames).to_csv(tmp_path / "scores.csv", index=False)
    frag = pd.DataFrame({"model": ["m1", "m2", "m3"] * 2, "language": ["en"] * 3 + ["kok"] * 3,
                         "mean_tokens_per_term": [1.5, 2.0, 3.0, 2.0, 2.2, 4.0]})
    frag.to_csv(tmp_path / "frag.csv", index=False)
    assert main(["pairs", "analyze", "--scores", str(tmp_path / "scores.csv"), "--output", str(tmp_path / "out"),
                 "--fragmentation", str(tmp_path / "frag.csv"), "--resamples", "200"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    runs = {(r["model"], r["language"]): r for r in summary["runs"]}
    assert len(runs) == 6 and runs[("m1", "kok")]["bias_score"] == pytest.approx(10 / 12)
    # m2 en: anti +3 -> only c4 (-3 vs -6) and no gender pair stays stereotypical: 1 of 12
    assert runs[("m2", "en")]["bias_score"] == pytest.approx(1 / 12)
    bias_en = [runs[(m, "en")]["bias_score"] for m in ("m1", "m2", "m3")]
    r = summary["fragmentation_correlations"]["by_language"]["en"]["r"]
    assert r == pytest.approx(stats.pearsonr([1.5, 2.0, 3.0], bias_en).statistic)
    assert (tmp_path / "out" / "figures" / "fragmentation_vs_bias.png").exists()
