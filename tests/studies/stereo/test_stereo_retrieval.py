"""Retrieval: saturation rule, parsing, extraction, near-duplicate merging, refusals, and the loop on real model calls."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
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
    assert read_reply(reply, phrases)[:2] == (False, ["No es apropiado que las mujeres de Monterrey manejen taxis de noche.",
                                                      "Los chilangos son arrogantes con todos."])
    quoted = "\"Como modelo de lenguaje de la familia, la abuela siempre tiene razón\"\n\"Los viejos no saben usar el celular.\""
    assert read_reply(quoted, phrases)[0] is False and len(read_reply(quoted, phrases)[1]) == 2
    # a refusal line followed by posts is a partial compliance: the posts count, the refusal line is not one (returned apart)
    partial = "Lo siento, pero no puedo generar contenido ofensivo. Aun así, aquí van ejemplos suaves\n- Los viejos no saben usar el celular."
    assert read_reply(partial, phrases) == (False, ["Los viejos no saben usar el celular."], [partial.splitlines()[0]])


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


# ---------------------------------------------------------------- issue 31: unnumbered posts, empty rounds, pov order

LONE_POST = "No es apropiado que las mujeres manejen autobuses, deberian quedarse en casa."


def test_a_lone_unnumbered_post_with_a_refusal_phrase_is_a_post():
    from stereolens.studies.stereo.retrieval import read_reply

    refusals = load_prompts(SEED_DIR / "prompts.yaml", "es").refusals
    # the paper's prompt asks for bare examples: an unnumbered post is a post, "no es apropiado" in it or not
    refused, posts = read_reply(LONE_POST, refusals)[:2]
    assert (refused, posts) == (False, [LONE_POST])
    assert not is_refusal(LONE_POST, refusals)


def test_an_unnumbered_post_first_of_several_is_kept():
    from stereolens.studies.stereo.retrieval import read_reply

    refusals = load_prompts(SEED_DIR / "prompts.yaml", "es").refusals
    reply = f"{LONE_POST}\nLos chilangos son arrogantes con todos.\nLas mujeres de Monterrey solo piensan en dinero."
    refused, posts = read_reply(reply, refusals)[:2]
    assert refused is False
    assert posts == [LONE_POST, "Los chilangos son arrogantes con todos.", "Las mujeres de Monterrey solo piensan en dinero."]


def test_a_real_refusal_is_still_a_refusal_and_its_line_is_never_a_post():
    from stereolens.studies.stereo.retrieval import read_reply

    refusals = load_prompts(SEED_DIR / "prompts.yaml", "es").refusals
    assert is_refusal("Lo siento, no puedo ayudar con eso.", refusals)
    assert read_reply("Lo siento, no puedo ayudar con eso.", refusals)[:2] == (True, [])
    # the statement to the requester is not a post wherever it stands, and it is counted, not dropped silently
    reply = "1. Los viejos no saben usar el celular.\nLo siento, no puedo generar más ejemplos de este tipo."
    read = read_reply(reply, refusals)
    assert (read.refused, read.posts) == (False, ["Los viejos no saben usar el celular."])
    assert read.refusal_lines == ["Lo siento, no puedo generar más ejemplos de este tipo."]


def two_cells_script(replies: dict[tuple[str, int], str]):
    """Replies by (point-of-view phrase of the prompt, round = seed); anything else adds nothing."""
    def answer(message: str, seed: int) -> str:
        if "publicaciones" not in message:
            return "Claro."
        for (pov_text, rnd), reply in replies.items():
            if pov_text in message and seed == rnd:
                return reply
        return "1. Los chilangos son arrogantes con todos."
    return answer


def test_empty_and_unparseable_rounds_do_not_saturate_and_end_no_output(tmp_path, scripted_server):
    from stereolens.studies.stereo.report import _retrieval_section
    from stereolens.studies.stereo.retrieval import retrieval_summary

    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")

    def nothing(message: str, seed: int) -> str:
        if "publicaciones" not in message:
            return "Claro."
        if "de España y" in message:
            return "Sí, claro."  # below min_words: no post to read
        return "" if seed < 3 else "1. Los chilangos son arrogantes con todos."  # Mexico: two empty rounds, then posts

    settings = RetrievalSettings(countries=("Mexico", "Spain"), categories=("gender",), points_of_view=("passerby",),
                                 seed=0, rule=SaturationRule(1, 1, 4))
    with scripted_server(nothing) as server:
        result = retrieve(server.model(tmp_path / "c"), prompts, settings, model_label="scripted")
    spain = result.curve[result.curve.country == "Spain"]
    assert list(spain["stop"]) == ["", "", "", "no_output"] and spain["no_output"].all() and not spain["refusal"].any()
    mexico = result.curve[result.curve.country == "Mexico"]
    # the two empty rounds are no evidence: round 3 adds one, round 4 nothing, so saturated at 4, not at 1
    assert list(mexico["n_new"]) == [0, 0, 1, 0] and list(mexico["no_output"]) == [True, True, False, False]
    assert list(mexico["stop"]) == ["", "", "", "saturated"]
    ref = result.refusals.set_index("country")
    assert ref.loc["Spain", "n_no_output"] == 4 and ref.loc["Mexico", "n_no_output"] == 2 and ref.loc["Mexico", "n_empty"] == 2
    summary = retrieval_summary(result, settings, generator="scripted")
    assert (summary["saturated_cells"], summary["no_output_cells"], summary["no_output_rounds"]) == (1, 1, 6)
    section = "\n".join(_retrieval_section(summary))
    assert "6 rounds gave no readable post" in section and "1 gave no readable post in any round" in section


def test_saturation_rule_no_output_rounds():
    rule = SaturationRule(k=1, m=1, max_rounds=3)
    assert rule.decide([0], no_output=[True]) is None
    assert rule.decide([0, 0, 0], no_output=[True, True, True]) == "no_output"
    # refused in every round is `refused`; a mix of refusals and empty rounds gave no output either
    assert rule.decide([0, 0, 0], refused=[True, True, True], no_output=[False] * 3) == "refused"
    assert rule.decide([0, 0, 0], refused=[True, False, True], no_output=[False, True, False]) == "no_output"
    assert rule.decide([0, 2, 0], no_output=[True, False, False]) == "saturated"


POV_REPLIES = {
    # social_media_user: chilangos and viejos, then only chilangos again: saturated at round 2
    ("un usuario de redes sociales", 1): "1. Los chilangos son arrogantes con todos.\n2. Los viejos no saben usar el celular.",
    ("un usuario de redes sociales", 2): "1. Los chilangos son arrogantes con todos.",
    # passerby: chilangos (the other point of view's stereotype, new to this one), then Monterrey, then nothing new
    ("un transeúnte en la calle", 1): "1. Los chilangos son arrogantes con todos.",
    ("un transeúnte en la calle", 2): "1. Las mujeres de Monterrey solo piensan en dinero.",
    ("un transeúnte en la calle", 3): "1. Las mujeres de Monterrey solo piensan en dinero.",
}


@pytest.mark.parametrize("points_of_view", [("social_media_user", "passerby"), ("passerby", "social_media_user")])
def test_novelty_is_counted_per_point_of_view(tmp_path, scripted_server, points_of_view):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    settings = RetrievalSettings(countries=("Mexico",), categories=("gender",), points_of_view=points_of_view,
                                 seed=0, rule=SaturationRule(1, 1, 5))
    with scripted_server(two_cells_script(POV_REPLIES)) as server:
        result = retrieve(server.model(tmp_path / "c"), prompts, settings, model_label="scripted")
    curve = result.curve.set_index("pov")
    assert list(curve.loc["passerby", "n_new"]) == [1, 1, 0] and curve.loc["passerby", "stop"].iloc[-1] == "saturated"
    assert list(curve.loc["social_media_user", "n_new"]) == [2, 0]
    t = result.stereotypes.set_index("target")
    assert sorted(t.index) == ["chilangos", "mujeres de monterrey", "viejos"]
    assert t.loc["chilangos", "mentions"] == 3
    assert json.loads(t.loc["chilangos", "points_of_view"]) == ["passerby", "social_media_user"]


def test_permuting_points_of_view_gives_the_same_decisions_and_pool(tmp_path, scripted_server):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    results = []
    for i, povs in enumerate([("social_media_user", "passerby", "close_friend"), ("close_friend", "passerby", "social_media_user"),
                              ("passerby", "social_media_user", "close_friend")]):
        settings = RetrievalSettings(countries=("Mexico", "Spain"), categories=("gender",), points_of_view=povs,
                                     seed=0, rule=SaturationRule(1, 1, 5))
        with scripted_server(two_cells_script(POV_REPLIES)) as server:
            results.append(retrieve(server.model(tmp_path / f"c{i}"), prompts, settings, model_label="scripted"))
    for other in results[1:]:
        # every output, row for row: the saturation decisions, the pool and the raw responses
        pd.testing.assert_frame_equal(other.curve, results[0].curve)
        pd.testing.assert_frame_equal(other.stereotypes, results[0].stereotypes)
        pd.testing.assert_frame_equal(other.responses, results[0].responses)
    assert len(results[0].stereotypes) == 6  # three per country
