"""The default generator and judge is SmolLM2-135M-Instruct, composed from conf/model (not a copied block);
the paper configurations keep the paper's own generators and judges (issue 24)."""

from __future__ import annotations

from pathlib import Path

import yaml

from stereolens.config import compose_config

CONF = Path(__file__).resolve().parents[2] / "conf"
SMOLLM2 = yaml.safe_load((CONF / "model" / "smollm2_135m.yaml").read_text(encoding="utf-8"))


def test_default_generators_and_judge_are_smollm2_from_its_model_config():
    study = compose_config([], config_dir=CONF)["study"]
    assert SMOLLM2["id"] == "smollm2-135m"
    assert study["stereo"]["generator"] == SMOLLM2
    # pairs keeps the top-level model: SmolLM2 gives its attribute prompt no list (conf/study/pairs/default.yaml)
    assert study["pairs"]["generator"] is None
    assert compose_config(["+model@study.pairs.generator=smollm2_135m"], config_dir=CONF)["study"]["pairs"][
        "generator"] == SMOLLM2
    [judge] = study["pcs"]["judges"]["panel"]
    assert judge["model"] == SMOLLM2 and judge["mode"] == "logprob"


def test_a_changed_model_config_reaches_every_generator(tmp_path):
    """Composed, not copied: editing conf/model/smollm2_135m.yaml changes what each study generates with."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    path = conf / "model" / "smollm2_135m.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("dtype: float32", "dtype: bfloat16"), encoding="utf-8")
    study = compose_config([], config_dir=conf)["study"]
    assert study["stereo"]["generator"]["dtype"] == "bfloat16"
    assert study["pcs"]["judges"]["panel"][0]["model"]["dtype"] == "bfloat16"


def test_paper_configs_keep_the_papers_generators_and_judges():
    study = compose_config(["study/stereo=paper", "study/pairs=paper", "study/pcs=paper"], config_dir=CONF)["study"]
    assert study["stereo"]["generator"] is None          # the paper's GPT-4o: the user points it at a chat model
    assert study["pairs"]["generator"]["name"] == "gpt-4o-mini"
    assert [j["id"] for j in study["pcs"]["judges"]["panel"]] == ["mistral-small-3.1", "gemini-2.0-flash-lite",
                                                                  "qwen-2.5-72b"]
    assert study["pcs"]["calibration"]["generator"]["name"] == "openai/gpt-4o"


def test_the_top_level_model_as_generator_is_one_override():
    study = compose_config(["study.stereo.generator=null", "study/pcs/judges=default_model"], config_dir=CONF)["study"]
    assert study["stereo"]["generator"] is None
    assert study["pcs"]["judges"]["panel"][0]["model"] is None
