"""Known answers for the validity review of the leakage study (ISSUE27: leakage items and multiple comparisons).

Each test fails on the code before the review: unconverged fits' edges were reported, missing human cells
were dropped by default, each choice pair was asked in one order, every left pole was "negative", the two
survey paths read different minimum keys, and the edges carried no multiple-comparison correction.  (Issue
31 revised the annotator minimum: a thin group keeps its values, test_leakage_thin_groups.py.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.errors import DataError
from stereolens.studies.leakage.choice import choice_scores, same_polarity_pairs
from stereolens.studies.leakage.lexicon import load_lexicon
from stereolens.studies.leakage.fit import design_table, fit_leakage, leakage_edges, with_edge_corrections

from test_leakage_fit import GROUPS, TRAITS, leaky_target, synthetic_human

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "data" / "seed" / "leakage"
DEFAULT = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lex():
    return load_lexicon(SEED)


# ----------------------------------------------------------------------------- 1. convergence


def test_edges_of_a_fit_that_did_not_converge_are_flagged_and_not_reported():
    human = synthetic_human(1)
    fit = fit_leakage(leaky_target(human, seed=2), human, "hi", maxiter=1, missing="drop")
    assert fit.converged is False
    flagged = leakage_edges(fit, converged_only=False)
    assert flagged and all(e["converged"] is False for e in flagged)  # RU -> HI is planted (0.3)
    assert leakage_edges(fit) == []  # the default leaves them out
    converged = fit_leakage(leaky_target(human, seed=2), human, "hi", missing="drop")
    assert converged.converged and all(e["converged"] for e in leakage_edges(converged))


def test_report_counts_unconverged_edges_and_leaves_them_out_of_the_headline():
    from stereolens.studies.leakage.report import report_markdown

    coef = pd.DataFrame({"panel": ["m/ilps"] * 2, "target": ["HI", "EN"], "term": ["H_RU", "H_RU"],
                         "estimate": [0.3, 0.2], "p": [0.001, 0.002], "missing": "zero", "converged": [True, False]})
    edges = [{"panel": "m/ilps", "source": "RU", "target": "HI", "estimate": 0.3, "p": 0.001, "converged": True,
              "missing": "zero", "configured": True},
             {"panel": "m/ilps", "source": "RU", "target": "EN", "estimate": 0.2, "p": 0.002, "converged": False,
              "missing": "zero", "configured": True}]
    fits = [{"panel": "m/ilps", "target_language": t, "terms": ["H_RU"], "n_obs": 960, "n_traits": 32,
             "missing": "zero", "scale": "raw", "converged": c, "baseline_available": True} for t, c in (("HI", True), ("EN", False))]
    md = report_markdown(model_id="m", coefficients=coef, edges=edges, beta=pd.DataFrame({"model": []}),
                         qualitative=pd.DataFrame(), fit_summaries=fits, nonmatching=None, provenance={})
    assert "**1 leakage edges**" in md and "1 more from fits that did not converge, not reported" in md
    assert "Not reported: 1 edge(s) from fits whose MixedLM did not converge: m/ilps RU->EN" in md


# ----------------------------------------------------------------------------- 2. missing human cells


def _nonshared_human(seed: int = 21) -> dict[str, pd.DataFrame]:
    """Complete 32 x 30 matrices, then each language leaves out the other languages' three home groups
    (as the published survey does for non-shared groups): 9 missing columns per language."""
    human = synthetic_human(seed, missing=0.0)
    home = {"EN": GROUPS[0:3], "RU": GROUPS[3:6], "ZH": GROUPS[6:9], "HI": GROUPS[9:12]}
    for lang, m in human.items():
        foreign = [g for other, gs in home.items() if other != lang for g in gs]
        m[foreign] = np.nan
    return human


def test_zero_fill_is_the_default_and_equals_the_reference_codes_fit():
    """The reference code (mixed_effect.py) sets missing human cells to 0 and fits statsmodels' MixedLM with
    a random intercept per trait: our default fit must give its numbers, from a frame we build by hand."""
    import statsmodels.formula.api as smf

    human = _nonshared_human()
    rng = np.random.default_rng(22)
    target = 0.3 * human["RU"].fillna(0) + rng.normal(0, 2, size=(32, 1)) + rng.normal(0, 3, size=(32, 30))
    fit = fit_leakage(target, human, "hi")  # no missing argument: the study's default
    assert fit.missing == "zero" and fit.n_obs == 960
    # by hand: long format, NaN -> 0, the reference formula
    rows = []
    for t in TRAITS:
        for g in GROUPS:
            rows.append({"trait": t, "y": target.loc[t, g],
                         **{f"H_{lang}": (0.0 if np.isnan(m.loc[t, g]) else m.loc[t, g]) for lang, m in human.items()}})
    frame = pd.DataFrame(rows)
    # the optimiser our fit kept (L-BFGS stops at a singular covariance here; fit_leakage tries several)
    ref = smf.mixedlm("y ~ H_EN + H_HI + H_RU + H_ZH", frame, groups=frame["trait"]).fit(reml=True, method=fit.optimiser)
    ours = fit.coefficients.set_index("term")
    for term in ("H_EN", "H_HI", "H_RU", "H_ZH"):
        assert ours.loc[term, "estimate"] == pytest.approx(ref.fe_params[term], abs=1e-8), term
        assert ours.loc[term, "p"] == pytest.approx(ref.pvalues[term], rel=1e-6), term
    assert ours.loc["H_RU", "estimate"] == pytest.approx(0.3, abs=0.05) and ours.loc["H_RU", "p"] < 0.05
    dropped, _ = design_table(target, human, target_language="hi", missing="drop")
    assert len(dropped) == 960 - 12 * 32  # every non-shared group is missing in some language: all 12 leave
    assert DEFAULT["fit"]["missing"] == "zero"


def test_both_edge_sets_side_by_side():
    from stereolens.studies.leakage.report import edge_sets_side_by_side

    coef = pd.DataFrame({
        "panel": ["m/ilps"] * 4, "target": ["HI"] * 4, "term": ["H_RU", "H_ZH", "H_RU", "H_ZH"],
        "estimate": [0.3, 0.1, 0.25, -0.1], "p": [0.001, 0.01, 0.2, 0.01],
        "missing": ["zero", "zero", "drop", "drop"], "converged": True})
    table = edge_sets_side_by_side(coef).set_index("source")
    assert list(table.index) == ["RU", "ZH"]
    assert table.loc["RU", "edge_zero"] and not table.loc["RU", "edge_drop"]
    assert table.loc["ZH", "edge_zero"] and not table.loc["ZH", "edge_drop"]  # negative under drop: no edge
    assert table.loc["RU", "p_drop"] == pytest.approx(0.2)


# ----------------------------------------------------------------------------- 3. position bias


@dataclass(frozen=True)
class _Spec:
    kind: str = "chat"


class FirstOptionScorer:
    """A deterministic chooser with a planted position bias: every trait is equally likely on its own merits,
    but the option listed first in the prompt gets ``bias`` nats more (and 'neither' is never chosen)."""

    spec = _Spec()

    def __init__(self, bias: float, merit: dict[str, float] | None = None):
        self.bias, self.merit = bias, merit or {}

    def loglikelihood(self, requests):
        from stereolens.models.base import Loglikelihood

        out = []
        for r in requests:
            user = r.messages[-1].content
            option = r.continuation.strip()
            if option == "neither":
                out.append(Loglikelihood(-50.0, 1))
                continue
            others = [w for w in _QUOTED.findall(user) if w != option and w != "neither"]
            first = user.index(f"'{option}'") < user.index(f"'{others[0]}'")
            out.append(Loglikelihood(self.merit.get(option, 0.0) + (self.bias if first else 0.0), 1))
        return out


import re  # noqa: E402

_QUOTED = re.compile(r"[‘'“\"]([^’'”\"]+)[’'”\"]")


def test_both_orders_cancel_a_planted_position_bias(lex):
    from stereolens.studies.leakage.choice_order import first_listed_wins

    chooser = FirstOptionScorer(bias=2.0)
    one, per_one, _ = choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=["woman"],
                                      both_orders=False)
    both, per_both, _ = choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=["woman"])
    # one order: the planted bias is measured exactly; a trait listed only first scores sigmoid(2), one
    # listed only second 1 - sigmoid(2) (the first trait of an odd class is both: 1/2)
    assert first_listed_wins(per_one) == 1.0 and first_listed_wins(per_both) == 1.0
    only_first = set(per_one["trait1"]) - set(per_one["trait2"])
    only_second = set(per_one["trait2"]) - set(per_one["trait1"])
    s1 = one.set_index("trait")["score"]
    sigmoid = 1 / (1 + np.exp(-2.0))
    assert len(only_first) == len(only_second) == 15  # 17 pairs; two first traits are also a wrap pair's second
    np.testing.assert_allclose(s1[sorted(only_first)], sigmoid, atol=1e-9)
    np.testing.assert_allclose(s1[sorted(only_second)], 1 - sigmoid, atol=1e-9)
    # both orders (the default): every trait has equal merit, so every score is exactly 1/2
    np.testing.assert_allclose(both["score"], 0.5, atol=1e-9)
    assert len(per_both) == 2 * len(per_one)


def test_both_orders_keep_a_real_preference(lex):
    chooser = FirstOptionScorer(bias=2.0, merit={"wealthy": 1.0})
    both = choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=["woman"])[0].set_index("trait")
    assert both.loc["wealthy", "score"] > 0.5 and DEFAULT["choice"]["both_orders"] is True


def test_first_listed_wins_from_samples_and_ties():
    from stereolens.studies.leakage.choice_order import first_listed_wins

    gens = pd.DataFrame({"language": "en", "group": "woman", "trait1": ["a", "a", "a", "c", "c"],
                         "trait2": ["b", "b", "b", "d", "d"], "match": ["trait1", "trait1", "trait2", "trait1", "trait2"]})
    assert first_listed_wins(gens) == pytest.approx(0.75)  # a-b: first wins 2 of 3; c-d: a tie, one half


# ----------------------------------------------------------------------------- 4. headline without a baseline


def test_headline_says_association_without_a_baseline():
    from stereolens.studies.leakage.report import edges_label, report_markdown

    assert edges_label(True) == "leakage edges"
    assert "association" in edges_label(False) and "leakage edges" not in edges_label(False)
    fits = [{"panel": "m/ilps", "target_language": "HI", "terms": ["H_RU"], "n_obs": 960, "n_traits": 32,
             "missing": "zero", "scale": "raw", "converged": True, "baseline_available": False}]
    md = report_markdown(model_id="m", coefficients=pd.DataFrame({"term": []}), edges=[], beta=pd.DataFrame({"model": []}),
                         qualitative=pd.DataFrame(), fit_summaries=fits, nonmatching=None, provenance={})
    assert "**0 cross-language association edges" in md and "not as leakage in the paper's sense" in md


# ----------------------------------------------------------------------------- 5. polarity


def test_non_polar_traits_are_compared_only_with_each_other(lex):
    pol = dict(zip(lex.traits["trait"], lex.traits["polarity"]))
    assert pol["religious"] == pol["traditional"] == "neutral"  # Cao et al. 2024 section 4.2.3
    assert pol["untrustworthy"] == "negative" and pol["warm"] == "positive" and pol["irrational"] == "negative"
    for design in ("all", "matching"):
        for a, b in same_polarity_pairs(lex, design=design):
            assert pol[a] == pol[b], (a, b)
    opponents = {b for a, b in same_polarity_pairs(lex, design="all") if a == "religious"}
    assert opponents == {"traditional", "modern", "non religious", "conservative", "liberal"}


def test_an_unknown_polarity_is_refused_in_one_line(tmp_path):
    import shutil

    seed = tmp_path / "seed"
    shutil.copytree(SEED, seed)
    text = (seed / "traits.csv").read_text(encoding="utf-8").replace("religious,8,beliefs,left,neutral",
                                                                      "religious,8,beliefs,left,nonpolar")
    (seed / "traits.csv").write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=r"traits.csv line 16, column polarity: 'nonpolar'"):
        load_lexicon(seed)


# ----------------------------------------------------------------------------- 6. one annotator rule


# The published path's thin groups (Hindi immigrant n = 1, Asian person n = 4): kept with their published values
# and listed, not blanked (issue 31): test_leakage_thin_groups.py::test_hindi_thin_groups_keep_their_published_values


def test_the_new_survey_path_reads_the_same_key(tmp_path, monkeypatch, capsys):
    from stereolens.cli import main
    from stereolens.studies.leakage.matrices import read_matrix
    from test_leakage_survey import ASSIGNED, simulate_survey

    table = simulate_survey(load_lexicon(SEED), "EN", ASSIGNED, seed=1)
    path = tmp_path / "judgements.csv"
    table.to_csv(path, index=False)
    judgements = {"path": str(path), "qc": dict(DEFAULT["judgements"]["qc"])}
    study = dict(DEFAULT, languages=["en"], seed_dir=str(SEED), survey=str(tmp_path / "none"),
                 judgements=judgements, min_annotators_per_group=3)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"tracking": {"enabled": False}, "study": {"leakage": study}}))
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "leakage-human"]) == 0
    h_en = read_matrix(Path("data/processed/leakage/human/H_EN.csv"))
    assert h_en[["lesbian", "Texan"]].notna().all().all()  # 3 and 4 passing annotators: not thin at a minimum of 3
    assert pd.read_csv("data/processed/leakage/human/thin_groups.csv").empty
    # the old per-path key is refused, naming the one key
    judgements["qc"]["min_annotations_per_group"] = 5
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"tracking": {"enabled": False}, "study": {"leakage": study}}))
    assert main(["stage", "leakage-human"]) != 0
    assert "study.leakage.min_annotators_per_group" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 7. multiple comparisons


def test_holm_and_bh_over_the_non_target_family_by_hand():
    # one treatment's family: the four non-target terms (the target's own H_HI and the intercept are not
    # leakage tests); the other treatment is its own family
    rows = [("m/ilps", "H_EN", 0.002, "zero"), ("m/ilps", "H_RU", 0.01, "zero"), ("m/ilps", "H_ZH", 0.03, "zero"),
            ("m/ilps", "H_HI", 0.0001, "zero"), ("m/ilps", "Intercept", 0.0, "zero"), ("m/choice", "H_EN", 0.5, "zero"),
            ("m/ilps", "H_EN", 0.01, "drop"), ("m/ilps", "H_RU", 0.04, "drop")]
    coef = pd.DataFrame([{"panel": panel, "target": "HI", "term": term, "estimate": 0.1, "p": p, "missing": missing,
                          "converged": True} for panel, term, p, missing in rows])
    edges = [{"panel": "m/ilps", "source": "EN", "target": "HI", "estimate": 0.1, "p": 0.002, "missing": "zero",
              "converged": True}]
    out, adjusted = with_edge_corrections(coef, edges)
    zero = out[(out["missing"] == "zero")].set_index(["panel", "term"])
    # family p = 0.002, 0.01, 0.03, 0.5 (n = 4). Holm: 4 x 0.002 = 0.008, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06,
    # 0.5.  BH: 0.008, 0.02, 0.04, 0.5
    assert zero.loc[("m/ilps", "H_EN"), "p_holm"] == pytest.approx(0.008)
    assert zero.loc[("m/ilps", "H_RU"), "p_holm"] == pytest.approx(0.03)
    assert zero.loc[("m/ilps", "H_ZH"), "p_holm"] == pytest.approx(0.06)
    assert zero.loc[("m/ilps", "H_ZH"), "p_bh"] == pytest.approx(0.04)
    assert zero.loc[("m/ilps", "H_RU"), "p_bh"] == pytest.approx(0.02)
    assert np.isnan(zero.loc[("m/ilps", "H_HI"), "p_holm"]) and np.isnan(zero.loc[("m/ilps", "Intercept"), "p_bh"])
    drop = out[out["missing"] == "drop"].set_index("term")
    assert drop.loc["H_EN", "p_holm"] == pytest.approx(0.02) and drop.loc["H_RU", "p_bh"] == pytest.approx(0.04)
    assert adjusted[0]["p_holm"] == pytest.approx(0.008) and adjusted[0]["p_bh"] == pytest.approx(0.008)


# ----------------------------------------------------------------------------- issue 32: robustness variants


def test_one_order_matrix_is_what_a_one_order_run_scores(lex):
    """Re-aggregating the stored both-order queries to their first listing gives exactly the scores of a run
    asked in that order only; the two orders' scores average to the both-order scores (each trait meets each of
    its opponents once in either order)."""
    from stereolens.studies.leakage.items import to_matrix
    from stereolens.studies.leakage.robustness import one_order_matrix

    chooser = FirstOptionScorer(bias=2.0, merit={"wealthy": 1.0, "poor": -0.5})
    groups = ["woman", "man"]
    both, per_both, _ = choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=groups)
    one, _, _ = choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=groups, both_orders=False)
    like = to_matrix(both, lex.trait_order, lex.group_order)
    first = one_order_matrix(per_both, "first", like)
    second = one_order_matrix(per_both, "second", like)
    pd.testing.assert_frame_equal(first, to_matrix(one, lex.trait_order, lex.group_order))
    pd.testing.assert_frame_equal((first + second) / 2, like)
    assert not first.equals(second)  # the planted position bias moves each order's scores
    # a table asked in one order only has no second listing to split off
    assert one_order_matrix(choice_scores(chooser, lex, "en", mode="logprob", design="matching", groups=groups,
                                          both_orders=False)[1], "first", like) is None


def _coefficients(rows: list[tuple[str, str, str, float, float]], *, converged: bool = True) -> pd.DataFrame:
    """Stacked coefficient rows (panel, target, term, estimate, p) of converged fits, with the other p columns."""
    df = pd.DataFrame(rows, columns=["panel", "target", "term", "estimate", "p"])
    return df.assign(converged=converged, missing="zero", p_holm=df["p"] * 4, p_bh=df["p"] * 2, p_cluster=df["p"] * 3)


def test_robustness_table_names_the_edges_each_variant_loses_or_adds():
    from stereolens.studies.leakage.robustness import FitVariants, robustness_summary, robustness_table

    configured = _coefficients([("m/ilps", "HI", "H_RU", 0.3, 0.001), ("m/ilps", "HI", "H_EN", 0.1, 0.02),
                                ("m/ilps", "HI", "H_HI", 0.9, 1e-9),  # the target's own term: never an edge
                                ("m/ilps", "EN", "H_RU", -0.2, 0.001)])  # negative: not an edge
    dropped = _coefficients([("m/ilps", "HI", "H_RU", 0.3, 0.001), ("m/ilps", "HI", "H_EN", 0.1, 0.2),
                             ("m/ilps", "HI", "H_HI", 0.9, 1e-9), ("m/ilps", "EN", "H_RU", 0.2, 0.01)])
    thin = _coefficients([("m/ilps", "HI", "H_RU", 0.3, 0.001), ("m/ilps", "HI", "H_EN", 0.1, 0.02),
                          ("m/ilps", "HI", "H_HI", 0.9, 1e-9)])
    variants = FitVariants(configured=configured, alternative=dropped.assign(missing="drop"), alternative_name="drop",
                           changed={("minimum annotators per group", "thin groups dropped"): [thin]})
    table = robustness_table(variants, alpha=0.05).set_index("variant")
    assert table.loc["headline", "decision"] == "2 edges: m/ilps EN->HI, m/ilps RU->HI"
    assert table.loc["drop", "decision"] == "2 edges: m/ilps RU->EN, m/ilps RU->HI (lost m/ilps EN->HI; new m/ilps RU->EN)"
    assert not table.loc["drop", "agrees"]
    assert table.loc["thin groups dropped", "agrees"]  # the HI fit swapped for its variant, EN kept as configured
    assert table.loc["Holm over the family of leakage tests", "decision"] == "1 edge: m/ilps RU->HI (lost m/ilps EN->HI)"
    assert table.loc["Benjamini-Hochberg over the family of leakage tests", "agrees"]  # 0.04 < 0.05
    assert table.loc["clustered by group (bootstrap)", "estimate"] == 1  # 0.06: EN->HI lost
    assert table.loc["headline", "n"] == 3  # the leakage tests: non-target terms of converged fits
    assert not table.loc["first-listed order only", "ran"]  # no choice panel in this run
    block = robustness_summary(table.reset_index())
    assert block == {"headline_decision": "2 edges: m/ilps EN->HI, m/ilps RU->HI", "survives": 3, "of": 6,
                     "not_run": 2, "table": "robustness.csv"}


def test_robustness_counts_the_edges_of_unconverged_fits_only_in_their_variant():
    from stereolens.studies.leakage.robustness import FitVariants, robustness_table

    configured = pd.concat([_coefficients([("m/ilps", "HI", "H_RU", 0.3, 0.001)]),
                            _coefficients([("m/ilps", "EN", "H_RU", 0.3, 0.001)], converged=False)], ignore_index=True)
    table = robustness_table(FitVariants(configured=configured), alpha=0.05).set_index("variant")
    assert table.loc["headline", "estimate"] == 1 and table.loc["headline", "n"] == 1
    assert table.loc["every fit, converged or not", "decision"] == "2 edges: m/ilps RU->EN, m/ilps RU->HI (new m/ilps RU->EN)"
    assert table.loc["every fit, converged or not", "n"] == 2


def test_mde_columns_cover_the_leakage_tests_at_alpha_and_at_each_familys_bonferroni_level():
    from statsmodels.stats.power import NormalIndPower

    from stereolens.studies.leakage.fit import with_minimum_detectable

    coef = pd.DataFrame({
        "panel": "m/ilps", "target": ["HI", "HI", "HI", "HI", "EN", "HI", "HI"],
        "term": ["H_RU", "H_EN", "H_HI", "Intercept", "H_RU", "H_RU", "H_EN"],
        "estimate": 0.1, "se": [0.02, 0.05, 0.01, 0.3, 0.04, 0.03, 0.06], "p": 0.2,
        "missing": ["zero"] * 5 + ["drop"] * 2, "converged": [True] * 4 + [False] + [True] * 2})
    out = with_minimum_detectable(coef, alpha=0.05, power=0.8)
    solve = NormalIndPower().solve_power
    # zero: two tests (the EN fit did not converge), drop: two tests
    for row in (0, 1, 5, 6):
        assert out.loc[row, "alpha_adjusted"] == pytest.approx(0.025)
        assert out.loc[row, "mde"] == pytest.approx(solve(None, nobs1=1, alpha=0.05, power=0.8, ratio=0) * coef.loc[row, "se"], rel=1e-5)
        assert out.loc[row, "mde_adjusted"] == pytest.approx(
            solve(None, nobs1=1, alpha=0.025, power=0.8, ratio=0) * coef.loc[row, "se"], rel=1e-5)
    # the target's own term, the intercept and an unconverged fit's term are no leakage tests
    assert out.loc[[2, 3, 4], ["mde", "mde_adjusted", "alpha_adjusted"]].isna().all().all()
