"""The generator and judge paths talk to an instruction-tuned model through its chat template and to a
base model in plain text (issue 24: SmolLM2-135M-Instruct is a ``causal`` model with a template, so
the config's ``kind`` cannot decide it).

What a study sent is read back from the response cache: a request the study issued is a cache hit
when it is asked again, and a request it did not issue is a miss.
"""

from __future__ import annotations

import pytest

from stereolens.models import GenerationRequest, ModelSpec, ResponseCache, load_model
from stereolens.models.base import ChatMessage
from stereolens.models.common import render_plain_chat
from stereolens.studies.pairs import generation as gen
from stereolens.studies.pairs import translation as tr
from stereolens.studies.pairs.minimal_pairs import Group
from stereolens.studies.pcs import judging as jd
from stereolens.studies.pcs.scenarios import RubricFeature
import tiny_models

REGION = {"name": "Goa", "adjective": "Goan"}
GROUP = Group("gender", "Women")
FEATURE = RubricFeature("PDI", "directness", "Directness", {1: "Blunt", 4: "Balanced", 7: "Indirect"})
ITEM = jd.JudgeItem("r1", "PDI", "Your manager proposed a flawed plan.", "I would ask for a private chat.", (FEATURE,))


@pytest.fixture(scope="module")
def base_lm_dir(tmp_path_factory):
    return tiny_models.build_causal_lm(tmp_path_factory.mktemp("tiny-base-lm"), chat_template=False)


def _load(path, tmp_path):
    return load_model(ModelSpec(name=str(path), kind="causal"), cache=ResponseCache(tmp_path / "cache"))


def _was_sent(lm, request: GenerationRequest) -> bool:
    return lm.generate([request])[0].cached


def test_takes_chat_messages_follows_the_tokenizer_not_the_kind(tiny_causal_lm_dir, base_lm_dir, tmp_path):
    chat_lm, base_lm = _load(tiny_causal_lm_dir, tmp_path / "c"), _load(base_lm_dir, tmp_path / "b")
    assert chat_lm.spec.kind == base_lm.spec.kind == "causal"
    assert chat_lm.takes_chat_messages and not base_lm.takes_chat_messages
    msgs = (ChatMessage("user", "Name two traits."),)
    # through the template: its role markers, and the assistant's turn opened
    assert chat_lm.chat_text(msgs) == "<|user|>\nName two traits.\n<|assistant|>\n"
    # a base model's transcript is the plain rendering
    assert base_lm.chat_text(msgs) == "User: Name two traits.\nAssistant:"


def test_cache_key_tells_template_chat_from_the_same_text_as_a_prompt(tiny_causal_lm_dir, tmp_path):
    lm = _load(tiny_causal_lm_dir, tmp_path)
    msgs = (ChatMessage("user", "Name two traits."),)
    as_chat = GenerationRequest(messages=msgs, max_tokens=3)
    as_text = GenerationRequest(prompt=lm.chat_text(msgs), max_tokens=3)
    assert not lm.generate([as_chat])[0].cached
    # same tokens, but a different request: not served from the chat request's entry
    assert not lm.generate([as_text])[0].cached
    assert lm.generate([as_chat])[0].cached and lm.generate([as_text])[0].cached


def test_pairs_attributes_send_chat_to_an_instruct_model_and_plain_text_to_a_base_model(
        tiny_causal_lm_dir, base_lm_dir, tmp_path):
    prompt = gen.ATTRIBUTE_PROMPT.format(region="Goa", context="Goan", group="Women", dimension="Gender", n=2)
    chat_lm = _load(tiny_causal_lm_dir, tmp_path / "c")
    gen.generate_attributes(chat_lm, [GROUP], region=REGION, n=2, max_tokens=4, generator="tiny-chat")
    assert _was_sent(chat_lm, GenerationRequest(messages=(ChatMessage("user", prompt),), max_tokens=4, stop=("]",)))
    assert not _was_sent(chat_lm, GenerationRequest(prompt=prompt + gen.COMPLETION_LIST_OPENING, max_tokens=4,
                                                    stop=("]",)))

    base_lm = _load(base_lm_dir, tmp_path / "b")
    gen.generate_attributes(base_lm, [GROUP], region=REGION, n=2, max_tokens=4, generator="tiny-base")
    assert _was_sent(base_lm, GenerationRequest(prompt=prompt + gen.COMPLETION_LIST_OPENING, max_tokens=4,
                                                stop=("]",)))


def test_pairs_translation_sends_chat_to_an_instruct_model_and_plain_text_to_a_base_model(
        tiny_causal_lm_dir, base_lm_dir, tmp_path):
    import pandas as pd

    pairs = pd.DataFrame({"pair_id": ["p1"], "sent_stereo": ["Women are kind."], "sent_anti": ["Men are kind."]})
    q = tr.TRANSLATION_PROMPT.format(language_name="Konkani", script="Devanagari", sentence="Women are kind.")
    chat_lm, base_lm = _load(tiny_causal_lm_dir, tmp_path / "c"), _load(base_lm_dir, tmp_path / "b")
    for lm in (chat_lm, base_lm):
        tr.machine_translate(lm, pairs, language="kok", language_name="Konkani", script="Devanagari", max_tokens=3)
    assert _was_sent(chat_lm, GenerationRequest(messages=(ChatMessage("user", q),), max_tokens=3))
    assert _was_sent(base_lm, GenerationRequest(prompt=q, max_tokens=3, stop=("\n",)))
    assert not _was_sent(chat_lm, GenerationRequest(prompt=q, max_tokens=3, stop=("\n",)))


def test_pcs_logprob_judge_asks_an_instruct_model_as_the_user(tiny_causal_lm_dir, base_lm_dir, tmp_path):
    spec = jd.JudgeSpec(id="j", mode="logprob", top_logprobs=5, include_scenario=False)
    prompt = jd.feature_prompt(ITEM, FEATURE, spec)
    chat_lm, base_lm = _load(tiny_causal_lm_dir, tmp_path / "c"), _load(base_lm_dir, tmp_path / "b")
    for lm in (chat_lm, base_lm):
        jd.judge_logprob(lm, spec, [ITEM])
    asked = GenerationRequest(messages=(ChatMessage("user", prompt + jd.CHAT_DIGIT_INSTRUCTION),), max_tokens=1,
                              top_logprobs=5)
    continued = GenerationRequest(prompt=prompt + " ", max_tokens=1, top_logprobs=5)
    assert _was_sent(chat_lm, asked) and not _was_sent(chat_lm, continued)
    assert _was_sent(base_lm, continued)
    # the chat prompt the judge's first answer token follows is the template's assistant turn
    assert chat_lm.chat_text(asked.messages).endswith("<|assistant|>\n")
    assert render_plain_chat(asked.messages) != chat_lm.chat_text(asked.messages)
