"""Overlap: symmetric shared counts, per-country denominators, adjudication, external datasets."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.stereo import overlap as ov
from stereolens.studies.stereo.seegull_reference import seegull_overlaps


def table(rows):
    return pd.DataFrame(rows, columns=["stereotype_id", "country", "category", "target", "stereotype"])


VALIDATED = table([
    ("A1", "A", "age", "viejos", "Los viejos no entienden la tecnología."),
    ("A2", "A", "age", "jóvenes", "Los jóvenes son vagos."),
    ("A3", "A", "gender", "mujeres", "Las mujeres manejan mal."),
    ("A4", "A", "gender", "hombres", "Los hombres no lloran."),
    ("B1", "B", "age", "viejos", "los viejos no entienden la tecnologia"),  # = A1 after normalisation
    ("B2", "B", "age", "viejos", "Los viejos no entienden la tecnología nunca."),  # near A1, but A1 is taken
    ("B3", "B", "gender", "mujeres", "Las mujeres manejan mal."),  # = A3
    ("C1", "C", "age", "jóvenes", "Los jóvenes son vagos."),  # = A2
    ("C2", "C", "gender", "mujeres", "Los viejos no entienden la tecnología."),  # same words as A1, other category
])


def test_shares_between_countries_are_symmetric_with_own_denominators():
    shares, pairs = ov.country_overlap(VALIDATED, ["A", "B", "C"], ["age", "gender"], ov.Matcher(0.6, 0.8))
    s = shares.set_index(["country", "other", "category"])
    # A and B share 2 (A1-B1 one-to-one, A3-B3); A has 4 validated, B has 3
    assert s.loc[("A", "B", "overall"), "shared"] == s.loc[("B", "A", "overall"), "shared"] == 2
    assert s.loc[("A", "B", "overall"), "share"] == pytest.approx(2 / 4)
    assert s.loc[("B", "A", "overall"), "share"] == pytest.approx(2 / 3)
    assert s.loc[("A", "B", "age"), "share"] == pytest.approx(1 / 2)
    assert s.loc[("B", "A", "age"), "share"] == pytest.approx(1 / 2)
    # C2 has A1's words but another category (and target): not present
    assert s.loc[("A", "C", "gender"), "shared"] == 0
    assert s.loc[("C", "A", "overall"), "share"] == pytest.approx(1 / 2)
    ab = pairs[(pairs["country"] == "A") & (pairs["other"] == "B") & (pairs["category"] == "age")]
    assert ab[["left_id", "right_id"]].values.tolist() == [["A1", "B1"]]


def test_adjudication_overrides(tmp_path):
    pd.DataFrame({"left_id": ["B3", "A4"], "right_id": ["A3", "B2"], "decision": ["absent", "present"]}).to_csv(tmp_path / "adj.csv", index=False)
    adj = ov.load_adjudication(tmp_path / "adj.csv")
    shares, _ = ov.country_overlap(VALIDATED, ["A", "B"], ["age", "gender"], ov.Matcher(), adj)
    s = shares.set_index(["country", "other", "category"])
    assert s.loc[("A", "B", "gender"), "shared"] == 0  # A3-B3 adjudicated absent
    pd.DataFrame({"left_id": ["x"], "right_id": ["y"], "decision": ["maybe"]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="bad.csv line 2, column decision"):
        ov.load_adjudication(tmp_path / "bad.csv")


def test_external_overlap_and_uncovered_categories(tmp_path):
    crows = pd.DataFrame({"sent_more": ["Las mujeres manejan mal.", "Old people are slow."], "bias_type": ["gender", "age"]})
    crows.to_csv(tmp_path / "crows.csv", index=False)
    t = ov.external_overlap(VALIDATED, ov.load_crows(tmp_path / "crows.csv"), ["A", "B", "C"], ["age", "gender"], ov.Matcher())
    t = t.set_index(["country", "category"])
    assert t.loc[("A", "gender"), "present"] == 1 and t.loc[("A", "gender"), "share"] == pytest.approx(1 / 2)
    assert t.loc[("overall", "overall"), "present"] == 2  # A3 and B3
    assert t.loc[("overall", "overall"), "n"] == 9
    ss = {"version": "1.0", "data": {"intersentence": [{"id": "i", "target": "Ethiopian", "bias_type": "race", "context": "c",
                                                         "sentences": [{"id": "s1", "sentence": "They are poor.", "gold_label": "stereotype"}]}],
                                      "intrasentence": []}}
    (tmp_path / "dev.json").write_text(json.dumps(ss))
    t2 = ov.external_overlap(VALIDATED, ov.load_stereoset(tmp_path / "dev.json"), ["A"], ["age"], ov.Matcher()).set_index(["country", "category"])
    assert not t2.loc[("A", "age"), "covered_by_dataset"] and t2.loc[("A", "age"), "share"] != t2.loc[("A", "age"), "share"]


@pytest.mark.parametrize("rows, message", [
    # a typo in a stereotype id: it exists nowhere, so the decision would count as adjudicated and decide nothing
    ([("A3", "B3", "absent"), ("A4", "B9", "present")],
     r"adj.csv line 3, column right_id: 'B9' is not a validated stereotype nor a CrowS-Pairs, StereoSet or SeeGULL "
     r"item \(crows-\.\.\. or stereoset-\.\.\. or seegull-\.\.\.\), so the decision would count as adjudicated and "
     r"decide nothing"),
    ([("A3", "B3", "absent"), ("B3", "A3", "present")], r"adj.csv line 3: the pair 'B3', 'A3' again \(first at line 2\)"),
    ([("A3", " ", "absent")], r"adj.csv line 2, column right_id: empty id"),
])
def test_adjudication_of_ids_that_exist_nowhere_is_refused(tmp_path, rows, message):
    pd.DataFrame(rows, columns=["left_id", "right_id", "decision"]).to_csv(tmp_path / "adj.csv", index=False)
    with pytest.raises(DataError, match=message):
        ov.country_overlap(VALIDATED, ["A", "B"], ["age", "gender"], ov.Matcher(), ov.load_adjudication(tmp_path / "adj.csv"))


def test_adjudication_of_an_external_item_must_name_one_of_its_items(tmp_path):
    crows = pd.DataFrame({"sent_more": ["Las mujeres manejan mal.", "Old people are slow."], "bias_type": ["gender", "age"]})
    crows.to_csv(tmp_path / "crows.csv", index=False)

    def overlaps(*rows, crows_path=str(tmp_path / "crows.csv")):
        pd.DataFrame(rows, columns=["left_id", "right_id", "decision"]).to_csv(tmp_path / "adj.csv", index=False)
        adj = ov.load_adjudication(tmp_path / "adj.csv")
        ov.country_overlap(VALIDATED, ["A", "B"], ["gender"], ov.Matcher(), adj)  # external ids are not its to check
        return ov.external_overlaps(VALIDATED, {"crows": crows_path, "stereoset": None}, ["A", "B"], ["gender"],
                                    ov.Matcher(), adj)

    # A3 = crows-0 by its words; adjudicated absent, it is no longer present
    tables, external = overlaps(("A3", "crows-0", "absent"))
    assert external["crows_pairs"]["present"] == 1  # B3 only
    with pytest.raises(DataError, match=r"adj.csv line 3, column right_id: 'crows-7' is not an item of .*crows.csv"):
        overlaps(("A3", "crows-0", "absent"), ("A4", "crows-7", "present"))
    with pytest.raises(DataError, match=r"line 2, column right_id: 'crows-0' is not an item of any file \(crows_pairs "
                                        r"is not available: study.stereo.overlap.crows is .*no.csv\)"):
        overlaps(("A3", "crows-0", "absent"), crows_path=str(tmp_path / "no.csv"))


# --- SeeGULL Multilingual: each country against its own locale's annotators

SEEGULL_HEADER = ("identity,attribute,non_stereotype,stereotype,unsure,mean_offensive_score,translated_identity,"
                  "translated_attribute_list\n")
SEEGULL_VALIDATED = table([
    ("MX-1", "Mexico", "gender", "mujeres", "Mujeres son chismosas."),      # = a stereotype tuple of es-MX
    ("MX-2", "Mexico", "gender", "hombres", "Hombres son machistas."),      # in es-MX, but 1 of 3 votes only
    ("MX-3", "Mexico", "race", "indígenas", "Los indígenas son flojos."),  # nowhere
    ("ES-1", "Spain", "gender", "mujeres", "Mujeres son chismosas."),      # es-ES has no such tuple
    ("AR-1", "Argentina", "gender", "mujeres", "Mujeres son chismosas."),  # Argentina has no SeeGULL locale
])


def seegull_folder(tmp_path):
    folder = tmp_path / "seegull"
    folder.mkdir()
    (folder / "Spanish (es) in Mexico.csv").write_text(SEEGULL_HEADER + (
        "mujeres,chismosas,0,3,0,1,women,gossips\n"
        "hombres,machistas,2,1,0,2,men,sexist\n"
        "regios,trabajadores,1,2,0,-1,regios,hard-working\n"
        "chilangos,groseros,0,2,1,1,chilangos,rude\n"), encoding="utf-8")
    (folder / "Spanish (es) in Spain.csv").write_text(SEEGULL_HEADER + "andaluces,graciosos,0,3,0,-1,Andalusians,funny\n",
                                                     encoding="utf-8")
    return folder


def test_seegull_overlap_in_both_directions_and_a_country_without_a_locale(tmp_path):
    cfg = {"data": str(seegull_folder(tmp_path)), "locales": {"Mexico": "es-MX", "Spain": "es-ES"},
           "statement": "{identity} son {attribute}."}
    countries = ["Mexico", "Spain", "Argentina"]
    table, matches, status = seegull_overlaps(SEEGULL_VALIDATED, cfg, countries, ["gender", "race"],
                                                 ov.Matcher(0.6, 0.8), ov.Adjudication())
    t = table.set_index(["direction", "country", "category"])
    # Mexico: 1 of its 3 validated stereotypes is among es-MX's 3 stereotype-majority tuples (MX-2's tuple has 1 vote)
    assert (t.loc[("study_in_seegull", "Mexico", "overall"), ["present", "n"]] == [1, 3]).all()
    assert t.loc[("study_in_seegull", "Mexico", "gender"), "share"] == pytest.approx(1 / 2)
    assert t.loc[("study_in_seegull", "Mexico", "race"), "share"] == 0
    # ... and the retrieval found 1 of es-MX's 3 stereotypes
    assert (t.loc[("seegull_in_study", "Mexico", "overall"), ["present", "n"]] == [1, 3]).all()
    assert (t.loc[("study_in_seegull", "Spain", "overall"), ["present", "n"]] == [0, 1]).all()
    assert (t.loc[("seegull_in_study", "Spain", "overall"), ["present", "n"]] == [0, 1]).all()
    assert set(t.loc[(slice(None), "Argentina", "overall"), "status"]) == {"no SeeGULL locale for this country"}
    assert matches[["stereotype_id", "seegull_id", "decided_by"]].values.tolist() == [["MX-1", "seegull-es-MX-2",
                                                                                      "normalised"]]
    assert status["by_country"]["Mexico"]["seegull_in_study"] == {"present": 1, "n": 3, "share": pytest.approx(1 / 3)}
    assert status["without_locale"] == ["Argentina"]
    missing = seegull_overlaps(SEEGULL_VALIDATED, {**cfg, "data": str(tmp_path / "none")}, countries, ["gender"],
                                  ov.Matcher(), ov.Adjudication())
    assert missing[0] is None and missing[2]["status"] == "not available"


def test_seegull_tuples_need_the_same_target_class_not_the_same_category(tmp_path):
    cfg = {"data": str(seegull_folder(tmp_path)), "locales": {"Mexico": "es-MX"}, "statement": "{identity} son {attribute}."}
    other_target = table([("MX-9", "Mexico", "gender", "suegras", "Mujeres son chismosas.")])
    table_, _, _ = seegull_overlaps(other_target, cfg, ["Mexico"], ["gender"], ov.Matcher(0.6, 0.8), ov.Adjudication())
    assert table_.set_index(["direction", "category"]).loc[("study_in_seegull", "overall"), "present"] == 0
    other_category = table([("MX-8", "Mexico", "age", "mujeres", "Mujeres son chismosas.")])
    table_, _, _ = seegull_overlaps(other_category, cfg, ["Mexico"], ["age"], ov.Matcher(0.6, 0.8), ov.Adjudication())
    assert table_.set_index(["direction", "category"]).loc[("study_in_seegull", "overall"), "present"] == 1


def test_adjudication_of_a_seegull_tuple_overrides_and_an_unknown_one_is_refused(tmp_path):
    cfg = {"data": str(seegull_folder(tmp_path)), "locales": {"Mexico": "es-MX"}, "statement": "{identity} son {attribute}."}
    pd.DataFrame([("MX-1", "seegull-es-MX-2", "absent"), ("MX-3", "seegull-es-MX-5", "present")],
                 columns=["left_id", "right_id", "decision"]).to_csv(tmp_path / "adj.csv", index=False)
    adj = ov.load_adjudication(tmp_path / "adj.csv")
    ov.country_overlap(SEEGULL_VALIDATED, ["Mexico"], ["gender"], ov.Matcher(), adj)  # SeeGULL ids are not its to check
    t, _, _ = seegull_overlaps(SEEGULL_VALIDATED, cfg, ["Mexico"], ["gender", "race"], ov.Matcher(0.6, 0.8), adj)
    t = t.set_index(["direction", "category"])
    assert t.loc[("study_in_seegull", "gender"), "present"] == 0 and t.loc[("study_in_seegull", "race"), "present"] == 1
    pd.DataFrame([("MX-1", "seegull-es-MX-3", "present")], columns=["left_id", "right_id", "decision"]).to_csv(
        tmp_path / "adj2.csv", index=False)  # line 3 is MX-2's tuple: 1 of 3 votes, not a SeeGULL stereotype
    with pytest.raises(DataError, match=r"adj2.csv line 2, column right_id: 'seegull-es-MX-3' is not a SeeGULL "
                                        r"stereotype of es-MX"):
        seegull_overlaps(SEEGULL_VALIDATED, cfg, ["Mexico"], ["gender"], ov.Matcher(),
                            ov.load_adjudication(tmp_path / "adj2.csv"))


def test_the_overlap_stage_writes_the_seegull_table_and_the_report_names_its_licence(tmp_path, monkeypatch):
    import yaml

    from stereolens.cli import main
    from stereolens.studies.stereo.report import _seegull_lines

    repo = __import__("pathlib").Path(__file__).resolve().parents[3]
    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    overlap = params["study"]["stereo"]["overlap"]
    overlap.update({"crows": None, "stereoset": None, "similarity": {**overlap["similarity"], "method": "lexical",
                                                                      "threshold": 0.6}})
    folder = seegull_folder(tmp_path)
    overlap["seegull"]["data"] = str(folder)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    validated = tmp_path / "data/interim/stereo/validation/validated.csv"
    validated.parent.mkdir(parents=True)
    SEEGULL_VALIDATED[SEEGULL_VALIDATED["country"].isin(["Mexico", "Spain"])].to_csv(validated, index=False)
    from stereolens.io import sha256_file

    (folder / "PROVENANCE.json").write_text(json.dumps(  # as the ingest stage writes it
        {"license": "CC BY 4.0", "attribution": "Bhutani et al. 2024", "upstream_commit": "589a2580",
         "files": [{"file": p.name, "sha256": sha256_file(p)} for p in folder.glob("*.csv")]}))
    assert main(["stage", "stereo-overlap"]) == 0
    written = pd.read_csv(tmp_path / "reports/stereo/overlap/table_seegull.csv")
    assert set(written["similarity_method"]) == {"lexical"} and set(written["threshold"]) == {0.6}
    summary = json.loads((tmp_path / "reports/stereo/overlap/summary.json").read_text())
    seegull = summary["external"]["seegull_multilingual"]
    assert seegull["license"] == "CC BY 4.0" and seegull["by_country"]["Mexico"]["study_in_seegull"]["present"] == 1
    text = "\n".join(_seegull_lines(tmp_path / "reports/stereo", seegull))
    assert "licence CC BY 4.0; attribution: Bhutani et al. 2024" in text and "3 annotators per tuple" in text
