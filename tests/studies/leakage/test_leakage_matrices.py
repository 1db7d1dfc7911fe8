"""The Cao et al. 2024 survey files and the H matrix format (stereolens.studies.leakage.matrices)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.leakage.matrices import (
    load_group_names,
    read_matrix,
    read_survey,
    survey_annotation_counts,
    survey_file,
    survey_to_matrices,
    write_matrix,
)

LANGS = ("EN", "RU", "ZH", "HI")


def test_matrix_roundtrip_keeps_missing(tmp_path):
    m = pd.DataFrame({"woman": [1.5, np.nan], "Texan": [np.nan, 2.0]}, index=pd.Index(["cold", "warm"], name="Traits"))
    path = write_matrix(m, tmp_path / "H_EN.csv")
    text = path.read_text().splitlines()
    assert text[0] == "Traits,woman,Texan" and text[1] == "cold,1.5,"
    back = read_matrix(path)
    pd.testing.assert_frame_equal(back, m, check_names=False)


def test_bad_rating_names_the_annotator(tmp_path):
    path = tmp_path / "data_full_english.json"
    path.write_text(json.dumps({"Annotator7": {"women": {"cold - warm": 70}}}))
    with pytest.raises(DataError, match="Annotator7"):
        read_survey(path)


@pytest.fixture(scope="module")
def survey_dir(data_mirror):
    return data_mirror / "stereotype_leakage"


def test_name_map_covers_every_survey_group(survey_dir):
    names = load_group_names()
    published = pd.read_csv(survey_dir / "aggregated_data_EN.csv").columns[1:].tolist()
    assert names.groups == published  # same 30 groups, published order
    for lang in LANGS:
        assert set(read_survey(survey_file(survey_dir, lang))["survey_group"]) <= set(names.survey_to_group)


def test_survey_reproduces_published_matrices(survey_dir):
    matrices = survey_to_matrices(survey_dir)
    for lang in LANGS:
        raw = pd.read_csv(survey_dir / f"aggregated_data_{lang}.csv", dtype=str).set_index("Traits")
        ours = matrices[lang]
        assert ours.shape == (32, 30)
        assert list(ours.index) == list(raw.index) and list(ours.columns) == list(raw.columns)
        published_missing = raw == "999"
        assert (ours.isna() == published_missing).all().all(), lang
        for group in raw.columns:
            for trait in raw.index:
                if published_missing.loc[trait, group]:
                    continue
                # the published cells are rounded (to at most 10 significant digits): equal at their precision
                text = raw.loc[trait, group]
                decimals = len(text.split(".")[1]) if "." in text else 0
                assert round(ours.loc[trait, group], decimals) == pytest.approx(float(text), abs=1e-12), (
                    lang, trait, group,
                )


def test_missing_rule_is_a_parameter(survey_dir):
    counts = survey_annotation_counts(survey_dir).set_index(["language", "group"])["n_annotators"]
    assert counts[("HI", "muscovite")] == 2 and counts[("HI", "Texan")] == 5 and counts[("HI", "immigrant")] == 1
    default = survey_to_matrices(survey_dir, ["HI"])["HI"]
    assert default["muscovite"].isna().all() and default["Texan"].notna().all()
    assert default["immigrant"].notna().all()  # shared groups are reported with any number of annotators
    relaxed = survey_to_matrices(survey_dir, ["HI"], min_foreign_nonshared=2)["HI"]
    assert relaxed["muscovite"].notna().all() and relaxed["Shanghainese person"].isna().all()
    strict = survey_to_matrices(survey_dir, ["HI"], min_annotators=2)["HI"]
    assert strict["immigrant"].isna().all()


def test_survey_as_judgements_agreement_and_coverage(survey_dir):
    import krippendorff

    from stereolens.annotation.agreement import krippendorff_alpha
    from stereolens.annotation.qc import QCConfig, run_qc
    from stereolens.studies.leakage.matrices import survey_judgements

    j = survey_judgements(survey_dir)
    assert len(j) == (136 + 144 + 164 + 160) * 16 and (j["source"] == "human").all()
    assert j.groupby("language")["annotator_id"].nunique().to_dict() == {"EN": 34, "RU": 36, "ZH": 41, "HI": 40}
    en = j[j["language"] == "EN"]
    wide = en.pivot(index="annotator_id", columns="item_id", values="label").to_numpy(dtype=float)
    res = krippendorff_alpha(en, "interval", n_boot=0)
    assert res.value == pytest.approx(krippendorff.alpha(reliability_data=wide, level_of_measurement="interval"))
    groups = run_qc(j, QCConfig(min_annotations_per_group=5)).groups.set_index(["language", "group"])
    assert groups.loc[("HI", "Asian person"), "n_annotators"] == 4 and not groups.loc[("HI", "Asian person"), "meets_min"]
    assert groups.loc[("EN", "Texan"), "meets_min"]


def test_read_matrix_names_bad_cell(tmp_path):
    path = tmp_path / "H_EN.csv"
    path.write_text("Traits,woman,man\ncold,1.5,\nwarm,n/a?,2\n")
    with pytest.raises(DataError, match=r"cell \('warm', 'woman'\) is 'n/a\?'"):
        read_matrix(path)


def test_default_name_map_is_found_from_the_package_not_the_working_directory(repo_root, tmp_path, monkeypatch):
    from stereolens.studies.leakage.matrices import repository_root

    # a stray file at the same relative path under the working directory must not be picked up
    stray = tmp_path / "data" / "seed" / "leakage" / "survey_group_names.csv"
    stray.parent.mkdir(parents=True)
    stray.write_text("something,else\n1,2\n")
    monkeypatch.chdir(tmp_path)
    assert repository_root() == repo_root
    names = load_group_names()
    assert len(names.groups) == 30 and "Texan" in names.groups


def test_missing_default_name_map_names_the_expected_path(tmp_path):
    from stereolens.studies.leakage.matrices import _default_name_map

    # a checkout (pyproject.toml) whose seed data is missing
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    package_file = tmp_path / "src" / "stereolens" / "studies" / "leakage" / "matrices.py"
    package_file.parent.mkdir(parents=True)
    package_file.write_text("")
    expected = tmp_path / "data" / "seed" / "leakage" / "survey_group_names.csv"
    with pytest.raises(DataError, match=rf"not found at the expected {expected}; pass the map's path \(--name-map\)$"):
        _default_name_map(package_file)
    outside = tmp_path.parent / f"{tmp_path.name}_site" / "stereolens" / "studies" / "leakage" / "matrices.py"
    outside.parent.mkdir(parents=True)
    with pytest.raises(DataError, match=r"no repository \(pyproject.toml\) above .*site.stereolens.studies.leakage"):
        _default_name_map(outside)
