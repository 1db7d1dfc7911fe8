"""Issue 32 for the pcs study: the minimum detectable effects of Tables 15-17, PCS with its intervals and decision,
PCS undefined exactly where capability utilisation is, a run language without valid responses, the robustness table
and the paired comparison of two models, each against an independent computation (scipy, statsmodels, enumeration)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from statsmodels.stats.multitest import multipletests

from stereolens.cli import main
from stereolens.io import write_csv, write_json
from stereolens.report.profile import pcs_cells
from stereolens.stats.bias import bca_interval
from stereolens.stats.cluster import cluster_ratio_interval
from stereolens.stats.power import minimum_detectable_rate
from stereolens.studies.pcs import analysis as pcs
from stereolens.studies.pcs.outputs import write_analysis
from stereolens.studies.pcs.paired import paired_comparisons
from stereolens.studies.pcs.robustness import COLUMNS

FEATURES = {"PDI": ("directness", "deference", "face_saving"), "IDV": ("agency_attribution", "duty_orientation", "outcome")}


def scores_from(cells: dict, *, model: str = "m", invalid: dict | None = None) -> pd.DataFrame:
    """Long judged scores, one judge and one sample: ``cells`` maps (language, scenario, dimension, feature) to
    (A, B, C); ``invalid`` maps (language, scenario, condition) to an invalid_reason."""
    rows = []
    for (language, scenario, dimension, feature), abc in cells.items():
        for condition, score in zip("ABC", abc):
            reason = (invalid or {}).get((language, scenario, condition), "")
            rows.append({"model": model, "language": language, "scenario_id": scenario, "dimension": dimension,
                         "feature": feature, "condition": condition, "judge": "j", "sample": 0, "score": score,
                         "invalid_reason": reason})
    return pd.DataFrame(rows)


def ratio_cells(ratios: dict, languages=("hi", "ur"), a: float = 3.0, gain: float = 3.0) -> dict:
    """Every feature of scenario s has PCS ratios[s] (A = a, B = a + gain, C = a + ratio x gain), in each language."""
    cells = {}
    for (scenario, ratio), language in itertools.product(ratios.items(), languages):
        dimension = "PDI" if int(scenario[1:]) % 2 else "IDV"
        for feature in FEATURES[dimension]:
            cells[(language, scenario, dimension, feature)] = (a, a + gain, a + ratio * gain)
    return cells


def random_cells(seed: int = 0, scenarios: int = 6) -> dict:
    rng = np.random.default_rng(seed)
    cells = {}
    for language, s in itertools.product(("hi", "ur"), range(scenarios)):
        dimension = "PDI" if s % 2 else "IDV"
        for feature in FEATURES[dimension]:
            a = rng.uniform(2, 4)
            cells[(language, f"s{s}", dimension, feature)] = (a, a + rng.uniform(0.5, 2.5), a + rng.uniform(-0.5, 2))
    return cells


# ---------------------------------------------------------------- minimum detectable effects (part 1)


def f_power(n: int, k: int, f: float, alpha: float) -> float:
    return float(stats.ncf.sf(stats.f.isf(alpha, k - 1, n - k), k - 1, n - k, f * f * n))


def t_power(n: int, d: float, alpha: float) -> float:
    critical = stats.t.isf(alpha / 2, n - 1)
    return float(stats.nct.sf(critical, n - 1, d * math.sqrt(n)) + stats.nct.cdf(-critical, n - 1, d * math.sqrt(n)))


def test_tables_15_and_16_carry_the_minimum_detectable_effect_of_their_own_tests():
    result = pcs.analyze_scores(scores_from(random_cells()))
    t15 = result.tables["table15_anova_language"]
    assert len(t15) == 2 and (t15["alpha_adjusted"] == 0.025).all()  # two dimensions tested: Bonferroni 0.05 / 2
    for row in t15.to_dict("records"):
        # the noncentral F (scipy) at the MDE has 80% power, from the row's own n and k
        assert f_power(row["n"], row["k"], row["mde_f"], 0.05) == pytest.approx(0.8, abs=1e-6)
        assert f_power(row["n"], row["k"], row["mde_f_adjusted"], 0.025) == pytest.approx(0.8, abs=1e-6)
        assert row["mde_eta2"] == pytest.approx(row["mde_f"] ** 2 / (1 + row["mde_f"] ** 2))
    t16 = result.tables["table16_paired_a_vs_c"]
    assert (t16["alpha_adjusted"] == 0.025).all()
    for row in t16.to_dict("records"):
        assert row["n"] == 18  # 6 scenarios x 3 features of one language
        assert t_power(row["n"], row["mde_dz"], 0.05) == pytest.approx(0.8, abs=1e-6)
        assert t_power(row["n"], row["mde_dz_adjusted"], 0.025) == pytest.approx(0.8, abs=1e-6)
    # the legend says what the MDE is; every row its test did not find says what it could not have detected
    notes = result.statistics["mde"]
    assert "Cohen's f" in notes["table15_anova_language"]["legend"]
    assert "Benjamini-Hochberg has no single per-row level" in notes["table16_paired_a_vs_c"]["legend"]
    not_found = t15.loc[t15["p"] >= 0.05, "dimension"].tolist()
    assert [line.split(":")[0] for line in notes["table15_anova_language"]["undetected"]] == not_found
    for line in notes["table15_anova_language"]["undetected"]:
        assert "could not detect an effect below Cohen's f = " in line and "in 2 languages (80% power" in line


def test_table_17_binomial_tests_are_corrected_over_the_two_and_carry_the_mde(tmp_path):
    prefs = pd.DataFrame(
        [{"language": "hi", "comparison": "A-C", "preference": p} for p in ["C"] * 8 + ["A"] * 4 + ["tie"] * 3]
        + [{"language": "ur", "comparison": "B-C", "preference": p} for p in ["C"] * 17 + ["B"] * 3])
    analysis, _ = write_analysis(scores_from(random_cells()), tmp_path, human=prefs.assign(source="human"))
    table = analysis.tables["table17_binomial_tests"].set_index("comparison")
    p = [stats.binomtest(8, 12, 0.5).pvalue, stats.binomtest(17, 20, 0.5).pvalue]
    assert table["p"].tolist() == pytest.approx(p)
    assert table["p_holm"].tolist() == pytest.approx(multipletests(p, method="holm")[1].tolist())
    assert table["p_bh"].tolist() == pytest.approx(multipletests(p, method="fdr_bh")[1].tolist())
    assert table.loc["A-C", "n_decisive"] == 12 and table.loc["A-C", "n_tie"] == 3
    for comp, n in (("A-C", 12), ("B-C", 20)):
        assert table.loc[comp, "mde"] == pytest.approx(minimum_detectable_rate(n).above)
        assert table.loc[comp, "mde_adjusted"] == pytest.approx(minimum_detectable_rate(n, alpha=0.025).above)
        # known answer: the exact binomial power at the MDE, summed over scipy's binomial
        rejected = [k for k in range(n + 1) if stats.binomtest(k, n, 0.5).pvalue < 0.05]
        assert stats.binom.pmf(rejected, n, table.loc[comp, "mde"]).sum() == pytest.approx(0.8, abs=1e-6)
    tests = analysis.statistics["human_validation"]
    assert tests["A-C"]["p_holm"] == pytest.approx(table.loc["A-C", "p_holm"])
    page = (tmp_path / "report.md").read_text()
    section = page.split("## table17_binomial_tests", 1)[1]
    assert "Family: the two binomial tests of this table" in section and "MDE: the smallest share" in section
    assert "- A-C: could not detect a preference below " in section  # p = 0.39: not significant
    assert "- B-C:" not in section  # p = 0.0026: significant


# ---------------------------------------------------------------- PCS: one rule for PCS and capability utilisation


def test_pcs_is_undefined_where_capability_utilisation_is_for_the_same_denominator(tmp_path):
    """The index showed a PCS value beside "capability utilisation undefined": both divide by the explicit
    prompt's gain, so when there is none overall neither is a share of it."""
    cells = {("hi", f"s{i}", "PDI", "deference"): (4.0, 3.0, 3.5) for i in range(5)}  # B below A: excluded
    cells[("hi", "s5", "PDI", "deference")] = (2.0, 3.0, 4.0)  # one cell gains 1: ratio 2
    analysis, _ = write_analysis(scores_from(cells), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    # mean B - mean A = (5 x -1 + 1) / 6 = -0.667
    assert summary["cap_util"] is None and summary["pcs"] is None
    assert summary["pcs_note"] == ("undefined: mean B - mean A = -0.667 over all 6 cells is not above the minimum gain "
                                   "0.25, so there is no explicit-prompt capability to take a share of (capability "
                                   "utilisation is undefined for the same reason); over the 1 cells whose own gain is "
                                   "above it the mean ratio is 2")
    assert summary["pcs_decision"] == "undefined" and summary["pcs_ci_low_cluster"] is None
    assert summary["headline"]["PCS"] == summary["pcs_note"]
    t10 = analysis.tables["table10_model_summary"].iloc[0]
    assert math.isnan(t10["pcs"]) and t10["pcs_note"] == summary["pcs_note"]
    headline = (tmp_path / "report.md").read_text().split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert f"- PCS: {summary['pcs_note']}" in headline and "- capability utilisation: undefined" in headline
    cell = next(c for c in pcs_cells(summary, tmp_path) if c.measure == "PCS")
    assert cell.text == f"n/a: {summary['pcs_note']}"
    # an undefined headline has no decision to survive: no variant counts as agreeing with it
    assert summary["robustness"]["by_measure"]["PCS"] == {"headline_decision": "undefined", "survives": 0, "of": 0,
                                                          "not_run": 2}
    table = pd.read_csv(tmp_path / "robustness.csv", keep_default_na=False)
    assert (table.loc[table["measure"] == "PCS", "agrees"] == "").all()


# ---------------------------------------------------------------- PCS intervals (part 4) and decision

# scenario PCS: every feature of a scenario shares it, so the scenarios, not the cells, are the independent units
SCENARIO_RATIOS = {"s1": 0.9, "s2": -0.5, "s3": 0.8, "s4": -0.4, "s5": 0.7, "s6": 0.1, "s7": -0.3, "s8": 0.6}


def test_pcs_interval_resamples_whole_scenarios_and_the_decision_uses_it():
    result = pcs.analyze_scores(scores_from(ratio_cells(SCENARIO_RATIOS, languages=("hi",))))
    s = result.summary
    assert s["pcs"] == pytest.approx(np.mean(list(SCENARIO_RATIOS.values())))
    assert s["pcs_n_cells"] == 24 and s["pcs_n_scenarios"] == 8
    cells = result.cells.loc[~result.cells["excluded"]]
    assert (s["pcs_ci_low"], s["pcs_ci_high"]) == pytest.approx(bca_interval(cells["pcs"].to_numpy(), seed=0))
    values = cells["pcs"].to_numpy()
    scenario = cluster_ratio_interval(values, np.ones_like(values), ("m|" + cells["scenario_id"]).to_numpy(), seed=0)
    assert (s["pcs_ci_low_cluster"], s["pcs_ci_high_cluster"]) == pytest.approx((scenario.low, scenario.high))
    # independent: scipy's BCa over the 8 scenario means (equal clusters), same draws, to BCa's rounding of ties
    direct = stats.bootstrap((np.array(list(SCENARIO_RATIOS.values())),), np.mean, n_resamples=2000, method="BCa",
                             random_state=np.random.default_rng(0)).confidence_interval
    assert (s["pcs_ci_low_cluster"], s["pcs_ci_high_cluster"]) == pytest.approx((direct.low, direct.high), abs=2e-3)
    # cells as independent exclude 0; whole scenarios do not: the decision is the scenarios'
    assert s["pcs_ci_low"] > 0 and s["pcs_ci_low_cluster"] < 0
    assert s["pcs_decision"] == "not distinguishable from 0 (no implicit adaptation detected)"
    t10 = result.tables["table10_model_summary"].iloc[0]
    assert t10["ci_low_cluster"] == pytest.approx(s["pcs_ci_low_cluster"]) and t10["n_scenarios"] == 8
    assert "The decision uses the scenario (cluster) interval" in result.statistics["pcs_interval"]


@pytest.mark.parametrize("low, high, decision", [
    (0.05, 0.3, "between 0 and 1 (partial implicit adaptation)"), (-0.2, 0.3, "not distinguishable from 0 (no "
                                                                              "implicit adaptation detected)"),
    (-0.9, -0.1, "below 0 (reverse adaptation)"), (0.6, 1.4, "not distinguishable from 1 (full implicit adaptation)"),
    (1.1, 1.5, "above 1 (more than the explicit prompt)"), (-0.5, 1.5, "not distinguishable from 0 or 1")])
def test_pcs_decision_against_0_and_1(low, high, decision):
    assert pcs.pcs_decision((low + high) / 2, low, high, 5) == decision
    assert pcs.pcs_decision(0.2, 0.1, 0.3, 1).startswith("cannot be decided")


# ---------------------------------------------------------------- a language run without a valid response


def test_a_language_whose_responses_were_all_invalid_says_no_valid_responses():
    """Gemma's profile said "LDI hi: not measured" though Hindi was run and its responses were excluded."""
    cells = random_cells()
    invalid = {("hi", f"s{s}", condition): "wrong_language" for s in range(6) for condition in "ABC"}
    summary = pcs.analyze_scores(scores_from(cells, invalid=invalid)).summary
    assert summary["ldi"]["hi"] == {} and set(summary["ldi"]["ur"]) == {f for fs in FEATURES.values() for f in fs}
    assert summary["ldi_notes"] == {"hi": "no valid responses: 6 of 6 judged Prompt A responses excluded as invalid "
                                          "(wrong_language: 6)"}
    cell = next(c for c in pcs_cells(summary, Path("no-gates-here")) if c.measure == "LDI hi")
    assert cell.text == f"n/a: {summary['ldi_notes']['hi']}"


# ---------------------------------------------------------------- robustness (part 3)


def test_robustness_table_recomputes_each_headline_under_each_choice(tmp_path):
    ratios = {f"s{i}": r for i, r in enumerate([0.3, 0.5, 0.2, 0.4, 0.35, 0.45], start=1)}
    cells = ratio_cells(ratios)
    # the Hindi implicit-prompt answers of s1-s3 were flagged wrong-language; judged, they score 1 (ratio -0.25)
    for key in cells:
        if key[0] == "hi" and key[1] in ("s1", "s2", "s3"):
            cells[key] = (2.0, 6.0, 1.0)
    scores = scores_from(cells, invalid={("hi", s, "C"): "wrong_language" for s in ("s1", "s2", "s3")})
    analysis, _ = write_analysis(scores, tmp_path)
    table = pd.read_csv(tmp_path / "robustness.csv", keep_default_na=False)
    assert list(table.columns) == COLUMNS
    assert table.loc[0, "variant"] == "headline" and table.loc[0, "measure"] == "PCS"
    rows = table.set_index(["choice", "variant"])
    headline = rows.iloc[0]
    assert float(headline["estimate"]) == pytest.approx(analysis.summary["pcs"])
    assert headline["decision"] == "between 0 and 1 (partial implicit adaptation)"
    gains = rows.loc["PCS: minimum explicit-prompt gain (ours, not the paper's)"]
    assert list(gains.index) == ["0 steps", "0.05 steps", "0.1 steps", "0.5 steps", "1 step"]
    kept = rows.loc[("PCS: invalid responses", "kept (the judged ones)")]
    # kept: hi s1-s3 have ratio -0.25 on 3 features each; the rest as before
    expected = np.mean([-0.25] * 9 + [ratios[s] for s in ("s4", "s5", "s6") for _ in range(3)]
                       + [ratios[s] for s in ratios for _ in range(3)])
    assert float(kept["estimate"]) == pytest.approx(expected)
    assert "3 judged invalid responses kept" in kept["reason"]
    not_run = table.loc[table["ran"].astype(str) == "False"]
    assert set(not_run["variant"]) == {"the paper's three-judge panel", "the paper's 4 samples at temperature 0.7"}
    assert (not_run["agrees"] == "").all() and (not_run["reason"] != "").all()
    ran = table.loc[(table["variant"] != "headline") & (table["ran"].astype(str) == "True")]
    block = analysis.summary["robustness"]
    assert block["of"] == len(ran) and block["survives"] == int((ran["agrees"].astype(str) == "True").sum())
    assert block["not_run"] == 2 and block["table"] == "robustness.csv"
    hu = table.loc[table["measure"] == "Hindi-Urdu difference"]
    assert hu.iloc[0]["variant"] == "headline"
    assert {"matched scenarios, paired t-test (scenario level)",
            "matched scenarios, Wilcoxon signed-rank test (scenario level; no interval)"} <= set(hu["variant"])
    assert block["by_measure"]["PCS"]["headline_decision"] == headline["decision"]
    page = (tmp_path / "report.md").read_text()
    assert "## Robustness" in page and f"survives {block['by_measure']['PCS']['survives']} of" in page


# ---------------------------------------------------------------- paired comparisons of two models (part 2)

# 13 scenarios: few enough (2^13 sign patterns) for the sign-flip test to enumerate them all, so its p is exact
PLANTED = {f"s{i}": r for i, r in enumerate([-0.4, 1.1, 0.2, 0.9, -0.2, 0.6, 0.0, 1.2, 0.3, -0.5, 0.8, 0.1, 1.0],
                                            start=1)}


def planted_pair() -> dict[str, pd.DataFrame]:
    """Model b's scenario PCS spread widely; model a's is b's plus 0.25 on 7 of the 13 scenarios."""
    lifted = {s: r + (0.25 if i % 2 == 0 else 0.0) for i, (s, r) in enumerate(PLANTED.items())}
    return {"b": scores_from(ratio_cells(PLANTED), model="b"), "a": scores_from(ratio_cells(lifted), model="a")}


def sign_flip_p_by_enumeration(d: np.ndarray) -> float:
    signs = np.array(list(itertools.product((1, -1), repeat=len(d))))
    means = np.abs((signs * d).mean(axis=1))
    return float(np.mean(means >= abs(d.mean()) - 1e-12))


def test_a_planted_difference_is_found_paired_and_missed_by_the_two_unpaired_intervals():
    scores = planted_pair()
    result = paired_comparisons(scores, models=["a", "b"], languages=["hi", "ur"], min_gain_steps=0.25)
    rows = {c["cell"]: c for c in result["comparisons"]}
    assert list(rows) == ["hi", "ur", "all"]
    differences = np.array([0.25 if i % 2 == 0 else 0.0 for i in range(13)])
    p = sign_flip_p_by_enumeration(differences)  # 2 / 2^7: the zeros flip to themselves
    assert p == pytest.approx(2 / 2**7)
    for cell in ("hi", "ur", "all"):
        assert rows[cell]["n"] == 13 and rows[cell]["difference"] == pytest.approx(7 * 0.25 / 13)
        assert rows[cell]["estimate_a"] - rows[cell]["estimate_b"] == pytest.approx(7 * 0.25 / 13)
        assert rows[cell]["p_value"] == pytest.approx(p)
        assert rows[cell]["ci_low"] > 0
    holm = multipletests([p, p], method="holm")[1]
    assert [rows["hi"]["p_holm"], rows["ur"]["p_holm"]] == pytest.approx(holm.tolist())
    assert rows["all"]["p_holm"] is None and rows["all"]["significant_holm"] is None
    assert {rows[c]["verdict"] for c in rows} == {"model_a more"}
    assert rows["all"]["mde"] > 0
    # compared unpaired, the two models' own PCS intervals overlap: the difference is not seen
    own = {m: pcs.analyze_scores(s).summary for m, s in scores.items()}
    assert own["a"]["pcs_ci_low_cluster"] < own["b"]["pcs_ci_high_cluster"]
    assert set(result) == {"study", "models", "test", "family", "alpha", "min_gain_steps", "comparisons", "reason"}
    assert set(rows["hi"]) >= {"model_a", "model_b", "cell", "n", "estimate_a", "estimate_b", "difference", "ci_low",
                               "ci_high", "p_value", "p_holm", "p_bh", "significant_holm", "significant_bh", "verdict",
                               "mde"}


def test_few_scenarios_cannot_be_decided_and_one_model_has_nothing_to_compare():
    few = {s: r for s, r in list(PLANTED.items())[:4]}
    scores = {"a": scores_from(ratio_cells({s: r + 0.5 for s, r in few.items()}), model="a"),
              "b": scores_from(ratio_cells(few), model="b")}
    result = paired_comparisons(scores, models=["a", "b"], languages=["hi", "ur"], min_gain_steps=0.25)
    # 4 scenarios: the smallest sign-flip p is 2 / 16 = 0.125, never below alpha
    assert {c["verdict"] for c in result["comparisons"]} == {"cannot be decided at this n"}
    # one scenario: a difference, no interval (a zero-width one would claim a certainty it does not have)
    one = {s: r for s, r in list(PLANTED.items())[:1]}
    single = paired_comparisons({"a": scores_from(ratio_cells({s: r + 0.5 for s, r in one.items()}), model="a"),
                                 "b": scores_from(ratio_cells(one), model="b")}, models=["a", "b"], languages=["hi"],
                                min_gain_steps=0.25)["comparisons"][0]
    assert single["n"] == 1 and single["difference"] == pytest.approx(0.5) and single["ci_low"] is None
    assert single["p_value"] == 1.0 and single["verdict"] == "cannot be decided at this n" and single["mde"] is None
    alone = paired_comparisons({"a": scores["a"]}, models=["a"], languages=["hi"], min_gain_steps=0.25)
    assert alone["comparisons"] == [] and alone["reason"].startswith("one model in the run (a)")


def test_paired_stage_writes_the_contract_and_the_report_stage_carries_it(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    for model, frame in planted_pair().items():
        write_csv(tmp_path / f"data/interim/pcs/{model}/scores.csv", frame.drop(columns="invalid_reason"))
        write_json(tmp_path / f"reports/pcs/{model}/gates.json", {"enforced": False, "all_passed": True, "gates": {}})
    # an absolute store: MLflow keeps one engine per tracking URI, and a relative one would be shared with other tests
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    tracking = {"enabled": True, "tracking_uri": uri, "artifact_location": str(tmp_path / "mlruns/artifacts"),
                "experiment": "t"}
    study = {"name": "t", "languages": ["hi", "ur"], "collection": {"samples": 1},
             "judges": {"panel": [{"id": "j", "model": None}]}, "human_validation": {}, "analysis": {}}
    models = {m: {"id": m, "name": m} for m in ("a", "b")}
    params = {"model": models["a"], "models": models, "model_ids": ["a", "b"], "language": {"include": None},
              "tracking": tracking, "seed": 0, "study": {"pcs": study}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    assert main(["stage", "pcs-paired"]) == 0
    paired = json.loads((tmp_path / "reports/pcs/paired.json").read_text())
    assert paired["study"] == "pcs" and paired["models"] == ["a", "b"] and len(paired["comparisons"]) == 3
    assert pd.read_csv(tmp_path / "reports/pcs/paired.csv")["cell"].tolist() == ["hi", "ur", "all"]
    assert main(["stage", "pcs-analyze", "--model", "b"]) == 0
    summary = json.loads((tmp_path / "reports/pcs/b/summary.json").read_text())
    assert summary["paired"]["comparisons"] == paired["comparisons"] and summary["paired"]["reason"] == ""
    assert (tmp_path / "reports/pcs/b/robustness.csv").exists()
    page = (tmp_path / "reports/pcs/b/report.md").read_text()
    assert "## Paired comparisons with the run's other models" in page and "model_a more" in page
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["t"]).set_index("tags.stage")
    all_row = next(c for c in paired["comparisons"] if c["cell"] == "all")
    for stage in ("paired", "analyze"):
        assert runs.loc[stage, "metrics.difference.a__b.all"] == pytest.approx(all_row["difference"])
        assert runs.loc[stage, "metrics.difference.a__b.hi"] == pytest.approx(paired["comparisons"][0]["difference"])
