"""Config -> ModelSpec -> backend, and the response-cache plumbing shared by backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stereolens.errors import ConfigError
from stereolens.models import (
    BACKENDS,
    GenerationRequest,
    LoglikelihoodRequest,
    ModelSpec,
    ResponseCache,
    load_model,
    spec_from_config,
)
from stereolens.models.common import CachedBatch, cache_payload, cut_at_stop, render_plain_chat, short_request
from stereolens.models.base import ChatMessage

CONF_MODELS = sorted((Path(__file__).resolve().parents[2] / "conf" / "model").glob("*.yaml"))


@pytest.mark.parametrize("path", CONF_MODELS, ids=lambda p: p.stem)
def test_every_model_config_gives_a_spec(path):
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = spec_from_config(cfg)
    assert spec.name == cfg["name"] and spec.kind == cfg["kind"]
    assert (spec.backend, spec.kind) in BACKENDS
    assert spec.label == cfg["id"]


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"model\.temprature") as info:
        spec_from_config({"name": "x", "kind": "causal", "temprature": 0.1})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"name": "x", "kind": "diffusion"}, "model.kind"),
        ({"kind": "causal"}, "model.name"),
        ({"name": "x", "kind": "chat", "backend": "hf"}, "not supported"),
        ({"name": "x", "kind": "chat", "backend": "openai", "max_concurrency": "many"}, "model.max_concurrency"),
        ({"name": "x", "kind": "chat", "backend": "openai", "max_concurrency": 0}, "positive"),
        ({"name": "x", "kind": "causal", "dtype": "float8"}, "model.dtype"),
    ],
)
def test_bad_configs_are_one_clear_line(cfg, match):
    with pytest.raises(ConfigError, match=match) as info:
        spec_from_config(cfg)
    assert "\n" not in str(info.value)


def test_numbers_from_yaml_strings_and_nulls_mean_default():
    spec = spec_from_config({"name": "m", "kind": "chat", "backend": "openai", "timeout_s": "30",
                             "max_retries": 0, "base_url": None, "revision": None})
    assert spec.timeout_s == 30.0 and spec.max_retries == 0 and spec.base_url is None
    assert spec.max_concurrency == ModelSpec(name="m", kind="chat").max_concurrency


def test_load_model_accepts_a_config_dict(tiny_causal_lm_dir, tmp_path):
    model = load_model({"name": str(tiny_causal_lm_dir), "kind": "causal"}, cache=ResponseCache(tmp_path))
    assert model.spec.kind == "causal" and hasattr(model, "tokenizer")


def test_cache_keys_cover_request_params_and_identity(tmp_path):
    req = GenerationRequest(prompt="p", temperature=0.5, seed=1)
    base = cache_payload("hf", "id-a", "generate", req, {"dtype": "float32"})
    from stereolens.models.cache import cache_key

    variants = [
        cache_payload("openai", "id-a", "generate", req, {"dtype": "float32"}),
        cache_payload("hf", "id-b", "generate", req, {"dtype": "float32"}),
        cache_payload("hf", "id-a", "generate", GenerationRequest(prompt="p", temperature=0.5, seed=2), {"dtype": "float32"}),
        cache_payload("hf", "id-a", "generate", GenerationRequest(prompt="p", temperature=0.6, seed=1), {"dtype": "float32"}),
        cache_payload("hf", "id-a", "generate", req, {"dtype": "bfloat16"}),
    ]
    keys = {cache_key(base), *map(cache_key, variants)}
    assert len(keys) == 1 + len(variants)


def test_cached_batch_dedupes_and_stores_as_answers_arrive(tmp_path):
    cache = ResponseCache(tmp_path)
    reqs = [LoglikelihoodRequest("a", " b"), LoglikelihoodRequest("c", " d"), LoglikelihoodRequest("a", " b")]
    payload = lambda r: cache_payload("t", "m", "ll", r, {})  # noqa: E731
    from_json = lambda obj, cached: (obj["v"], cached)  # noqa: E731
    batch = CachedBatch(cache, reqs, payload, from_json)
    assert batch.todo == [0, 1]
    batch.store(0, {"v": 1})
    # written before the batch finishes: a crash now would keep it
    assert CachedBatch(cache, reqs, payload, from_json).todo == [1]
    batch.store(1, {"v": 2})
    assert batch.finish() == [(1, False), (2, False), (1, False)]
    again = CachedBatch(cache, reqs, payload, from_json)
    assert again.todo == [] and again.finish() == [(1, True), (2, True), (1, True)]


def test_small_helpers():
    assert cut_at_stop("abc. def", (".", "d")) == ("abc", True)
    assert cut_at_stop("abc", ()) == ("abc", False)
    text = render_plain_chat((ChatMessage("system", "S"), ChatMessage("user", "U")))
    assert text == "System: S\nUser: U\nAssistant:"
    assert short_request(GenerationRequest(prompt="x" * 200)).endswith("...'")
