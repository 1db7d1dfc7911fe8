"""The stage kit: one model loader, one capability check, one summary writer for every study."""

from __future__ import annotations

import json

import pytest
import yaml

from stereolens.errors import ConfigError, DataError
from stereolens.stages.kit import load_stage_model, model_label, require_generator, write_study_summary


def test_a_masked_model_is_refused_as_generator_naming_the_key():
    with pytest.raises(ConfigError, match=r"^study.pairs.generator: 'mbert' is a 'masked' model and cannot generate"):
        require_generator({"id": "mbert", "name": "bert-base-multilingual-cased", "kind": "masked"},
                          key="study.pairs.generator")
    require_generator({"name": "x", "kind": "chat"}, key="model")  # generators pass


def test_label_prefers_the_id():
    assert model_label({"id": "gemma3-270m", "name": "models/gemma3-270m"}) == "gemma3-270m"
    assert model_label({"name": "gpt-4o-mini"}) == "gpt-4o-mini"


def test_stage_model_goes_through_the_shared_cache(tiny_causal_lm_dir, tmp_path, monkeypatch):
    from stereolens.models import LoglikelihoodRequest

    monkeypatch.setenv("STEREOLENS_CACHE_DIR", str(tmp_path / "cache"))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"executor": {"kind": "local"}}))
    lm = load_stage_model({"id": "tiny", "name": str(tiny_causal_lm_dir), "kind": "causal"}, params_path=params)
    first = lm.loglikelihood([LoglikelihoodRequest(context="", continuation="the cat sat")])
    assert any((tmp_path / "cache").rglob("*.json")), "the request was not written to the shared cache"
    again = load_stage_model({"id": "tiny", "name": str(tiny_causal_lm_dir), "kind": "causal"}, params_path=params)
    assert again.loglikelihood([LoglikelihoodRequest(context="", continuation="the cat sat")])[0].logprob == pytest.approx(
        first[0].logprob)
    assert again.cache.hits == 1  # served from disk, not recomputed


def test_summary_is_checked_against_the_report_contract(tmp_path):
    path = write_study_summary(tmp_path / "summary.json", {"headline": {"ss": 52.2}, "provenance": {"notes": ["x"]}})
    assert json.loads(path.read_text())["headline"] == {"ss": 52.2}
    with pytest.raises(DataError, match="headline 'ss' must be a number or text"):
        write_study_summary(tmp_path / "bad.json", {"headline": {"ss": [1, 2]}})
    with pytest.raises(DataError, match="machine_generated must be true or false"):
        write_study_summary(tmp_path / "bad.json", {"provenance": {"machine_generated": "yes"}})
    assert not (tmp_path / "bad.json").exists()
