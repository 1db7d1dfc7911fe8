"""Leakage regression (Cao et al. 2024 Equation 1): known-answer fits, the CLI, edges, tables and the flow figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stereolens.studies.leakage.fit import (
    COEFFICIENT_COLUMNS,
    beta_table,
    design_table,
    fit_leakage,
    leakage_edges,
    qualitative_table,
)
from stereolens.studies.leakage.matrices import survey_to_matrices, write_matrix

TRAITS = [f"t{i}" for i in range(32)]
GROUPS = [f"g{j}" for j in range(30)]


def synthetic_human(seed: int = 0, missing: float = 0.1) -> dict[str, pd.DataFrame]:
    """Four independent 32 x 30 'human' matrices on the survey's 0..50 scale, some cells missing."""
    rng = np.random.default_rng(seed)
    out = {}
    for lang in ("EN", "RU", "ZH", "HI"):
        m = pd.DataFrame(rng.uniform(0, 40, size=(32, 30)), index=pd.Index(TRAITS, name="Traits"), columns=GROUPS)
        m = m.mask(rng.random(m.shape) < missing)
        out[lang] = m
    return out


def leaky_target(human: dict[str, pd.DataFrame], seed: int = 1, noise: float = 3.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    trait_effect = rng.normal(0, 2, size=(32, 1))  # what the random intercept per trait absorbs
    return 0.3 * human["RU"].fillna(human["RU"].mean().mean()) + trait_effect + rng.normal(0, noise, size=(32, 30))


def _check_recovers_ru(fit, target="HI"):
    coef = fit.coefficients.set_index("term")
    assert list(fit.coefficients.columns) == COEFFICIENT_COLUMNS
    assert coef.loc["H_RU", "estimate"] == pytest.approx(0.3, abs=0.05)
    assert coef.loc["H_RU", "p"] < 0.05
    assert coef.loc["H_RU", "ci_low"] < 0.3 < coef.loc["H_RU", "ci_high"]
    # no other source is significant in either direction.  A fair test, not a lucky seed: over 200
    # seeds each (fpr experiment, noise sd 3) a non-RU term had p < 0.05 in 4.0% (synthetic) and
    # 5.7% (real survey) of fits, the nominal 5%; the seeds here are the files' first ones, not picked.
    for other in ("H_EN", "H_ZH", "H_HI"):
        assert coef.loc[other, "p"] >= 0.05, (other, coef.loc[other, "estimate"], coef.loc[other, "p"])
    edges = leakage_edges(fit)
    assert [(e["source"], e["target"]) for e in edges] == [("RU", target)]


def test_known_answer_synthetic_human_matrices():
    human = synthetic_human()
    fit = fit_leakage(leaky_target(human), human, "hi", missing="drop")
    _check_recovers_ru(fit)
    assert "LM_HI" not in set(fit.coefficients["term"])
    assert any("no monolingual baseline" in n for n in fit.notes)


@pytest.fixture(scope="module")
def survey_matrices(data_mirror):
    survey = Path(data_mirror) / "stereotype_leakage"
    if not survey.is_dir():
        pytest.skip(f"leakage survey not in the data mirror ({survey})")
    return survey_to_matrices(survey)


def test_known_answer_real_survey_matrices(survey_matrices):
    rng = np.random.default_rng(7)
    h_ru = survey_matrices["RU"]
    target = 0.3 * h_ru + rng.normal(0, 3, size=h_ru.shape)
    fit = fit_leakage(target, survey_matrices, "hi")
    _check_recovers_ru(fit)


def test_baseline_term_and_beta_table():
    human = synthetic_human(3)
    rng = np.random.default_rng(4)
    lm = pd.DataFrame(rng.normal(0, 5, size=(32, 30)), index=human["EN"].index, columns=GROUPS)
    target = 0.3 * human["RU"].fillna(0) + 0.5 * lm + rng.normal(0, 1, size=(32, 30))
    fit = fit_leakage(target, human, "hi", baseline=lm)
    coef = fit.coefficients.set_index("term")
    assert list(coef.index) == ["H_EN", "H_HI", "H_RU", "H_ZH", "LM_HI", "Intercept"]
    assert coef.loc["LM_HI", "estimate"] == pytest.approx(0.5, abs=0.05)
    table = beta_table({("m", "hi"): fit})
    assert table.loc[0, "HI"] == pytest.approx(coef.loc["LM_HI", "estimate"])
    assert table.loc[0, "p_HI"] == pytest.approx(coef.loc["LM_HI", "p"]) and table.loc[0, "p_HI"] < 0.05
    # from coefficient tables (what the report stage reads back), in the study's language order
    no_lm = fit_leakage(target, human, "en")
    table = beta_table({("m", "hi"): fit.coefficients, ("m", "en"): no_lm.coefficients}, ["en", "ru", "hi"])
    assert list(table.columns) == ["model", "EN", "RU", "HI", "p_EN", "p_RU", "p_HI"]
    assert table.loc[0, "p_HI"] == pytest.approx(coef.loc["LM_HI", "p"])
    assert table[["EN", "RU", "p_EN", "p_RU"]].isna().all().all()


def test_missing_cells_dropped_or_zero_filled_and_scaling():
    human = synthetic_human(5, missing=0.2)
    target = leaky_target(human)
    dropped, _ = design_table(target, human, target_language="hi", missing="drop")
    zeroed, _ = design_table(target, human, target_language="hi", missing="zero")
    assert len(zeroed) == 960 and len(dropped) < len(zeroed)
    assert not dropped.isna().any().any()
    fit_drop = fit_leakage(target, human, "hi", missing="drop").summary()
    fit_zero = fit_leakage(target, human, "hi", missing="zero").summary()
    assert fit_drop["n_dropped_missing_human"] == 960 - len(dropped) == fit_zero["n_zero_filled_missing_human"]
    assert fit_drop["n_obs"] == len(dropped) and fit_zero["n_dropped_missing_human"] == 0
    std, _ = design_table(target, human, target_language="hi", scale="standardised", missing="drop")
    assert std["y"].mean() == pytest.approx(0, abs=1e-9) and std["H_RU"].std(ddof=0) == pytest.approx(1)
    fit = fit_leakage(target, human, "hi", scale="standardised", missing="drop")
    assert fit.coefficients.set_index("term").loc["H_RU", "p"] < 0.05


def test_degenerate_optimum_is_not_kept():
    """On these matrices L-BFGS reports convergence at a singular random-effects covariance (llf = +inf,
    trait variance 0, intercept SE ~3e7); the fit keeps the best finite converged optimum instead."""
    human = synthetic_human()
    fit = fit_leakage(leaky_target(human), human, "hi", missing="drop")
    tried = {c["method"]: c for c in fit.summary()["optimisers_tried"]}
    assert tried["lbfgs"]["converged"] and tried["lbfgs"]["llf"] is None  # the degenerate one
    assert fit.converged and fit.optimiser != "lbfgs"
    assert fit.log_likelihood == max(c["llf"] for c in tried.values() if c["llf"] is not None and c["converged"])
    assert 1.0 < fit.trait_variance < 16.0  # the truth: trait effects with sd 2
    assert fit.coefficients.set_index("term").loc["Intercept", "se"] < 5


def test_no_converged_optimiser_keeps_the_highest_likelihood():
    human = synthetic_human(1)
    fit = fit_leakage(leaky_target(human, seed=2), human, "hi", maxiter=1, missing="drop")
    s = fit.summary()
    assert s["converged"] is False and not any(c["converged"] for c in s["optimisers_tried"])
    finite = [c for c in s["optimisers_tried"] if c["llf"] is not None]
    best = max(finite, key=lambda c: c["llf"])
    assert s["optimiser"] == best["method"] and s["log_likelihood"] == best["llf"]
    assert any("did not converge with any optimiser" in n for n in s["notes"])


def test_qualitative_table_finds_leaked_cells():
    human = synthetic_human(8, missing=0.0)
    target = human["RU"].copy()
    q = qualitative_table(target, human, "RU", "HI", top_k=10)
    assert len(q) == 10
    assert (q["source"] == "RU").all() and (q["target"] == "HI").all()
    assert (q["model_z"] > 0).all() and (q["source_human_z"] > q["target_human_z"]).all()
    assert q["leak_score"].is_monotonic_decreasing


def write_lexicon(folder) -> str:
    """traits.csv and groups.csv naming the synthetic matrices' labels."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"trait": TRAITS}).to_csv(folder / "traits.csv", index=False)
    pd.DataFrame({"group": GROUPS}).to_csv(folder / "groups.csv", index=False)
    return str(folder)


def test_cli_fit_writes_coefficients_and_edges(tmp_path, capsys):
    from stereolens.cli import main

    human = synthetic_human(11)
    hdir = tmp_path / "human"
    for lang, m in human.items():
        write_matrix(m, hdir / f"H_{lang}.csv")
    write_matrix(leaky_target(human, seed=12), tmp_path / "model_hi.csv")
    rng = np.random.default_rng(13)
    write_matrix(pd.DataFrame(rng.normal(size=(32, 30)), index=human["EN"].index, columns=GROUPS), tmp_path / "base.csv")
    out = tmp_path / "out"
    lexicon = write_lexicon(tmp_path / "lexicon")
    rc = main(["leakage", "fit", "--human", str(hdir), "--model-scores", str(tmp_path / "model_hi.csv"),
               "--target", "HI", "--baseline", str(tmp_path / "base.csv"), "--output", str(out),
               "--lexicon", lexicon])
    assert rc == 0
    coef = pd.read_csv(out / "coefficients.csv")
    assert list(coef.columns) == ["term", "estimate", "se", "z", "p", "ci_low", "ci_high"]
    assert list(coef["term"]) == ["H_EN", "H_HI", "H_RU", "H_ZH", "LM_HI", "Intercept"]
    edges = json.loads((out / "edges.json").read_text())
    assert [(e["source"], e["target"]) for e in edges] == [("RU", "HI")]
    # without a baseline the term is absent and the output says so
    rc = main(["leakage", "fit", "--human", str(hdir), "--model-scores", str(tmp_path / "model_hi.csv"),
               "--target", "hi", "--scale", "standardised", "--output", str(tmp_path / "out2"), "--lexicon", lexicon])
    assert rc == 0
    assert "LM_HI" not in set(pd.read_csv(tmp_path / "out2" / "coefficients.csv")["term"])
    assert "no monolingual baseline" in capsys.readouterr().out
    fit_json = json.loads((tmp_path / "out2" / "fit.json").read_text())
    assert fit_json["baseline_available"] is False and fit_json["scale"] == "standardised"


def test_cli_reports_missing_input_in_one_line(tmp_path, capsys):
    from stereolens.cli import main

    rc = main(["leakage", "fit", "--human", str(tmp_path / "nope"), "--model-scores", "x.csv", "--target", "hi",
               "--output", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "human matrix directory not found" in err[0]


def test_flow_figure_writes_png_and_svg(tmp_path):
    from stereolens.studies.leakage.report import flow_figure

    edges = [{"panel": "m/ilps", "source": "RU", "target": "HI", "estimate": 0.3, "p": 0.001}]
    paths = flow_figure(edges, ["m/ilps", "m/choice"], ["en", "ru", "zh", "hi"], tmp_path / "flow")
    assert sorted(p.suffix for p in paths) == [".png", ".svg"]
    assert all(p.stat().st_size > 0 for p in paths)
