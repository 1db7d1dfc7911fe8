"""Every option of every config group composes; bad overrides fail with one clear line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from stereolens.cli import main
from stereolens.config import compose_config
from stereolens.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"


def _group_options() -> list[tuple[str, str]]:
    """(group, option) for every YAML under conf/ except the root config; nested groups use '/'."""
    pairs = []
    for path in sorted(CONF.rglob("*.yaml")):
        rel = path.relative_to(CONF)
        if len(rel.parts) == 1:
            continue
        pairs.append(("/".join(rel.parts[:-1]), path.stem))
    return pairs


def test_every_group_has_options():
    groups = {g for g, _ in _group_options()}
    assert {"model", "language", "metric", "annotation", "tracking"} <= groups
    assert any(g.startswith("study/") for g in groups)


@pytest.mark.parametrize(("group", "option"), _group_options())
def test_every_option_composes(group, option):
    config = compose_config([f"{group}={option}"], config_dir=CONF)
    # a file may place itself elsewhere with Hydra's `# @package` header (e.g. release declarations)
    first = (CONF / group / f"{option}.yaml").read_text(encoding="utf-8").splitlines()[0]
    package = first.split("@package", 1)[1].strip() if first.startswith("# @package") else group.replace("/", ".")
    node = config
    for part in package.removeprefix("_global_").strip(".").split("."):
        node = node[part]
    assert isinstance(node, dict) and node, f"{group}={option} composed to an empty node"


def test_committed_params_match_composed_defaults():
    """params.yaml is what `dvc repro` reads: it must not drift from conf/."""
    committed = yaml.safe_load((CONF.parent / "params.yaml").read_text(encoding="utf-8"))
    assert committed == compose_config([], config_dir=CONF)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("model=does_not_exist", "Could not find 'model/does_not_exist'"),
        ("model==", "Error parsing override"),
        ("no_such_key.leaf=1", "Could not override 'no_such_key.leaf'"),
    ],
)
def test_bad_overrides_fail_with_one_line(override, fragment):
    with pytest.raises(ConfigError) as err:
        compose_config([override], config_dir=CONF)
    message = str(err.value)
    assert fragment in message and "\n" not in message


def test_cli_compose_writes_params(tmp_path, capsys):
    out = tmp_path / "params.yaml"
    assert main(["config", "compose", "--config-dir", str(CONF), "--output", str(out), "model=mbert", "metric=pll_word_l2r"]) == 0
    params = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert params["model"]["name"] == "bert-base-multilingual-cased"
    assert params["metric"]["name"] == "pll_word_l2r"


def test_cli_compose_warns_that_a_model_change_makes_every_study_stale(tmp_path, capsys):
    out = tmp_path / "params.yaml"
    for overrides in (["model=mbert"], ["model.dtype=bfloat16"]):
        assert main(["config", "compose", "--config-dir", str(CONF), "--output", str(out), *overrides]) == 0
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("note: the model is a param of every measuring stage"), overrides
        assert "`dvc repro crows_report`" in err[0]
    assert main(["config", "compose", "--config-dir", str(CONF), "--output", str(out), "metric=pll_word_l2r"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_bad_override_exits_2_without_touching_params(tmp_path, capsys):
    out = tmp_path / "params.yaml"
    out.write_text("seed: 0\n", encoding="utf-8")
    assert main(["config", "compose", "--config-dir", str(CONF), "--output", str(out), "model=nope"]) == 2
    assert out.read_text(encoding="utf-8") == "seed: 0\n"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stereolens: error:")


def test_models_mapping_puts_the_primary_first_then_compare_with():
    """`models` (what the foreach stages iterate over): model id -> the full conf/model config, primary first."""
    smollm2 = yaml.safe_load((CONF / "model" / "smollm2_135m.yaml").read_text(encoding="utf-8"))
    default = compose_config([], config_dir=CONF)
    assert default["compare_with"] == ["smollm2_135m"]
    assert list(default["models"]) == ["gemma3-270m", "smollm2-135m"] == default["model_ids"]
    assert default["models"]["gemma3-270m"] == default["model"]
    assert default["models"]["smollm2-135m"] == smollm2

    swapped = compose_config(["model=mbert", "compare_with=[smollm2_135m,xlmr_base]"], config_dir=CONF)
    assert swapped["model_ids"] == ["mbert", "smollm2-135m", "xlmr-base"]
    assert swapped["models"]["mbert"]["name"] == "bert-base-multilingual-cased"

    alone = compose_config(["compare_with=[]"], config_dir=CONF)
    assert list(alone["models"]) == alone["model_ids"] == ["gemma3-270m"]
    # naming the primary again measures it once, with the primary's (overridden) config
    again = compose_config(["compare_with=[gemma3_270m]", "model.dtype=bfloat16"], config_dir=CONF)
    assert again["model_ids"] == ["gemma3-270m"] and again["models"]["gemma3-270m"]["dtype"] == "bfloat16"


def test_an_unknown_compared_model_fails_in_one_line():
    with pytest.raises(ConfigError) as err:
        compose_config(["compare_with=[no_such_model]"], config_dir=CONF)
    message = str(err.value)
    assert "compare_with: no model config" in message and "no_such_model.yaml" in message and "\n" not in message


def test_dvc_composes_models_through_its_own_hydra(tmp_path):
    """`dvc exp run -S` composes conf/ with DVC's Hydra integration, not ours: the resolver `models` needs comes
    from hydra_plugins/ at the repository root, which DVC's plugin scan imports."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(CONF, tmp_path / "conf")
    shutil.copytree(CONF.parent / "hydra_plugins", tmp_path / "hydra_plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "params.yaml"
    # a fresh process, as DVC is: no resolver registered by an earlier compose in this one
    code = ("import sys; from dvc.utils.hydra import compose_and_dump; "
            "compose_and_dump(sys.argv[1], sys.argv[2], None, 'config', sys.argv[3], ['compare_with=[]'])")
    subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "conf"), str(tmp_path)], cwd=tmp_path,
                   check=True, env={**os.environ, "PYTHONPATH": str(CONF.parent / "src")})
    params = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert params["model_ids"] == ["gemma3-270m"] and params["models"]["gemma3-270m"]["id"] == "gemma3-270m"


@pytest.mark.parametrize("argv,noted", [
    (["exp", "run", "-S", "model=mbert"], True),
    (["exp", "run", "--queue", "--set-param", "model.dtype=bfloat16"], True),
    (["exp", "run", "-S", "model=mbert", "crows_report"], False),  # a target: only its studies rerun
    (["exp", "run", "-S", "metric=pll_word_l2r"], False),
    (["exp", "run", "--no-hydra", "-S", "model=mbert"], False),  # DVC does not compose conf/
    (["exp", "run", "-S", "other.yaml:model=mbert"], False),  # a params file DVC does not compose
    (["exp", "show"], False),
    (["-q", "tests/config", "-k", "run"], False),  # another program's command line: no usage printed either
])
def test_dvc_exp_run_note_is_for_a_model_override_without_a_target(argv, noted, capsys):
    from stereolens.config.compose import dvc_exp_run_note

    note = dvc_exp_run_note(argv)
    assert (note is not None) == noted and capsys.readouterr().err == ""
    if noted:
        assert note.startswith("note: the model is a param of every measuring stage") and "\n" not in note
        assert f"e.g. `dvc exp run -S {argv[-1]} crows_report`" in note


def test_dvc_exp_run_prints_the_note_through_the_hydra_plugin(tmp_path):
    """The real `dvc exp run` (dry) in a repository with conf/ and hydra_plugins/: the note without a target,
    none with one."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(CONF, tmp_path / "conf")
    shutil.copytree(CONF.parent / "hydra_plugins", tmp_path / "hydra_plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))
    stages = {"crows_report": {"cmd": "echo crows", "params": ["model"]}, "other": {"cmd": "echo other", "params": ["seed"]}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(CONF.parent / "src"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(*args: str) -> str:
        done = subprocess.run(list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stderr

    assert main(["config", "compose", "--config-dir", str(tmp_path / "conf"), "--output", str(tmp_path / "params.yaml")]) == 0
    run("git", "init", "-q")
    run(sys.executable, "-m", "dvc", "init", "-q")
    run(sys.executable, "-m", "dvc", "config", "hydra.enabled", "true")
    run(sys.executable, "-m", "dvc", "config", "core.analytics", "false")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "init")
    notes = [line for line in run(sys.executable, "-m", "dvc", "exp", "run", "--dry", "-S", "model=mbert").splitlines()
             if line.startswith("note:")]
    assert len(notes) == 1 and "`dvc exp run -S model=mbert crows_report`" in notes[0]
    run("git", "checkout", "-q", "params.yaml")
    assert "note:" not in run(sys.executable, "-m", "dvc", "exp", "run", "--dry", "-S", "model=mbert", "crows_report")
