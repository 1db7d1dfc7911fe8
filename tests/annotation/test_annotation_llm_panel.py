"""Models as annotators: option log-probabilities where the backend scores, parsed answers otherwise."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from stereolens.annotation.llm_panel import annotate_with_model, llm_panel_annotations, parse_answer
from stereolens.annotation.scales import LIKERT5, SLIDER_50, YES_NO
from stereolens.models import LoglikelihoodRequest, ModelSpec, ResponseCache, load_model

ITEMS = pd.DataFrame({"item_id": ["s1", "s2"], "text": ["Old people do not understand technology.", "Goans are lazy."]})
INSTRUCTIONS = "How common is this stereotype in your country? 1 = never observed, 5 = pervasive."


def test_parse_answer():
    assert parse_answer(" Yes, it is.", YES_NO) == "yes"
    assert parse_answer("No. (not yes)", YES_NO) == "no"
    assert parse_answer("I'd say 4 out of 5", LIKERT5) == 4
    assert parse_answer("7, no wait, 2", LIKERT5) == 2  # 7 is off the scale
    assert parse_answer("about -12.5", SLIDER_50) == -12.5
    assert parse_answer("maybe", YES_NO) is None


@pytest.fixture(scope="module")
def tiny_causal(tiny_causal_lm_dir, tmp_path_factory):
    cache = ResponseCache(tmp_path_factory.mktemp("panel_cache"))
    return load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=cache)


def test_loglikelihood_panel_member(tiny_causal):
    df = annotate_with_model(tiny_causal, ITEMS, LIKERT5, INSTRUCTIONS, annotator_id="tiny")
    assert (df["method"] == "loglikelihood").all() and (df["source"] == "llm_panel").all()
    for _, row in df.iterrows():
        probs = json.loads(row["option_probs"])
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
        assert row["label"] == int(max(probs, key=probs.get))  # the most probable option wins
        assert 1.0 <= row["expected_label"] <= 5.0
    # the choice is the argmax of the model's own scores of " 1" .. " 5" after the prompt
    from stereolens.annotation.llm_panel import DEFAULT_TEMPLATE, render_prompt

    prompt = render_prompt(DEFAULT_TEMPLATE, INSTRUCTIONS, ITEMS["text"][0], LIKERT5)
    scores = tiny_causal.loglikelihood([LoglikelihoodRequest(context=prompt, continuation=f" {o}") for o in range(1, 6)])
    assert df["label"][0] == 1 + max(range(5), key=lambda k: scores[k].logprob)


def test_generated_panel_member_and_panel(tiny_causal):
    from stereolens.annotation.llm_panel import DEFAULT_TEMPLATE, render_prompt
    from stereolens.annotation.scales import Scale
    from stereolens.models import GenerationRequest

    df = llm_panel_annotations({"gen": tiny_causal}, ITEMS, YES_NO, "Is this a stereotype?", method="generate")
    assert (df["method"] == "generate").all()
    assert (df["annotator_id"] == "gen").all() and df["model_identity"].str.len().gt(0).all()
    # the raw answer is the model's own greedy continuation of the rendered prompt
    prompts = [render_prompt(DEFAULT_TEMPLATE, "Is this a stereotype?", t, YES_NO) for t in ITEMS["text"]]
    direct = tiny_causal.generate(
        [GenerationRequest(prompt=p, max_tokens=8, temperature=0.0, seed=0, stop=("\n",)) for p in prompts]
    )
    assert df["raw_answer"].tolist() == [g.text for g in direct]
    # an untrained model names neither yes nor no: the label stays missing, never guessed
    assert not any(re.search(r"(?<!\w)(yes|no)(?!\w)", g.text.lower()) for g in direct)
    assert df["label"].isna().all()

    # with a prompt that does not list the options, a scale whose first option is the first word
    # the model says must be answered with exactly that option
    template = "{instructions}\n\n{text}\nAnswer:"
    said = tiny_causal.generate([GenerationRequest(prompt=render_prompt(template, "Rate it.", ITEMS["text"][0], YES_NO),
                                                   max_tokens=8, temperature=0.0, seed=0, stop=("\n",))])[0].text
    word = re.search(r"\w+", said).group()
    assert "qqqqqqqq" not in said.lower()
    probe = Scale("probe", "nominal", options=("hit", "miss"), option_texts=(word, "qqqqqqqq"))
    probed = llm_panel_annotations({"gen": tiny_causal}, ITEMS, probe, "Rate it.", template=template, method="generate")
    assert probed["raw_answer"][0] == said and probed["label"][0] == "hit"
