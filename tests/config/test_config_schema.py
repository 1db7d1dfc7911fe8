"""Every config group's typed schema refuses, naming the key, a wrong type and an out-of-range value of each
of its keys, at compose time and when a stage loads its params (issue 22, cause 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from config_edit import with_value

from stereolens.cli import declare_study_param_types, main
from stereolens.config.compose import check_schema, check_types, compose_config, expected_types
from stereolens.config.schema import full_schema
from stereolens.errors import ConfigError
from stereolens.stages.common import load_params

CONF = Path(__file__).resolve().parents[2] / "conf"


def _group_options() -> list[tuple[str, str]]:
    return sorted({("/".join(p.relative_to(CONF).parts[:-1]), p.stem) for p in CONF.rglob("*.yaml")
                   # a release block composes to release.<study>, outside its group's path: tested below
                   if len(p.relative_to(CONF).parts) > 1 and "release" not in p.parts})


def _leaves(schema: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(dotted key, schema) of every named key with a scalar schema; a list of mappings (the pcs judge panel)
    through its first item (``panel.0.mode``)."""
    out = []
    for key, sub in (schema.get("properties") or {}).items():
        if "properties" in sub:
            out += _leaves(sub, f"{prefix}{key}.")
        elif "properties" in (sub.get("items") or {}):
            out += _leaves(sub["items"], f"{prefix}{key}.0.")
        elif "enum" in sub or set(sub.get("type", [])) & {"integer", "number", "boolean", "string"}:
            out.append((f"{prefix}{key}", sub))
    return out


def _get(config: dict, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif not isinstance(node, dict) or part not in node:
            return KeyError
        else:
            node = node[part]
    return node


def _wrong_type(sub: dict[str, Any]) -> Any:
    types = set(sub.get("type", []))
    return 12345 if "enum" in sub or "string" in types else "abc"


def _out_of_range(sub: dict[str, Any]) -> Any:
    if "enum" in sub:
        return "no-such-option"
    for bound, step in (("minimum", -1), ("exclusiveMinimum", 0), ("maximum", 1), ("exclusiveMaximum", 0)):
        if bound in sub:
            value = sub[bound] + step
            return int(value) if "integer" in sub["type"] else float(value)
    return None


def _refused(config: dict, defaults: dict, key: str) -> str:
    with pytest.raises(ConfigError) as refusal:
        check_types(config, expected_types(defaults), ())
        check_schema(config, ())
    return str(refusal.value)


@pytest.mark.parametrize(("group", "option"), _group_options())
def test_each_key_refuses_a_wrong_type_and_an_out_of_range_value_naming_it(group, option):
    declare_study_param_types()
    config = compose_config([f"{group}={option}"], config_dir=CONF)
    root = group.replace("/", ".")
    checked = 0
    for key, sub in _leaves(full_schema()):
        if not key.startswith(root + ".") or _get(config, key) is KeyError:
            continue
        message = _refused(with_value(config, key, _wrong_type(sub)), config, key)
        assert message.startswith(key), message
        bad = _out_of_range(sub)
        if bad is not None:
            message = _refused(with_value(config, key, bad), config, key)
            assert message.startswith(key), message
        checked += 1
    if group.split("/")[0] in ("model", "executor", "metric", "study"):
        assert checked, f"{group}={option}: no key of the group is checked"


@pytest.mark.parametrize(("override", "message"), [
    ("study.heads.threads=abc", "study.heads.threads must be"),
    ("study.heads.shapley.value=bogus", "study.heads.shapley.value must be one of ['accuracy', 'loss'], got 'bogus'"),
    ("study.heads.probe.pooling=middle", "study.heads.probe.pooling must be one of"),
    ("study.heads.split.shapley_fraction=1.5", "study.heads.split.shapley_fraction must be a number in (0, 1)"),
    ("study.stereo.overlap.similarity.threshold=7", "study.stereo.overlap.similarity.threshold must be a number in "
                                                    "[0, 1] or one of ['calibrated'], got 7"),
    ("study.stereo.overlap.similarity.method=cosine", "study.stereo.overlap.similarity.method must be one of"),
    ("study.stereo.countries=[Narnia]", "study.stereo.countries: ['Narnia'] not in data/seed/stereo/prompts.yaml"),
    ("study.pairs.evaluation.bootstrap_resamples=-5", "study.pairs.evaluation.bootstrap_resamples must be an "
                                                      "integer >= 1, got -5"),
    ("study.pairs.contrast.caste.Bamon=Women", "contrast 'Women' is not a caste group"),
    ("study.crows.limit=-5", "study.crows.limit must be an integer >= 1 (or null), got -5"),
    ("executor.actors=-1", "executor.actors must be an integer >= 1"),
    ("executor.shard_size=0", "executor.shard_size must be an integer >= 1"),
])
def test_the_issue_cases_are_refused_when_composed(repo_root, monkeypatch, override, message):
    monkeypatch.chdir(repo_root)
    declare_study_param_types()
    overrides = (["executor=ray"] if override.startswith("executor.") else []) + [override]
    with pytest.raises(ConfigError) as refusal:
        compose_config(overrides, config_dir=CONF)
    assert message in str(refusal.value) and repr(override) in str(refusal.value)


def test_layers_the_model_lacks_are_refused_when_its_config_is_here(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    (tmp_path / "m/config.json").write_text('{"num_hidden_layers": 18}', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"study\.heads\.shapley\.layers \[99\]: \[99\] out of range for a "
                                          r"model with 18 layers"):
        compose_config(["study/heads=paper", "study.heads.shapley.layers=[99]", f"model.name={tmp_path / 'm'}"],
                       config_dir=CONF)


def test_a_stage_refuses_a_hand_edited_value_naming_key_and_file(tmp_path):
    params = compose_config([], config_dir=CONF)
    params = with_value(params, "study.heads.probe.epochs", 0)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"study\.heads\.probe\.epochs must be an integer >= 1, got 0 in "
                                          rf"{tmp_path / 'params.yaml'}"):
        load_params("model", "study.heads", path=tmp_path / "params.yaml")
    assert load_params("study.crows", path=tmp_path / "params.yaml")  # another study's keys are not its business


def test_a_yaml_syntax_error_in_params_is_one_line(tmp_path, capsys):
    (tmp_path / "params.yaml").write_text("study:\n  crows: {limit: [1\n", encoding="utf-8")
    assert main(["stage", "crows-report", "--params", str(tmp_path / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "params.yaml line 3, column 1: not valid YAML" in err[0], err


@pytest.mark.parametrize(("key", "value", "message"), [
    ("release.stereo.title", 12345, "release.stereo.title must be a non-empty text, got 12345"),
    ("release.stereo.dataset", [], "release.stereo.dataset must be a list of at least 1 item(s)"),
    ("release.pairs.gates", "reports/*.json", "release.pairs.gates must be a list"),
    ("release.leakage.datasheet.uses", 3, "release.leakage.datasheet.uses must be a non-empty text, got 3"),
    ("study.pcs.judges.panel", [], "study.pcs.judges.panel must be a list of at least 1 item(s)"),
    ("study.pairs.coupling.keep", "fish curry", "study.pairs.coupling.keep must be a list"),
    ("study.pairs.coupling.replace.tap toddy", None, "study.pairs.coupling.replace.tap toddy must be a non-empty text"),
])
def test_release_judges_and_coupling_blocks_are_typed(key, value, message):
    """The blocks a plain group test cannot reach (a release composes outside its group; free-named maps)."""
    config = compose_config([], config_dir=CONF)
    refused = _refused(with_value(config, key, value), config, key.split(".", 2)[0] + "." + key.split(".")[1])
    assert refused.startswith(message), refused


@pytest.mark.parametrize(("field", "value", "message"), [
    ("mode", "vibes", "must be one of ['json', 'logprob'], got 'vibes'"),
    ("top_logprobs", 0, "must be an integer >= 1, got 0"),
    ("temperature", -0.5, "must be a number >= 0, got -0.5"),
    ("model", {"name": "m", "kind": "oracle"}, "must be one of ['masked', 'causal', 'seq2seq', 'chat', 'completion']"),
])
def test_each_judge_of_the_panel_is_typed(field, value, message):
    config = compose_config([], config_dir=CONF)
    panel = [{**config["study"]["pcs"]["judges"]["panel"][0], field: value}]
    refused = _refused(with_value(config, "study.pcs.judges.panel", panel), config, "study.pcs.judges")
    assert refused.startswith("study.pcs.judges.panel.0.") and message in refused, refused


def test_the_stereo_annotator_files_compose_as_docs_annotation_shows():
    """study.stereo.{validation,instantiation}.annotators name the team's demographics CSV, not a count."""
    config = compose_config(["annotation=human", "study.stereo.validation.annotators=annotators.csv",
                             "study.stereo.instantiation.annotators=writers.csv"], config_dir=CONF)
    assert config["study"]["stereo"]["validation"]["annotators"] == "annotators.csv"
    assert config["study"]["stereo"]["instantiation"]["annotators"] == "writers.csv"
