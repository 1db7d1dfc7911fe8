"""Generative choice in ``auto`` mode against the OpenAI-wire test server of test_models_openai.

A chat endpoint scores no given continuation (loglikelihood raises UnsupportedRequest), so auto mode
samples 10 answers per query with exact matching; a completions endpoint with echo + logprobs gets
log-probabilities.  The toy server answers "echo <last word> ...", which matches no option: every
generation must be counted as non-matching, none dropped.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from test_models_openai import api_key, server  # noqa: F401  (the same loopback server and key fixtures)
from stereolens.models import ModelSpec, ResponseCache, UnsupportedRequest, load_model
from stereolens.studies.leakage.choice import choice_scores, resolve_choice_mode
from stereolens.studies.leakage.lexicon import load_lexicon

SEED = Path(__file__).resolve().parents[3] / "data" / "seed" / "leakage"


def _remote(server, tmp_path, kind):
    spec = ModelSpec(name="toy-model", kind=kind, backend="openai", base_url=server.base_url, retry_base_s=0.01)
    return load_model(spec, cache=ResponseCache(tmp_path / "cache"))


def test_auto_mode_samples_on_a_chat_endpoint_and_records_it(server, tmp_path):
    from stereolens.studies.leakage.scores import score_model

    lex = load_lexicon(SEED)
    chat = _remote(server, tmp_path, "chat")
    with pytest.raises(UnsupportedRequest):  # why logprob mode cannot work here
        choice_scores(chat, lex, "en", mode="logprob", design="matching", groups=["woman"])
    study = {"choice": {"mode": "auto", "design": "matching", "groups": ["woman"], "n_samples": 10}}
    done = score_model(chat, "chat", ["choice"], lex, "en", study, None, tmp_path / "out")["choice"]
    assert (done["mode_requested"], done["mode"], done["n_samples"], done["queries"]) == ("auto", "sample", 10, 34)
    assert server.calls == 34 * 10  # 17 matching pairs in both orders
    assert all("messages" in b and "logprobs" not in b for b in server.bodies)
    gens = pd.read_csv(tmp_path / "out" / "choice_queries.csv")
    assert len(gens) == 340 and (gens["match"] == "nonmatching").all()
    assert gens["output"].str.startswith("echo").all()
    nm = pd.read_csv(tmp_path / "out" / "choice_nonmatching.csv")
    assert nm[["language", "group", "n_generations", "n_nonmatching"]].values.tolist() == [["en", "woman", 340, 340]]
    assert done["nonmatching"] == 340


def test_auto_mode_uses_logprobs_on_a_completions_endpoint(server, tmp_path):
    lex = load_lexicon(SEED)
    completion = _remote(server, tmp_path, "completion")
    assert resolve_choice_mode(completion, "auto") == "logprob"
    scores, per_query, nonmatching = choice_scores(completion, lex, "en", mode="auto", design="matching",
                                                     groups=["woman"])
    assert nonmatching is None and len(per_query) == 34
    assert all(b.get("echo") is True for b in server.bodies)
    # the toy log-probability depends on token length only: the options' shares follow it exactly
    total = per_query[["p_trait1", "p_trait2", "p_neither"]].sum(axis=1)
    assert total.round(9).eq(1.0).all()
