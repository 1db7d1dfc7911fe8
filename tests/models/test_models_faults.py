"""Reliability against a faulty OpenAI-compatible endpoint (issue #17, items 1 and 2).

The loopback server injects faults per request: 429 with Retry-After, 500, 503, a
stall past the client timeout, a truncated 200 body, a dropped connection, and 200
bodies without choices or without their message/text.  Every request must end
answered, with the same answer a fault-free server gives; when the retries run out
the error is one line naming model, endpoint and request.
"""

from __future__ import annotations

import pytest
from loopback_openai import FAULT_MODES, MALFORMED_MODES, LoopbackServer, toy_logprob, toy_tokens

from stereolens.errors import RemoteCallError
from stereolens.models import (
    ChatMessage,
    GenerationRequest,
    LoglikelihoodRequest,
    ModelSpec,
    ResponseCache,
    load_model,
)


@pytest.fixture
def server():
    with LoopbackServer() as state:
        yield state


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def remote(base_url, cache_dir, kind="chat", **kw):
    kw.setdefault("retry_base_s", 0.005)
    kw.setdefault("timeout_s", 0.4)
    spec = ModelSpec(name="toy-model", kind=kind, backend="openai", base_url=base_url, **kw)
    return load_model(spec, cache=ResponseCache(cache_dir))


def answer_of(kind, op, model, request):
    if op == "loglikelihood":
        return model.loglikelihood([request])[0]
    return model.generate([request])[0]


CASES = [
    ("chat", "generate", GenerationRequest(prompt="Say hello", max_tokens=4)),
    ("chat", "generate", GenerationRequest(prompt="Name a colour", max_tokens=4, top_logprobs=2)),
    ("completion", "generate", GenerationRequest(prompt="Tell me", max_tokens=2, top_logprobs=1)),
    ("completion", "loglikelihood", LoglikelihoodRequest(context="The doctor said", continuation=" hello there")),
]


@pytest.mark.parametrize("mode", MALFORMED_MODES)
@pytest.mark.parametrize("kind,op,request_", CASES, ids=["chat", "chat-top", "completion", "completion-echo"])
def test_malformed_200_is_retried_like_a_5xx(server, tmp_path, mode, kind, op, request_):
    server.plan = [mode, mode]
    got = answer_of(kind, op, remote(server.base_url, tmp_path / "a", kind, max_retries=3), request_)
    assert server.calls == 3
    with LoopbackServer() as clean:
        want = answer_of(kind, op, remote(clean.base_url, tmp_path / "b", kind), request_)
    assert got == want


@pytest.mark.parametrize("mode", MALFORMED_MODES)
def test_malformed_after_last_attempt_is_one_line_naming_model_endpoint_request(server, tmp_path, mode):
    server.always_action = mode
    model = remote(server.base_url, tmp_path, "completion", max_retries=2)
    with pytest.raises(RemoteCallError) as info:
        model.loglikelihood([LoglikelihoodRequest(context="Why is the sky", continuation=" blue?\nExplain.")])
    message = str(info.value)
    assert "\n" not in message
    assert "'toy-model'" in message and server.base_url in message
    assert "Why is the sky blue? Explain." in message
    assert "after 3 attempt(s): malformed response" in message
    assert server.calls == 3


def test_known_answer_survives_a_truncated_body(server, tmp_path):
    """The answer after a retry is the toy model's, computed by hand, not merely 'some answer'."""
    server.plan = ["truncated"]
    res = remote(server.base_url, tmp_path, "completion").loglikelihood(
        [LoglikelihoodRequest(context="Alpha", continuation=" beta gamma")]
    )[0]
    assert res.logprob == pytest.approx(toy_logprob(" beta") + toy_logprob(" gamma")) and res.n_tokens == 2
    assert toy_tokens(" beta gamma") == [" beta", " gamma"]


def workload() -> list[tuple[str, str, object]]:
    """210 distinct requests over the three kinds of call the issue names."""
    chat = [("chat", "generate", GenerationRequest(
        messages=(ChatMessage("system", "Be brief."), ChatMessage("user", f"Question number {i}")), max_tokens=6))
        for i in range(80)]
    top = [("chat", "generate", GenerationRequest(prompt=f"Colour {i}", max_tokens=4, top_logprobs=3))
           for i in range(60)]
    echo = [("completion", "loglikelihood", LoglikelihoodRequest(context=f"Person {i} is", continuation=" very kind"))
            for i in range(70)]
    return chat + top + echo


def run_workload(base_url, cache_dir, **kw):
    results = {}
    for kind in ("chat", "completion"):
        model = remote(base_url, cache_dir, kind, **kw)
        for op in ("generate", "loglikelihood"):
            reqs = [r for k, o, r in workload() if k == kind and o == op]
            if reqs:
                results[(kind, op)] = model.generate(reqs) if op == "generate" else model.loglikelihood(reqs)
    return results


def test_thirty_percent_faults_over_210_requests_all_answered_as_without_faults(server, tmp_path):
    server.fault_rate = 0.3
    server.fault_modes = FAULT_MODES + ("no_choices", "no_message")
    server.timeout_sleep_s = 0.6
    server.retry_after = "0.01"
    faulty = run_workload(server.base_url, tmp_path / "faulty", max_retries=15, max_concurrency=16, timeout_s=0.3)
    with LoopbackServer() as clean:
        reference = run_workload(clean.base_url, tmp_path / "clean", max_concurrency=16)
        assert clean.calls == 210
    assert faulty == reference
    assert sum(len(v) for v in faulty.values()) == 210
    # the faults really happened, every kind of them, at about the set rate
    faults = server.faults()
    assert set(faults) == set(server.fault_modes)
    assert len(server.answered()) == 210  # distinct requests answered
    assert 0.2 < sum(faults.values()) / server.calls < 0.4
    # every request answered exactly once: no answer thrown away and asked for again
    assert set(server.answered().values()) == {1}
