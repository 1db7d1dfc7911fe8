"""The leakage DVC stages end to end on the real survey and a tiny causal LM (outside DVC, in a temp dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_leakage_stages_end_to_end(tmp_path, monkeypatch, data_mirror, tiny_causal_lm_dir, tiny_masked_lm_dir):
    from stereolens.cli import main

    survey = Path(data_mirror) / "stereotype_leakage"
    if not survey.is_dir():
        pytest.skip(f"leakage survey not in the data mirror ({survey})")
    study = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    study.update({
        "languages": ["en", "hi"],
        "seed_dir": str(REPO / "data" / "seed" / "leakage"),
        "survey": str(survey),
        "templates": {"en": ["are"], "hi": ["hote"]},
    })
    study["choice"].update({"design": "matching", "groups": ["woman", "man", "Texan"]})
    study["methods"]["causal"] = ["ilps", "choice"]  # the paper's methods (the default runs ILPS only)
    # a monolingual baseline for English only (scored with SeT); Hindi has none, so its fits omit LM_HI
    study["baselines"] = {"en": str(tiny_masked_lm_dir), "hi": None}
    tiny = {"id": "tiny", "name": str(tiny_causal_lm_dir), "kind": "causal", "backend": "hf"}
    params = {
        "model": tiny, "models": {"tiny": tiny}, "model_ids": ["tiny"],
        "language": {"include": None},
        "tracking": {"enabled": False},
        "study": {"leakage": study},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))

    assert main(["stage", "leakage-human"]) == 0
    check = pd.read_csv("data/processed/leakage/human/published_check.csv")
    assert (check["max_abs_diff"] < 1e-6).all() and (check["missing_mismatch"] == 0).all()
    for lang in ("en", "hi"):
        assert main(["stage", "leakage-scores", "--language", lang]) == 0
        assert main(["stage", "leakage-fit", "--language", lang]) == 0
    # times are run facts (MLflow, the printed line), not outputs: a rerun from the cache writes the cold bytes
    scored = sorted(p for p in Path("data/processed/leakage/tiny/scores/hi").rglob("*") if p.is_file())
    cold = {p: p.read_bytes() for p in scored}
    assert "seconds" not in cold[Path("data/processed/leakage/tiny/scores/hi/manifest.json")].decode()
    assert main(["stage", "leakage-scores", "--language", "hi"]) == 0
    assert {p: p.read_bytes() for p in scored} == cold
    ilps = pd.read_csv("data/processed/leakage/tiny/scores/hi/tiny/ilps.csv")
    assert ilps.shape == (32, 31) and ilps.columns[0] == "Traits"
    choice = pd.read_csv("data/processed/leakage/tiny/scores/hi/tiny/choice.csv").set_index("Traits")
    assert choice[["woman", "man", "Texan"]].notna().all().all() and choice["lesbian"].isna().all()
    coef = pd.read_csv("data/processed/leakage/tiny/fit/hi/tiny/ilps/coefficients.csv")
    assert list(coef["term"]) == ["H_EN", "H_HI", "Intercept"]  # the study's languages only
    fit = json.loads(Path("data/processed/leakage/tiny/fit/hi/tiny/ilps/fit.json").read_text())
    assert fit["baseline_available"] is False
    en_coef = pd.read_csv("data/processed/leakage/tiny/fit/en/tiny/ilps/coefficients.csv")
    assert list(en_coef["term"]) == ["H_EN", "H_HI", "LM_EN", "Intercept"]

    assert main(["stage", "leakage-paired"]) == 0  # one model: nothing to compare, and it says so
    assert json.loads(Path("reports/leakage/paired.json").read_text())["comparisons"] == []
    assert main(["stage", "leakage-report"]) == 0
    report = Path("reports/leakage/tiny")
    for name in ("coefficients.csv", "edges.json", "beta_table.csv", "qualitative.csv", "flow.png", "flow.svg", "report.md",
                 "choice_nonmatching.csv"):
        assert (report / name).exists(), name
    text = (report / "report.md").read_text(encoding="utf-8")
    assert "Table 3 shape" in text and "authored" in text
    beta = pd.read_csv(report / "beta_table.csv").set_index("model")
    assert beta.loc["tiny/ilps", "EN"] == pytest.approx(en_coef.set_index("term").loc["LM_EN", "estimate"])
    assert pd.isna(beta.loc["tiny/ilps", "HI"])
    assert beta.loc["tiny/ilps", "p_EN"] == pytest.approx(en_coef.set_index("term").loc["LM_EN", "p"])
    assert list(beta.columns) == ["EN", "HI", "p_EN", "p_HI"]
    summary = json.loads((report / "summary.json").read_text())
    assert set(summary["terms"]) == {"tiny/ilps->EN", "tiny/ilps->HI", "tiny/choice->EN", "tiny/choice->HI"}
    # coverage: choice mode, design, groups and templates per language, as scored
    choice_cov = summary["coverage"]["HI"]["tiny/choice"]
    assert (choice_cov["mode_requested"], choice_cov["mode"], choice_cov["design"]) == ("auto", "logprob", "matching")
    assert (choice_cov["n_groups"], choice_cov["groups"]) == (3, ["woman", "Texan", "man"])  # seed order
    assert summary["coverage"]["HI"]["tiny/ilps"]["templates"] == ["hote"]
    assert "3 of the groups (woman, Texan, man)" in text and "1 template(s) (hote)" in text
    # rows zero-filled for missing human cells (the default), per fit, in the summary and on the page; the
    # other treatment (drop) fitted beside it
    hi_fit = next(f for f in summary["fits"] if f["panel"] == "tiny/ilps" and f["target"] == "HI")
    assert hi_fit["missing_human"] == "zero" and hi_fit["n_obs"] == 960
    assert hi_fit["n_zero_filled_missing_human"] == fit["n_zero_filled_missing_human"] > 0
    # only the 999 cells are filled: 10 groups unrated in EN or HI (320 rows); the two thin Hindi groups
    # (immigrant n = 1, Asian person n = 4) keep their published ratings (issue 31: was 384 filled)
    assert (fit["n_zero_filled_missing_human"], fit["n_thin_kept"], fit["thin_rule"]) == (320, 64, "keep")
    assert (hi_fit["n_thin_kept"], hi_fit["thin_rule"]) == (64, "keep")
    assert "64 rows of thin groups kept with their values (flagged)" in text
    assert summary["thin_groups"]["groups"] == {"HI": ["immigrant (n = 1)", "Asian person (n = 4)"]}
    assert f"{fit['n_zero_filled_missing_human']} (group, trait) rows with a missing human cell zero-filled" in text
    alt = json.loads(Path("data/processed/leakage/tiny/fit/hi/tiny/ilps/alternative_missing/fit.json").read_text())
    assert alt["missing"] == "drop" and alt["n_dropped_missing_human"] == fit["n_zero_filled_missing_human"]
    assert alt["n_obs"] == 960 - 320 and alt["n_thin_kept"] == 64  # the thin rule applies under both treatments
    coefficients = pd.read_csv(report / "coefficients.csv")
    assert set(coefficients["converged"]) <= {True, False}
    assert set(coefficients["missing"]) == {"zero", "drop"} and set(coefficients["configured"]) == {True, False}
    assert summary["missing_human_cells"]["configured"] == "zero" and summary["missing_human_cells"]["alternative"] == "drop"
    # Holm and BH over the non-target terms: EN and HI fits x ilps and choice, one other language each = 4 tests
    mc = summary["multiple_comparisons"]
    assert mc["n_tests"] == 4 and "Holm" in mc["legend"] and "Benjamini-Hochberg" in mc["legend"]
    assert mc["legend"] in text
    family = coefficients[coefficients["p_holm"].notna()]
    assert len(family) == 8 and set(family["term"].str[2:] != family["target"]) == {True}
    # every edge counted in the headline comes from a converged fit of the configured treatment
    edges = json.loads((report / "edges.json").read_text())
    assert summary["n_edges"] == sum(e["configured"] and e["converged"] for e in edges)
    # HI has no baseline: the headline does not call the edges leakage
    assert not summary["baseline_available_all_fits"]
    assert any(k.startswith("cross-language association edges") for k in summary["headline"])
    # the choice task in both orders by default, its position bias per language
    assert choice_cov["both_orders"] is True and choice_cov["pairs_per_group"] == 34
    bias = summary["position_bias"]["tiny/choice"]
    assert set(bias) == {"EN", "HI"} and all(0 <= v <= 1 for v in bias.values())
    assert "Position bias of the choice task" in text
    # robustness (issue 32): the choice task ran in both orders, so each order alone is re-aggregated from the
    # stored per-query probabilities and re-fitted; Hindi has thin groups, so the minimum-annotator rule is re-fitted
    robustness = pd.read_csv(report / "robustness.csv")
    assert robustness.iloc[0]["variant"] == "headline"
    orders = robustness[robustness["choice"] == "choice task orders"]
    assert list(orders["variant"]) == ["first-listed order only", "second-listed order only"]
    assert orders["ran"].astype(bool).all()
    assert bool(robustness.set_index("choice").loc["minimum annotators per group", "ran"])
    assert summary["robustness"]["not_run"] == 0 and summary["robustness"]["of"] == len(robustness) - 1
    assert summary["paired"]["comparisons"] == [] and "one model in this run" in summary["paired"]["reason"]
    choice_dir = Path("data/processed/leakage/tiny/fit/hi/tiny/choice")
    both = json.loads((choice_dir / "fit.json").read_text())
    for order in ("first", "second"):
        one = choice_dir / "variants" / f"choice_{order}_order"
        # the same (group, trait) cells, other scores: each trait is in one pair per group in either order
        assert json.loads((one / "fit.json").read_text())["n_obs"] == both["n_obs"]
        assert not pd.read_csv(one / "coefficients.csv")["estimate"].equals(
            pd.read_csv(choice_dir / "coefficients.csv")["estimate"])
