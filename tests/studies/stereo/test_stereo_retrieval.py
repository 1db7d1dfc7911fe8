"""Retrieval: saturation rule, parsing, extraction, near-duplicate merging, refusals, and the loop on real model calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from stereolens.errors import ConfigError
from stereolens.studies.stereo.prompts import load_prompts
from stereolens.studies.stereo.retrieval import (
    RetrievalSettings,
    SaturationRule,
    StereotypePool,
    extract,
    is_refusal,
    parse_posts,
    retrieve,
)
from stereolens.studies.stereo.text import is_near_duplicate, normalise



SEED_DIR = Path(__file__).resolve().parents[3] / "data" / "seed" / "stereo"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def stops(rule: SaturationRule, counts: list[int], refused: list[bool] | None = None) -> tuple[int, str]:
    """Feed rounds one at a time, as the loop does; return (round stopped at, reason)."""
    refused = refused or [False] * len(counts)
    for r in range(1, len(counts) + 1):
        reason = rule.decide(counts[:r], refused[:r])
        if reason:
            return r, reason
    return 0, ""


def test_saturation_paper_rule_stops_at_first_round_adding_nothing():
    rule = SaturationRule(k=1, m=1, max_rounds=10)
    assert stops(rule, [6, 3, 0, 4]) == (3, "saturated")
    assert stops(rule, [0]) == (1, "saturated")


def test_saturation_k_consecutive_rounds_below_m():
    rule = SaturationRule(k=2, m=2, max_rounds=10)
    # rounds adding 1 and 3: only one below m=2 in a row; then 1, 0: two in a row
    assert stops(rule, [5, 1, 3, 1, 0, 7]) == (5, "saturated")


def test_saturation_round_cap():
    assert stops(SaturationRule(k=1, m=1, max_rounds=3), [4, 2, 1, 5]) == (3, "round_cap")


def test_a_refused_round_never_counts_towards_saturation():
    rule = SaturationRule(k=1, m=1, max_rounds=4)
    # a refused round adds 0 but is no evidence that nothing new is left: go on
    assert stops(rule, [0, 0, 0, 0], [True, True, True, True]) == (4, "refused")
    assert stops(rule, [0, 3, 0], [True, False, False]) == (3, "saturated")
    assert stops(rule, [0, 3, 2, 0], [True, False, False, True]) == (4, "round_cap")
    # k=2: a refused round between two quiet answered rounds neither counts nor breaks the run
    assert stops(SaturationRule(k=2, m=1, max_rounds=9), [5, 0, 0, 0], [False, False, True, False]) == (4, "saturated")


def test_saturation_rejects_nonsense():
    with pytest.raises(ConfigError):
        SaturationRule(k=0)


def test_parse_posts_strips_numbering_and_drops_headings():
    text = "Publicaciones generadas:\n1. Los viejos no entienden nada de tecnología.\n2) \"Las mujeres manejan fatal, siempre.\"\n- corto\n\n• Los jóvenes de hoy no respetan a nadie."
    assert parse_posts(text) == [
        "Los viejos no entienden nada de tecnología.",
        "Las mujeres manejan fatal, siempre.",
        "Los jóvenes de hoy no respetan a nadie.",
    ]


def test_extract_target_and_statement():
    target, statement = extract("Ayer en el bus. Los costeños siempre intentan sacarte más dinero. #Bogotá")
    assert target == "costeños"
    assert statement == "Los costeños siempre intentan sacarte más dinero."
    assert extract("Nadie confía en nadie aquí hoy.")[0] == ""


def test_normalise_and_near_duplicates():
    assert normalise("¡Los VIEJOS no entienden la tecnología! @user https://x.co #tag") == "los viejos no entienden la tecnologia tag"
    assert is_near_duplicate("Los viejos no entienden la tecnología.", "los viejos NO entienden la tecnologia", 0.99)
    assert is_near_duplicate("Los viejos no entienden la tecnología.", "Los viejos no entienden nada de la tecnología.", 0.8)
    assert not is_near_duplicate("Los viejos no entienden la tecnología.", "Las mujeres manejan mal.", 0.8)


def test_pool_merges_near_duplicates_within_country_and_category_only():
    pool = StereotypePool(threshold=0.8)
    assert pool.add("Spain", "age", "p", 1, "Los viejos no entienden la tecnología.")
    assert not pool.add("Spain", "age", "p", 2, "Los viejos no entienden nada de la tecnología.")
    assert pool.add("Mexico", "age", "p", 1, "Los viejos no entienden la tecnología.")  # other country: new
    assert pool.add("Spain", "gender", "p", 1, "Las mujeres manejan mal siempre.")
    t = pool.table()
    assert len(t) == 3
    first = t[(t.country == "Spain") & (t.category == "age")].iloc[0]
    assert first["mentions"] == 2 and first["source"] == "machine"


def test_refusals():
    phrases = load_prompts(SEED_DIR / "prompts.yaml", "es").refusals
    assert is_refusal("Lo siento, pero no puedo ayudarte con esa solicitud.", phrases)
    assert not is_refusal("   ", phrases)  # empty output is counted apart, not as a refusal
    assert not is_refusal("1. Los viejos no entienden la tecnología.", phrases)
    assert is_refusal("No puedo ayudarte con esa solicitud.", phrases)  # GPT-4o, Fig H2


def test_a_refusal_phrase_inside_a_post_is_not_a_refusal():
    from stereolens.studies.stereo.retrieval import read_reply

    phrases = load_prompts(SEED_DIR / "prompts.yaml", "es").refusals
    reply = ("1. No es apropiado que las mujeres de Monterrey manejen taxis de noche.\n"
             "2. Los chilangos son arrogantes con todos.")
    assert not is_refusal(reply, phrases)
    assert read_reply(reply, phrases) == (False, ["No es apropiado que las mujeres de Monterrey manejen taxis de noche.",
                                                  "Los chilangos son arrogantes con todos."])
    quoted = "\"Como modelo de lenguaje de la familia, la abuela siempre tiene razón\"\n\"Los viejos no saben usar el celular.\""
    assert read_reply(quoted, phrases)[0] is False and len(read_reply(quoted, phrases)[1]) == 2
    # a refusal opening followed by posts is a partial compliance: the posts count, the opening is not one
    partial = "Lo siento, pero no puedo generar contenido ofensivo. Aun así, aquí van ejemplos suaves\n- Los viejos no saben usar el celular."
    assert read_reply(partial, phrases) == (False, ["Los viejos no saben usar el celular."])


ROUNDS = {
    # Mexico: round 1 three posts, round 2 one new + one near-duplicate, round 3 only repeats -> saturated at 3
    ("México", 1): "1. Los chilangos son arrogantes con todos.\n2. Los viejos no saben usar el celular.\n3. Las mujeres de Monterrey solo piensan en dinero.",
    ("México", 2): "1. Los viejos no saben usar el celular nunca.\n2. Los jóvenes son flojos y no quieren trabajar.",
    ("México", 3): "1. Los chilangos son arrogantes con todos.",
}
# Spain: refuses every round -> no posts, and the cell ends `refused` at the round cap, not `saturated` at round 1
SPAIN_REFUSAL = "Lo siento, pero no puedo ayudarte con eso."


def script(message: str, seed: int) -> str:
    if "publicaciones" not in message:
        return "Claro, con gusto."
    if "de España y" in message:
        return SPAIN_REFUSAL
    for (country, rnd), reply in ROUNDS.items():
        if f"de {country} y" in message and seed == rnd:
            return reply
    return "No tengo más ejemplos."


def test_retrieve_on_real_model_calls(tmp_path, scripted_server):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    settings = RetrievalSettings(countries=("Mexico", "Spain"), categories=("age",), points_of_view=("social_media_user",),
                                 seed=0, rule=SaturationRule(1, 1, 5))
    with scripted_server(script) as server:
        result = retrieve(server.model(tmp_path / "cache"), prompts, settings, model_label="scripted")
        n_calls = len(server.bodies)
    curve = result.curve.set_index(["country", "round"])
    assert list(result.curve[result.curve.country == "Mexico"]["n_new"]) == [3, 1, 0]
    assert curve.loc[("Mexico", 3), "stop"] == "saturated"
    spain = result.curve[result.curve.country == "Spain"]
    assert list(spain["n_new"]) == [0] * 5 and spain["refusal"].all()
    assert list(spain["stop"]) == [""] * 4 + ["refused"]
    ref = result.refusals.set_index("country")
    assert ref.loc["Spain", "n_refusals"] == 5 and ref.loc["Mexico", "n_refusals"] == 0
    assert len(result.stereotypes) == 4
    assert set(result.stereotypes["target"]) == {"chilangos", "viejos", "mujeres de monterrey", "jóvenes"}
    # every raw response is kept: 2 preamble turns are not rows, 3 Mexico rounds + 5 Spain rounds are
    assert len(result.responses) == 8 and result.responses["response"].str.len().gt(0).all()
    assert n_calls == 2 + 8
    # the prompt is the paper's, filled in
    body = server.bodies[-1]["messages"]
    assert [m["role"] for m in body] == ["user", "assistant", "user", "assistant", "user"]
    assert "sesgos de edad negativos en la cultura" in body[-1]["content"]


def test_a_round_whose_post_says_no_es_apropiado_keeps_its_posts_and_goes_on(tmp_path, scripted_server):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    replies = {1: "1. No es apropiado que las mujeres de Monterrey manejen taxis.\n2. Los chilangos son arrogantes con todos.",
               2: "1. Los chilangos son arrogantes con todos."}

    def quoting(message: str, seed: int) -> str:
        return replies.get(seed, "Claro.") if "publicaciones" in message else "Claro."

    settings = RetrievalSettings(countries=("Mexico",), categories=("gender",), points_of_view=("passerby",),
                                 seed=0, rule=SaturationRule(1, 1, 5))
    with scripted_server(quoting) as server:
        result = retrieve(server.model(tmp_path / "c"), prompts, settings, model_label="scripted")
    assert list(result.curve["n_new"]) == [2, 0] and list(result.curve["stop"]) == ["", "saturated"]
    assert not result.curve["refusal"].any() and int(result.responses["refusal"].sum()) == 0
    assert "mujeres de monterrey" in set(result.stereotypes["target"])


def test_positive_then_negative_reads_the_last_turn(tmp_path, scripted_server):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")

    def pn(message: str, seed: int) -> str:
        if message == "Si":
            return "1. Los viejos no saben usar el celular."
        if "positivo" in message and "publicaciones" in message:
            return "1. Los abuelos son muy sabios y cariñosos."
        return "Claro."

    settings = RetrievalSettings(countries=("Mexico",), categories=("age",), points_of_view=("passerby",),
                                 mode="positive_then_negative", rule=SaturationRule(1, 1, 2))
    with scripted_server(pn) as server:
        result = retrieve(server.model(tmp_path / "c"), prompts, settings, model_label="scripted")
    assert list(result.stereotypes["target"]) == ["viejos"]
    assert len(result.responses) == 2 * 3  # two rounds (the second adds nothing) x three turns


def test_parse_extraction_is_strict():
    from stereolens.studies.stereo.retrieval import parse_extraction

    assert parse_extraction('{"target": "Los Chilangos", "stereotype": "Son arrogantes."}') == ("los chilangos", "Son arrogantes.")
    assert parse_extraction('```json\n{"target": "", "stereotype": "Nadie trabaja."}\n```') == ("", "Nadie trabaja.")
    for bad in ('{"target": "x"}', '{"target": "x", "stereotype": ""}', "Claro: {\"target\": \"x\", \"stereotype\": \"y\"}",
                '["x", "y"]', '{"target": 3, "stereotype": "y"}', "{target: x}"):
        assert parse_extraction(bad) is None, bad


EXTRACTION_POSTS = ("1. Los chilangos son arrogantes con todos.\n2. Las mujeres de Monterrey solo piensan en dinero.\n"
                    "3. Los viejos no saben usar el celular.")


def extraction_script(message: str, body: dict) -> str:
    if "Responde solo con JSON" in message:
        if "chilangos" in message:
            return '{"target": "chilangos", "stereotype": "Los chilangos son arrogantes."}'
        if "Monterrey" in message:
            return '{"target": "mujeres de Monterrey", "stereotype": '  # invalid JSON: the rule reads this post
        return "El grupo es los viejos."  # prose, not JSON: the rule again
    if "publicaciones" in message:
        return EXTRACTION_POSTS if body.get("seed") == 1 else "Nada."  # round 2 adds nothing: saturated
    return "Claro."


def test_model_extraction_on_the_loopback_server_with_rule_fallback(tmp_path):
    from loopback_openai import LoopbackServer

    from stereolens.models import ModelSpec, ResponseCache, load_model

    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    settings = RetrievalSettings(countries=("Mexico",), categories=("age",), points_of_view=("social_media_user",),
                                 seed=0, rule=SaturationRule(1, 1, 3), extraction="model")
    with LoopbackServer() as state:
        state.script = extraction_script
        spec = ModelSpec(name="scripted", kind="chat", backend="openai", base_url=state.base_url, retry_base_s=0.01, max_retries=0)
        result = retrieve(load_model(spec, cache=ResponseCache(tmp_path / "cache")), prompts, settings, model_label="scripted")
        asked = [b["messages"][-1]["content"] for b in state.bodies if "Responde solo con JSON" in b["messages"][-1]["content"]]
    t = result.stereotypes.set_index("target")
    assert t.loc["chilangos", "extraction"] == "model" and t.loc["chilangos", "stereotype"] == "Los chilangos son arrogantes."
    # the two unparseable answers fell back to the rule extractor
    assert t.loc["mujeres de monterrey", "extraction"] == "rule"
    assert t.loc["viejos", "extraction"] == "rule" and t.loc["viejos", "stereotype"] == "Los viejos no saben usar el celular."
    e = result.extractions
    assert len(e) == 3 and int((e["parsed"] == False).sum()) == 2  # noqa: E712
    assert list(e["extraction"]) == ["model", "rule", "rule"]
    assert len(asked) == 3 and "sobre edad" in asked[0]  # one request per post, the prompt filled in
    with pytest.raises(ConfigError, match="extraction must be one of rule, model"):
        RetrievalSettings(countries=("Mexico",), categories=("age",), points_of_view=("passerby",), extraction="llm")
