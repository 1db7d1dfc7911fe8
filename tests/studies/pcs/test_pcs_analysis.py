"""Known-answer tests of the Fifteen Percent Fluency triad statistics (stereolens.studies.pcs.analysis)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stereolens.studies.pcs import analysis as pcs
from stereolens.errors import DataError

# (language, scenario, dimension, feature) -> (A, B, C), chosen so every number is easy by hand
CELLS = {
    ("hi", "s1", "PDI", "deference"): (2.0, 6.0, 3.0),  # pcs 0.25
    ("hi", "s2", "IDV", "agency_attribution"): (4.0, 6.0, 5.0),  # pcs 0.5
    ("ur", "s1", "PDI", "deference"): (3.0, 7.0, 5.0),  # pcs 0.5
    ("ur", "s2", "IDV", "agency_attribution"): (4.0, 4.0, 6.0),  # B == A: excluded
}


def _long(cells=CELLS, model="m1") -> pd.DataFrame:
    """Two judges (-0.5 / +0.5) and two samples (-1 / +1) around each cell value."""
    rows = []
    for (lang, sid, dim, feat), abc in cells.items():
        for cond, value in zip("ABC", abc):
            for sample, s_off in ((0, -1.0), (1, 1.0)):
                for judge, j_off in (("j1", -0.5), ("j2", 0.5)):
                    rows.append(
                        dict(model=model, language=lang, scenario_id=sid, dimension=dim, feature=feat,
                             condition=cond, judge=judge, sample=sample, score=value + s_off + j_off)
                    )
    return pd.DataFrame(rows)


def test_known_pcs_cap_util_ldi_hud():
    result = pcs.analyze_scores(_long())
    s = result.summary
    assert list(s) == ["pcs", "pcs_note", "pcs_ci_low_cluster", "pcs_ci_high_cluster", "pcs_ci_low", "pcs_ci_high",
                       "pcs_decision", "pcs_n_cells", "pcs_n_scenarios", "cap_util", "cap_util_note", "n_excluded",
                       "by_dimension", "ldi", "hud", "ldi_notes", "hud_note", "hindi_urdu"]
    assert s["pcs"] == pytest.approx((0.25 + 0.5 + 0.5) / 3)
    # means A 3.25, B 5.75, C 4.75
    assert s["cap_util"] == pytest.approx(1.5 / 2.5) and s["cap_util_note"] == ""
    assert s["n_excluded"] == 1
    assert s["by_dimension"] == pytest.approx({"PDI": 0.375, "IDV": 0.5})
    assert s["ldi"] == {"hi": {"agency_attribution": 4.0, "deference": 2.0}, "ur": {"agency_attribution": 4.0, "deference": 3.0}}
    assert s["hud"] == pytest.approx({"agency_attribution": 0.0, "deference": 1.0, "overall": 0.5})


def test_judges_averaged_before_samples():
    base = dict(model="m", language="en", scenario_id="s", dimension="PDI", feature="deference")
    rows = [
        {**base, "condition": "A", "sample": 0, "judge": "j1", "score": 1.0},
        {**base, "condition": "A", "sample": 0, "judge": "j2", "score": 3.0},
        {**base, "condition": "A", "sample": 1, "judge": "j1", "score": 6.0},  # j2 failed on this sample
    ]
    cells = pcs.cell_scores(pcs.check_scores(pd.DataFrame(rows)))
    assert cells["score"].iloc[0] == pytest.approx(4.0)  # mean(mean(1, 3), 6), not mean(1, 3, 6)


def test_min_gain_excludes_and_counts():
    result = pcs.analyze_scores(_long(), min_gain_steps=2.4)
    # gaps: 4, 2, 4, 0 -> the 2 and the 0 are excluded
    assert result.summary["n_excluded"] == 2
    assert result.summary["pcs"] == pytest.approx((0.25 + 0.5) / 2)
    # cap util uses every complete triad regardless of exclusion (mean B - mean A = 2.5 > 2.4)
    assert result.summary["cap_util"] == pytest.approx(0.6)
    # ... and is undefined once the aggregate gain 2.5 is not above the minimum
    assert pcs.analyze_scores(_long(), min_gain_steps=2.5).summary["cap_util"] is None


# Fifteen Percent Fluency Table 10: model -> (PCS, printed capability utilisation %, mean A, mean B, mean C)
TABLE10 = {
    "Minstral-8B": (0.137, 13.5, 4.90, 6.06, 5.06),
    "Mimo-V2-flash": (0.135, 19.3, 4.89, 6.22, 5.15),
    "Gemini-3-flash": (0.107, 19.5, 5.03, 6.42, 5.30),
    "Grok-4.1-fast": (0.081, 16.8, 4.88, 6.34, 5.13),
}


def test_table10_means_give_the_defined_cap_util():
    """All four models of Fifteen Percent Fluency Table 10: the aggregate ratio of the printed means.

    The means are printed to two decimals, so the ratio they imply can differ from the printed
    percentage by the rounding of three means; the printed value must lie inside that interval.
    """
    rows = [
        dict(model=model, language=lang, scenario_id=f"s{i}", dimension="PDI", feature="deference", condition=c, score=v)
        for model, (_, _, *abc) in TABLE10.items()
        for lang in ("en", "hi")
        for i in range(3)
        for c, v in zip("ABC", abc)
    ]
    result = pcs.analyze_scores(pd.DataFrame(rows))
    t10 = result.tables["table10_model_summary"].set_index("model")
    implied = {"Minstral-8B": 13.8, "Mimo-V2-flash": 19.5, "Gemini-3-flash": 19.4, "Grok-4.1-fast": 17.1}
    for model, (_, printed, a, b, c) in TABLE10.items():
        row = t10.loc[model]
        assert (row["mean_a"], row["mean_b"], row["mean_c"]) == pytest.approx((a, b, c))
        assert row["cap_util"] == pytest.approx((c - a) / (b - a))
        assert round(100 * row["cap_util"], 1) == implied[model]
        half = 0.005
        lo, hi = (c - a - 2 * half) / (b - a + 2 * half), (c - a + 2 * half) / (b - a - 2 * half)
        assert lo <= printed / 100 <= hi, model
    # every triad is identical within a model, so each cell's PCS equals the model's capability utilisation
    assert t10["pcs"].to_numpy() == pytest.approx(t10["cap_util"].to_numpy())
    assert set(t10.index) == set(TABLE10) and (t10["n_cells"] == 6).all()


def test_cap_util_per_language_and_dimension_language():
    result = pcs.analyze_scores(_long())
    by_lang = result.tables["pcs_by_language"].set_index("language")
    # hi: A (2, 4) B (6, 6) C (3, 5) -> (4 - 3) / (6 - 3); ur: A (3, 4) B (7, 4) C (5, 6) -> (5.5 - 3.5) / (5.5 - 3.5)
    assert by_lang.loc["hi", "cap_util"] == pytest.approx(1 / 3)
    assert by_lang.loc["ur", "cap_util"] == pytest.approx(1.0)
    assert by_lang.loc["hi", "mean_pcs"] == pytest.approx(0.375) and by_lang.loc["ur", "n_excluded"] == 1
    dim_lang = result.tables["pcs_dimension_language"].set_index(["dimension", "language"])
    assert dim_lang.loc[("PDI", "hi"), "cap_util"] == pytest.approx(0.25)
    assert dim_lang.loc[("PDI", "ur"), "cap_util"] == pytest.approx(0.5)
    assert np.isnan(dim_lang.loc[("IDV", "ur"), "cap_util"])  # B == A: the ratio is undefined
    assert dim_lang.loc[("IDV", "ur"), "cap_util_note"].startswith("undefined: mean B - mean A = +0.000")
    assert "cap_util" in result.tables["table09_pcs_model_language"].columns


@pytest.mark.parametrize("col", ["judge", "sample"])
def test_blank_judge_or_sample_is_refused_not_dropped(col):
    df = _long()
    df[col] = df[col].astype(object)
    df.loc[5, col] = None
    with pytest.raises(DataError, match=rf"line 7, column {col}: blank '{col}'"):
        pcs.analyze_scores(df)


def test_anova_matches_statsmodels_and_eta2():
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(0)
    rows = []
    for lang, shift in (("de", 0.0), ("en", 0.2), ("hi", 0.8)):
        for i in range(40):
            rows.append(dict(model="m", language=lang, scenario_id=f"s{i}", dimension="IDV", feature="f",
                             condition="A", score=4 + shift + rng.normal(0, 0.5)))
    resp = pcs.response_scores(pcs.check_scores(pd.DataFrame(rows)))
    table = pcs.anova_by_dimension(resp)
    row = table.iloc[0]
    fit = smf.ols("score ~ C(language)", data=resp).fit()
    aov = sm.stats.anova_lm(fit, typ=1)
    assert row["F"] == pytest.approx(aov.loc["C(language)", "F"])
    assert row["p"] == pytest.approx(aov.loc["C(language)", "PR(>F)"])
    eta2 = aov.loc["C(language)", "sum_sq"] / aov["sum_sq"].sum()
    assert row["eta2"] == pytest.approx(eta2)
    assert (row["df_between"], row["df_within"]) == (2, 117)
    assert row["significant"]


def test_paired_and_independent_tests_match_scipy():
    rng = np.random.default_rng(1)
    a = rng.normal(4.8, 1.0, 60)
    c = a + 0.3 + rng.normal(0, 0.5, 60)
    res = pcs.paired_test(a, c)
    ref = stats.ttest_rel(a, c)
    assert res["t"] == pytest.approx(ref.statistic) and res["t"] < 0
    assert res["p"] == pytest.approx(ref.pvalue)
    assert res["dz"] == pytest.approx((c - a).mean() / (c - a).std(ddof=1))
    assert res["d"] == pytest.approx((c.mean() - a.mean()) / math.sqrt((a.var(ddof=1) + c.var(ddof=1)) / 2))

    x, y = rng.normal(5.24, 0.89, 80), rng.normal(5.21, 0.88, 70)
    ind = pcs.independent_test(x, y)
    ref = stats.ttest_ind(x, y)
    assert ind["t"] == pytest.approx(ref.statistic) and ind["p"] == pytest.approx(ref.pvalue)
    pooled = math.sqrt((79 * x.var(ddof=1) + 69 * y.var(ddof=1)) / 148)
    assert ind["d"] == pytest.approx((x.mean() - y.mean()) / pooled)


def test_paired_tests_detect_known_shift():
    rng = np.random.default_rng(2)
    cells = {}
    for i in range(30):
        a = 4 + rng.normal(0, 0.5)
        cells[("en", f"s{i}", "PDI", "deference")] = (a, a + 2, a + 0.5 + rng.normal(0, 0.1))
    result = pcs.analyze_scores(_long(cells))
    t16 = result.tables["table16_paired_a_vs_c"].iloc[0]
    assert t16["p"] < 1e-10 and t16["t"] < 0 and t16["d"] > 0
    assert result.summary["pcs"] == pytest.approx(0.25, abs=0.02)


def _three_dimensions_three_languages() -> pd.DataFrame:
    """Prompt A shifts by language that differ by dimension, C above A by language-dependent amounts, and one
    dimension (UAI) with a single language, so its ANOVA has no test and stays out of the family."""
    rng = np.random.default_rng(5)
    cells = {}
    shifts = {"PDI": {"de": 0.0, "hi": 0.1, "ur": 0.15}, "IDV": {"de": 0.0, "hi": 0.6, "ur": 0.5},
              "UAI": {"hi": 0.0}}
    lift = {"de": 0.05, "hi": 0.4, "ur": 0.15}
    for dim, by_lang in shifts.items():
        for lang, shift in by_lang.items():
            for i in range(6):
                a = 4 + shift + rng.normal(0, 0.4)
                cells[(lang, f"{dim}{i}", dim, "f")] = (a, a + 1.5, a + lift[lang] + rng.normal(0, 0.3))
    return _long(cells)


def test_tables_15_and_16_carry_holm_and_bh_over_their_family(tmp_path):
    """Issue 31: Tables 15 and 16 get the Holm and Benjamini-Hochberg columns of every starred table, each over
    its own family (the dimensions; the languages), checked against statsmodels' multipletests, and the
    report page states the family under each table's title."""
    from statsmodels.stats.multitest import multipletests

    from stereolens.studies.pcs.outputs import write_analysis

    result, _ = write_analysis(_three_dimensions_three_languages(), tmp_path)
    page = (tmp_path / "report.md").read_text()
    for name, family in (("table15_anova_language", "dimension"), ("table16_paired_a_vs_c", "language")):
        table = result.tables[name]
        tested = table["p"].notna()
        assert tested.sum() >= 2, name
        p = table.loc[tested, "p"].to_numpy()
        assert table.loc[tested, "p_holm"].to_numpy() == pytest.approx(multipletests(p, method="holm")[1])
        assert table.loc[tested, "p_bh"].to_numpy() == pytest.approx(multipletests(p, method="fdr_bh")[1])
        assert (table.loc[tested, "significant_holm"] == (multipletests(p, method="holm")[1] < 0.05)).all()
        assert (table.loc[tested, "significant_bh"] == (multipletests(p, method="fdr_bh")[1] < 0.05)).all()
        # a row without a test stays empty and does not enlarge the family
        assert table.loc[~tested, "p_holm"].isna().all() and not table.loc[~tested, "significant_holm"].any()
        legend = result.statistics["corrections"][name]
        assert f"family of {int(tested.sum())} tests" in legend and f"Family: every {family}" in legend, legend
        assert legend in page.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
    t15 = result.tables["table15_anova_language"].set_index("dimension")
    assert np.isnan(t15.loc["UAI", "p"])  # one language: no ANOVA
    # the paper's own (uncorrected) star stays beside the corrections
    assert "significant" in t15.columns


def test_human_validation_reproduces_appendix_j():
    """Table 17 totals: A-C 39/32/46 and B-C 37/39/42 -> 54.9 % A (p = 0.48), 51.3 % C (p = 0.91)."""
    rows = (
        [("xx", "A-C", "A")] * 39 + [("xx", "A-C", "C")] * 32 + [("xx", "A-C", "tie")] * 46
        + [("xx", "B-C", "B")] * 37 + [("xx", "B-C", "C")] * 39 + [("xx", "B-C", "tie")] * 42
    )
    table, tests = pcs.human_validation(pd.DataFrame(rows, columns=["language", "comparison", "preference"]))
    assert tests["A-C"]["n_decisive"] == 71 and round(1 - tests["A-C"]["share_C"], 3) == 0.549
    assert round(tests["A-C"]["p"], 2) == 0.48
    assert round(tests["B-C"]["share_C"], 3) == 0.513 and round(tests["B-C"]["p"], 2) == 0.91
    total = table.loc[table["language"] == "total"].iloc[0]
    assert (total["A_C_A"], total["A_C_C"], total["A_C_tie"], total["n"]) == (39, 32, 46, 235)


def test_bad_condition_is_a_data_error():
    df = _long().head(3).assign(condition="D")
    with pytest.raises(DataError, match=r"^scores line 2, column condition: 'D' is not one of A, B, C$"):
        pcs.analyze_scores(df)
