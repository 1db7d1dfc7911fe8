"""The validity guards of the pcs analysis (issue #27): capability utilisation without a gain, PCS without
exclusions, invalid responses in the language comparisons, and the scenario-level paired analysis."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.cli import main
from stereolens.errors import DataError
from stereolens.io import write_csv
from stereolens.studies.pcs import analysis as pcs


def _triads(*abc) -> pd.DataFrame:
    return pd.DataFrame(
        [dict(model="m", language="hi", scenario_id=f"s{i}", dimension="PDI", feature="deference", A=a, B=b, C=c)
         for i, (a, b, c) in enumerate(abc)]
    )


def _long(cells: dict, model: str = "m") -> pd.DataFrame:
    """One row per (cell, condition): cells map (language, scenario, dimension, feature) -> (A, B, C)."""
    return pd.DataFrame([
        dict(model=model, language=lang, scenario_id=sid, dimension=dim, feature=feat, condition=cond, score=v)
        for (lang, sid, dim, feat), abc in cells.items() for cond, v in zip("ABC", abc)
    ])


# ---------------------------------------------------------------- capability utilisation


@pytest.mark.parametrize("abc", [(2.929, 2.848, 2.828), (3.0, 2.99, 2.9), (4.0, 4.0, 4.5), (4.0, 4.2, 4.1)])
def test_cap_util_is_undefined_without_a_gain(abc):
    """The default run's means (B below A: the old code said 1.241), a tiny loss (old: 10.0), no gain, and a
    gain of 0.2 points, not above the default minimum of 0.25 steps = 0.25 points."""
    value, why = pcs.capability_utilisation(_triads(abc), pcs.min_gain_points(0.25))
    assert math.isnan(value)
    assert why.startswith(f"undefined: mean B - mean A = {abc[1] - abc[0]:+.3f} is not above the minimum gain 0.25")
    assert ("did not raise the scores" in why) == (abc[1] <= abc[0])


def test_cap_util_table10_known_answer():
    """Fifteen Percent Fluency Table 10, Minstral-8B: A 4.90, B 6.06, C 5.06 -> 0.16 / 1.16 = 13.8 %."""
    value, why = pcs.capability_utilisation(_triads((4.90, 6.06, 5.06)), pcs.min_gain_points(0.25))
    assert round(100 * value, 1) == 13.8 and why == ""


def test_cap_util_undefined_per_feature_and_overall():
    cells = {("hi", "s1", "PDI", "deference"): (3.0, 6.0, 4.0),  # gain 3: 1/3
             ("hi", "s2", "PDI", "directness"): (3.0, 2.9, 4.79)}  # loss: the old ratio was -17.9
    result = pcs.analyze_scores(_long(cells))
    ranking = result.tables["table14_feature_ranking"].set_index("feature")
    assert ranking.loc["deference", "cap_util"] == pytest.approx(1 / 3)
    assert np.isnan(ranking.loc["directness", "cap_util"])
    assert ranking.loc["directness", "cap_util_note"].startswith("undefined: mean B - mean A = -0.100")
    # overall: mean A 3, mean B 4.45, mean C 4.395 -> 1.395 / 1.45
    assert result.summary["cap_util"] == pytest.approx(1.395 / 1.45)
    t10 = result.tables["table10_model_summary"].iloc[0]
    assert t10["cap_util"] == pytest.approx(1.395 / 1.45) and t10["cap_util_note"] == ""


# ---------------------------------------------------------------- PCS and its minimum gain


CELLS = {("hi", "s1", "PDI", "deference"): (3.0, 3.0, 4.0),    # no gain: the old code's (C - A) / 0 = inf
         ("hi", "s2", "PDI", "directness"): (3.0, 2.0, 2.5),   # a loss: excluded, whatever its ratio
         ("hi", "s3", "PDI", "deference"): (3.0, 3.1, 3.05),   # gain 0.1: PCS 0.5
         ("hi", "s4", "PDI", "directness"): (3.0, 3.2, 3.0),   # gain 0.2: PCS 0
         ("hi", "s5", "PDI", "deference"): (2.0, 4.0, 3.0)}    # gain 2: PCS 0.5


def test_pcs_with_no_minimum_gain_is_finite_and_counts_the_excluded():
    result = pcs.analyze_scores(_long(CELLS), min_gain_steps=0)
    assert result.summary["pcs"] == pytest.approx((0.5 + 0.0 + 0.5) / 3)
    assert result.summary["n_excluded"] == 2
    assert np.isfinite(result.cells["pcs"].dropna()).all()


def test_min_gain_sensitivity_table():
    result = pcs.analyze_scores(_long(CELLS))  # the default, 0.25 steps
    table = result.tables["pcs_min_gain_sensitivity"].set_index("min_gain_steps")
    assert list(table.index) == [0.0, 0.05, 0.1, 0.25, 0.5, 1.0]
    # gains 0.1, 0.2, 2 (and 0, -1): above 0 and 0.05 all three, above 0.1 (not at it) 0.2 and 2, above 0.25 / 1 only 2
    # ... and PCS is undefined (as capability utilisation is) once the gain over all cells, mean B - mean A = 0.26,
    # is not above the minimum: at 0.5 and 1 step, though the cell with gain 2 still has a ratio of 0.5
    assert table["pcs"].tolist() == pytest.approx([1 / 3, 1 / 3, 0.25, 0.5, math.nan, math.nan], nan_ok=True)
    assert table["cap_util"].isna().tolist() == [False, False, False, False, True, True]
    assert table.loc[0.5, "pcs_note"].startswith("undefined: mean B - mean A = 0.26 over all 5 cells is not above "
                                                 "the minimum gain 0.5")
    assert table.loc[0.5, "pcs_note"].endswith("the mean ratio is 0.5")
    assert table["n_excluded"].tolist() == [2, 2, 3, 4, 4, 4]
    assert table["configured"].tolist() == [False, False, False, True, False, False]
    assert result.summary["pcs"] == table.loc[0.25, "pcs"] and result.summary["n_excluded"] == 4
    # the gain is in steps of the judges' 1-7 scale: one step is one point
    assert table["min_gain_points"].tolist() == pytest.approx(table.index.tolist())


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_bad_minimum_gain_is_refused(bad):
    with pytest.raises(DataError, match="min_gain_steps must be a number >= 0"):
        pcs.analyze_scores(_long(CELLS), min_gain_steps=bad)


# ---------------------------------------------------------------- invalid responses


def _hindi_urdu(planted: float | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    cells = {}
    for lang, base in (("hi", 4.0), ("ur", 4.5)):
        for i in range(6):
            a = base + rng.normal(0, 0.3)
            cells[(lang, f"s{i}", "PDI", "deference")] = (a, a + 1.0, a + 0.3)
    df = _long(cells).assign(invalid_reason="")
    if planted is not None:
        # an English reply to one Hindi prompt A, judged (the default judges wrong-language replies)
        row = dict(model="m", language="hi", scenario_id="s6", dimension="PDI", feature="deference")
        extra = [dict(row, condition=c, score=s, invalid_reason="wrong_language" if c == "A" else "")
                 for c, s in (("A", planted), ("B", 5.0), ("C", 4.5))]
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    return df


def test_wrong_language_response_is_left_out_of_hud_and_the_language_tests():
    clean = pcs.analyze_scores(_hindi_urdu())
    planted = pcs.analyze_scores(_hindi_urdu(planted=1.0))
    for key in ("t", "p", "d", "n_hindi", "hindi_mean"):
        assert planted.statistics["hindi_urdu"][key] == clean.statistics["hindi_urdu"][key], key
    assert planted.summary["hud"] == clean.summary["hud"] and planted.summary["ldi"] == clean.summary["ldi"]
    assert planted.tables["table15_anova_language"].equals(clean.tables["table15_anova_language"])
    excluded = planted.tables["excluded_responses"].set_index(["language", "condition"])
    assert excluded.loc[("hi", "A"), "n_responses"] == 7 and excluded.loc[("hi", "A"), "n_excluded"] == 1
    assert excluded.loc[("hi", "A"), "wrong_language"] == 1 and excluded["n_excluded"].sum() == 1
    assert planted.statistics["n_responses_excluded_invalid"] == 1
    # the planted response's B and C are valid but their cell has no A: no triad for it
    assert len(planted.cells) == len(clean.cells) == 12


def test_hindi_urdu_headline_refused_when_too_few_valid_responses():
    df = _hindi_urdu()
    hindi_a = (df["language"] == "hi") & (df["condition"] == "A")
    df.loc[hindi_a & (df["scenario_id"] != "s0"), "invalid_reason"] = "wrong_language"
    hu = pcs.analyze_scores(df).statistics["hindi_urdu"]
    assert hu["t"] is None and hu["p"] is None and hu["n_hindi_responses"] == 1
    assert hu["note"].startswith("not computed: 1 valid hi and 6 valid ur Prompt A responses")
    # with no valid Hindi Prompt A response at all, HUD is undefined and says why
    df.loc[hindi_a, "invalid_reason"] = "wrong_language"
    result = pcs.analyze_scores(df)
    assert result.summary["hud"] == {"overall": None}
    assert result.statistics["hud_note"] == "undefined: no valid Prompt A score in hi (invalid responses are excluded)"
    assert result.statistics["hindi_urdu"]["note"].startswith("not computed: 0 valid hi")
    both = result.summary["hindi_urdu"]
    assert both["agree"] is None and both["note"].startswith("not compared: the response-level and the scenario-level")
    from stereolens.studies.pcs.outputs import report_contract
    headline = report_contract(result.summary, None, None, None)["headline"]
    assert headline["Hindi-Urdu p (headline: the paper's response-level t-test)"].startswith("not computed: 0 valid hi")


def test_analyze_stage_takes_validity_from_the_responses(tmp_path, analyze_stage):
    """The stage joins responses.csv's invalid_reason onto the judged scores by response_id."""
    scores = _hindi_urdu(planted=1.0).drop(columns="invalid_reason")
    scores["response_id"] = (scores["language"] + "-" + scores["scenario_id"] + "-" + scores["condition"])
    write_csv(tmp_path / "data/interim/pcs/m/scores.csv", scores)
    responses = scores.drop_duplicates("response_id").assign(domain="workplace", translation_status="authored")
    responses["invalid_reason"] = np.where(responses["response_id"] == "hi-s6-A", "wrong_language", "")
    write_csv(tmp_path / "data/interim/pcs/m/responses.csv", responses)
    assert main(["stage", "pcs-analyze"]) == 0
    stage = json.loads((tmp_path / "reports/pcs/m/summary.json").read_text())
    assert stage["hud"] == pytest.approx(pcs.analyze_scores(_hindi_urdu()).summary["hud"])
    statistics = json.loads((tmp_path / "reports/pcs/m/statistics.json").read_text())
    assert statistics["n_responses_excluded_invalid"] == 1
    report = (tmp_path / "reports/pcs/m/report.md").read_text()
    assert "## excluded_responses" in report and "## pcs_min_gain_sensitivity" in report
    # the renamed key is refused in one line, not silently ignored
    analyze_stage({"min_gap": 0.05})
    assert main(["stage", "pcs-analyze"]) != 0


# ---------------------------------------------------------------- scenario-level analysis (beyond the paper)


def _scenario_scores(shifts: dict[str, float], n: int = 8, seed: int = 4) -> pd.DataFrame:
    """Prompt A only (the paired analyses read A): per scenario a common level, per language a shift,
    two features and two samples of noise, so the rows are many and the scenarios few."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        level = 4 + rng.normal(0, 0.8)
        for lang, shift in shifts.items():
            for feat in ("deference", "directness"):
                for sample in (0, 1):
                    rows.append(dict(model="m", language=lang, scenario_id=f"s{i}", dimension="PDI", feature=feat,
                                     condition="A", sample=sample, score=level + shift + rng.normal(0, 0.4)))
    return pd.DataFrame(rows)


def test_paired_hindi_urdu_matches_scipy_on_scenario_means():
    df = _scenario_scores({"hi": 0.0, "ur": 0.3})
    resp = pcs.response_scores(pcs.check_scores(df))
    res = pcs.paired_language_test(pcs.scenario_means(resp), "hi", "ur")
    by = df.groupby(["language", "scenario_id"])["score"].mean()  # by hand: every feature and sample of a scenario
    hi, ur = by["hi"].to_numpy(), by["ur"].to_numpy()
    assert res["n_pairs"] == 8 and res["n_unmatched"] == 0
    assert res["t"] == pytest.approx(stats.ttest_rel(hi, ur).statistic)
    assert res["p_t"] == pytest.approx(stats.ttest_rel(hi, ur).pvalue)
    assert res["wilcoxon_w"] == pytest.approx(stats.wilcoxon(hi, ur).statistic)
    assert res["p_wilcoxon"] == pytest.approx(stats.wilcoxon(hi, ur).pvalue)
    # the paper's test treats the 32 (scenario, feature, sample) rows per language as independent and unpaired
    unpaired = pcs.hindi_urdu_test(resp)
    assert unpaired["n_hindi"] == 32 and unpaired["t"] == pytest.approx(
        stats.ttest_ind(resp.loc[resp.language == "hi", "score"], resp.loc[resp.language == "ur", "score"]).statistic)


def test_repeated_measures_anova_known_answers():
    # two languages: the repeated-measures F is the square of the paired t, with the same p
    two = pcs.scenario_means(pcs.response_scores(pcs.check_scores(_scenario_scores({"hi": 0.0, "ur": 0.3}))))
    row = pcs.repeated_measures_anova(two).iloc[0]
    wide = two.pivot(index="scenario_id", columns="language", values="score")
    ref = stats.ttest_rel(wide["hi"], wide["ur"])
    assert row["F"] == pytest.approx(ref.statistic ** 2) and row["p"] == pytest.approx(ref.pvalue)
    assert (row["df_between"], row["df_within"], row["n_scenarios"]) == (1, 7, 8)
    # three languages: F = MS_language / MS_error by hand, p from scipy's F distribution
    three = pcs.scenario_means(pcs.response_scores(pcs.check_scores(
        _scenario_scores({"de": 0.2, "hi": 0.0, "ur": 0.5}))))
    y = three.pivot(index="scenario_id", columns="language", values="score").to_numpy()
    n, k = y.shape
    grand = y.mean()
    ss_lang = n * ((y.mean(axis=0) - grand) ** 2).sum()
    ss_subj = k * ((y.mean(axis=1) - grand) ** 2).sum()
    ss_err = ((y - grand) ** 2).sum() - ss_lang - ss_subj
    f = (ss_lang / (k - 1)) / (ss_err / ((k - 1) * (n - 1)))
    row = pcs.repeated_measures_anova(three).iloc[0]
    assert row["F"] == pytest.approx(f) and row["p"] == pytest.approx(stats.f.sf(f, k - 1, (k - 1) * (n - 1)))
    # a scenario missing a language is left out and counted
    row = pcs.repeated_measures_anova(three.loc[~((three.scenario_id == "s0") & (three.language == "de"))]).iloc[0]
    assert (row["n_scenarios"], row["n_incomplete"], row["df_within"]) == (7, 1, 12)


def test_scenario_level_analysis_is_in_the_results():
    df = _scenario_scores({"hi": 0.0, "ur": 0.3})
    full = pd.concat([df, df.assign(condition="B", score=df["score"] + 1), df.assign(condition="C")], ignore_index=True)
    result = pcs.analyze_scores(full)
    assert result.statistics["hindi_urdu_scenarios"]["n_pairs"] == 8
    assert result.tables["scenario_rm_anova_language"].iloc[0]["n_scenarios"] == 8


# ---------------------------------------------------------------- the Hindi-Urdu headline: both tests, one named


def _disagreeing_hindi_urdu() -> pd.DataFrame:
    """Six scenarios whose Hindi-minus-Urdu difference varies by scenario (0.9, 0.7, 0.5, 0.3, -0.3, -0.2), each
    with four features and two samples: 48 response-level rows per language make the paper's unpaired t-test
    significant (t = 3.87, p = 0.0002), while across the six matched scenarios the paired test is not
    (t = 1.60, p = 0.169)."""
    rows = []
    for i, diff in enumerate((0.9, 0.7, 0.5, 0.3, -0.3, -0.2)):
        for lang, shift in (("hi", diff), ("ur", 0.0)):
            for feature, f_off in zip(("deference", "directness", "face_saving", "communication_channel"),
                                      (-0.3, -0.1, 0.1, 0.3)):
                for sample, s_off in ((0, -0.1), (1, 0.1)):
                    a = 4 + shift + f_off + s_off
                    for cond, score in (("A", a), ("B", a + 1.0), ("C", a + 0.3)):
                        rows.append(dict(model="m", language=lang, scenario_id=f"s{i}", dimension="PDI",
                                         feature=feature, condition=cond, sample=sample, score=score))
    return pd.DataFrame(rows)


def test_hindi_urdu_headline_names_its_test_and_shows_both_when_they_disagree(tmp_path):
    """Issue 31: the response-level t-test (the paper's) and the scenario-level paired test disagree here; the
    summary and the report page show both, say which the headline rests on, and say that they disagree."""
    from stereolens.studies.pcs.outputs import write_analysis

    df = _disagreeing_hindi_urdu()
    rows_a = df.loc[df["condition"] == "A"]
    by_hand_t = stats.ttest_ind(rows_a.loc[rows_a.language == "hi", "score"], rows_a.loc[rows_a.language == "ur", "score"])
    means = rows_a.groupby(["language", "scenario_id"])["score"].mean()
    by_hand_paired = stats.ttest_rel(means["hi"].to_numpy(), means["ur"].to_numpy())
    assert by_hand_t.pvalue < 0.05 < by_hand_paired.pvalue  # the case is what it claims to be

    analysis, _ = write_analysis(df, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    hu = summary["hindi_urdu"]
    assert hu["note"] == analysis.summary["hindi_urdu"]["note"]
    assert hu["headline_test"] == "response_level"
    assert hu["response_level"]["p"] == pytest.approx(by_hand_t.pvalue)
    assert hu["response_level"]["t"] == pytest.approx(by_hand_t.statistic)
    assert hu["response_level"]["n_hindi"] == 48 and hu["response_level"]["significant"] is True
    assert hu["scenario_level"]["p"] == pytest.approx(by_hand_paired.pvalue)
    assert hu["scenario_level"]["n_pairs"] == 6 and hu["scenario_level"]["significant"] is False
    assert hu["agree"] is False and "disagree" in hu["note"]
    # the report site's headline block carries both p-values, the headline's named as such
    labels = summary["headline"]
    assert labels["Hindi-Urdu p (headline: the paper's response-level t-test)"] == pytest.approx(by_hand_t.pvalue)
    assert labels["Hindi-Urdu p (matched scenarios, paired t-test)"] == pytest.approx(by_hand_paired.pvalue)
    page = (tmp_path / "report.md").read_text()
    headline = page.split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert "the headline rests on the paper's response-level t-test" in headline
    # numbers through the one formatter (report/markdown.format_cell): three significant digits
    from stereolens.report.markdown import format_cell

    assert format_cell(by_hand_t.statistic) == "3.87" and format_cell(by_hand_paired.pvalue) == "0.169"
    assert f"t = 3.87, p = {format_cell(by_hand_t.pvalue)}" in headline and "paired t = 1.6, p = 0.169" in headline
    assert "**The two Hindi-Urdu tests disagree" in headline


def test_hindi_urdu_headline_agrees_when_both_tests_agree():
    hu = pcs.analyze_scores(_hindi_urdu()).summary["hindi_urdu"]
    assert hu["agree"] is (hu["response_level"]["significant"] == hu["scenario_level"]["significant"]) is True
    assert "agree" in hu["note"] and "disagree" not in hu["note"]
