"""What every stage reads: the declared params keys, the executor section, the language filter;
and the foundation stages' refusals and outputs."""

from __future__ import annotations

import json

import pytest
import yaml

from stereolens.cli import main
from stereolens.errors import ConfigError
from stereolens.stages.common import executor_config, languages_to_run, load_params


@pytest.fixture
def params(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"model": {"id": "m", "kind": "causal"}, "study": {"crows": {"limit": 5}},
                                    "seed": 0}), encoding="utf-8")
    return path


def test_load_params_returns_exactly_the_declared_dotted_keys(params):
    assert load_params("study.crows.limit", "seed", path=params) == {"study.crows.limit": 5, "seed": 0}
    assert load_params("model", path=params) == {"model": {"id": "m", "kind": "causal"}}


def test_load_params_names_the_missing_key_and_the_file(params, tmp_path):
    with pytest.raises(ConfigError, match=r"params key 'study\.crows\.limitt' not found in .*params\.yaml"):
        load_params("study.crows.limitt", path=params)
    with pytest.raises(ConfigError, match=r"params key 'model\.id\.x' not found"):
        load_params("model.id.x", path=params)  # a leaf is not a section
    with pytest.raises(ConfigError, match=r"params file not found: .*absent\.yaml \(run `stereolens config compose`\)"):
        load_params("seed", path=tmp_path / "absent.yaml")


def test_executor_config_is_none_without_the_section_and_refuses_a_missing_file(params, tmp_path):
    assert executor_config(params) is None
    params.write_text(yaml.safe_dump({"executor": {"kind": "local"}}), encoding="utf-8")
    assert executor_config(params) == {"kind": "local"}
    with pytest.raises(ConfigError, match="params file not found"):
        executor_config(tmp_path / "absent.yaml")


@pytest.mark.parametrize(("include", "expected"), [(None, ["en", "hi", "ru"]), (["hi", "zh"], ["hi"]), ([], [])])
def test_languages_to_run_keeps_the_study_order_within_the_filter(include, expected):
    assert languages_to_run(["en", "hi", "ru"], {"include": include}) == expected


def test_ingest_refuses_a_dataset_the_registry_lacks_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "registry.yaml").write_text(yaml.safe_dump({"one": {
        "license": "MIT", "base_url": "https://example.invalid", "commit": "0" * 40,
        "files": {"a.csv": {"upstream": "a.csv", "sha256": "0" * 64}}}}), encoding="utf-8")
    assert main(["stage", "ingest", "--dataset", "two", "--registry", "registry.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["stereolens: error: dataset 'two' is not in registry.yaml (known: one)"]
    assert not (tmp_path / "data").exists()


def test_prepare_model_records_exactly_which_hub_model_a_run_meant(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    model = {"id": "hub-mbert", "name": "google-bert/bert-base-multilingual-cased", "kind": "masked",
             "backend": "hf", "revision": "abc123", "batch_size": 8}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"model": model}), encoding="utf-8")
    assert main(["stage", "prepare-model"]) == 0
    reference = json.loads((tmp_path / "models/hub-mbert/MODEL_REFERENCE.json").read_text(encoding="utf-8"))
    assert reference == {"id": "hub-mbert", "name": "google-bert/bert-base-multilingual-cased", "kind": "masked",
                         "backend": "hf", "revision": "abc123", "base_url": None}


def test_prepare_model_says_a_hub_model_was_recorded_not_downloaded_and_warns_when_offline_without_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "stereolens-tests/never-downloaded-model"  # no such repo: it cannot be in any local cache
    model = {"id": "uncached", "name": name, "kind": "masked", "backend": "hf", "revision": None}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"model": model}), encoding="utf-8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["stage", "prepare-model"]) == 0
    out, err = capsys.readouterr()
    assert "model ready" not in out
    assert f"recorded the reference to hub model '{name}'" in out and "did not download it" in out
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"{name!r} is not in the local Hugging Face cache" in warning[0]
    assert "later stages will fail to load it" in warning[0] and "point model.name at a local folder" in warning[0]

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert main(["stage", "prepare-model"]) == 0
    assert "warning" not in capsys.readouterr().err  # online, later stages can still download it


def test_a_human_input_outside_data_annotations_is_named_once_under_dvc(tmp_path, monkeypatch, capsys):
    """DVC cannot see a file a param only names: under `dvc repro` the stage says so, once per key."""
    import stereolens.stages.common as common

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "_warned", set())
    (tmp_path / "data/annotations").mkdir(parents=True)
    cfg = {"study": {"pairs": {"validation": {"judgements": "exports/tuple_tasks.csv"}},
                     "stereo": {"overlap": {"adjudication": "data/annotations/adj.csv"}}}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    load_params("study.pairs", "study.stereo.overlap", path=path)  # not under DVC: nothing to say
    assert capsys.readouterr().err == ""
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "pairs_validate": {"cmd": "x", "deps": ["data/annotations"]}, "pairs_report": {"cmd": "y", "deps": ["z"]}}}),
        encoding="utf-8")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("DVC_STAGE", "pairs_report")  # reads no human input: nothing to say
    load_params("study.pairs", path=path)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("DVC_STAGE", "pairs_validate")
    load_params("study.pairs", "study.stereo.overlap", path=path)
    load_params("study.pairs.validation", path=path)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["stereolens: warning: study.pairs.validation.judgements=exports/tuple_tasks.csv is outside "
                     "data/annotations/, so `dvc repro` will not rerun this stage when that file changes; keep it "
                     "under data/annotations/"]


# the stages whose code opens a file that a HUMAN_INPUT_KEYS param names (others declare the same params
# sections without reading the file)
HUMAN_INPUT_READERS = {"leakage_human", "pcs_human_validation", "pairs_validate", "pairs_sentences", "pairs_translate",
                       "stereo_validate", "stereo_instantiate", "stereo_overlap"}


def test_every_stage_reading_a_human_input_depends_on_data_annotations():
    """The keys of HUMAN_INPUT_KEYS exist in the composed config, and the stages that read them, and only those,
    declare data/annotations/ (so replacing a file there reruns them, and nothing else)."""
    from pathlib import Path

    from stereolens.stages.common import ANNOTATIONS_DIR, HUMAN_INPUT_KEYS

    root = Path(__file__).resolve().parents[2]
    composed = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    human = yaml.safe_load((root / "conf/annotation/human.yaml").read_text(encoding="utf-8"))
    for key in HUMAN_INPUT_KEYS:
        node = {"annotation": human} if key.startswith("annotation.") else composed
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not a key of the composed config"
            node = node[part]
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    declaring = {name for name, block in stages.items() if ANNOTATIONS_DIR in (block.get("do", block).get("deps") or [])}
    assert declaring == HUMAN_INPUT_READERS
    for name in HUMAN_INPUT_READERS:  # each reader's params reach a human input key
        params = [p for p in stages[name].get("do", stages[name]).get("params") or [] if isinstance(p, str)]
        assert any(k == p or k.startswith(p + ".") for k in HUMAN_INPUT_KEYS for p in params), name
    assert (root / ANNOTATIONS_DIR / "README.md").exists()  # a fresh clone has the folder DVC depends on
