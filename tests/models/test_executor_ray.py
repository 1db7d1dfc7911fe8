"""executor=ray against a real local Ray instance (2 CPUs): same answers as local, resumable.

One Ray session serves the whole module (starting one costs seconds); each test
builds its own actor pool on it and stops it afterwards.  The kill-and-resume test
runs the driver in a subprocess connected to this session through RAY_ADDRESS and
kills it with SIGKILL while its actors are still answering.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from stereolens.models import GenerationRequest, LoglikelihoodRequest, ResponseCache, load_model  # noqa: E402
from stereolens.models.base import ModelSpec  # noqa: E402
from stereolens.models.executor import ExecutorSpec, RayModel  # noqa: E402
from stereolens.scoring import score_continuations, score_pairs, score_sentences  # noqa: E402

pytestmark = pytest.mark.slow

SENTENCES = [
    "The nurse said she was tired.", "The engineer fixed the bridge.", "Les infirmières sont douces.",
    "Der Arzt kam spät.", "डॉक्टर देर से आया।", "The old man walked home.", "Children play outside.",
    "She cooked dinner for everyone.", "He cried at the movie.", "They moved to a new city.",
    "The poor family lived nearby.", "Rich people own boats.",
]


@pytest.fixture(scope="module")
def ray_session():
    # Ray starts its workers at niceness 15; on a busy shared CI machine they then starve, so the
    # test cluster runs them at the test's own priority (read by the raylet at start)
    previous = os.environ.get("RAY_worker_niceness")
    os.environ["RAY_worker_niceness"] = "0"
    try:
        context = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024,
                           log_to_driver=False)
    finally:
        if previous is None:
            os.environ.pop("RAY_worker_niceness")
        else:
            os.environ["RAY_worker_niceness"] = previous
    yield context
    ray.shutdown()


def _ray_model(path: Path, kind: str, cache: ResponseCache, **executor) -> RayModel:
    spec = ModelSpec(name=str(path), kind=kind, batch_size=3)
    # a quarter CPU per actor: both pools (4 actors) hold one of the session's 2 CPUs, leaving one
    # for the kill test's driver, whose actor could not be scheduled otherwise
    options = {"kind": "ray", "actors": 2, "shard_size": 4, "num_cpus_per_actor": 0.25, **executor}
    model = load_model(spec, cache=cache, executor=options)
    assert isinstance(model, RayModel)
    return model


# One actor pool per model for the module: an actor's start (a worker importing torch and
# loading the model) is most of these tests' time.  Tests read counter differences.
@pytest.fixture(scope="module")
def remote_causal(ray_session, tiny_causal_lm_dir, tmp_path_factory):
    model = _ray_model(tiny_causal_lm_dir, "causal", ResponseCache(tmp_path_factory.mktemp("ray-cache")))
    yield model
    model.close()


@pytest.fixture(scope="module")
def remote_masked(ray_session, tiny_masked_lm_dir, tmp_path_factory):
    model = _ray_model(tiny_masked_lm_dir, "masked", ResponseCache(tmp_path_factory.mktemp("ray-cache")), shard_size=2)
    yield model
    model.close()


def _close(a: float, b: float) -> bool:
    # batch composition changes float32 summation order only: well under 1e-4 nats
    return abs(a - b) <= 1e-4 * max(1.0, abs(b))


def test_causal_scoring_and_loglikelihood_equal_local(remote_causal, tiny_causal_lm_dir):
    remote, cache = remote_causal, remote_causal.cache
    local = load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal", batch_size=3),
                       cache=ResponseCache(enabled=False))
    hits, misses, shards_run = cache.hits, cache.misses, remote.shards_run
    got = score_sentences(remote, None, SENTENCES, "causal", cache=cache)
    want = score_sentences(local, None, SENTENCES, "causal")
    assert [s.n_tokens for s in got] == [s.n_tokens for s in want]
    assert all(_close(g.logprob, w.logprob) for g, w in zip(got, want))
    assert remote.shards_run - shards_run == 3  # 12 sentences in shards of 4
    assert cache.misses - misses == len(SENTENCES) and cache.hits == hits

    contexts, conts = ["The nurse said"] * 4 + [""] * 2, [" she", " he", " they", " it", "Hello.", "Bye."]
    got_c = score_continuations(remote, None, contexts, conts, cache=cache)
    want_c = score_continuations(local, None, contexts, conts)
    assert all(_close(g.logprob, w.logprob) for g, w in zip(got_c, want_c))

    requests = [LoglikelihoodRequest(context=c, continuation=t) for c, t in zip(contexts, conts)]
    got_ll = remote.loglikelihood(requests)
    want_ll = local.loglikelihood(requests)
    assert [g.n_tokens for g in got_ll] == [w.n_tokens for w in want_ll]
    assert all(_close(g.logprob, w.logprob) for g, w in zip(got_ll, want_ll))

    # a second pass is served from the cache the actors wrote: no new misses
    misses = cache.misses
    again = score_sentences(remote, None, SENTENCES, "causal", cache=cache)
    assert [s.logprob for s in again] == [s.logprob for s in got]
    assert cache.misses == misses and cache.hits - hits >= len(SENTENCES)
    # the identity comes from an actor and equals the local backend's content hash
    assert remote.identity == local.identity


@pytest.mark.parametrize("metric", ["pll_word_l2r", "crows"])
def test_masked_pair_scoring_equals_local(remote_masked, tiny_masked_lm_dir, metric):
    pairs = pd.DataFrame({
        "id": range(6),
        "sent_stereo": ["Poor people are lazy.", "Women cook.", "Old men are slow.", "He is strong.",
                        "Girls like dolls.", "The rich are greedy."],
        "sent_anti": ["Rich people are lazy.", "Men cook.", "Young men are slow.", "She is strong.",
                      "Boys like dolls.", "The poor are greedy."],
    })
    remote = remote_masked
    local = load_model(ModelSpec(name=str(tiny_masked_lm_dir), kind="masked"), cache=ResponseCache(enabled=False))
    shards_run = remote.shards_run
    got = score_pairs(remote, None, pairs, metric, cache=remote.cache)
    want = score_pairs(local, None, pairs, metric)
    assert list(got["id"]) == list(want["id"])
    for col in ("score_stereo", "score_anti"):
        assert all(_close(g, w) for g, w in zip(got[col], want[col])), col
    assert list(got["n_tokens_stereo"]) == list(want["n_tokens_stereo"])
    assert remote.shards_run - shards_run == 3  # 6 pairs in shards of 2


def test_generation_equals_local_greedy_and_sampled(remote_causal, tiny_causal_lm_dir):
    requests = [GenerationRequest(prompt=s, max_tokens=8) for s in SENTENCES[:6]]
    requests += [GenerationRequest(prompt=s, max_tokens=8, temperature=0.8, seed=i) for i, s in enumerate(SENTENCES[:4])]
    remote, misses = remote_causal, remote_causal.cache.misses
    local = load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal", batch_size=3),
                       cache=ResponseCache(enabled=False))
    got = remote.generate(requests)
    want = local.generate(requests)
    assert [g.text for g in got] == [w.text for w in want]
    assert [g.finish_reason for g in got] == [w.finish_reason for w in want]
    assert remote.cache.misses - misses == len(requests)
    # attributes that are not batches of requests come from a local replica
    assert remote.prefix_token_id == local.prefix_token_id


DRIVER = textwrap.dedent(
    """
    import json, sys
    from stereolens.models import GenerationRequest, ResponseCache, load_model
    from stereolens.models.base import ModelSpec

    model_dir, cache_dir, out = sys.argv[1:4]
    cache = ResponseCache(cache_dir)
    # RAY_ADDRESS (set by the test) points the executor at the test's Ray session
    model = load_model(ModelSpec(name=model_dir, kind="causal"), cache=cache,
                       executor={"kind": "ray", "actors": 1, "shard_size": 1})
    requests = [GenerationRequest(prompt=f"Story number {i}:", max_tokens=48, temperature=0.9, seed=i)
                for i in range(N)]
    texts = [g.text for g in model.generate(requests)]
    with open(out, "w") as fh:
        json.dump({"texts": texts, "hits": cache.hits, "misses": cache.misses}, fh)
    """
)
N_REQUESTS = 24


def _entries(cache_dir: Path) -> int:
    return len(list(cache_dir.glob("??/*.json")))


def test_killed_driver_resumes_without_repeating_a_cached_request(ray_session, tiny_causal_lm_dir, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.replace("range(N)", f"range({N_REQUESTS})"), encoding="utf-8")
    cache_dir, out = tmp_path / "cache", tmp_path / "out.json"
    env = {**os.environ, "RAY_ADDRESS": ray_session.address_info["address"],
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, str(script), str(tiny_causal_lm_dir), str(cache_dir), str(out)]

    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while _entries(cache_dir) < 3 and first.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert first.poll() is None, "the driver finished before it could be killed: " + first.stderr.read().decode()[-2000:]
    first.send_signal(signal.SIGKILL)
    first.wait()
    # Ray stops the dead driver's actor; a shard it was finishing may still land, so wait for quiet
    stable_since, count = time.time(), _entries(cache_dir)
    while time.time() - stable_since < 2.0:
        time.sleep(0.1)
        if _entries(cache_dir) != count:
            stable_since, count = time.time(), _entries(cache_dir)
    assert 3 <= count < N_REQUESTS
    assert not out.exists()

    second = subprocess.run(cmd, env=env, capture_output=True, timeout=300)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    result = json.loads(out.read_text())
    # every answer the killed run stored is reused; only the rest is generated
    assert result["hits"] == count
    assert result["misses"] == N_REQUESTS - count
    assert _entries(cache_dir) == N_REQUESTS

    local = load_model(ModelSpec(name=str(tiny_causal_lm_dir), kind="causal"), cache=ResponseCache(enabled=False))
    want = local.generate([GenerationRequest(prompt=f"Story number {i}:", max_tokens=48, temperature=0.9, seed=i)
                           for i in range(N_REQUESTS)])
    assert result["texts"] == [w.text for w in want]
