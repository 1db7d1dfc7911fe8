"""Validation: the Figure D1 mapping, the median rule, vote ratios, panels with demographics, import checks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stereolens.errors import DataError
from stereolens.studies.stereo import validation as v
from stereolens.studies.stereo.prompts import load_prompts

SEED_DIR = Path(__file__).resolve().parents[3] / "data" / "seed" / "stereo"


@pytest.fixture(scope="module")
def prompts():
    return load_prompts(SEED_DIR / "prompts.yaml", "es")


def stereotypes(n_per_panel: int = 2) -> pd.DataFrame:
    rows = []
    for c in ("Mexico", "Spain"):
        for k in ("age", "gender"):
            for i in range(n_per_panel):
                rows.append({"stereotype_id": f"{c}-{k}-{i}", "country": c, "category": k, "target": "viejos",
                             "stereotype": f"Estereotipo {i}", "examples": json.dumps([f"post {j}" for j in range(5)]),
                             "source": "machine"})
    return pd.DataFrame(rows)


def test_display_order_and_scores(prompts):
    # Figure D1 shows "almost everyone" first and "does not exist" last; scores run 5 .. 1
    assert [v.score_of_display_position(i) for i in range(5)] == [5, 4, 3, 2, 1]
    scale = v.likert_scale(prompts.likert_display)
    assert scale.options == (5, 4, 3, 2, 1)
    assert scale.option_texts[0].startswith("Casi todo el mundo")
    assert scale.option_texts[-1].startswith("Este estereotipo no existe")


def test_questionnaire_has_three_examples_and_the_scale(prompts):
    items = v.questionnaire(stereotypes(1), prompts, n_examples=3)
    assert (items["n_examples"] == 3).all()
    first = items.iloc[0]
    assert first["panel"] == "Mexico/age"
    assert first["options"].split(" | ")[0] == "Casi todo el mundo en México cree este estereotipo. [5]"
    assert first["options"].split(" | ")[-1] == "Este estereotipo no existe en México. [1]"


def test_median_at_or_below_two_is_discarded():
    j = pd.DataFrame({
        "item_id": ["a"] * 5 + ["b"] * 5 + ["c"] * 4,
        "annotator_id": [f"x{i}" for i in range(5)] * 2 + [f"x{i}" for i in range(4)],
        # a: median 2 -> discarded; b: median 3 -> kept (3:2 valid/invalid); c: 4 labels, median 2.5 -> kept
        "label": [1, 2, 2, 5, 5, 1, 2, 3, 4, 5, 1, 2, 3, 5],
    })
    d = v.decide(j).set_index("item_id")
    assert d.loc["a", "median"] == 2 and not d.loc["a", "validated"]
    assert d.loc["b", "median"] == 3 and d.loc["b", "validated"] and d.loc["b", "vote_ratio"] == "3:2"
    assert d.loc["c", "median"] == 2.5 and d.loc["c", "validated"]
    assert d.loc["a", "vote_ratio"] == "2:3"


def test_unanswered_labels_are_not_counted_as_annotators():
    # a panel member that gave no parseable score leaves a missing label: 2 annotators judged, not 3
    j = pd.DataFrame({"item_id": ["a", "a", "a"], "annotator_id": ["m1", "m2", "m3"], "label": [4, None, 2]})
    d = v.decide(j).set_index("item_id")
    assert d.loc["a", "n_annotators"] == 2
    assert d.loc["a", "median"] == 3 and d.loc["a", "vote_ratio"] == "1:1"


def test_rates_and_vote_ratio_tables():
    st = stereotypes(2)
    labels = {"Mexico-age-0": [5] * 5, "Mexico-age-1": [1] * 5, "Mexico-gender-0": [3, 3, 3, 1, 1], "Mexico-gender-1": [4, 4, 4, 4, 2]}
    rows = [(i, f"a{n}", lab) for i, ls in labels.items() for n, lab in enumerate(ls)]
    d = v.decide(pd.DataFrame(rows, columns=["item_id", "annotator_id", "label"]))
    t7 = v.validation_rates(st, d, ["Mexico", "Spain"], ["age", "gender"]).set_index(["country", "category"])
    assert t7.loc[("Mexico", "age"), "rate"] == 0.5
    assert t7.loc[("Mexico", "gender"), "rate"] == 1.0
    assert t7.loc[("Mexico", "overall"), "rate"] == 0.75
    assert t7.loc[("Spain", "age"), "rate"] == 0.0  # retrieved but never judged: not validated
    e = v.vote_ratio_table(st, d, "Mexico", ["age", "gender"]).set_index("category")
    assert e.loc["age", "5:0"] == 1 and e.loc["gender", "3:2"] == 1 and e.loc["gender", "4:1"] == 1
    assert e.loc["total", "total"] == 3


def test_simulated_panels_are_five_per_country_category_with_demographics(prompts):
    items = v.questionnaire(stereotypes(2), prompts)
    scale = v.likert_scale(prompts.likert_display)
    j, a = v.simulate_panels(items, scale, n_annotators=5, reliability=0.8, bias=0.0, seed=0)
    assert (j["source"] == "simulated").all() and (a["source"] == "simulated").all()
    assert a.groupby("panel").size().tolist() == [5, 5, 5, 5]
    # annotators only judge their own panel
    assert (j["annotator_id"].str.replace("-sim.*", "", regex=True) == j["panel"].str.replace("/", "-")).all()
    d = v.demographics_table(a, "Mexico", ["age", "gender"])
    assert d[d["field"] == "gender"][["age", "gender"]].sum().tolist() == [5, 5]
    again, _ = v.simulate_panels(items, scale, n_annotators=5, reliability=0.8, bias=0.0, seed=0)
    pd.testing.assert_frame_equal(j, again)


def test_import_refuses_an_annotator_of_another_panel(tmp_path, prompts):
    items = v.questionnaire(stereotypes(1), prompts)
    scale = v.likert_scale(prompts.likert_display)
    demo = {c: v.DEMOGRAPHIC_VALUES[c][0] for c in v.DEMOGRAPHIC_COLUMNS}
    pd.DataFrame([{"annotator_id": "h1", "panel": "Mexico/age", **demo}]).to_csv(tmp_path / "ann.csv", index=False)
    pd.DataFrame({"item_id": ["Mexico-age-0", "Spain-age-0"], "annotator_id": ["h1", "h1"], "label": [4, 2]}).to_csv(tmp_path / "j.csv", index=False)
    with pytest.raises(DataError, match=r"j.csv line 3, column annotator_id: annotator 'h1' belongs to panel 'Mexico/age'"):
        v.import_panels(tmp_path / "j.csv", tmp_path / "ann.csv", scale, items)
    pd.DataFrame({"item_id": ["Mexico-age-0"], "annotator_id": ["h1"], "label": [7]}).to_csv(tmp_path / "j.csv", index=False)
    with pytest.raises(DataError, match="line 2"):
        v.import_panels(tmp_path / "j.csv", tmp_path / "ann.csv", scale, items)
    pd.DataFrame({"item_id": ["Mexico-age-0"], "annotator_id": ["h1"], "label": [4]}).to_csv(tmp_path / "j.csv", index=False)
    j, a = v.import_panels(tmp_path / "j.csv", tmp_path / "ann.csv", scale, items[items["panel"] == "Mexico/age"])
    assert j["source"].tolist() == ["human"] and a["source"].tolist() == ["human"]


def test_import_refuses_items_nobody_judged(tmp_path, prompts):
    """An item without a single judgement has no median: left out, it would count as a rejected stereotype."""
    items = v.questionnaire(stereotypes(1), prompts)  # Mexico and Spain x age and gender, one each
    scale = v.likert_scale(prompts.likert_display)
    demo = {c: v.DEMOGRAPHIC_VALUES[c][0] for c in v.DEMOGRAPHIC_COLUMNS}
    pd.DataFrame([{"annotator_id": "h1", "panel": "Mexico/age", **demo}]).to_csv(tmp_path / "ann.csv", index=False)
    pd.DataFrame({"item_id": ["Mexico-age-0"], "annotator_id": ["h1"], "label": [4]}).to_csv(tmp_path / "j.csv", index=False)
    with pytest.raises(DataError, match=r"j.csv: 3 item\(s\) nobody judged, which would count as rejected: "
                                        r"'Mexico-gender-0', 'Spain-age-0', 'Spain-gender-0' \(a Label Studio task"):
        v.import_panels(tmp_path / "j.csv", tmp_path / "ann.csv", scale, items)


# three panel members on the loopback server; answers per (model, stereotype): medians 4, 2 and 2.5 (one reply unreadable)
PANEL_ANSWERS = {
    "Estereotipo 0": {"judge-a": "4", "judge-b": "5", "judge-c": "3"},
    "Estereotipo 1": {"judge-a": "1", "judge-b": "2", "judge-c": "Respuesta: 5"},
    "Estereotipo 2": {"judge-a": "3", "judge-b": "no sé", "judge-c": "2"},
}


def panel_script(message: str, body: dict) -> str:
    for statement, answers in PANEL_ANSWERS.items():
        if f"Estereotipo: {statement}\n" in message:
            return answers[body["model"]]
    return "?"


def test_llm_panel_judgements_and_the_median_rule_on_the_loopback_server(tmp_path, prompts, monkeypatch):
    from loopback_openai import LoopbackServer

    from stereolens.models import ModelSpec, ResponseCache, load_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    st = stereotypes(3)
    items = v.questionnaire(st[(st["country"] == "Mexico") & (st["category"] == "age")], prompts)
    with LoopbackServer() as state:
        state.script = panel_script
        models = {name: load_model(ModelSpec(name=name, kind="chat", backend="openai", base_url=state.base_url, max_retries=0),
                                   cache=ResponseCache(tmp_path / "cache")) for name in ("judge-a", "judge-b", "judge-c")}
        judgements, members = v.llm_panel_panels(models, items, prompts, template="{instructions}\n\n{text}\n\nRespuesta ({options}):")
        asked = state.bodies[0]["messages"][-1]["content"]
    assert (judgements["source"] == "llm_panel").all() and len(judgements) == 9
    assert set(members["annotator_id"]) == {"judge-a", "judge-b", "judge-c"} and set(members["panel"]) == {"Mexico/age"}
    # the prompt: the country in the instructions, the options numbered by score, the answer asked as a score
    assert "vive en México" in asked and "5. Casi todo el mundo en México" in asked and "1. Este estereotipo no existe en México" in asked
    assert "(5, 4, 3, 2, 1)" in asked
    labels = judgements.set_index(["item_id", "annotator_id"])["label"]
    assert labels[("Mexico-age-1", "judge-c")] == 5  # the first in-range number of the reply
    assert labels.isna().sum() == 1 and pd.isna(labels[("Mexico-age-2", "judge-b")])
    decisions = v.decide(judgements.dropna(subset=["label"])).set_index("item_id")
    assert decisions["median"].to_dict() == {"Mexico-age-0": 4.0, "Mexico-age-1": 2.0, "Mexico-age-2": 2.5}
    assert decisions["validated"].to_dict() == {"Mexico-age-0": True, "Mexico-age-1": False, "Mexico-age-2": True}
    assert decisions.loc["Mexico-age-2", "vote_ratio"] == "1:1"
