"""Killed runs resume; two writers share a cache; no secret leaks (issue #17, items 3, 5 and 6).

A real stage runs as a subprocess, is killed with SIGKILL halfway and rerun; the
rerun's outputs are byte-identical to an uninterrupted run's.  Three stages:

* ``crows-score`` on an OpenAI-compatible completions endpoint and ``pcs-collect``
  on a chat endpoint (both the loopback server of ``tests/loopback_openai.py``):
  the server's log shows no successful request repeated beyond those in flight at
  the kill (at most ``max_concurrency``);
* ``crows-score`` on a tiny local masked LM: every sentence cached before the kill
  is a cache hit on the rerun, and only the others are computed.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from loopback_openai import LoopbackServer

REPO = Path(__file__).resolve().parents[2]
SENTINEL_KEY = "sk-SENTINEL-7c1f0e9b2d4a-do-not-leak"
MAX_CONCURRENCY = 4
N_PAIRS = 120  # 240 log-likelihood requests


def make_stage_dir(root: Path, base_url: str, *, tracking: bool) -> None:
    raw = root / "data/raw/crows_pairs"
    raw.mkdir(parents=True)
    pd.DataFrame({
        "sent_more": [f"Person number {i} from the poor side of town is lazy." for i in range(N_PAIRS)],
        "sent_less": [f"Person number {i} from the rich side of town is lazy." for i in range(N_PAIRS)],
        "stereo_antistereo": ["stereo"] * N_PAIRS, "bias_type": ["socioeconomic"] * N_PAIRS,
    }).to_csv(raw / "crows_pairs_anonymized.csv")
    track = ({"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
              "experiment": "resume"} if tracking else {"enabled": False})
    params = {"model": {"id": "toy", "name": "toy-model", "kind": "completion", "backend": "openai",
                        "base_url": base_url, "retry_base_s": 0.01, "max_concurrency": MAX_CONCURRENCY},
              "metric": {"name": "causal", "batch_tokens": 512, "truncate": False}, "language": {"include": None},
              "tracking": track, "seed": 0,
              "study": {"crows": {"dataset": "crows_pairs", "sample": None, "seed": 0, "limit": None, "bootstrap_resamples": 100}}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")


def stage_env(root: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "STEREOLENS_CACHE_DIR": str(root / "cache"),
           "OPENAI_API_KEY": SENTINEL_KEY, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    env.pop("OPENAI_BASE_URL", None)
    return env


def start_stage(root: Path, log_name: str, name: str = "crows-score") -> subprocess.Popen:
    out = open(root / f"{log_name}.log", "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, "-m", "stereolens", "stage", name], cwd=root,
                            env=stage_env(root), stdout=out, stderr=subprocess.STDOUT)


def answered_since(server, start: int) -> Counter:
    with server.lock:
        return Counter(key for key, action in server.log[start:] if action == "ok")


@pytest.mark.slow
def test_killed_stage_resumes_byte_identical_without_repeating_answers(tmp_path):
    with LoopbackServer() as server:
        server.delay_s = 0.03
        reference = tmp_path / "reference"
        make_stage_dir(reference, server.base_url, tracking=False)
        assert start_stage(reference, "run").wait(timeout=300) == 0, (reference / "run.log").read_text()
        start = len(server.log)

        killed = tmp_path / "killed"
        make_stage_dir(killed, server.base_url, tracking=True)
        proc = start_stage(killed, "first")
        deadline = time.monotonic() + 120
        while sum(answered_since(server, start).values()) < N_PAIRS and time.monotonic() < deadline:
            assert proc.poll() is None, (killed / "first.log").read_text()
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        answered_before_kill = sum(answered_since(server, start).values())
        assert N_PAIRS <= answered_before_kill < 2 * N_PAIRS, "the kill must land halfway"
        # nothing half-written: no output yet, no temporary file left where outputs go
        assert not (killed / "data/processed/crows/toy/scores.csv").exists()
        assert not [p for p in (killed / "data").rglob("*") if p.name.endswith(".tmp")]

        assert start_stage(killed, "second").wait(timeout=300) == 0, (killed / "second.log").read_text()
        answered = answered_since(server, start)

    assert (killed / "data/processed/crows/toy/scores.csv").read_bytes() == \
        (reference / "data/processed/crows/toy/scores.csv").read_bytes()
    assert len(answered) == 2 * N_PAIRS  # every request answered ...
    repeated = [key for key, n in answered.items() if n > 1]
    assert len(repeated) <= MAX_CONCURRENCY  # ... and only those in flight at the kill twice

    # the sentinel key appears in no file the runs left: params, MLflow store and artifacts,
    # the response cache, outputs, and the stage logs
    leaks = [str(p) for p in killed.rglob("*") if p.is_file() and SENTINEL_KEY.encode() in p.read_bytes()]
    assert not leaks
    assert (killed / "mlruns/mlflow.db").stat().st_size > 0 and any((killed / "cache").rglob("*.json"))


def cache_entries(cache: Path) -> int:
    """Whole response entries in a cache (``ab/abcd....json``; a temporary file or the model
    fingerprints under ``_identity/`` are not responses)."""
    return sum(1 for _ in cache.glob("??/*.json")) if cache.exists() else 0


def no_half_written_outputs(root: Path) -> None:
    """Every file a killed stage left where outputs go is whole: no temporary file, nothing torn."""
    left = [p for folder in ("data", "reports") if (root / folder).exists()
            for p in (root / folder).rglob("*") if p.is_file() and p.name.endswith(".tmp")]
    assert not left, left


def make_local_crows_dir(root: Path, model_dir: Path) -> int:
    """crows-score on a tiny local masked LM; returns the number of distinct sentences."""
    import tiny_models

    subjects, traits = tiny_models.SUBJECTS, tiny_models.TRAITS
    combos = [(s, t, u) for s in subjects for t in traits for u in traits if t != u][:300]
    stereo = [f"The {s} were {t} and {u}." for s, t, u in combos]
    anti = [f"The {subjects[(subjects.index(s) + 1) % len(subjects)]} were {t} and {u}." for s, t, u in combos]
    raw = root / "data/raw/crows_pairs"
    raw.mkdir(parents=True)
    pd.DataFrame({"sent_more": stereo, "sent_less": anti, "stereo_antistereo": ["stereo"] * len(combos),
                  "bias_type": ["socioeconomic"] * len(combos)}).to_csv(raw / "crows_pairs_anonymized.csv")
    params = {"model": {"id": "tiny", "name": str(model_dir), "kind": "masked"},
              "metric": {"name": "pll", "batch_tokens": 256, "truncate": False}, "language": {"include": None},
              "tracking": {"enabled": False}, "seed": 0,
              "study": {"crows": {"dataset": "crows_pairs", "sample": None, "seed": 0, "limit": None, "bootstrap_resamples": 10}}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return len(set(stereo) | set(anti))


@pytest.mark.slow
def test_killed_local_scoring_stage_resumes_byte_identical_without_recomputing(tmp_path, tiny_masked_lm_dir):
    """crows-score on a tiny local masked LM: SIGKILL once part of the cache exists, rerun.

    The rerun's outputs equal an uninterrupted run's byte for byte, every sentence scored
    before the kill is a cache hit, and only the rest is computed.
    """
    reference = tmp_path / "reference"
    n_sentences = make_local_crows_dir(reference, tiny_masked_lm_dir)
    assert start_stage(reference, "run").wait(timeout=300) == 0, (reference / "run.log").read_text()
    # cache use is a run fact: the printed line (and MLflow) carry it, scoring.json does not
    assert f"(cache hits 0, misses {n_sentences})" in (reference / "run.log").read_text()

    killed = tmp_path / "killed"
    make_local_crows_dir(killed, tiny_masked_lm_dir)
    proc = start_stage(killed, "first")
    deadline = time.monotonic() + 180
    while cache_entries(killed / "cache") < n_sentences // 3 and time.monotonic() < deadline:
        assert proc.poll() is None, (killed / "first.log").read_text()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    scored_before_kill = cache_entries(killed / "cache")
    assert n_sentences // 3 <= scored_before_kill < n_sentences, "the kill must land part-way"
    assert not (killed / "data/processed/crows/tiny/scores.csv").exists()
    no_half_written_outputs(killed)

    assert start_stage(killed, "second").wait(timeout=300) == 0, (killed / "second.log").read_text()
    # nothing scored before the kill is computed again; everything else is computed once
    assert f"(cache hits {scored_before_kill}, misses {n_sentences - scored_before_kill})" in \
        (killed / "second.log").read_text()
    assert cache_entries(killed / "cache") == n_sentences
    for name in ("scores.csv", "scoring.json"):
        assert (killed / "data/processed/crows/tiny" / name).read_bytes() == \
            (reference / "data/processed/crows/tiny" / name).read_bytes(), name


def make_pcs_collect_dir(root: Path, base_url: str, *, tracking: bool) -> None:
    """pcs-collect with an OpenAI chat model at ``base_url``, on the repository's scenario bank."""
    composed = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    cfg = composed["study"]["pcs"]
    cfg.update(bank=str(REPO / "data/seed/pcs"), languages=["hi", "ur"], per_dimension_domain=None, domains=None,
               scenario_ids=None)
    cfg["collection"].update(temperature=0.7, samples=1, max_tokens=16)
    track = ({"enabled": True, "tracking_uri": "sqlite:///mlruns/mlflow.db", "artifact_location": "mlruns/artifacts",
              "experiment": "resume"} if tracking else {"enabled": False})
    params = {"model": {"id": "toy-chat", "name": "toy-chat", "kind": "chat", "backend": "openai",
                        "base_url": base_url, "retry_base_s": 0.01, "max_concurrency": MAX_CONCURRENCY},
              "language": {"include": None}, "tracking": track, "seed": 0, "study": {"pcs": cfg}}
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


PCS_OUTPUTS = ("data/interim/pcs/toy-chat/responses.csv", "reports/pcs/toy-chat/validity.csv",
               "reports/pcs/toy-chat/translation_reviews.csv")


@pytest.mark.slow
def test_killed_pcs_collect_resumes_byte_identical_without_repeating_answers(tmp_path):
    """pcs-collect against the loopback chat server: SIGKILL halfway, rerun, same bytes, no answer asked twice
    beyond the ``max_concurrency`` requests in flight at the kill."""
    n_requests = 60 * 2 * 3  # scenarios x languages x conditions (one sample each)
    with LoopbackServer() as server:
        server.delay_s = 0.02
        reference = tmp_path / "reference"
        make_pcs_collect_dir(reference, server.base_url, tracking=False)
        assert start_stage(reference, "run", "pcs-collect").wait(timeout=300) == 0, (reference / "run.log").read_text()
        assert sum(answered_since(server, 0).values()) == n_requests
        start = len(server.log)

        killed = tmp_path / "killed"
        make_pcs_collect_dir(killed, server.base_url, tracking=True)
        proc = start_stage(killed, "first", "pcs-collect")
        deadline = time.monotonic() + 180
        while sum(answered_since(server, start).values()) < n_requests // 2 and time.monotonic() < deadline:
            assert proc.poll() is None, (killed / "first.log").read_text()
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert n_requests // 2 <= sum(answered_since(server, start).values()) < n_requests, "the kill must land halfway"
        assert not any((killed / name).exists() for name in PCS_OUTPUTS)
        no_half_written_outputs(killed)

        assert start_stage(killed, "second", "pcs-collect").wait(timeout=300) == 0, (killed / "second.log").read_text()
        answered = answered_since(server, start)

    for name in PCS_OUTPUTS:
        assert (killed / name).read_bytes() == (reference / name).read_bytes(), name
    assert len(answered) == n_requests  # every request answered ...
    repeated = [key for key, n in answered.items() if n > 1]
    assert len(repeated) <= MAX_CONCURRENCY  # ... and only those in flight at the kill twice
    leaks = [str(p) for p in killed.rglob("*") if p.is_file() and SENTINEL_KEY.encode() in p.read_bytes()]
    assert not leaks


def _fill_cache(root: str, worker: int, n: int) -> None:
    from stereolens.models.cache import ResponseCache

    cache = ResponseCache(root)
    for i in range(n):
        # half the keys are shared by both writers, half are each writer's own
        key = i if i % 2 == 0 else f"{worker}-{i}"
        cache.put({"request": key}, {"text": f"answer {key}", "padding": "x" * 2000})


def test_two_processes_filling_one_cache_never_corrupt_an_entry(tmp_path):
    from stereolens.models.cache import ResponseCache

    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_fill_cache, args=(str(tmp_path), w, 300)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    cache = ResponseCache(tmp_path)
    for worker in range(2):
        for i in range(300):
            key = i if i % 2 == 0 else f"{worker}-{i}"
            assert cache.get({"request": key}) == {"text": f"answer {key}", "padding": "x" * 2000}
    assert cache.misses == 0 and not list(tmp_path.rglob("*.tmp"))
