"""The seegull study's parts without a model: the sample, the templates, the cross-locale regression against a
hand computation, the alignment through translations, the offensiveness split, the config checks, the plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stereolens.config.compose import compose_config as compose
from stereolens.datasets.seegull import NO_MAJORITY, NOT_STEREOTYPE, STEREOTYPE
from stereolens.errors import ConfigError, DataError
from stereolens.studies.seegull.analysis import (aligned_verdicts, checked_associations, cross_locale_fit,
                                                 locale_pairs, locale_table)
from stereolens.studies.seegull.associations import association_items, select_tuples
from stereolens.studies.seegull.templates import load_templates, templates_for

REPO = Path(__file__).resolve().parents[3]


def _tuples(locale: str, verdicts: list[str], start: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"locale": locale, "language": locale[:2], "identity": [f"id{i}" for i in range(start, start + len(verdicts))],
                         "attribute": "attr", "verdict": verdicts})


def test_the_sample_draws_per_verdict_per_locale_seeded_and_leaves_out_no_majority():
    mx = _tuples("es-MX", [STEREOTYPE] * 30 + [NOT_STEREOTYPE] * 50 + [NO_MAJORITY] * 5)
    es = _tuples("es-ES", [STEREOTYPE] * 4 + [NOT_STEREOTYPE] * 40, start=100)
    both = pd.concat([mx, es], ignore_index=True)
    drawn = select_tuples(both, per_verdict=10, seed=3)
    counts = drawn.groupby(["locale", "verdict"]).size().to_dict()
    # a verdict with fewer tuples than asked gives all of them
    assert counts == {("es-MX", STEREOTYPE): 10, ("es-MX", NOT_STEREOTYPE): 10, ("es-ES", STEREOTYPE): 4,
                      ("es-ES", NOT_STEREOTYPE): 10}
    assert drawn.equals(select_tuples(both, per_verdict=10, seed=3))
    assert not drawn.equals(select_tuples(both, per_verdict=10, seed=4))
    # a locale's draw does not depend on the other locales of the run, and stays in file order
    alone = select_tuples(mx, per_verdict=10, seed=3)
    assert alone["identity"].tolist() == drawn.loc[drawn["locale"] == "es-MX", "identity"].tolist()
    assert alone["identity"].tolist() == sorted(alone["identity"], key=lambda i: int(i[2:]))
    assert select_tuples(both, per_verdict=None, seed=3).equals(both)


def test_the_committed_templates_name_the_identity_before_the_attribute_in_every_language_of_the_dataset():
    from stereolens.datasets.seegull import LANGUAGES

    templates = load_templates(REPO / "data/seed/seegull")
    assert {t.language for t in templates} == set(LANGUAGES.values())
    assert all(t.source == "authored" for t in templates)
    son = templates_for(templates, "es", ["son"])[0]
    assert (son.prefix("afganos"), son.generic_prefix, son.suffix()) == ("Afganos son ", "Las personas son ", ".")


def test_a_template_with_the_attribute_first_or_an_unknown_id_is_refused(tmp_path):
    (tmp_path / "templates.csv").write_text(
        "language,template_id,template,generic,source\nes,son,{identity} son {attribute}.,la gente,authored\n"
        "es,late,{attribute} es lo típico de {identity}.,la gente,authored\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"templates.csv line 3, column template: \{identity\} comes after \{attribute\}"):
        load_templates(tmp_path)
    templates = load_templates(REPO / "data/seed/seegull")
    with pytest.raises(ConfigError, match=r"study.seegull.association.templates.es: \['nope'\] not among"):
        templates_for(templates, "es", ["nope"])
    with pytest.raises(ConfigError, match="has no template for language 'xx'"):
        templates_for(templates, "xx")


def test_the_generic_sentence_is_shared_by_every_identity_of_a_template():
    templates = load_templates(REPO / "data/seed/seegull")
    tuples = pd.DataFrame({"locale": ["es-MX", "es-ES"], "language": "es", "identity": ["afganos", "suecos"],
                           "attribute": "ordenados"})
    items = association_items(tuples, templates)
    assert len(items) == 4 and items["generic_prefix"].nunique() == 2
    assert set(items["prefix"]) == {"Afganos son ", "Suecos son ", "Cuando se habla de afganos, se piensa en ",
                                    "Cuando se habla de suecos, se piensa en "}


def test_the_cross_locale_fit_is_ols_with_identity_clustered_errors_by_hand():
    """Coefficients: least squares; standard errors: the cluster sandwich (X'X)^-1 (sum_g X_g'u_g u_g'X_g) (X'X)^-1
    with statsmodels' small-sample factor G/(G-1) (N-1)/(N-K), written out here with numpy."""
    rng = np.random.default_rng(2)
    n = 60
    identity = np.repeat([f"i{g}" for g in range(15)], 4)
    own, other = rng.integers(1, 4, n) / 3, rng.integers(1, 4, n) / 3
    association = 0.2 + 1.5 * own + 0.4 * other + np.repeat(rng.normal(0, 0.3, 15), 4) + rng.normal(0, 0.2, n)
    aligned = pd.DataFrame({"identity": identity, "association": association, "own_share": own, "other_share": other})
    rows = {r["term"]: r for r in cross_locale_fit(aligned, confidence=0.9)}
    x = np.column_stack([np.ones(n), own, other])
    beta = np.linalg.lstsq(x, association, rcond=None)[0]
    residual = association - x @ beta
    bread = np.linalg.inv(x.T @ x)
    meat = sum(np.outer(x[identity == g].T @ residual[identity == g], x[identity == g].T @ residual[identity == g])
               for g in np.unique(identity))
    groups, k = 15, 3
    cov = bread @ meat @ bread * groups / (groups - 1) * (n - 1) / (n - k)
    se = np.sqrt(np.diag(cov))
    for i, term in enumerate(("intercept", "own verdict", "other locale's verdict")):
        assert rows[term]["estimate"] == pytest.approx(beta[i], abs=1e-10)
        assert rows[term]["std_error"] == pytest.approx(se[i], rel=1e-8)
        assert rows[term]["n_aligned"] == n and rows[term]["n_identities"] == 15
        # the interval is the estimate +- the normal quantile times the clustered standard error
        from scipy import stats

        half = stats.norm.ppf(0.95) * se[i]
        assert (rows[term]["ci_low"], rows[term]["ci_high"]) == (pytest.approx(beta[i] - half), pytest.approx(beta[i] + half))


def test_too_few_aligned_tuples_or_a_constant_verdict_is_said_not_fitted():
    few = pd.DataFrame({"identity": ["a", "b"], "association": [1.0, 2.0], "own_share": [1 / 3, 1.0],
                        "other_share": [1.0, 2 / 3]})
    (row,) = cross_locale_fit(few, min_aligned=10)
    assert row["estimate"] is None and row["note"] == "2 aligned tuples, fewer than min_aligned 10"
    flat = pd.DataFrame({"identity": list("abcdefghijkl"), "association": np.arange(12.0), "own_share": 1.0,
                         "other_share": np.tile([1 / 3, 1.0], 6)})
    assert cross_locale_fit(flat)[0]["note"] == "a verdict is constant over the aligned tuples"


def test_alignment_pools_the_other_locales_tuples_with_the_same_translation():
    mine = pd.DataFrame({"locale": "es-MX", "identity": ["suecos", "noruegos"], "attribute": ["ordenados", "fríos"],
                         "identity_en": ["Swedes", "Norwegians"], "attribute_en": ["tidy", "cold"],
                         "association": [0.5, -0.1], "stereotype_share": [1.0, 1 / 3]})
    theirs = pd.DataFrame({"locale": "es-ES", "identity_en": ["swedes", "Swedes ", "Danes"],
                           "attribute_en": ["Tidy", "tidy", "cold"], "stereotype_votes": [3, 1, 2], "n_annotators": 3})
    aligned = aligned_verdicts(mine, theirs, [("es-MX", "es-ES")])
    assert len(aligned) == 1  # the Norwegians have no match
    row = aligned.iloc[0]
    assert (row["other_stereotype_votes"], row["other_annotators"], row["other_tuples"]) == (4, 6, 2)
    assert row["other_share"] == pytest.approx(4 / 6) and row["own_share"] == 1.0
    assert locale_pairs(["a", "b", "c"], None) == [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]


def test_the_verdict_comes_from_the_votes_and_offensiveness_splits_the_tuples():
    frame = pd.DataFrame({
        "locale": "es-MX", "identity": [f"i{i}" for i in range(8)], "attribute": "a",
        "stereotype_votes": ["3", "2", "1", "1", "3", "1", "2", "1"], "non_stereotype_votes": ["0", "1", "2", "2", "0", "2", "0", "1"],
        "unsure_votes": ["0", "0", "0", "0", "0", "0", "1", "1"],
        "association": ["0.9", "0.5", "0.1", "0.6", "0.2", "0.0", "0.3", "0.4"],
        "mean_offensive_score": ["3", "2", "0", "", "-1", "1", "2", "0"],
        "verdict": "stereotype"})  # a verdict column in the file is not trusted: it is recomputed from the votes
    table = checked_associations(frame, "f.csv")
    assert table["verdict"].tolist() == [STEREOTYPE, STEREOTYPE, NOT_STEREOTYPE, NOT_STEREOTYPE, STEREOTYPE,
                                         NOT_STEREOTYPE, STEREOTYPE, NO_MAJORITY]
    rows = locale_table(table, resamples=0).set_index("subset")
    # all: stereotype 0.9, 0.5, 0.2, 0.3 against not 0.1, 0.6, 0.0 -> 9 of 12 pairs won
    assert rows.loc["all", "auc"] == pytest.approx(9 / 12) and rows.loc["all", "n_no_majority"] == 1
    # offensive (score > 0): stereotype 0.9, 0.5, 0.3 against not 0.0 -> all won; the blank score is in neither
    assert (rows.loc["offensive", "n_stereotype"], rows.loc["offensive", "n_not"]) == (3, 1)
    assert rows.loc["offensive", "auc"] == 1.0
    assert (rows.loc["not_offensive", "n_stereotype"], rows.loc["not_offensive", "n_not"]) == (1, 1)
    assert rows.loc["all", "auc_low"] is None or np.isnan(rows.loc["all", "auc_low"])  # resamples 0: no interval


def test_the_paper_config_has_all_23_locales_and_every_tuple():
    paper = compose(["study/seegull=paper"])["study"]["seegull"]
    assert len(paper["locales"]) == 23 and paper["sample"]["per_verdict"] is None
    assert paper["analysis"]["cross_locale"] is None
    default = compose([])["study"]["seegull"]
    assert default["locales"] == ["es-MX", "es-ES", "hi-IN"] and default["sample"]["per_verdict"] == 100


@pytest.mark.parametrize("override, expect", [
    ("study.seegull.locales=[es-MX,xx-YY]", "study.seegull.locales: ['xx-YY'] are not SeeGULL locale codes"),
    ("study.seegull.analysis.cross_locale=[[es-MX,pt-BR]]", "names ['pt-BR'], not among study.seegull.locales"),
    ("study.seegull.sample.per_verdict=0", "study.seegull.sample.per_verdict must be an integer >= 1"),
])
def test_the_config_refuses_unknown_locales_in_one_line(override, expect):
    with pytest.raises(ConfigError) as caught:
        compose([override])
    assert expect in str(caught.value) and "\n" not in str(caught.value)


def test_the_plan_counts_the_stages_requests(data_mirror):
    from stereolens.studies.seegull.plan import plan

    config = compose([f"study.seegull.data={data_mirror / 'seegull_multilingual'}"])
    rows = pd.DataFrame(plan(config))
    assert set(rows["model"]) == set(config["models"]) and set(rows["language"]) == {"es-MX", "es-ES", "hi-IN"}
    # one template per language in the default: 200 tuples, 200 identity sentences per locale, plus the generic ones
    assert (rows["count"] > 200).all() and rows["note"].str.startswith("200 tuples; 200 identity").all()
    paper = compose([f"study.seegull.data={data_mirror / 'seegull_multilingual'}", "study/seegull=paper",
                     "study.seegull.locales=[es-MX]", "study.seegull.analysis.cross_locale=[]"])
    (row,) = [r for r in plan(paper) if r["model"] == paper["model"]["id"]]
    assert row["note"].startswith("1745 tuples; 3490 identity")  # every tuple, both Spanish templates
