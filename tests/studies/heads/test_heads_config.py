"""Bad ``study.heads`` values are refused in one line naming the key, before the instances are read or
the model loads (issue 22: a test fraction of 1.5 used to be clamped silently, the others failed late)."""

from __future__ import annotations

import pytest
import yaml
from config_edit import with_value

from stereolens.cli import main
from stereolens.config.compose import compose_config
from stereolens.errors import ConfigError
from stereolens.studies.heads.config import check_heads_config


@pytest.fixture(scope="module")
def heads_cfg(repo_root) -> dict:
    return compose_config((), config_dir=repo_root / "conf")["study"]["heads"]


_with = with_value


BAD = [
    ("split.shapley_fraction", 1.5, "study.heads.split.shapley_fraction must be a number strictly between 0 and 1"),
    ("split.shapley_fraction", 0, "study.heads.split.shapley_fraction must be a number strictly between 0 and 1"),
    ("split.pruning_fraction", -0.1, "study.heads.split.pruning_fraction must be a number strictly between 0 and 1"),
    ("split.pruning_fraction", 0.7, "study.heads.split.shapley_fraction + study.heads.split.pruning_fraction"),
    ("probe.pooling", "middle", "study.heads.probe.pooling must be one of"),
    ("shapley.value", "bogus", "study.heads.shapley.value must be one of"),
    ("pruning.candidate_score", "stereoset_generative", "study.heads.pruning.candidate_score must be one of"),
    ("shapley.layers", [], "study.heads.shapley.layers must be null or a non-empty list"),
    ("shapley.permutations", 7, "study.heads.shapley.permutations must be even with study.heads.shapley.antithetic"),
    ("shapley.permutations", 0, "study.heads.shapley.permutations must be a positive integer"),
    ("pruning.step", 0, "study.heads.pruning.step must be a positive integer"),
    ("shapley.stability_seeds", -1, "study.heads.shapley.stability_seeds must be a whole number >= 0"),
    ("shapley.stability_seeds", 1.5, "study.heads.shapley.stability_seeds must be a whole number >= 0"),
]


def test_the_default_and_paper_configs_pass(heads_cfg, repo_root):
    check_heads_config(heads_cfg, n_layers=18)
    paper = compose_config(("study/heads=paper",), config_dir=repo_root / "conf")["study"]["heads"]
    check_heads_config(paper, n_layers=12)


@pytest.mark.parametrize(("key", "value", "message"), BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_a_bad_value_is_refused_naming_its_key(heads_cfg, key, value, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")):
        check_heads_config(_with(heads_cfg, key, value), n_layers=18)


def test_layers_out_of_the_models_range_are_refused(heads_cfg):
    check_heads_config(_with(heads_cfg, "shapley.layers", [-18, 17]), n_layers=18)
    with pytest.raises(ConfigError, match=r"study.heads.shapley.layers \[99\]: \[99\] out of range for a model with 18 layers"):
        check_heads_config(_with(heads_cfg, "shapley.layers", [99]), n_layers=18)


@pytest.mark.parametrize(("override", "key"), [
    ("study.heads.split.shapley_fraction=1.5", "study.heads.split.shapley_fraction"),
    ("study.heads.shapley.layers=[99]", "study.heads.shapley.layers"),
    ("study.heads.probe.pooling=middle", "study.heads.probe.pooling"),
    ("study.heads.shapley.value=bogus", "study.heads.shapley.value"),
    ("study.heads.shapley.permutations=7", "study.heads.shapley.permutations"),
])
def test_the_probe_stage_refuses_before_reading_instances_or_loading_the_model(
        override, key, tmp_path, monkeypatch, capsys, repo_root, tiny_causal_lm_dir):
    # the instances file does not exist: a stage that read it first would fail on that instead; the bad value is
    # hand-edited into params.yaml (`config compose` itself refuses it)
    params = compose_config((f"model.name={tiny_causal_lm_dir}", "model.id=tiny-causal", "tracking=disabled"),
                            config_dir=repo_root / "conf")
    dotted, _, raw = override.partition("=")
    params = with_value(params, dotted, yaml.safe_load(raw))
    assert not (tmp_path / params["study"]["heads"]["instances"]).exists()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "heads-probe", "--params", "params.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stereolens: error: {key}"), err
    assert not (tmp_path / "data").exists() and not (tmp_path / "mlruns").exists()


def test_an_old_test_fraction_key_is_refused_at_compose(repo_root):
    with pytest.raises(ConfigError, match="study.heads.probe.test_fraction"):
        compose_config(("study.heads.probe.test_fraction=1.5",), config_dir=repo_root / "conf")
