"""Instantiation: triple parsing, the irrelevant-sentence check, the starter set, the annotator import, the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.stereo import instantiation as ins
from stereolens.studies.stereo import validation
from stereolens.studies.stereo.prompts import load_prompts
from stereolens.studies.stereo.text import content_words, load_stopwords

SEED_DIR = Path(__file__).resolve().parents[3] / "data" / "seed" / "stereo"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture(scope="module")
def stop():
    return load_stopwords(SEED_DIR / "stopwords_es.txt")


def test_parse_triples_from_labelled_lines():
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    text = ("Claro, aquí tienes:\n1. **Contexto:** Juan tiene 66 años.\n**Estereotipo:** Juan olvida todo.\n"
            "Antiestereotipo: Juan juega al ajedrez muy bien.\n\nContexto: Ana es joven.\nEstereotipo: Ana es vaga.\n"
            "Contexto: Pilar tiene 80 años.\nOración estereotipada: Pilar no usa el móvil.\nContraestereotipo: Pilar usa el móvil.\n"
            "Contexto: ...\nEstereotipo: ...\nAntiestereotipo: ...\n"
            "Contexto: Eva es joven.\nEstereotipo: Eva es vaga.\nAntiestereotipo: Eva es vaga.")
    assert ins.parse_triples(text, prompts.instance_labels) == [
        ("Juan tiene 66 años.", "Juan olvida todo.", "Juan juega al ajedrez muy bien."),
        ("Pilar tiene 80 años.", "Pilar no usa el móvil.", "Pilar usa el móvil."),
    ]


def test_content_words(stop):
    assert content_words("Las personas mayores no entienden la tecnología.", stop) == {"mayores", "entienden", "tecnologia"}


def test_irrelevant_sentence_shares_no_content_word(stop):
    corpus = pd.DataFrame({"id": ["a", "b", "c"], "text": ["El tren llegó tarde a Sevilla.", "La tecnología avanza.",
                                                            "Los girasoles siguen al sol."], "source": "authored"})
    context = "Manuel vive en Sevilla y estudia tecnología."
    # whatever order the key gives, a and b share a content word (sevilla, tecnologia): only c qualifies
    for key in ("x1", "x2", "x3", "x4"):
        assert ins.pick_unrelated(context, corpus, stop, key) == ("c", "Los girasoles siguen al sol.")
    with pytest.raises(DataError, match="instance k: every sentence"):
        ins.pick_unrelated("Los girasoles de Sevilla y la tecnología.", corpus, stop, "k")


def test_starter_set_is_about_forty_authored_triples_over_five_countries(stop):
    starter = ins.load_starter(SEED_DIR / "starter_instances.csv")
    assert len(starter) >= 40
    assert set(starter["country"]) == {"Spain", "Mexico", "Argentina", "Colombia", "Nicaragua"}
    assert starter["category"].nunique() >= 4 and (starter["source"] == "authored").all()
    corpus = ins.load_corpus(SEED_DIR / "irrelevant_sentences.csv")
    instances, prov = ins.assemble(starter, corpus, stop)
    assert list(instances.columns) == list(ins.INSTANCE_COLUMNS)
    for r in instances.itertuples():
        assert not content_words(r.context, stop) & content_words(r.sent_unrelated, stop)
    assert (prov["unrelated_source"] == "authored").all()


TRIPLE_COLUMNS = ["stereotype_id", "annotator_id", "context", "sent_stereo", "sent_anti", "distributor_review", "author_review"]
DEMOGRAPHICS = {"country": "Mexico", "ethnicity": "mestizo", "gender": "female", "religion": "catholic",
                "sexual_orientation": "heterosexual", "age_band": "22-40", "education": "college", "area": "urban"}
VALIDATED_MX = pd.DataFrame([{"stereotype_id": "MX-age-001", "country": "Mexico", "category": "age", "target": "viejos"},
                             {"stereotype_id": "MX-gender-001", "country": "Mexico", "category": "gender", "target": "mujeres"}])


def human_rows():
    return [
        ["MX-age-001", "a1", "Juan tiene 70 años.", "Juan olvida todo.", "Juan recuerda todo.", "accepted", "accepted"],
        ["MX-age-001", "a2", "Ana tiene 70 años.", "Ana olvida todo.", "Ana recuerda todo.", "accepted", "rejected"],
        ["MX-age-001", "a3", "Luis tiene 70 años.", "Luis olvida todo.", "Luis recuerda todo.", "rejected", "accepted"],
        ["MX-gender-001", "a1", "Marta maneja un taxi.", "Marta choca siempre.", "Marta maneja muy bien.", "accepted", "accepted"],
    ]


def annotators_file(path, **changes):
    rows = [{"annotator_id": a, **DEMOGRAPHICS} for a in ("a1", "a2", "a3")]
    rows[1].update(gender="male", age_band="41-60")
    for (i, col), value in changes.items():
        rows[i][col] = value
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_human_import_keeps_rows_accepted_by_distributor_and_authors(tmp_path):
    rows = human_rows()
    pd.DataFrame(rows, columns=TRIPLE_COLUMNS).to_csv(tmp_path / "h.csv", index=False)
    out, counts, annotators = ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX, annotators_file(tmp_path / "a.csv"))
    assert counts == {"submitted": 4, "accepted_by_distributor": 3, "accepted_by_authors": 2}
    assert out["context"].tolist() == ["Juan tiene 70 años.", "Marta maneja un taxi."] and set(out["source"]) == {"human"}
    # one row per annotator and category they wrote for: a1 wrote for age and gender
    assert sorted(map(tuple, annotators[["annotator_id", "panel"]].values)) == [
        ("a1", "Mexico/age"), ("a1", "Mexico/gender"), ("a2", "Mexico/age"), ("a3", "Mexico/age")]
    table = validation.demographics_table(annotators, "Mexico", ["age", "gender"]).set_index(["field", "value"])
    assert table.loc[("gender", "female"), "age"] == 2 and table.loc[("gender", "male"), "age"] == 1
    assert table.loc[("gender", "female"), "gender"] == 1 and table.loc[("age_band", "41-60"), "gender"] == 0
    rows[1][5] = "maybe"
    pd.DataFrame(rows, columns=TRIPLE_COLUMNS).to_csv(tmp_path / "h.csv", index=False)
    with pytest.raises(DataError, match="h.csv line 3, column distributor_review"):
        ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX, tmp_path / "a.csv")


def test_human_import_demographics_inline_in_the_triples_file(tmp_path):
    df = pd.DataFrame(human_rows(), columns=TRIPLE_COLUMNS).assign(**DEMOGRAPHICS)
    df.to_csv(tmp_path / "h.csv", index=False)
    _, _, annotators = ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX)
    assert sorted(annotators["annotator_id"].unique()) == ["a1", "a2", "a3"] and set(annotators["source"]) == {"human"}
    df.loc[3, "religion"] = "atheist"  # a1 again, with another religion than on line 2
    df.to_csv(tmp_path / "h.csv", index=False)
    with pytest.raises(DataError, match=r"h.csv line 5, column religion: annotator 'a1' has 'atheist' here but 'catholic'"):
        ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX)


@pytest.mark.parametrize("case, message", [
    ("no demographics", r"h.csv line 1: no annotator demographics \(missing column\(s\) country, ethnicity"),
    ("empty cell", r"instantiation annotators .*a.csv line 3, column education: empty education"),
    ("missing column", r"a.csv line 1: missing column\(s\) area"),
    ("unknown annotator", r"h.csv line 4, column annotator_id: 'a3' is not in .*a.csv"),
    ("other country", r"h.csv line 2, column annotator_id: annotator 'a1' is from 'Spain', stereotype 'MX-age-001' from 'Mexico'"),
    ("duplicate annotator", r"a.csv line 4, column annotator_id: duplicate value 'a1'"),
])
def test_human_import_refuses_bad_demographics_with_one_line(tmp_path, case, message):
    pd.DataFrame(human_rows(), columns=TRIPLE_COLUMNS).to_csv(tmp_path / "h.csv", index=False)
    annotators = annotators_file(tmp_path / "a.csv")
    a = pd.read_csv(annotators, dtype=str)
    if case == "empty cell":
        a.loc[1, "education"] = ""
    elif case == "missing column":
        a = a.drop(columns=["area"])
    elif case == "unknown annotator":
        a = a[a["annotator_id"] != "a3"]
    elif case == "other country":
        a.loc[0, "country"] = "Spain"
    elif case == "duplicate annotator":
        a.loc[2, "annotator_id"] = "a1"
    a.to_csv(annotators, index=False)
    with pytest.raises(DataError, match=message) as info:
        ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX, None if case == "no demographics" else annotators)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_generated_triples_through_the_model_layer(tmp_path, scripted_server):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    validated = pd.DataFrame([{"stereotype_id": "MX-age-001", "country": "Mexico", "category": "age", "target": "viejos",
                               "stereotype": "Los viejos no saben usar el celular.", "examples": json.dumps(["post uno"])}])

    def script(message: str, seed: int) -> str:
        if message.startswith("Estereotipo:"):
            return "Contexto: Don Pedro tiene 80 años.\nEstereotipo: Don Pedro no sabe usar el celular.\nAntiestereotipo: Don Pedro programa aplicaciones."
        return "Sí."

    with scripted_server(script) as server:
        triples, raw = ins.generate_triples(server.model(tmp_path / "c"), prompts, validated, ins.InstantiationSettings())
    assert triples[["id", "source", "context"]].values.tolist() == [["MX-age-001-m1", "machine", "Don Pedro tiene 80 años."]]
    assert raw["n_triples"].tolist() == [1]


def test_human_import_refuses_the_same_triple_twice(tmp_path):
    rows = human_rows()
    pd.DataFrame([*rows, rows[0]], columns=TRIPLE_COLUMNS).to_csv(tmp_path / "h.csv", index=False)
    with pytest.raises(DataError, match=rf"h.csv line {len(rows) + 2}: the same triple .* as line 2"):
        ins.import_human_triples(tmp_path / "h.csv", VALIDATED_MX, annotators_file(tmp_path / "a.csv"))
