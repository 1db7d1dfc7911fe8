"""Similarity models of the overlap tables: embedding cosine, threshold, the model as judge, the overlap counts they give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from loopback_openai import LoopbackServer

from stereolens.errors import ConfigError
from stereolens.models import ModelSpec, ResponseCache, load_model
from stereolens.studies.stereo import overlap as ov
from stereolens.studies.stereo.prompts import load_prompts
from stereolens.studies.stereo.similarity import (
    EmbeddingSimilarity,
    JudgeSimilarity,
    LexicalSimilarity,
    build_similarity,
    parse_judgement,
)
from stereolens.studies.stereo.text import similarity

SEED_DIR = Path(__file__).resolve().parents[3] / "data" / "seed" / "stereo"
TEXTS = ["Los viejos no entienden la tecnología.", "Las mujeres manejan mal.", "Los jóvenes son vagos y no trabajan nunca."]


def table(rows):
    return pd.DataFrame(rows, columns=["stereotype_id", "country", "category", "target", "stereotype"])


def independent_embedding(auto_cls, path: Path, text: str) -> np.ndarray:
    """Plain transformers, one text at a time, no padding: the last hidden states of the non-special tokens, averaged in numpy."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = auto_cls.from_pretrained(path).eval()
    ids = tok(text)["input_ids"]
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0].numpy().astype(np.float64)
    # the tokens the template adds (BOS, CLS, SEP), not [UNK]: an unknown word is still the text's own
    added = set(tok.all_special_ids) - {tok.unk_token_id}
    keep = [i for i, t in enumerate(ids) if t not in added]
    assert 0 < len(keep) < len(ids)
    mean = hidden[keep].mean(axis=0)
    return mean / np.linalg.norm(mean)


@pytest.mark.parametrize("kind", ["causal", "masked"])
def test_embedding_cosine_equals_an_independent_computation(kind, tmp_path, tiny_causal_lm_dir, tiny_masked_lm_dir):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    path, auto_cls = (tiny_causal_lm_dir, AutoModelForCausalLM) if kind == "causal" else (tiny_masked_lm_dir, AutoModelForMaskedLM)
    emb = EmbeddingSimilarity({"name": str(path), "kind": kind, "backend": "hf"}, ResponseCache(tmp_path / "cache"), batch_size=2)
    vectors = emb.embed(TEXTS)  # batched and padded: three texts of different lengths in batches of two
    expected = np.stack([independent_embedding(auto_cls, path, t) for t in TEXTS])
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    pairs = [(table([("a", "A", "age", "x", TEXTS[0])]).iloc[0], table([("b", "B", "age", "x", t)]).iloc[0]) for t in TEXTS[1:]]
    assert emb.scores(pairs) == pytest.approx([float(expected[0] @ expected[1]), float(expected[0] @ expected[2])], abs=1e-6)
    # cached on disk by content: a new instance on the same cache computes nothing and loads no model
    again = EmbeddingSimilarity({"name": str(path), "kind": kind, "backend": "hf"}, ResponseCache(tmp_path / "cache"))
    np.testing.assert_allclose(again.embed(TEXTS[::-1]), vectors[::-1], atol=1e-12)
    assert again.n_computed == 0 and again.n_cached == 3 and again._model is None


def test_threshold_decides_at_the_score():
    a = table([("A1", "A", "age", "viejos", "Los viejos no entienden la tecnología.")])
    b = table([("B1", "B", "age", "viejos", "Los viejos no entienden nada de computadoras.")])
    score = similarity(a.stereotype[0], b.stereotype[0])
    assert 0 < score < 1
    at = ov.matched_pairs(a, b, ov.Matcher(threshold=score, model=LexicalSimilarity()))
    above = ov.matched_pairs(a, b, ov.Matcher(threshold=score + 1e-9, model=LexicalSimilarity()))
    assert len(at) == 1 and at["similarity"][0] == pytest.approx(score) and at["decided_by"][0] == "lexical"
    assert above.empty
    # normalised equality is decided before the model: score 1, decided_by "normalised"
    c = table([("C1", "C", "age", "viejos", "los viejos NO entienden la tecnologia")])
    assert ov.matched_pairs(a, c, ov.Matcher(threshold=0.99))["decided_by"].tolist() == ["normalised"]


def test_parse_judgement_is_strict():
    assert parse_judgement("Sí") is True and parse_judgement(" sí.\n") is True and parse_judgement("Yes") is True
    assert parse_judgement("No.") is False and parse_judgement("«no»") is False
    assert parse_judgement("Sí, dicen lo mismo") is None and parse_judgement("") is None and parse_judgement("quizás") is None


# a hand-made set: A1~B1 is a paraphrase the judge accepts and trigrams miss; A2~B2 are equal after normalisation;
# A3 vs B3 gets an unparseable answer; A4 vs B4 a refusal; other pairs "no"
VALIDATED = table([
    ("A1", "A", "age", "viejos", "Los viejos no entienden la tecnología."),
    ("A2", "A", "gender", "mujeres", "Las mujeres manejan mal."),
    ("A3", "A", "gender", "hombres", "Los hombres no lloran."),
    ("A4", "A", "age", "jóvenes", "Los jóvenes son vagos."),
    ("B1", "B", "age", "viejos", "Los ancianos son torpes con las computadoras."),
    ("B2", "B", "gender", "mujeres", "las mujeres manejan MAL"),
    ("B3", "B", "gender", "hombres", "Los hombres nunca muestran sus sentimientos."),
    ("B4", "B", "age", "jóvenes", "Los jóvenes no quieren trabajar."),
])
SCRIPT = {
    ("Los viejos no entienden la tecnología.", "Los ancianos son torpes con las computadoras."): "Sí.",
    ("Los hombres no lloran.", "Los hombres nunca muestran sus sentimientos."): "Bueno, en cierto modo sí",
    ("Los jóvenes son vagos.", "Los jóvenes no quieren trabajar."): "Lo siento, pero no puedo ayudarte con eso.",
}


def judge_script(message: str, body: dict) -> str:
    for (x, y), answer in SCRIPT.items():
        if (x in message and y in message) and message.index(x) < message.index(y):
            return answer
    return "no"


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def judge_on(state, cache_dir, prompts):
    spec = ModelSpec(name="scripted-judge", kind="chat", backend="openai", base_url=state.base_url, retry_base_s=0.01, max_retries=0)
    return JudgeSimilarity(load_model(spec, cache=ResponseCache(cache_dir)), prompts.overlap_judge, prompts.refusals,
                           label="scripted-judge", category_names=prompts.categories)


def test_judge_on_the_loopback_server_gives_the_known_overlap(tmp_path, api_key):
    prompts = load_prompts(SEED_DIR / "prompts.yaml", "es")
    with LoopbackServer() as state:
        state.script = judge_script
        judge = judge_on(state, tmp_path / "cache", prompts)
        shares, pairs = ov.country_overlap(VALIDATED, ["A", "B"], ["age", "gender"], ov.Matcher(threshold=0.5, model=judge))
        n_calls = state.calls
        # a rerun is answered from the response cache
        rerun = judge_on(state, tmp_path / "cache", prompts)
        ov.country_overlap(VALIDATED, ["A", "B"], ["age", "gender"], ov.Matcher(threshold=0.5, model=rerun))
        assert state.calls == n_calls
    s = shares.set_index(["country", "other", "category"])
    # shared: A1-B1 (judge yes) and A2-B2 (normalised, never asked); A3-B3 unparseable and A4-B4 refused: not present
    assert s.loc[("A", "B", "overall"), "shared"] == s.loc[("B", "A", "overall"), "shared"] == 2
    assert s.loc[("A", "B", "age"), "shared"] == 1 and s.loc[("A", "B", "gender"), "shared"] == 1
    assert sorted(map(tuple, pairs[["left_id", "right_id", "decided_by"]].values)) == [("A1", "B1", "judge"), ("A2", "B2", "normalised")]
    # asked: the same-class pairs that are not equal after normalisation (A1-B1, A3-B3, A4-B4) plus A1-B4 / A4-B1 /
    # A2-B3 / A3-B2 are other target classes and never asked
    assert judge.counts() == {"asked": 3, "yes": 1, "no": 0, "unparseable": 1, "refusal": 1}
    assert n_calls == 3
    # lexical trigrams miss the paraphrase: only the normalised pair is shared
    lexical, _ = ov.country_overlap(VALIDATED, ["A", "B"], ["age", "gender"], ov.Matcher(threshold=0.6))
    assert lexical.set_index(["country", "other", "category"]).loc[("A", "B", "overall"), "shared"] == 1
    # the prompt names the category in the language and both target groups
    asked = [b["messages"][-1]["content"] for b in state.bodies]
    assert any("Dos estereotipos de edad" in m and "A (grupo: viejos)" in m and "B (grupo: viejos)" in m for m in asked)


def test_build_similarity_checks_the_config(tmp_path):
    assert isinstance(build_similarity({}, model_cfg=None, cache=None), LexicalSimilarity)
    with pytest.raises(ConfigError, match="must be one of lexical, embedding, offline, judge"):
        build_similarity({"method": "cosine"}, model_cfg=None, cache=None)
    with pytest.raises(ConfigError, match="masked.*cannot answer as judge"):
        build_similarity({"method": "judge"}, model_cfg={"name": "m", "kind": "masked"}, cache=None)
    with pytest.raises(ConfigError, match="backend hf"):
        build_similarity({"method": "embedding"}, model_cfg={"name": "m", "kind": "chat", "backend": "openai"}, cache=None)
