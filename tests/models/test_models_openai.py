"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1.

The server (``tests/loopback_openai.py``) speaks the OpenAI wire format with a
deterministic toy "model" whose answers the tests can compute, programmable
failures and a request log.  Nothing of ours is mocked: requests go through the
real ``openai`` client over TCP.
"""

from __future__ import annotations

import json
import time

import pytest
from loopback_openai import LoopbackServer, toy_logprob, toy_tokens

from stereolens.errors import ModelLoadError, RemoteCallError
from stereolens.models import (
    ChatMessage,
    GenerationRequest,
    LoglikelihoodRequest,
    ModelSpec,
    ResponseCache,
    UnsupportedRequest,
    load_model,
    spec_from_config,
)

API_KEY = "sk-test-key"


@pytest.fixture
def server():
    with LoopbackServer() as state:
        yield state


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def remote(server, tmp_path, kind="chat", **kw):
    kw.setdefault("retry_base_s", 0.01)
    spec = ModelSpec(name="toy-model", kind=kind, backend="openai", base_url=server.base_url, **kw)
    return load_model(spec, cache=ResponseCache(tmp_path / "cache"))


# --- tests ---------------------------------------------------------------------------


def test_chat_results_logprobs_and_real_client(server, tmp_path):
    model = remote(server, tmp_path)
    reqs = [
        GenerationRequest(messages=(ChatMessage("system", "Be brief."), ChatMessage("user", "Say hello")), max_tokens=3),
        GenerationRequest(prompt="Name a colour", max_tokens=8, top_logprobs=2),
        GenerationRequest(prompt="Sample", temperature=0.7, seed=5, stop=(" here",)),
    ]
    out = model.generate(reqs)
    assert out[0].text == "echo hello and" and out[0].finish_reason == "length"
    assert out[1].text == "echo colour and more words here"
    assert out[1].top_logprobs[0] == {"echo": toy_logprob("echo"), "alt1": toy_logprob("echo") - 1}
    assert len(out[1].top_logprobs) == len(toy_tokens(out[1].text))
    assert out[2].text == "echo Sample and more words" and out[2].finish_reason == "stop"
    assert server.calls == 3
    # what went over the wire: the real openai client, our key, our decoding parameters
    assert all(h["user-agent"].startswith("OpenAI/Python") for h in server.headers)
    assert all(h["authorization"] == f"Bearer {API_KEY}" for h in server.headers)
    sampled = next(b for b in server.bodies if b.get("seed") == 5)
    assert sampled["temperature"] == 0.7 and sampled["stop"] == [" here"]


def test_completion_generate_and_loglikelihood_known_answer(server, tmp_path):
    model = remote(server, tmp_path, kind="completion")
    gen = model.generate([GenerationRequest(prompt="Tell me", max_tokens=2, top_logprobs=1)])[0]
    assert gen.text == "echo me" and gen.top_logprobs == ({"echo": toy_logprob("echo")}, {" me": toy_logprob(" me")})
    reqs = [
        LoglikelihoodRequest(context="The doctor said", continuation=" hello to everyone"),
        LoglikelihoodRequest(context="Alpha", continuation=" beta"),
    ]
    res = model.loglikelihood(reqs)
    assert res[0].n_tokens == 3
    assert res[0].logprob == pytest.approx(sum(toy_logprob(t) for t in [" hello", " to", " everyone"]))
    assert res[1].logprob == pytest.approx(toy_logprob(" beta")) and res[1].is_greedy
    body = server.bodies[-1]
    assert body["echo"] is True and body["logprobs"] == 1


def test_rerun_is_served_from_cache_with_zero_calls(server, tmp_path):
    reqs = [GenerationRequest(prompt=f"Prompt number {i}", max_tokens=4) for i in range(5)]
    first = remote(server, tmp_path).generate(reqs + reqs[:2])  # duplicates are sent once
    assert server.calls == 5
    second = remote(server, tmp_path).generate(reqs)
    assert server.calls == 5
    assert all(g.cached for g in second) and [g.text for g in second] == [g.text for g in first[:5]]
    # a different seed is a different request
    remote(server, tmp_path).generate([GenerationRequest(prompt="Prompt number 0", max_tokens=4, seed=1)])
    assert server.calls == 6


def test_killed_run_resumes_where_it_stopped(server, tmp_path):
    reqs = [GenerationRequest(prompt=f"Item {i}") for i in range(5)] + [GenerationRequest(prompt="Item BOOM")]
    server.always_fail_on = "BOOM"
    with pytest.raises(RemoteCallError):
        remote(server, tmp_path, max_concurrency=1, max_retries=1).generate(reqs)
    assert server.calls == 5 + 2  # five answers, then the failing one tried twice
    server.always_fail_on = None
    out = remote(server, tmp_path, max_concurrency=1).generate(reqs)
    assert server.calls == 7 + 1  # only the one that had failed
    assert [g.cached for g in out] == [True] * 5 + [False]


def test_retries_then_succeeds(server, tmp_path):
    server.plan = ["429", "500", "timeout", "502"]
    model = remote(server, tmp_path, max_retries=4, timeout_s=0.5)
    out = model.generate([GenerationRequest(prompt="Persist")])
    assert out[0].text.startswith("echo Persist")
    assert server.calls == 5 and model.calls == 5
    # the client's own retry loop is off: every attempt reaches the server as a first try
    assert {h["x-stainless-retry-count"] for h in server.headers} == {"0"}


def test_retry_exhaustion_names_model_and_request(server, tmp_path):
    server.always_status = 503
    model = remote(server, tmp_path, max_retries=2)
    with pytest.raises(RemoteCallError) as info:
        model.generate([GenerationRequest(prompt="Why is the sky blue?\nExplain.")])
    message = str(info.value)
    assert "\n" not in message
    assert "'toy-model'" in message and "after 3 attempt(s)" in message and "HTTP 503" in message
    assert "Why is the sky blue? Explain." in message
    assert server.calls == 3


def test_client_errors_are_not_retried(server, tmp_path):
    server.always_status = 400
    with pytest.raises(RemoteCallError, match="HTTP 400"):
        remote(server, tmp_path, max_retries=5).generate([GenerationRequest(prompt="Bad")])
    assert server.calls == 1


def test_concurrency_bound_is_respected(server, tmp_path):
    server.delay_s = 0.15
    reqs = [GenerationRequest(prompt=f"Parallel {i}") for i in range(12)]
    start = time.perf_counter()
    remote(server, tmp_path, max_concurrency=3).generate(reqs)
    elapsed = time.perf_counter() - start
    assert server.max_in_flight == 3
    assert elapsed < 12 * 0.15  # really concurrent, not one after another


def test_loglikelihood_support_is_explicit(server, tmp_path):
    with pytest.raises(UnsupportedRequest, match="cannot score"):
        remote(server, tmp_path, kind="chat").loglikelihood([LoglikelihoodRequest("a", " b")])
    off = remote(server, tmp_path, kind="completion", extra={"supports_loglikelihood": False})
    assert not off.supports_loglikelihood
    with pytest.raises(UnsupportedRequest):
        off.loglikelihood([LoglikelihoodRequest("a", " b")])
    assert server.calls == 0


def test_key_comes_from_environment_only(server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelLoadError, match="OPENAI_API_KEY") as info:
        load_model(ModelSpec(name="gpt-x", kind="chat", backend="openai", base_url="https://api.example.com/v1"),
                   cache=ResponseCache(tmp_path))
    assert "\n" not in str(info.value)
    # a local server needs no key
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    spec = spec_from_config({"id": "toy", "name": "toy-model", "kind": "chat", "backend": "openai",
                             "base_url": None, "max_concurrency": 2, "max_retries": 1, "timeout_s": 5, "source": None})
    model = load_model(spec, cache=ResponseCache(tmp_path))
    assert model.generate([GenerationRequest(prompt="hi")])[0].text.startswith("echo hi")
    assert server.calls == 1


def test_backoff_grows_jitters_and_honours_retry_after(server, tmp_path):
    model = remote(server, tmp_path, retry_base_s=1.0)
    for attempt in range(5):
        step = min(60.0, 2.0**attempt)
        delays = [model._backoff(attempt, None) for _ in range(200)]
        # equal jitter: never under half the step, never over the step
        assert all(step / 2 <= d <= step for d in delays)
        assert len(set(delays)) > 100, "delays must vary between calls (jitter)"
    assert model._backoff(20, None) <= 60.0  # capped
    assert model._backoff(0, 7.0) >= 7.0  # a server's Retry-After wins over a shorter step
    assert model._backoff(0, 3600.0) <= 60.0  # ... but never past the cap


def test_crows_stage_scores_a_completion_endpoint(server, tmp_path, monkeypatch):
    """The CrowS slice on an OpenAI-compatible completions endpoint: sentence log-likelihoods
    through echo+logprobs, a known answer from the toy model; a chat endpoint is skipped, not failed."""
    import argparse

    import pandas as pd
    import yaml

    from stereolens.studies.crows.stages import crows_report, crows_score

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))
    raw = tmp_path / "data/raw/crows_pairs"
    raw.mkdir(parents=True)
    pd.DataFrame({"sent_more": ["Poor people steal things.", "Women cannot drive well."],
                  "sent_less": ["Rich people steal things.", "Men cannot drive."],
                  "stereo_antistereo": ["stereo", "stereo"], "bias_type": ["socioeconomic", "gender"]}
                 ).to_csv(raw / "crows_pairs_anonymized.csv")

    def params(kind):
        p = {"model": {"id": "toy", "name": "toy-model", "kind": kind, "backend": "openai", "base_url": server.base_url,
                       "retry_base_s": 0.01},
             "metric": {"name": "causal", "batch_tokens": 512, "truncate": False}, "language": {"include": None},
             "tracking": {"enabled": False}, "seed": 0,
             "study": {"crows": {"dataset": "crows_pairs", "sample": None, "seed": 0, "limit": None, "bootstrap_resamples": 100}}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(p), encoding="utf-8")
        return argparse.Namespace(params="params.yaml")

    crows_score(params("completion"))
    scores = pd.read_csv("data/processed/crows/toy/scores.csv")
    # the first echoed token has no context (OpenAI reports null), the rest are toy log-probabilities
    expected = sum(toy_logprob(t) for t in toy_tokens("Poor people steal things.")[1:])
    assert scores.loc[0, "score_stereo"] == pytest.approx(expected)
    crows_report(params("completion"))
    summary = json.loads((tmp_path / "reports/crows/toy/summary.json").read_text())
    assert summary["n"] == 2 and summary["skipped"] is None

    calls = server.calls
    crows_score(params("chat"))
    assert server.calls == calls
    assert json.loads((tmp_path / "data/processed/crows/toy/scoring.json").read_text())["skipped"]
    crows_report(params("chat"))
    summary = json.loads((tmp_path / "reports/crows/toy/summary.json").read_text())
    assert summary["n"] == 0 and "log-likelihood" in summary["skipped"]


def test_crows_route_refuses_a_metric_that_contradicts_the_model():
    from stereolens.errors import ConfigError
    from stereolens.studies.crows.scoring import crows_scoring_route

    assert crows_scoring_route("causal", {"kind": "causal"}) == ("engine", None)
    assert crows_scoring_route("pll_word_l2r", {"kind": "masked"}) == ("engine", None)
    assert crows_scoring_route("causal", {"kind": "completion"}) == ("loglikelihood", None)
    assert crows_scoring_route("causal", {"kind": "seq2seq"})[0] == "skip"
    with pytest.raises(ConfigError, match="metric=causal"):
        crows_scoring_route("pll", {"id": "g", "kind": "causal"})
    with pytest.raises(ConfigError, match="pll_word_l2r"):
        crows_scoring_route("causal", {"id": "m", "kind": "masked"})
