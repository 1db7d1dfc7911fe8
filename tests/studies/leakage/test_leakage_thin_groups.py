"""Issue 31, leakage: groups rated by too few annotators are not missing cells, and the Holm/BH family holds
only the fits whose edges can be reported.

Before the fix the 5-annotator rule blanked Hindi "immigrant" (1 annotator) and "Asian person" (4) and the
default zero-fill then set those 64 published ratings to 0, while the reference ``mixed_effect.py`` reads
the published files and replaces only the 999 code; and the corrections ran over the terms of fits that did
not converge.  The known answers below come from the published survey files read with pandas and a
statsmodels MixedLM fitted by hand, not from our code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "data" / "seed" / "leakage"
LANGS = ("EN", "RU", "ZH", "HI")
THIN_HI = ["immigrant", "Asian person"]


@pytest.fixture(scope="module")
def survey(data_mirror) -> Path:
    path = Path(data_mirror) / "stereotype_leakage"
    if not path.is_dir():
        pytest.skip(f"leakage survey not in the data mirror ({path})")
    return path


@pytest.fixture(scope="module")
def human_dir(survey, tmp_path_factory) -> Path:
    """The leakage-human stage's output for the four published languages, with the default config."""
    from stereolens.cli import main

    tmp = tmp_path_factory.mktemp("leakage-human")
    study = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    study.update({"languages": [lang.lower() for lang in LANGS], "seed_dir": str(SEED), "survey": str(survey)})
    (tmp / "params.yaml").write_text(yaml.safe_dump({"tracking": {"enabled": False}, "study": {"leakage": study}}))
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        assert main(["stage", "leakage-human"]) == 0
    finally:
        os.chdir(cwd)
    return tmp / "data" / "processed" / "leakage" / "human"


def _published(survey: Path, lang: str) -> pd.DataFrame:
    """aggregated_data_<LANG>.csv as the reference reads it: pandas, 999 still in place."""
    return pd.read_csv(survey / f"aggregated_data_{lang}.csv").set_index("Traits")


def _target(survey: Path) -> pd.DataFrame:
    """A synthetic model matrix that leans on the Hindi ratings, the term the defect moved."""
    h_hi = _published(survey, "HI").replace(999, 0.0)
    rng = np.random.default_rng(31)
    return 0.02 * h_hi + rng.normal(0, 1, size=(len(h_hi), 1)) + rng.normal(0, 0.5, size=h_hi.shape)


def test_hindi_thin_groups_keep_their_published_values(human_dir, survey):
    from stereolens.studies.leakage.matrices import read_matrix

    published = read_matrix(survey / "aggregated_data_HI.csv")
    h_hi = read_matrix(human_dir / "H_HI.csv")
    # the published file rates immigrant (1 annotator) and Asian person (4); H_HI keeps those values
    assert published[THIN_HI].notna().all().all() and published[THIN_HI].to_numpy().max() > 0
    pd.testing.assert_frame_equal(h_hi, published, check_dtype=False, atol=1e-9)
    # ... and lists them as thin, with their counts: flagged, not missing
    thin = pd.read_csv(human_dir / "thin_groups.csv")
    assert thin.values.tolist() == [["HI", "immigrant", 1, 5], ["HI", "Asian person", 4, 5]]
    check = pd.read_csv(human_dir / "published_check.csv").set_index("language")
    assert check["missing_mismatch"].eq(0).all() and check.loc["HI", ["groups_below_min", "cells_below_min"]].tolist() == [2, 64]
    assert check["groups_below_min"].sum() == 2  # no other language keeps a thin group
    prov = json.loads((human_dir / "provenance.json").read_text())
    assert prov["HI"]["groups_below_min"] == ["immigrant (n = 1)", "Asian person (n = 4)"]


def test_default_fit_fills_only_the_999_cells_as_the_reference_does(human_dir, survey):
    """The reference: ``human_df.replace([999], 0.0)`` on the published files, then MixedLM with a random
    intercept per trait.  Our default fit on the stage's H matrices must give its coefficients."""
    import statsmodels.formula.api as smf

    from stereolens.studies.leakage.fit import fit_leakage
    from stereolens.studies.leakage.matrices import read_human_dir

    target = _target(survey)
    human = read_human_dir(human_dir)
    fit = fit_leakage(target, human, "hi")
    ref_h = {lang: _published(survey, lang).replace(999, 0.0).abs() for lang in LANGS}  # abs: as mixed_effect.py
    rows = [{"trait": t, "group": g, "y": target.loc[t, g], **{f"H_{lang}": ref_h[lang].loc[t, g] for lang in LANGS}}
            for g in target.columns for t in target.index]
    frame = pd.DataFrame(rows)
    ref = smf.mixedlm("y ~ H_EN + H_HI + H_RU + H_ZH", frame, groups=frame["trait"]).fit(reml=True, method=fit.optimiser)
    ours = fit.coefficients.set_index("term")
    for term in ("H_EN", "H_HI", "H_RU", "H_ZH", "Intercept"):
        assert ours.loc[term, "estimate"] == pytest.approx(ref.fe_params[term], rel=1e-6, abs=1e-9), term
        assert ours.loc[term, "se"] == pytest.approx(ref.bse_fe[term], rel=1e-5), term
    # the counts the README and config state, from the survey itself: 1,024 cells coded 999 in 11 groups,
    # 352 of the 960 rows; the 64 rows of the two thin Hindi groups are kept, not filled
    assert sum(int((_published(survey, lang) == 999).sum().sum()) for lang in LANGS) == 1024
    from stereolens.studies.leakage.matrices import read_thin_groups

    fit = fit_leakage(target, human, "hi", thin=read_thin_groups(human_dir))
    summary = fit.summary()
    assert (fit.n_obs, summary["n_zero_filled_missing_human"], summary["n_thin_kept"]) == (960, 352, 64)
    assert summary["thin_rule"] == "keep" and summary["thin_groups"] == {"HI": THIN_HI}
    assert fit.coefficients.set_index("term").loc["H_HI", "estimate"] == pytest.approx(ours.loc["H_HI", "estimate"])


def test_thin_rows_in_the_design_carry_the_published_ratings(human_dir, survey):
    from stereolens.studies.leakage.fit import design_table
    from stereolens.studies.leakage.matrices import read_human_dir, read_thin_groups

    df, notes = design_table(_target(survey), read_human_dir(human_dir), target_language="hi",
                             thin=read_thin_groups(human_dir))
    published = _published(survey, "HI")
    thin_rows = df[df["group"].isin(THIN_HI)].set_index(["trait", "group"])["H_HI"]
    assert len(thin_rows) == 64
    expected = published[THIN_HI].stack()
    expected.index.names = ["trait", "group"]
    pd.testing.assert_series_equal(thin_rows.sort_index(), expected.sort_index().astype(float), check_names=False)
    assert any("kept 64 rows of groups rated by too few annotators" in n for n in notes)
    assert any("filled 352 cells' missing human ratings with 0" in n for n in notes)


def test_thin_rule_drop_leaves_the_thin_rows_out_and_fills_nothing_more(human_dir, survey):
    from stereolens.studies.leakage.fit import design_table, fit_leakage
    from stereolens.studies.leakage.matrices import read_human_dir, read_thin_groups

    human, thin = read_human_dir(human_dir), read_thin_groups(human_dir)
    target = _target(survey)
    fit = fit_leakage(target, human, "hi", thin=thin, thin_rule="drop")
    s = fit.summary()
    assert (fit.n_obs, s["n_zero_filled_missing_human"], s["n_thin_dropped"], s["n_thin_kept"]) == (896, 352, 64, 0)
    both, _ = design_table(target, human, target_language="hi", thin=thin, thin_rule="drop", missing="drop")
    assert len(both) == 960 - 352 - 64 and not both["group"].isin(THIN_HI).any()


def test_the_command_line_lists_thin_groups_and_the_fit_applies_the_rule(survey, tmp_path, capsys):
    from stereolens.cli import main
    from stereolens.studies.leakage.matrices import write_matrix

    human = tmp_path / "human"
    assert main(["leakage", "human", "--survey", str(survey), "--output", str(human)]) == 0
    assert "note: HI immigrant: 1 annotator(s), fewer than 5: kept and listed as thin" in capsys.readouterr().out
    write_matrix(_target(survey), tmp_path / "model_hi.csv")
    for rule, n_obs in (("keep", 960), ("drop", 896)):
        out = tmp_path / rule
        assert main(["leakage", "fit", "--human", str(human), "--model-scores", str(tmp_path / "model_hi.csv"),
                     "--target", "hi", "--thin-groups", rule, "--output", str(out)]) == 0
        fit = json.loads((out / "fit.json").read_text())
        assert (fit["n_obs"], fit["thin_rule"], fit["n_zero_filled_missing_human"]) == (n_obs, rule, 352)
        assert fit[f"n_thin_{'kept' if rule == 'keep' else 'dropped'}"] == 64


def test_a_bad_thin_rule_is_refused():
    from stereolens.errors import ConfigError
    from stereolens.studies.leakage.fit import check_thin_rule

    assert check_thin_rule("drop") == "drop"
    with pytest.raises(ConfigError, match=r"study.leakage.fit.thin_groups must be one of keep, drop"):
        check_thin_rule("zero")
    default = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    assert default["fit"]["thin_groups"] == "keep" and default["fit"]["missing"] == "zero"


def test_the_report_page_states_both_rules():
    from stereolens.studies.leakage.report import report_markdown

    fits = [{"panel": "m/ilps", "target_language": "HI", "terms": ["H_EN", "H_HI"], "n_obs": 960, "n_traits": 32,
             "missing": "zero", "scale": "raw", "converged": True, "baseline_available": True,
             "n_zero_filled_missing_human": 352, "thin_rule": "keep", "n_thin_kept": 64, "n_thin_dropped": 0}]
    human = {"HI": {"source": "published survey", "min_annotators_per_group": 5,
                    "groups_below_min": ["immigrant (n = 1)", "Asian person (n = 4)"]}}
    md = report_markdown(model_id="m", coefficients=pd.DataFrame({"term": []}), edges=[],
                         beta=pd.DataFrame({"model": []}), qualitative=pd.DataFrame(), fit_summaries=fits,
                         nonmatching=None, provenance={"human": human})
    assert "missing human cells, the published 999 code: filled with 0" in md
    assert "groups rated by too few annotators: kept with their values" in md
    assert "Thin groups (rated by fewer than 5 annotators, the paper's stated minimum): HI immigrant (n = 1), " \
           "Asian person (n = 4)" in md
    assert "352 (group, trait) rows with a missing human cell zero-filled; 64 rows of thin groups kept" in md


# ----------------------------------------------------------------------------- the correction family


def test_holm_and_bh_family_leaves_out_fits_that_did_not_converge():
    from stereolens.studies.leakage.fit import family_size, with_edge_corrections

    # two converged fits (HI, EN) and one that did not converge (ZH) with the smallest p of all
    rows = [("HI", "H_EN", 0.004, True), ("HI", "H_RU", 0.02, True), ("EN", "H_RU", 0.03, True),
            ("ZH", "H_EN", 0.0001, False), ("ZH", "H_RU", 0.01, False)]
    coef = pd.DataFrame([{"panel": "m/ilps", "target": t, "term": term, "estimate": 0.1, "p": p, "missing": "zero",
                          "converged": c} for t, term, p, c in rows])
    edges = [{"panel": "m/ilps", "source": "EN", "target": "HI", "estimate": 0.1, "p": 0.004, "missing": "zero",
              "converged": True},
             {"panel": "m/ilps", "source": "EN", "target": "ZH", "estimate": 0.1, "p": 0.0001, "missing": "zero",
              "converged": False}]
    out, adjusted = with_edge_corrections(coef, edges)
    assert family_size(out, "zero") == 3
    by = out.set_index(["target", "term"])
    # family p = 0.004, 0.02, 0.03 (n = 3).  Holm: 3 x 0.004 = 0.012, 2 x 0.02 = 0.04, 0.03 -> max(0.04, 0.03)
    # = 0.04.  BH: 0.012, min(3/2 x 0.02, 0.03) = 0.03, 0.03
    assert by.loc[("HI", "H_EN"), "p_holm"] == pytest.approx(0.012)
    assert by.loc[("HI", "H_RU"), "p_holm"] == pytest.approx(0.04)
    assert by.loc[("EN", "H_RU"), "p_holm"] == pytest.approx(0.04)
    assert by.loc[("HI", "H_RU"), "p_bh"] == pytest.approx(0.03) and by.loc[("EN", "H_RU"), "p_bh"] == pytest.approx(0.03)
    # the unconverged fit's terms are outside the family: no adjusted p, not significant
    assert by.loc[[("ZH", "H_EN"), ("ZH", "H_RU")], ["p_holm", "p_bh"]].isna().all().all()
    assert not by.loc[("ZH", "H_EN"), "significant_holm"]
    assert adjusted[0]["p_holm"] == pytest.approx(0.012) and np.isnan(adjusted[1]["p_holm"])
