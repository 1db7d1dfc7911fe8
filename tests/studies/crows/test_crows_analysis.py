"""Known answers for the CrowS report's numbers: per-type tests with Holm / BH over the bias
types, and the length-controlled view with a planted length effect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from stereolens.studies.crows.analysis import bias_by_type, crows_summary, length_control, length_table
from stereolens.studies.crows.report import report_markdown


def planted_length_effect() -> pd.DataFrame:
    """100 pairs.  Per token, the stereotypical sentence is better in exactly half of every group;
    summed, the shorter sentence always wins.  Stereotypical shorter: 40, longer: 20, equal: 40."""
    rows = []
    for i in range(100):
        n_stereo, n_anti = (5, 8) if i < 40 else (8, 5) if i < 60 else (6, 6)
        m_stereo, m_anti = (-2.0, -2.1) if i % 2 == 0 else (-2.1, -2.0)  # per-token means
        rows.append({"id": i, "bias_type": "gender" if i % 4 < 2 else "age",
                     "score_stereo": n_stereo * m_stereo, "score_anti": n_anti * m_anti,
                     "n_tokens_stereo": n_stereo, "n_tokens_anti": n_anti})
    return pd.DataFrame(rows)


def test_length_controlled_view_removes_a_planted_length_effect():
    scores = planted_length_effect()
    table, _ = bias_by_type(scores)
    reference = table.iloc[0].to_dict()
    # reference: 40 shorter (all win) + 20 longer (none) + 40 equal (half) = 60 of 100
    assert reference["bias_score"] == pytest.approx(0.6)
    view = length_control(scores)
    assert view["share_different_token_count"] == pytest.approx(0.6)
    assert view["stereotypical_shorter"] == {"n": 40, "stereotypical_wins": 1.0}
    assert view["stereotypical_longer"] == {"n": 20, "stereotypical_wins": 0.0}
    assert view["per_token"]["bias_score"] == pytest.approx(0.5) and view["per_token"]["n"] == 100
    assert view["equal_length_subset"]["bias_score"] == pytest.approx(0.5)
    assert view["equal_length_subset"]["n"] == 40
    assert not view["per_token"]["significant"]
    both = length_table(view, reference)
    assert both["bias_score"].tolist() == pytest.approx([0.6, 0.5, 0.5])


def test_length_view_says_when_token_counts_are_missing():
    scores = planted_length_effect().drop(columns=["n_tokens_stereo", "n_tokens_anti"])
    assert length_control(scores) == {"available": False,
                                      "note": "the scores carry no n_tokens_stereo / n_tokens_anti"}


def test_holm_and_bh_over_the_bias_types():
    rng = np.random.default_rng(0)
    types = ["gender"] * 30 + ["age"] * 30 + ["race"] * 30
    stereo = np.r_[np.ones(30), rng.normal(size=30), rng.normal(size=30) + 0.8]
    scores = pd.DataFrame({"id": range(90), "bias_type": types, "score_stereo": stereo, "score_anti": np.zeros(90)})
    table, legend = bias_by_type(scores)
    per_type = table[table["group"] != "all"].set_index("group")
    p = per_type["p_value"].to_numpy(dtype=float)
    assert per_type["p_holm"].astype(float).to_numpy() == pytest.approx(multipletests(p, method="holm")[1])
    assert per_type["p_bh"].astype(float).to_numpy() == pytest.approx(multipletests(p, method="fdr_bh")[1])
    assert table.loc[table["group"] == "all", "p_holm"].isna().all()  # the overall row is outside the family
    assert "3 tests" in legend and "Benjamini-Hochberg" in legend and "borderline" in legend
    assert per_type.loc["gender", "significant"] and per_type.loc["gender", "significant_holm"]


def _tied_type(bias_type: str, wins: int, losses: int, ties: int, start: int = 0) -> pd.DataFrame:
    n = wins + losses + ties
    return pd.DataFrame({"id": range(start, start + n), "bias_type": bias_type,
                         "score_stereo": [-1.0] * wins + [-3.0] * losses + [-2.0] * ties, "score_anti": [-2.0] * n})


def test_a_tied_bias_type_is_tested_on_its_untied_pairs_one_way_per_row():
    """Issue 31: 80 stereotypical wins, 40 anti, 80 ties read '0.40 [0.335, 0.47], significant' (anti) beside
    p = 0.00033 for the stereotypical side; the row's star, interval, p and Holm / BH now agree."""
    scores = pd.concat([_tied_type("age", 80, 40, 80), _tied_type("gender", 5, 5, 30, start=200)])
    table, legend = bias_by_type(scores)
    rows = table.set_index("group")
    age, gender = rows.loc["age"], rows.loc["gender"]
    assert age["bias_score"] == pytest.approx(0.4) and age["share_untied"] == pytest.approx(80 / 120)
    assert age["p_value"] == pytest.approx(stats.binomtest(80, 120).pvalue)
    assert age["significant"] and age["ci_low"] > 0.5 and age["favours"] == "stereotypical"
    assert age["significant_holm"] and age["significant_bh"]
    assert not gender["significant"] and gender["p_value"] == pytest.approx(1.0) and gender["favours"] == "neither"
    # the legend says what the row tests and whose rule the star is (CrowS-Pairs has none)
    assert "among the row's untied pairs" in legend and "AmchiBias" in legend and "no significance test" in legend
    assert "reference rule" not in legend


def test_the_crows_scripts_rounded_score_is_reported_beside_it(tmp_path):
    """The CrowS-Pairs script rounds both scores to 3 decimals before comparing; pairs closer than that tie there."""
    scores = pd.DataFrame({"id": range(6), "bias_type": ["age"] * 3 + ["gender"] * 3,
                           "score_stereo": [-10.0001, -5.0, -7.3, -3.2, -8.00049, -4.0],
                           "score_anti": [-10.0004, -6.0, -7.2, -3.3, -8.0001, -4.5]})
    # as metric.py does it: Python's round(score, 3), then sent_more > sent_less
    script = [round(s, 3) > round(a, 3) for s, a in zip(scores["score_stereo"], scores["score_anti"])]
    assert script == [False, True, False, True, False, True]  # pairs 0 and 4 tie after rounding
    table, legend = bias_by_type(scores)
    rows = table.set_index("group")
    assert rows.loc["all", "bias_score"] == pytest.approx(4 / 6)  # unrounded, pair 0 (-10.0001 > -10.0004) wins
    assert rows.loc["all", "bias_score_rounded_3"] == pytest.approx(sum(script) / 6)
    assert rows.loc["age", "bias_score_rounded_3"] == pytest.approx(1 / 3)
    summary = crows_summary(table, legend, length_control(scores), model="m", metric="causal",
                            dataset="crows_pairs", skipped=None)
    assert summary["bias_score_rounded_3"] == pytest.approx(0.5)
    assert summary["by_bias_type_tests"]["gender"]["bias_score_rounded_3"] == pytest.approx(2 / 3)
    page = report_markdown(summary, table, length_table(summary["beyond_reference"]["length_control"],
                                                        table.iloc[0].to_dict()))
    assert "rounds both sentence scores to 3 decimals" in page and "**50.0%**" in page
    assert legend in page and "| bias_score_rounded_3 |" in page
    # shares in percent and the bias score starred, as the pairs pages show theirs (issue 32)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines() if line.startswith("| ")}
    assert rows["all"].startswith("| all | 6 | 66.7% | 50.0% | ") and "`*` after a bias score" in page


def test_the_crows_page_stars_its_rows_as_the_pairs_pages_do():
    """Issue 32: the pairs pages star their cells; the crows page showed a `significant` column only."""
    from stereolens.studies.crows.report import display_table

    rng = np.random.default_rng(0)
    types = ["gender"] * 30 + ["age"] * 30
    stereo = np.r_[np.ones(30), rng.normal(size=30)]
    scores = pd.DataFrame({"id": range(60), "bias_type": types, "score_stereo": stereo, "score_anti": np.zeros(60)})
    table, _ = bias_by_type(scores)
    shown = display_table(table).set_index("group")
    rows = table.set_index("group")
    assert bool(rows.loc["gender", "significant"]) and not bool(rows.loc["age", "significant"])
    assert shown.loc["gender", "bias_score"] == "100.0%*"  # every gender pair stereotypical
    assert shown.loc["age", "bias_score"] == f"{100 * rows.loc['age', 'bias_score']:.1f}%"
    assert shown.loc["age", "ci_low"] == f"{100 * rows.loc['age', 'ci_low']:.1f}%"


def _exact_power_by_binomtest(n: int, rate: float, alpha: float) -> float:
    """Power of scipy's two-sided binomtest at ``alpha``, summed over Binomial(n, rate) (independent of stats.power)."""
    rejected = [k for k in range(n + 1) if stats.binomtest(k, n, 0.5).pvalue < alpha]
    return float(sum(stats.binom.pmf(k, n, rate) for k in rejected))


def test_each_bias_type_has_its_minimum_detectable_effect_unadjusted_and_at_the_family_level():
    """60 untied disability pairs (and 10 ties), 40 gender, 20 age: each row's mde is the rate at which the
    exact test reaches 80% power over its untied pairs, mde_adjusted the same at alpha / 3 (three types)."""
    scores = pd.concat([_tied_type("disability", 31, 29, 10), _tied_type("gender", 22, 18, 0, start=100),
                        _tied_type("age", 11, 9, 0, start=200)])
    table, legend = bias_by_type(scores)
    rows = table.set_index("group")
    for group, untied in (("disability", 60), ("gender", 40), ("age", 20)):
        for column, alpha in (("mde", 0.05), ("mde_adjusted", 0.05 / 3)):
            rate = float(rows.loc[group, column])
            assert _exact_power_by_binomtest(untied, rate, alpha) == pytest.approx(0.8, abs=1e-6)
            assert _exact_power_by_binomtest(untied, rate - 0.002, alpha) < 0.8
    assert rows.loc["disability", "mde"] == pytest.approx(0.692, abs=5e-4)  # docs/methods.md: 60 pairs, 0.692
    assert rows.loc["all", "mde"] < rows.loc["age", "mde"] and pd.isna(rows.loc["all", "mde_adjusted"])
    assert "alpha / 3" in legend and "no clustered interval applies" in legend


def test_the_report_says_in_words_what_an_unstarred_type_could_not_detect():
    scores = pd.concat([_tied_type("disability", 31, 29, 0), _tied_type("gender", 40, 0, 0, start=100)])
    table, legend = bias_by_type(scores)
    summary = crows_summary(table, legend, length_control(scores), model="m", metric="causal",
                            dataset="crows_pairs", skipped=None)
    page = report_markdown(summary, table, length_table(summary["beyond_reference"]["length_control"],
                                                        table.iloc[0].to_dict()))
    line = next(x for x in page.splitlines() if x.startswith("- disability:"))
    assert "could not detect a preference below 0.692 (or above 0.308) with 60 untied pairs" in line
    assert "at the family's Bonferroni level, below 0.707" in line  # alpha 0.05 / 2, bisected by hand
    assert not any(x.startswith("- gender:") for x in page.splitlines())  # starred: no such line
    assert summary["by_bias_type_tests"]["disability"]["mde"] == pytest.approx(0.692, abs=5e-4)


def test_the_overall_verdict_under_each_choice_with_a_planted_length_effect():
    """Summed scores favour the shorter sentence: 60 of 100 pairs stereotypical overall (significant), but per
    token and on the equal-length pairs it is 50%: the headline survives neither; rounding ties nothing."""
    from stereolens.studies.crows.analysis import robustness_rows

    scores = planted_length_effect()
    scores = pd.concat([scores, scores.assign(id=scores["id"] + 100)], ignore_index=True)  # 200 pairs: 120 of 200
    table, _ = bias_by_type(scores)
    robust = robustness_rows(scores, table.iloc[0].to_dict(), length_control(scores), metric="causal")
    rows = robust.set_index("variant")
    assert rows.loc["headline", "decision"] == "stereotypical" and rows.loc["headline", "n"] == 200
    assert rows.loc["headline", "estimate"] == pytest.approx(0.6)
    assert rows.loc["per-token mean", "estimate"] == pytest.approx(0.5)
    assert rows.loc["per-token mean", "decision"] == "no preference detected"
    assert not rows.loc["per-token mean", "agrees"] and not rows.loc["equal token count only", "agrees"]
    assert rows.loc["equal token count only", "n"] == 80
    rounded = rows.loc["rounded to 3 decimals (CrowS-Pairs metric.py)"]
    assert rounded["agrees"] and rounded["estimate"] == pytest.approx(0.6)
    masked = rows.loc["PLL against PLL-word-l2r"]
    assert not masked["ran"] and "masked LMs only" in masked["reason"] and pd.isna(masked["agrees"])


def test_a_masked_model_compares_pll_with_pll_word_l2r_when_the_second_pass_ran():
    from stereolens.studies.crows.analysis import robustness_rows

    scores = _tied_type("age", 30, 10, 0)
    table, _ = bias_by_type(scores)
    without = robustness_rows(scores, table.iloc[0].to_dict(), length_control(scores), metric="pll")
    row = without.set_index("variant").loc["PLL-word-l2r"]
    assert not row["ran"] and "study.crows.alternative_metric_pass" in row["reason"]
    # the second pass reverses every pair: the verdict does not survive the metric
    second = scores.assign(score_stereo_pll_word_l2r=scores["score_anti"], score_anti_pll_word_l2r=scores["score_stereo"])
    ran = robustness_rows(second, table.iloc[0].to_dict(), length_control(second), metric="pll")
    row = ran.set_index("variant").loc["PLL-word-l2r"]
    assert row["ran"] and row["estimate"] == pytest.approx(0.25) and row["decision"] == "anti-stereotypical"
    assert not row["agrees"]
    both = robustness_rows(second, table.iloc[0].to_dict(), length_control(second), metric="crows")
    assert {"PLL", "PLL-word-l2r"} <= set(both["variant"])
