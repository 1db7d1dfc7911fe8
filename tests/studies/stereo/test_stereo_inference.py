"""Issue 32 for the stereo study: each country's test, MDE and clustered interval; the robustness table of the
overall verdict; the paired comparison of two models on the same instances.  Known answers come from scipy and
statsmodels computed here, not from the study's code."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from stereolens.stats.bias import bias_score
from stereolens.studies.stereo.inference import (
    alternative_score_columns, country_tests, paired_comparisons, robustness_rows,
)


def _scores(outcomes: dict[str, list[str]], *, clusters: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per instance: ``w`` the stereotypical sentence wins (-1 against -2), ``l`` it loses, ``t`` a tie;
    the unrelated sentence always loses.  Each instance is its own stereotype unless ``clusters`` says otherwise."""
    rows = []
    for country, marks in outcomes.items():
        for k, mark in enumerate(marks):
            stereo, anti = {"w": (-1.0, -2.0), "l": (-2.0, -1.0), "t": (-1.5, -1.5)}[mark]
            rows.append({"id": f"{country}{k}", "country": country, "category": "gender", "target": f"{country}{k}",
                         "stereotype_id": (clusters or {}).get(country, [f"{country}{j}" for j in range(len(marks))])[k],
                         "source": "authored", "score_stereo": stereo, "score_anti": anti, "score_unrelated": -9.0,
                         "n_tokens_stereo": 5, "n_tokens_anti": 5})
    return pd.DataFrame(rows)


OUTCOMES = {"Mexico": list("w" * 12 + "t" + "l"), "Spain": list("wwwwwlllll"), "Peru": list("wwwwww")}


def _exact_power(n: int, rate: float, alpha: float) -> float:
    """The exact binomial test's power, summed over the counts scipy's binomtest rejects (independent of stats/power.py)."""
    return sum(stats.binom.pmf(k, n, rate) for k in range(n + 1) if stats.binomtest(k, n, 0.5).pvalue < alpha)


def test_each_country_is_tested_on_its_untied_instances_with_holm_bh_and_its_mde():
    tests, level = country_tests(_scores(OUTCOMES), n_resamples=500)
    row = tests.set_index("country")
    # a tie is set aside by the sign test: Mexico has 13 untied instances, 12 of them stereotypical
    assert row.loc["Mexico", "n_untied"] == 13 and row.loc["Mexico", "share_untied"] == pytest.approx(12 / 13)
    wins = {"Mexico": (12, 13), "Peru": (6, 6), "Spain": (5, 10)}
    for country, (k, n) in wins.items():
        assert row.loc[country, "p_value"] == pytest.approx(stats.binomtest(k, n, 0.5).pvalue)
    countries = ["Mexico", "Peru", "Spain"]
    p = [stats.binomtest(*wins[c], 0.5).pvalue for c in countries]
    for method, column in (("holm", "p_holm"), ("fdr_bh", "p_bh")):
        assert row.loc[countries, column].astype(float).tolist() == pytest.approx(multipletests(p, method=method)[1].tolist())
    # the overall row is outside the family: no adjusted p, no adjusted MDE
    assert row.loc["all", "p_holm"] is None and math.isnan(row.loc["all", "mde_adjusted"])
    assert level == pytest.approx(0.05 / 3) and row.loc[countries, "alpha_adjusted"].tolist() == pytest.approx([0.05 / 3] * 3)
    # the MDE is the true share the exact test finds with 80% power: power there is 0.8 (scipy's binomial)
    for country, (_, n) in wins.items():
        assert _exact_power(n, row.loc[country, "mde"], 0.05) == pytest.approx(0.8, abs=1e-6)
        if country != "Peru":
            assert _exact_power(n, row.loc[country, "mde_adjusted"], 0.05 / 3) == pytest.approx(0.8, abs=1e-6)
    # Peru's 6 instances: even 6 of 6 gives p = 2 / 64 > 0.05 / 3, so no share is detectable at the family's level
    assert stats.binomtest(6, 6, 0.5).pvalue > 0.05 / 3 and math.isnan(row.loc["Peru", "mde_adjusted"])
    assert row.loc["Mexico", "significant"] and not row.loc["Spain", "significant"]
    assert row.loc["Mexico", "favours"] == "stereotypical"


def test_with_one_stereotype_per_instance_the_clustered_interval_is_scipys_item_bootstrap():
    """Singleton clusters: the cluster bootstrap is the BCa bootstrap of the untied instances' 0/1 outcomes."""
    scores = _scores(OUTCOMES)
    tests, _ = country_tests(scores, n_resamples=700, seed=3)
    mexico = scores[scores["country"] == "Mexico"]
    untied = mexico[mexico["score_stereo"] != mexico["score_anti"]]
    wins = (untied["score_stereo"] > untied["score_anti"]).to_numpy(float)
    reference = stats.bootstrap((wins,), np.mean, n_resamples=700, method="BCa",
                                random_state=np.random.default_rng(3)).confidence_interval
    row = tests.set_index("country").loc["Mexico"]
    assert (row["ci_low_cluster"], row["ci_high_cluster"]) == pytest.approx((reference.low, reference.high))
    assert row["n_clusters"] == 13  # the tied instance's stereotype carries no untied instance


def test_instances_of_one_stereotype_that_agree_widen_the_clustered_interval():
    """Ten stereotypes of four instances each, every instance of a stereotype with the same outcome: the item-level
    interval counts 40 independent instances, the clustered one 10 stereotypes."""
    marks = list("wwww" * 7 + "llll" * 3)
    scores = _scores({"Mexico": marks}, clusters={"Mexico": [f"s{k // 4}" for k in range(40)]})
    row = country_tests(scores, n_resamples=2000)[0].set_index("country").loc["Mexico"]
    assert row["n_clusters"] == 10 and row["share_untied"] == pytest.approx(0.7)
    assert row["ci_high_cluster"] - row["ci_low_cluster"] > 1.4 * (row["ci_high"] - row["ci_low"])


def test_per_token_sum_variant_reaggregates_the_stored_means_and_can_flip_the_verdict():
    """Stereotypical sentences three tokens longer: per-token means favour them, sums do not."""
    n = 20
    scores = pd.DataFrame({"id": [str(k) for k in range(n)], "country": "Mexico", "source": "authored",
                           "score_stereo": -1.0, "score_anti": -1.2, "score_unrelated": -3.0,
                           "n_tokens_stereo": 8, "n_tokens_anti": 5})
    table = robustness_rows(scores, score="mean", kind="causal").set_index("variant")
    assert table.loc["headline", "decision"] == "stereotypical"
    direct = bias_score(scores["score_stereo"] * 8, scores["score_anti"] * 5)  # -8 against -6 on every instance
    assert table.loc["sum", "estimate"] == direct.share_untied == 0.0
    assert (table.loc["sum", "ci_low"], table.loc["sum", "ci_high"]) == (direct.ci_low, direct.ci_high)
    assert table.loc["sum", "decision"] == "anti-stereotypical" and table.loc["sum", "agrees"] is False
    assert table.loc["sum", "n"] == n and "no second model pass" in table.loc["sum", "reason"]
    # a summed headline gives the per-token mean the same way
    back = robustness_rows(scores.assign(score_stereo=-8.0, score_anti=-6.0), score="sum", kind="causal")
    assert back.set_index("variant").loc["mean", "decision"] == "stereotypical"


def test_generative_variant_runs_only_where_a_second_pass_stored_it():
    scores = _scores(OUTCOMES)
    masked = robustness_rows(scores, score="mean", kind="masked").set_index("variant").loc["stereoset_generative"]
    assert not masked["ran"] and "causal LMs" in masked["reason"]
    causal = robustness_rows(scores, score="mean", kind="causal").set_index("variant").loc["stereoset_generative"]
    assert not causal["ran"] and "study.stereo.evaluation.generative_pass: true" in causal["reason"]
    # the second pass's columns present: every instance now anti-stereotypical under the generative score
    stored = scores.assign(**{column: scores[source] for source, column in alternative_score_columns("stereoset_generative").items()})
    stored[alternative_score_columns("stereoset_generative")["score_stereo"]] = -5.0
    row = robustness_rows(stored, score="mean", kind="causal").set_index("variant").loc["stereoset_generative"]
    assert row["ran"] and row["decision"] == "anti-stereotypical" and row["agrees"] is False


def test_each_source_kind_in_and_out_and_what_is_not_run():
    scores = _scores({"Mexico": list("wwwwwwww" + "llll")})
    scores.loc[8:, "source"] = "machine"
    table = robustness_rows(scores, score="mean", kind="causal").set_index("variant")
    assert table.loc["authored only", "n"] == 8 and table.loc["authored only", "estimate"] == 1.0
    assert table.loc["without authored", "estimate"] == 0.0 and table.loc["without machine", "n"] == 8
    assert not table.loc["human only", "ran"] and table.loc["human only", "reason"] == "no human instance in this run"
    # every instance of one kind: its "only" variant is the headline itself and its "without" is empty
    every = robustness_rows(_scores(OUTCOMES), score="mean", kind="causal").set_index("variant")
    assert not every.loc["authored only", "ran"] and "the headline's instances" in every.loc["authored only", "reason"]
    assert not every.loc["without authored", "ran"]
    assert list(every.columns) == ["choice", "estimate", "ci_low", "ci_high", "n", "decision", "agrees", "ran", "reason"]


# --- paired comparisons -------------------------------------------------------------------------------------------


def _two_models() -> pd.DataFrame:
    """Model B is stereotypical on half of Mexico's 40 instances; model A on the same ones and on half of the
    others (a difference planted on 10 instances, all one way); on Spain the two agree instance by instance."""
    b_mexico = ["w"] * 20 + ["l"] * 20
    a_mexico = ["w"] * 30 + ["l"] * 10
    spain = list("wlwlwlwlwwll")
    a = _scores({"Mexico": a_mexico, "Spain": spain}).assign(model="a")
    b = _scores({"Mexico": b_mexico, "Spain": spain}).assign(model="b")
    return pd.concat([a, b], ignore_index=True)


def test_a_planted_difference_is_found_by_mcnemar_and_missed_by_the_two_unpaired_intervals():
    long = _two_models()
    table, document = paired_comparisons(long, ["a", "b"], n_resamples=200, permutations=999)
    mexico = next(c for c in document["comparisons"] if c["cell"] == "Mexico")
    # statsmodels' exact McNemar on the paired table: 20 both, 10 A only, 0 B only, 10 neither
    assert mexico["p_value"] == pytest.approx(mcnemar([[20, 10], [0, 10]], exact=True).pvalue)
    assert mexico["verdict"] == "model_a more" and mexico["difference"] == pytest.approx(0.25)
    assert (mexico["estimate_a"], mexico["estimate_b"], mexico["n"]) == (0.75, 0.5, 40)
    assert mexico["n_a_only"] == 10 and mexico["n_b_only"] == 0
    # compared unpaired, each model's own interval overlaps the other's: no difference would be seen
    shares = {m: bias_score(long.loc[(long["model"] == m) & (long["country"] == "Mexico"), "score_stereo"],
                            long.loc[(long["model"] == m) & (long["country"] == "Mexico"), "score_anti"])
              for m in ("a", "b")}
    assert shares["a"].ci_low < shares["b"].ci_high
    spain = next(c for c in document["comparisons"] if c["cell"] == "Spain")
    assert spain["difference"] == 0 and spain["verdict"] == "cannot be decided at this n"  # no discordant instance
    assert spain["mde"] is None
    # Holm over the two countries (Spain has no test: the family is Mexico alone)
    assert mexico["p_holm"] == pytest.approx(mexico["p_value"]) and spain["p_holm"] is None
    overall = next(c for c in document["comparisons"] if c["cell"] == "all")
    assert overall["p_holm"] is None and overall["n"] == 52
    assert set(document) >= {"study", "models", "test", "family", "comparisons"} and document["study"] == "stereo"
    assert list(mexico)[:16] == ["model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low",
                                 "ci_high", "p_value", "p_holm", "p_bh", "significant_holm", "significant_bh",
                                 "verdict", "mde"]
    assert set(table["cell"]) == {"all", "Mexico", "Spain"}


def test_lms_difference_and_its_sign_flip_p_by_enumeration():
    """Ten Peruvian instances: model A's anti-stereotypical sentence loses to the unrelated one on four of them.
    The exact sign-flip p enumerates all 2^10 sign vectors of the per-instance differences."""
    a = _scores({"Peru": list("wwwwwwwwww")}).assign(model="a")
    b = a.assign(model="b")
    a.loc[:3, "score_anti"] = -10.0  # below the unrelated -9: lms indicator 0.5 instead of 1
    a.loc[0, "score_unrelated"] = -0.5  # and on one instance both sentences lose: 0
    _, document = paired_comparisons(pd.concat([a, b], ignore_index=True), ["a", "b"], n_resamples=200,
                                     permutations=9999)
    peru = next(c for c in document["lms_comparisons"] if c["cell"] == "Peru")
    d = np.array([-1.0, -0.5, -0.5, -0.5] + [0.0] * 6)
    assert peru["difference"] == pytest.approx(d.mean()) and peru["estimate_b"] == 1.0
    null = np.array([np.mean(d * signs) for signs in itertools.product([-1, 1], repeat=len(d))])
    observed = d.mean()
    expected = min(1.0, 2 * min(np.mean(null <= observed + 1e-12), np.mean(null >= observed - 1e-12)))
    assert peru["p_value"] == pytest.approx(expected)
    assert "icat" in document and document["icat"].startswith("not compared")


def test_one_model_gives_an_empty_list_with_the_reason():
    table, document = paired_comparisons(_scores(OUTCOMES).assign(model="a"), ["a"])
    assert table.empty and document["comparisons"] == [] and document["models"] == ["a"]
    assert document["reason"].startswith("one model in this run (a)")
