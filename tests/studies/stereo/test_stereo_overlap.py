"""Overlap: symmetric shared counts, per-country denominators, adjudication, external datasets."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.stereo import overlap as ov


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
     r"adj.csv line 3, column right_id: 'B9' is not a validated stereotype nor a CrowS-Pairs or StereoSet item "
     r"\(crows-\.\.\. or stereoset-\.\.\.\), so the decision would count as adjudicated and decide nothing"),
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
