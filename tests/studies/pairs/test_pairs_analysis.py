"""Known answers for the AmchiBias evaluation: BCa equals scipy's, degenerate cells, LMS,
the hyperlocal gap, and ``stereolens pairs analyze`` on a hand-computed file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.cli import main
from stereolens.errors import DataError
from stereolens.stats.bias import bias_score, proportion_bca_interval
from stereolens.studies.pairs.analysis import (
    analyze_scores, bias_cell, check_fragmentation, fragmentation, fragmentation_correlations, identity_forms,
    pairs_headline,
)
from stereolens.studies.pairs.report import report_markdown

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


def test_bca_interval_is_scipys_many_resample_limit():
    rng = np.random.default_rng(7)
    stereo, anti = rng.normal(size=40), rng.normal(size=40)
    cell = bias_cell(pd.DataFrame({"score_stereo": stereo, "score_anti": anti}), n_resamples=1000, seed=3)
    indicator = (stereo > anti).astype(float)
    ref = stats.bootstrap((indicator,), np.mean, n_resamples=200_000, method="BCa", confidence_level=0.95,
                          random_state=np.random.default_rng(3))
    assert cell["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=0.5 / 40)
    assert cell["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=0.5 / 40)
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
    exact = proportion_bca_interval(2, 3)  # the test is over the 3 untied pairs: c1, c4 win, c2 loses
    assert (caste["ci_low"], caste["ci_high"]) == (exact.low, exact.high) and caste["share_untied"] == pytest.approx(2 / 3)
    assert caste["ties"] == 1 and summary["runs"][0]["n"] == 12
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
    # target minus English for both gaps: frag kok - en, bias kok - en
    gap = stats.pearsonr([0.5, 0.2, 1.0], [-0.1, -0.03, -0.01]).statistic
    assert res["gap"]["r"] == pytest.approx(gap)
    assert res["gap"]["languages"] == ["en", "kok"]


def test_fragmentation_gap_sign_does_not_follow_language_code_order():
    frag = pd.DataFrame({"model": ["a", "b", "c"] * 3, "language": ["en"] * 3 + ["kok"] * 3 + ["hi"] * 3,
                         "mean_tokens_per_term": [1.5, 2.0, 3.0, 2.0, 2.2, 4.0, 1.6, 2.5, 2.9]})
    cells = pd.DataFrame({"model": ["a", "b", "c"] * 3, "language": ["en"] * 3 + ["kok"] * 3 + ["hi"] * 3,
                          "dimension": "all", "bias_score": [0.6, 0.55, 0.5, 0.5, 0.52, 0.49, 0.58, 0.5, 0.51]})
    before = fragmentation_correlations(frag, cells)["gaps"]
    # kok renamed to a code that sorts before English, hi to one that sorts after kok
    renamed = {"kok": "am", "hi": "zz"}
    after = fragmentation_correlations(frag.replace({"language": renamed}), cells.replace({"language": renamed}))["gaps"]
    assert after["am"]["r"] == pytest.approx(before["kok"]["r"])
    assert after["zz"]["r"] == pytest.approx(before["hi"]["r"])
    assert after["am"]["languages"] == ["en", "am"]
    assert before["kok"]["r"] == pytest.approx(stats.pearsonr([0.5, 0.2, 1.0], [-0.1, -0.03, -0.01]).statistic)


@pytest.mark.slow
def test_analyze_cli_with_models_languages_and_fragmentation(tmp_path):
    frames = []
    for k, model in enumerate(("m1", "m2", "m3")):
        for language in ("en", "kok"):
            # both scores 10 lower: log-likelihoods stay negative, every comparison is the same
            frames.append(HAND.assign(model=model, language=language, score_stereo=HAND["score_stereo"] - 10,
                                      score_anti=HAND["score_anti"] - 10 + (k * 3 if language == "en" else 0)))
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


def _ten_of_twelve(**extra) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"r{i}" for i in range(12)], "dimension": "religion",
                         "score_stereo": [-1.0] * 10 + [-3.0] * 2, "score_anti": [-2.0] * 12, **extra})


def test_ten_of_twelve_gets_the_same_decision_for_seeds_0_to_9():
    cells = [bias_cell(_ten_of_twelve(), n_resamples=1000, seed=seed) for seed in range(10)]
    assert {(c["significant"], c["borderline"], c["ci_low"]) for c in cells} == {(False, True, 0.5)}
    analysis = analyze_scores(_ten_of_twelve(), seed=3)
    table = analysis.tables["table5_6_dimensions_-"].set_index("dimension")
    assert table.loc["religion", "-"] == "83.3~"
    assert analysis.summary["by_dimension"]["religion"]["borderline"]


def _tied_cell(dimension: str, wins: int, losses: int, ties: int) -> pd.DataFrame:
    n = wins + losses + ties
    return pd.DataFrame({"id": [f"{dimension}{i}" for i in range(n)], "dimension": dimension,
                         "score_stereo": [-1.0] * wins + [-3.0] * losses + [-2.0] * ties, "score_anti": [-2.0] * n})


def test_a_tied_cell_is_starred_by_its_untied_pairs_and_the_legend_says_so():
    """Issue 31: the star tested the share of all pairs (5 wins, 5 losses, 30 ties: 12.5%, starred) beside a
    binomial p of 1.0 over the untied pairs; now both test the untied pairs and point the same way."""
    tied = pd.concat([_tied_cell("region", 5, 5, 30), _tied_cell("caste", 80, 40, 80)])
    analysis = analyze_scores(tied)
    region, caste = analysis.summary["by_dimension"]["region"], analysis.summary["by_dimension"]["caste"]
    assert region["bias_score"] == pytest.approx(5 / 40) and region["ties"] == 30
    assert not region["significant"] and region["p_value"] == pytest.approx(1.0)
    assert region["share_untied"] == 0.5 and region["ci_low"] < 0.5 < region["ci_high"]
    # 40% of all pairs, but two to one among the untied: starred for the stereotypical side, as its p says
    assert caste["bias_score"] == pytest.approx(0.4) and caste["share_untied"] == pytest.approx(80 / 120)
    assert caste["p_value"] == pytest.approx(stats.binomtest(80, 120).pvalue)
    assert caste["significant"] and caste["ci_low"] > 0.5 and caste["favours"] == "stereotypical"
    assert caste["p_holm"] < 0.05 and caste["significant_holm"]
    table = analysis.tables["table5_6_dimensions_-"].set_index("dimension")
    assert table.loc["region", "-"] == "12.5" and table.loc["region", "- ties"] == 30
    assert table.loc["caste", "-"] == "40.0*" and table.loc["caste", "- ties"] == 80
    page = report_markdown(analysis, title="t")
    assert "ties counted as not stereotypical" in page and "among the cell's untied pairs" in page
    # the degenerate cells' star is the binomial test's, said in the legend on the page
    assert "Degenerate cells" in page and "BCa is undefined" in page and "p < 0.05, not the BCa rule" in page


def test_muril_age_75_percent_of_16_is_borderline_under_the_papers_rule():
    """The paper stars MuRIL Age 75.0% (n = 16); with no ties, 12 of 16 has its exact BCa lower bound on 50%
    and a binomial p of 0.077: borderline, not starred (the pairs README says so)."""
    cell = bias_cell(_tied_cell("age", 12, 4, 0), n_resamples=1000, seed=0)
    assert cell["ci_low"] == 0.5 and cell["borderline"] and not cell["significant"]
    assert cell["p_value"] == pytest.approx(stats.binomtest(12, 16).pvalue) and cell["p_value"] > 0.05
    # 2 of the 16 tied (the paper reports no ties): 12 of 14 untied, starred
    tied = bias_cell(_tied_cell("age", 12, 2, 2), n_resamples=1000, seed=0)
    assert tied["bias_score"] == 0.75 and tied["significant"] and tied["p_value"] == pytest.approx(
        stats.binomtest(12, 14).pvalue)


def test_holm_and_bh_over_the_dimension_model_language_family():
    frames = [HAND.assign(model=m, language=lang) for m in ("m1", "m2") for lang in ("en", "kok")]
    analysis = analyze_scores(pd.concat(frames))
    per_dim = analysis.cells[analysis.cells["dimension"] != "all"]
    assert len(per_dim) == 8  # 2 dimensions x 2 models x 2 languages, one family
    p = per_dim["p_value"].to_numpy(dtype=float)
    # Holm by hand: caste p = 1.0 (2 of 3 decisive) x4, gender p = 2/256 x4 -> 4 * 2/256 for the smallest
    gender = per_dim[per_dim["dimension"] == "gender"]
    assert gender["p_holm"].astype(float).tolist() == pytest.approx([min(1.0, 8 * 2 / 256)] * 4)
    assert gender["p_bh"].astype(float).tolist() == pytest.approx([8 * (2 / 256) / 4] * 4)
    assert p.max() == pytest.approx(1.0)
    assert "8 tests" in analysis.summary["corrections"] and "Holm" in analysis.summary["corrections"]
    run = analysis.summary["runs"][0]
    assert set(run["by_dimension"]["gender"]) >= {"p_holm", "p_bh", "significant_holm", "significant_bh"}
    table = analysis.tables["table5_6_dimensions_en"]
    assert {"m1 p_holm", "m1 p_bh", "m1 ties"} <= set(table.columns)


def test_non_finite_scores_and_duplicate_ids_are_refused_with_their_line(tmp_path):
    bad = HAND.copy()
    bad.loc[3, "score_stereo"] = np.inf
    path = tmp_path / "inf.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"inf.csv line 5, column score_stereo: inf is not a finite number"):
        analyze_scores(pd.read_csv(path), what=str(path))
    dup = pd.concat([HAND, HAND.iloc[[2]]], ignore_index=True)
    with pytest.raises(DataError, match=r"line 14, column id: 'c3' appears twice"):
        analyze_scores(dup)
    # the same id under another model is another cell, not a duplicate
    analyze_scores(pd.concat([HAND.assign(model="a"), HAND.assign(model="b")]))


def test_headline_keeps_a_set_with_a_single_run():
    crows = analyze_scores(HAND.assign(language="en", model="m")).summary
    starter = analyze_scores(pd.concat([HAND.assign(language=lang, model="m") for lang in ("en", "kok")])).summary
    headline = pairs_headline({"starter": starter, "crows": crows})
    assert headline["crows bias score (en)"] == pytest.approx(round(10 / 12, 3))
    assert {"starter bias score (en)", "starter bias score (kok)"} <= set(headline)
    assert crows["bias_score"] == pytest.approx(10 / 12)  # the single run stays at the top level too


def _uncased_wordpiece():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    import tiny_models

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # lower-cases and strips accents, as an uncased BERT does (BertNormalizer drops Mn marks)
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(tiny_models.corpus() + ["Bamon", "नुस्तेकार"],
                            trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]"]))
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def test_case_alone_is_not_lossy_but_a_dropped_vowel_sign_is():
    tokenizer = _uncased_wordpiece()
    assert tokenizer.decode(tokenizer("Bamon", add_special_tokens=False)["input_ids"]) == "bamon"
    result = fragmentation(tokenizer, ["Bamon", "Café"])
    assert not result["lossy"] and result["lossy_terms"] == 0
    # the normaliser strips the Devanagari vowel signs (category Mn) of Nustekar: characters lost
    lost = fragmentation(tokenizer, ["Bamon", "नुस्तेकार"])
    assert lost["lossy"] and lost["lossy_examples"] == ["नुस्तेकार"]


def test_fragmentation_terms_are_the_forms_the_sentences_use():
    pairs = pd.DataFrame({
        "language": ["en", "en", "kok"],
        "sent_stereo": ["Saraswats are shrewd traders.", "The Bamon priest was strict.", "बामण चड हुशार आसात."],
        "sent_anti": ["Shudras are shrewd traders.", "The Gawda priest was strict.", "गावडे चड हुशार आसात."],
    })
    assert identity_forms(pairs) == {"en": ["Bamon", "Gawda", "Saraswats", "Shudras"], "kok": ["गावडे", "बामण"]}


def test_each_set_says_who_judged_its_pairs(tmp_path):
    """CrowS-Pairs was written and validated by crowd workers; the constructed set's tuples by the configured
    annotators; the starter set was authored by the project and judged by no one (the model profile labels
    each set's cells from this)."""
    from stereolens.studies.pairs.report import empty_sets, report_sets

    scores = pd.concat([HAND.assign(language="en", model="m", set="crows"),
                        HAND.assign(language="en", model="m", set="starter", translation_status="authored")])
    sets = report_sets(scores, pd.DataFrame(), model="m", metric="causal", annotation_source="simulated",
                       n_resamples=200, seed=0, alpha=0.05, output=tmp_path)
    assert sets["crows"].provenance["annotation_source"] == "human"
    assert "annotation_source" not in sets["starter"].provenance
    empty = empty_sets(sets, "simulated")
    assert set(empty) == {"constructed"} and empty["constructed"]["provenance"]["annotation_source"] == "simulated"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.assign(score_anti=d["score_anti"].where(d.index != 1, 0.4)),
     r"s.csv line 3, column score_anti: 0.4 is positive, but scores are log-likelihoods"),
    (lambda d: d.assign(dimension=d["dimension"].where(d.index != 2, "All")),
     r"s.csv line 4, column dimension: 'All' is the name of the overall row"),
    # a row without its model would fall out of every cell (groupby drops it), the file's n one short
    (lambda d: d.assign(model=["m"] * 5 + [""] + ["m"] * 6),
     r"s.csv line 7, column model: empty model \(the row would fall out of every model x language cell\)"),
    (lambda d: d.assign(model="m", language=["en"] * 11 + [None]), r"s.csv line 13, column language: empty language"),
    (lambda d: d.assign(score_stereo=d["score_stereo"].astype(object).where(d.index != 4, "")),
     r"s.csv line 6, column score_stereo: empty$"),
])
def test_scores_that_cannot_be_log_likelihoods_or_a_dimension_named_all_are_refused(tmp_path, edit, message):
    edit(HAND).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(DataError, match=message):
        analyze_scores(pd.read_csv(tmp_path / "s.csv"), n_resamples=10, what=str(tmp_path / "s.csv"))


@pytest.mark.parametrize("frag, message", [
    ({"model": ["m"], "language": ["en"], "mean_tokens_per_term": [-1.5]}, r"line 2, column mean_tokens_per_term: "),
    ({"model": [""], "language": ["en"], "mean_tokens_per_term": [1.5]}, r"line 2, column model: empty model"),
    ({"model": ["other"], "language": ["en"], "mean_tokens_per_term": [1.5]}, r"no \(model, language\) in common"),
])
def test_a_fragmentation_table_that_cannot_be_matched_is_refused(frag, message):
    cells = pd.DataFrame({"model": ["m"], "language": ["en"], "dimension": ["all"], "bias_score": [0.5]})
    with pytest.raises(DataError, match=message):
        check_fragmentation(pd.DataFrame(frag), cells, what="frag.csv")


@pytest.mark.parametrize("extra_row, message", [
    ("caste,Bamon,pan_regional,ours,again\n", r"gc.csv line 39, column group: duplicate value 'Bamon' \(first at line 2"),
    ("caste,Newcomers,regional,ours,x\n", r"gc.csv line 39, column class: "),
])
def test_group_classes_refuse_a_second_row_for_a_group_and_an_unknown_class(tmp_path, extra_row, message):
    from stereolens.studies.pairs.minimal_pairs import read_group_classes

    seed = Path(__file__).resolve().parents[3] / "data/seed/pairs/group_classes.csv"
    (tmp_path / "gc.csv").write_text(seed.read_text(encoding="utf-8") + extra_row, encoding="utf-8")
    assert len(read_group_classes(seed)) == 37
    with pytest.raises(DataError, match=message):
        read_group_classes(tmp_path / "gc.csv")
