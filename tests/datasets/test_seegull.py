"""SeeGULL Multilingual: the pinned files, the locale of a file name, and the schema every file is read through."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.datasets import ingest_dataset, load_registry
from stereolens.datasets.ingest import upstream_url
from stereolens.datasets.seegull import (COUNTRIES, LANGUAGES, NO_MAJORITY, NOT_STEREOTYPE, STEREOTYPE, alignment_key,
                                         locale_of, read_locale, read_seegull)
from stereolens.errors import ConfigError, DataError
from stereolens.io import sha256_file

REGISTRY = Path(__file__).resolve().parents[2] / "data" / "seed" / "datasets.yaml"
HEADER = "identity,attribute,non_stereotype,stereotype,unsure,mean_offensive_score,translated_identity,translated_attribute_list\n"
GOOD = HEADER + ("afganos,terrorista,0,3,0,4,afghans,terrorist\n"
                 "michoacanas,narcotraficante,2,1,0,4,Michoacan,drug dealer\n"
                 "suecos,ordenados,1,1,1,,Swedes,tidy\n"
                 "regios,trabajadores,0,1,2,-1,regios,hard-working\n")


def _file(folder: Path, text: str, name: str = "Spanish (es) in Mexico.csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_registry_pins_every_stereotypes_file_with_licence_and_attribution():
    spec = load_registry(REGISTRY)["seegull_multilingual"]
    assert spec.commit == "589a2580bb09533c6ff097ccd2ce05bce01cbdfd" and spec.license == "CC BY 4.0"
    assert "Bhutani" in spec.attribution and "2024.acl-short.75" in spec.attribution
    csvs = [f for f in spec.files if f.name.endswith(".csv")]
    assert len(csvs) == 23 and all(f.upstream == f"dataset/stereotypes/{f.name}" for f in csvs)
    assert {locale_of(f.name).code for f in csvs} == {
        "ar-AE", "bn-BD", "bn-IN", "de-DE", "es-ES", "es-MX", "fr-FR", "hi-IN", "id-ID", "it-IT", "ja-JP", "ko-KR",
        "mr-IN", "ms-MY", "nl-NL", "pt-BR", "pt-PT", "sw-KE", "ta-IN", "te-IN", "th-TH", "tr-TR", "vi-VN"}


def test_a_download_address_percent_encodes_the_spaces_of_an_upstream_name():
    spec = load_registry(REGISTRY)["seegull_multilingual"]
    fspec = next(f for f in spec.files if f.name == "Spanish (es) in Mexico.csv")
    assert upstream_url(spec, fspec) == (
        "https://raw.githubusercontent.com/google-research-datasets/SeeGULL-Multilingual/"
        "589a2580bb09533c6ff097ccd2ce05bce01cbdfd/dataset/stereotypes/Spanish%20%28es%29%20in%20Mexico.csv")


def test_ingest_from_the_mirror_records_licence_and_attribution(tmp_path, data_mirror):
    spec = load_registry(REGISTRY)["seegull_multilingual"]
    if not (data_mirror / spec.name).is_dir():
        pytest.skip(f"{spec.name} not in the mirror")
    out = ingest_dataset(spec, tmp_path / "raw" / spec.name, mirror=data_mirror)
    assert all(sha256_file(out / f.name) == f.sha256 for f in spec.files)
    record = json.loads((out / "PROVENANCE.json").read_text(encoding="utf-8"))
    assert record["license"] == "CC BY 4.0" and record["attribution"] == spec.attribution
    assert record["upstream_commit"] == (data_mirror / spec.name / "SOURCE_COMMIT").read_text().split()[0]
    tuples = read_seegull(out)
    # the published counts (Bhutani et al. 2024): Spanish in Mexico 1,745 tuples, in Spain 1,344, Hindi in India 763
    counts = tuples["locale"].value_counts()
    assert (counts["es-MX"], counts["es-ES"], counts["hi-IN"]) == (1745, 1344, 763)
    assert len(tuples) == 25861 and tuples["n_annotators"].eq(3).all()
    assert (tuples["stereotype_votes"] + tuples["non_stereotype_votes"] + tuples["unsure_votes"]).eq(3).all()
    # the Arabic file ends every identity with a comma (an export artefact): read without it
    arabic = tuples[tuples["locale"] == "ar-AE"]
    assert not arabic["identity"].str.contains(r"[,\u060c]$").any() and arabic["identity_en"].iloc[0] == "Zambian"


@pytest.mark.parametrize("name, code", [("Spanish (es) in Mexico.csv", "es-MX"), ("Hindi (hi) in India.csv", "hi-IN"),
                                        ("Vietnamese (vn) in Vietnam.csv", "vi-VN"), ("Arabic (ar) in UAE.csv", "ar-AE")])
def test_the_locale_code_comes_from_the_file_name(name, code):
    assert locale_of(name).code == code


@pytest.mark.parametrize("name, expect", [
    ("Klingon (kl) in Mexico.csv", "unknown language 'Klingon'"),
    ("Spanish (es) in Narnia.csv", "unknown country 'Narnia'"),
    ("Spanish (pt) in Mexico.csv", "code (pt) is not Spanish's (es)"),
    ("spanish_mexico.csv", "not named '<Language> (<code>) in <Country>.csv'"),
])
def test_an_unknown_locale_name_is_refused_naming_the_file(name, expect):
    with pytest.raises(DataError) as caught:
        locale_of(name)
    assert expect in str(caught.value) and repr(name) in str(caught.value) and "\n" not in str(caught.value)


def test_every_language_and_country_of_the_tables_has_a_two_letter_code():
    assert all(len(c) == 2 for c in LANGUAGES.values()) and all(len(c) == 2 and c.isupper() for c in COUNTRIES.values())


def test_a_file_is_read_with_votes_verdicts_and_a_missing_offensiveness(tmp_path):
    table = read_locale(_file(tmp_path, GOOD))
    assert list(table["locale"].unique()) == ["es-MX"]
    assert list(table["verdict"]) == [STEREOTYPE, NOT_STEREOTYPE, NO_MAJORITY, NO_MAJORITY]
    assert list(table["stereotype_share"]) == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3])
    assert pd.isna(table.loc[2, "mean_offensive_score"]) and table.loc[3, "mean_offensive_score"] == -1.0
    assert list(table["source_line"]) == [2, 3, 4, 5]


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t.replace("afganos,terrorista,0,3,0", "afganos,terrorista,0,2.5,0"),
     "line 2, column stereotype: stereotype vote count is not a whole number in 0..3, got '2.5'"),
    (lambda t: t.replace("michoacanas,narcotraficante,2,1,0", "michoacanas,narcotraficante,dos,1,0"),
     "line 3, column non_stereotype: non_stereotype vote count is not a whole number in 0..3, got 'dos'"),
    (lambda t: t.replace("regios,trabajadores,0,1,2", "regios,trabajadores,1,1,2"),
     "line 5: the votes non_stereotype + stereotype + unsure must sum to the 3 annotators of a tuple"),
    (lambda t: t.replace(",unsure,", ",unsur,"), "missing column(s) unsure"),
    (lambda t: t + "afganos,terrorista,1,2,0,3,afghans,terrorist\n", "line 6: duplicate row for identity 'afganos'"),
    (lambda t: t.replace(",4,afghans", ",7,afghans"), "line 2, column mean_offensive_score"),
])
def test_a_bad_file_is_refused_in_one_line_naming_file_line_and_column(tmp_path, edit, expect):
    path = _file(tmp_path, edit(GOOD))
    with pytest.raises(DataError) as caught:
        read_locale(path)
    message = str(caught.value)
    assert expect in message and path.name in message and "\n" not in message


def test_a_locale_the_folder_lacks_is_refused_naming_the_key(tmp_path):
    _file(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=r"study.seegull.locales: \['es-ES'\] not among the SeeGULL locales"):
        read_seegull(tmp_path, ["es-MX", "es-ES"], key="study.seegull.locales")
    assert len(read_seegull(tmp_path, ["es-MX"])) == 4


def test_the_alignment_key_folds_case_and_spaces():
    key = alignment_key(pd.Series(["Swedes ", "swedes"]), pd.Series(["tidy  people", "Tidy people"]))
    assert key.tolist() == ["swedes|tidy people", "swedes|tidy people"]
