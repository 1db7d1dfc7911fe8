"""Instantiation: triple parsing, the irrelevant-sentence check, the starter set, the annotator import, the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.stereo import instantiation as ins
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


def test_human_import_keeps_rows_accepted_by_distributor_and_authors(tmp_path):
    validated = pd.DataFrame([{"stereotype_id": "MX-age-001", "country": "Mexico", "category": "age", "target": "viejos"}])
    rows = [
        ["MX-age-001", "a1", "Juan tiene 70 años.", "Juan olvida todo.", "Juan recuerda todo.", "accepted", "accepted"],
        ["MX-age-001", "a2", "Ana tiene 70 años.", "Ana olvida todo.", "Ana recuerda todo.", "accepted", "rejected"],
        ["MX-age-001", "a3", "Luis tiene 70 años.", "Luis olvida todo.", "Luis recuerda todo.", "rejected", "accepted"],
    ]
    cols = ["stereotype_id", "annotator_id", "context", "sent_stereo", "sent_anti", "distributor_review", "author_review"]
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "h.csv", index=False)
    out, counts = ins.import_human_triples(tmp_path / "h.csv", validated)
    assert counts == {"submitted": 3, "accepted_by_distributor": 2, "accepted_by_authors": 1}
    assert out["context"].tolist() == ["Juan tiene 70 años."] and out["source"].tolist() == ["human"]
    rows[1][5] = "maybe"
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "h.csv", index=False)
    with pytest.raises(DataError, match="h.csv line 3, column distributor_review"):
        ins.import_human_triples(tmp_path / "h.csv", validated)


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
