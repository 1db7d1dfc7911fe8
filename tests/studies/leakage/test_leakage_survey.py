"""New leakage surveys through the annotation layer: seeded simulated judgements -> QC -> H matrices.

The judgements come from the annotation layer's simulator with planted failures: an annotator who
fails the attention check (and is biased, so keeping them would move the matrix), one whose repeated
answers flip sides (self-agreement ~0), a group rated by 4 annotators of whom one fails (5 raw,
4 after QC -> missing) and a group with only 3 annotators (missing).  Expected cells are computed
here with numpy from the simulated rows, not with the aggregation under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from stereolens.annotation.scales import SLIDER_50
from stereolens.annotation.simulate import simulate_annotations
from stereolens.errors import DataError
from stereolens.io import SIGNIFICANT_DIGITS
from stereolens.studies.leakage.lexicon import load_lexicon

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "data" / "seed" / "leakage"
GOOD = [f"a{i}" for i in range(6)]
INATTENTIVE, INCONSISTENT = "a6", "a7"
# group -> annotators who rate it
ASSIGNED = {
    "woman": GOOD + [INATTENTIVE, INCONSISTENT],  # 6 pass -> kept
    "man": GOOD[:5] + [INATTENTIVE],  # 5 pass (boundary) -> kept
    "Texan": GOOD[:4] + [INCONSISTENT],  # 5 raw, 4 pass -> thin (kept, listed)
    "lesbian": GOOD[:3],  # 3 -> thin (kept, listed)
}


def _pairs(lex) -> list[str]:
    t = lex.traits
    return [f"{t[(t.pair_id == k) & (t.pole == 'left')].trait.iloc[0]} - {t[(t.pair_id == k) & (t.pole == 'right')].trait.iloc[0]}"
            for k in sorted(t.pair_id.unique())]


def _simulate(items: pd.DataFrame, who: list[str], reliability, bias, seed: int) -> pd.DataFrame:
    """simulate_annotations for the named annotators (its ids sim0.. renamed to ours)."""
    out = simulate_annotations(items, len(who), SLIDER_50, reliability=reliability, bias=bias, seed=seed)
    names = {f"sim{i:0{len(str(len(who) - 1))}d}": a for i, a in enumerate(who)}
    out["annotator_id"] = out["annotator_id"].map(names)
    return out.drop(columns=["truth"])


def simulate_survey(lex, language: str, assigned: dict[str, list[str]], seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    everyone = sorted({a for who in assigned.values() for a in who})
    rows = []
    for g_i, (group, who) in enumerate(assigned.items()):
        pairs = _pairs(lex)
        # truths away from the slider's midpoint: a careful annotator's repeat lands on the same side
        truth = rng.choice([-1, 1], len(pairs)) * rng.uniform(15, 45, len(pairs))
        items = pd.DataFrame({"item_id": [f"{language}|{group}|{p}" for p in pairs], "truth": truth,
                              "group": group, "trait_pair": pairs})
        rel = [0.9] * len(everyone)
        bias = [30.0 if a == INATTENTIVE else 0.0 for a in everyone]
        first = _simulate(items[["item_id", "truth"]], everyone, rel, bias, seed=100 * seed + g_i)
        first = first[first["annotator_id"].isin(who)].merge(items[["item_id", "group", "trait_pair"]], on="item_id")
        rows.append(first.assign(repeat=0))
        if group == "woman":  # the repeated group (Cao et al. 2024: the fifth group repeats an earlier one)
            again = _simulate(items[["item_id", "truth"]], everyone, rel, bias, seed=100 * seed + 50)
            flipped = _simulate(items[["item_id"]].assign(truth=-items["truth"]), [INCONSISTENT], 0.9, 0.0, seed=7)
            again = pd.concat([again[again["annotator_id"].isin(set(who) - {INCONSISTENT})],
                               flipped if INCONSISTENT in who else flipped.iloc[0:0]], ignore_index=True)
            again = again.merge(items[["item_id", "group", "trait_pair"]], on="item_id")
            rows.append(again.assign(repeat=1))
    # one attention check each: "move the slider to the far left"; the biased annotator misses it
    check = pd.DataFrame({"item_id": [f"{language}|attention"], "truth": [-50.0]})
    att = _simulate(check, everyone, 1.0, [30.0 if a == INATTENTIVE else 0.0 for a in everyone], seed=99)
    rows.append(att.assign(gold=-50.0, repeat=0))
    out = pd.concat(rows, ignore_index=True)
    out["language"] = language
    return out[["item_id", "annotator_id", "label", "language", "group", "trait_pair", "repeat", "gold", "source"]]


def expected_cell(judgements: pd.DataFrame, group: str, trait: str, pair: str, annotators: list[str]) -> float:
    rows = judgements[(judgements.group == group) & (judgements.trait_pair == pair) & (judgements.repeat == 0)
                      & judgements.annotator_id.isin(annotators)]
    assert len(rows) == len(annotators) == rows.annotator_id.nunique()
    left = pair.split(" - ")[0] == trait
    r = rows.label.to_numpy(dtype=float)
    return float(np.mean(np.maximum(-r, 0) if left else np.maximum(r, 0)))


@pytest.fixture(scope="module")
def lex():
    return load_lexicon(SEED)


@pytest.fixture
def survey_csv(tmp_path, lex):
    en = simulate_survey(lex, "EN", ASSIGNED, seed=1)
    # a language beyond the published survey's four, with five careful annotators
    de = simulate_survey(lex, "DE", {"woman": GOOD[:5], "man": GOOD[:5]}, seed=2)
    table = pd.concat([en, de], ignore_index=True)
    path = tmp_path / "judgements.csv"
    table.to_csv(path, index=False)
    return path, table


def _run_human_stage(tmp_path, monkeypatch, study_extra: dict) -> None:
    from stereolens.cli import main

    study = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    study.update({"seed_dir": str(SEED), "survey": str(tmp_path / "no-published-survey"), **study_extra})
    params = {"tracking": {"enabled": False}, "study": {"leakage": study}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "leakage-human"]) == 0


def test_simulated_survey_through_qc_to_h_matrices(tmp_path, monkeypatch, survey_csv, lex):
    from stereolens.studies.leakage.matrices import read_matrix

    path, table = survey_csv
    judgements = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text())["judgements"]
    judgements["path"] = str(path)
    _run_human_stage(tmp_path, monkeypatch, {"languages": ["en", "de"], "judgements": judgements})
    human = Path("data/processed/leakage/human")

    # the same layout as the published-survey matrices: Traits first, the study's traits and groups
    raw = pd.read_csv(human / "H_EN.csv")
    assert raw.columns[0] == "Traits" and list(raw["Traits"]) == lex.trait_order
    assert list(raw.columns[1:]) == lex.group_order
    h_en, h_de = read_matrix(human / "H_EN.csv"), read_matrix(human / "H_DE.csv")

    # QC: the planted annotators fail for their own reasons, everyone else passes
    ann = pd.read_csv(human / "qc" / "annotators.csv").set_index("annotator_id")
    en = ann[ann["language"] == "EN"]
    assert set(en.index[en["passed"]]) == set(GOOD)
    assert "attention" in en.loc[INATTENTIVE, "reason"]
    assert "self-agreement" in en.loc[INCONSISTENT, "reason"] and "attention" not in en.loc[INCONSISTENT, "reason"]
    per_lang = pd.read_csv(human / "qc" / "per_language.csv").set_index("language")
    assert per_lang.loc["EN", ["n_annotators", "n_passed"]].tolist() == [8, 6]
    assert per_lang.loc["DE", ["n_annotators", "n_passed"]].tolist() == [5, 5]
    groups = pd.read_csv(human / "qc" / "groups.csv").set_index(["language", "group"])
    assert groups.loc[("EN", "Texan"), "n_annotators"] == 4 and not groups.loc[("EN", "Texan"), "meets_min"]
    assert groups.loc[("EN", "lesbian"), "n_annotators"] == 3 and not groups.loc[("EN", "lesbian"), "meets_min"]
    assert groups.loc[("EN", "man"), "n_annotators"] == 5 and groups.loc[("EN", "man"), "meets_min"]

    # pole-split means over the passing annotators' first answers; thin groups keep theirs and are listed
    pairs = _pairs(lex)
    for group, who in (("woman", GOOD), ("man", GOOD[:5])):
        for pair in pairs:
            for trait in pair.split(" - "):
                expect = expected_cell(table[table.language == "EN"], group, trait, pair, who)
                # the matrix file holds SIGNIFICANT_DIGITS significant digits: half a unit of the last
                assert h_en.loc[trait, group] == pytest.approx(expect, rel=0.5 * 10 ** (1 - SIGNIFICANT_DIGITS))
    # Texan (4 passing) and lesbian (3) are thin at the minimum of 5: their means stay (a missing cell would be
    # zero-filled by the fit as if nobody had rated them) and thin_groups.csv lists them (issue 31)
    assert h_en.loc["powerless", "Texan"] == pytest.approx(
        expected_cell(table[table.language == "EN"], "Texan", "powerless", pairs[0], GOOD[:4]))
    assert h_en[["Texan", "lesbian"]].notna().all().all()
    thin = pd.read_csv(human / "thin_groups.csv")
    assert sorted(map(tuple, thin[["language", "group", "n_annotators"]].values.tolist())) == [
        ("EN", "Texan", 4), ("EN", "lesbian", 3)]
    assert h_en.drop(columns=["woman", "man", "Texan", "lesbian"]).isna().all().all()
    assert h_en[["woman", "man"]].notna().all().all()
    assert h_de[["woman", "man"]].notna().all().all() and h_de.drop(columns=["woman", "man"]).isna().all().all()
    assert h_de.loc["powerless", "woman"] == pytest.approx(
        expected_cell(table[table.language == "DE"], "woman", "powerless", pairs[0], GOOD[:5]))

    prov = json.loads((human / "provenance.json").read_text())
    assert prov["EN"]["source"] == "judgements" and prov["EN"]["annotation_source"] == "simulated"
    assert (prov["EN"]["n_annotators_passed"], prov["EN"]["n_groups_kept"]) == (6, 2)
    assert not (human / "published_check.csv").exists()  # nothing came from the published survey


def test_judgement_languages_beside_the_published_survey(tmp_path, monkeypatch, survey_csv, data_mirror):
    """EN from the judgements, RU from the published survey (still gated on reproducing its files)."""
    from stereolens.studies.leakage.matrices import read_matrix

    survey = Path(data_mirror) / "stereotype_leakage"
    if not survey.is_dir():
        pytest.skip(f"leakage survey not in the data mirror ({survey})")
    path, _ = survey_csv
    _run_human_stage(tmp_path, monkeypatch, {"languages": ["en", "ru"], "survey": str(survey),
                                             "judgements": {"path": str(path)}})
    human = Path("data/processed/leakage/human")
    check = pd.read_csv(human / "published_check.csv")
    assert list(check["language"]) == ["RU"] and (check["max_abs_diff"] < 1e-6).all()
    published = read_matrix(survey / "aggregated_data_RU.csv")
    pd.testing.assert_frame_equal(read_matrix(human / "H_RU.csv"), published, check_dtype=False)
    # the simulated EN (2 groups rated by 5 or more, Texan and lesbian thin), not the published one (Texan rated by 34)
    assert read_matrix(human / "H_EN.csv")["muscovite"].isna().all()
    assert pd.read_csv(human / "thin_groups.csv")[["language", "group"]].values.tolist() == [["EN", "Texan"], ["EN", "lesbian"]]
    prov = json.loads((human / "provenance.json").read_text())
    assert (prov["EN"]["source"], prov["RU"]["source"]) == ("judgements", "published survey")
    assert set(pd.read_csv(human / "qc" / "per_language.csv")["language"]) == {"EN"}  # DE is not a study language


def test_a_language_in_neither_source_is_refused_in_one_line(tmp_path, monkeypatch, survey_csv, capsys):
    from stereolens.cli import main

    path, _ = survey_csv
    study = yaml.safe_load((REPO / "conf" / "study" / "leakage" / "default.yaml").read_text(encoding="utf-8"))
    study.update({"seed_dir": str(SEED), "languages": ["en", "fr"], "judgements": {"path": str(path)}})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"tracking": {"enabled": False}, "study": {"leakage": study}}))
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "leakage-human"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FR" in err[0] and "judgements" in err[0]


def test_bad_judgement_rows_are_named(tmp_path, lex, survey_csv):
    from stereolens.studies.leakage.survey import read_survey_judgements

    _, table = survey_csv
    bad = table.copy()
    bad.loc[3, "trait_pair"] = "powerless - mighty"
    p = tmp_path / "bad.csv"
    bad.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"line 5, column trait_pair: trait 'mighty'"):
        read_survey_judgements(p, lex.trait_order, lex.group_order)
    bad = table.copy()
    bad.loc[0, "label"] = 75
    bad.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"line 2, column label .*outside \[-50"):
        read_survey_judgements(p, lex.trait_order, lex.group_order)
    bad = table.copy()
    bad.loc[0, "group"] = "martians"
    bad.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"line 2, column group: group 'martians'"):
        read_survey_judgements(p, lex.trait_order, lex.group_order)


def test_downstream_runs_take_the_least_human_source_of_the_h_matrices():
    """leakage-fit and leakage-report tag their MLflow runs from provenance.json: one simulated
    language makes the whole fit simulated; the published survey (no annotation_source) is human."""
    from stereolens.studies.leakage.stages import _human_source, least_human_source

    published = {"RU": {"source": "published survey", "path": "x"}}
    assert _human_source(published) == "human"
    assert _human_source({**published, "EN": {"source": "judgements", "annotation_source": "simulated"}}) == "simulated"
    assert _human_source({**published, "DE": {"source": "judgements", "annotation_source": "human+llm_panel"}}) == "llm_panel"
    assert least_human_source([]) == "human"
