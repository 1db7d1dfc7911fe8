"""Config values are typed at compose time, and the documented examples compose (issue #18)."""

from __future__ import annotations

import re
import shlex

import pytest

from stereolens.cli import build_parser, declare_study_param_types, main
from stereolens.config.compose import compose_config
from stereolens.errors import ConfigError


@pytest.mark.parametrize("override, message", [
    ("study.crows.limit=abc", r"study\.crows\.limit must be int \(or null\), got 'abc'"),
    ("study.crows.bootstrap_resamples=1.5", r"study\.crows\.bootstrap_resamples must be int"),
    ("seed=true", r"seed must be int"),
])
def test_a_value_of_the_wrong_type_is_refused_when_composed(repo_root, override, message):
    declare_study_param_types()
    with pytest.raises(ConfigError, match=message):
        compose_config([override], config_dir=repo_root / "conf")


def test_values_of_the_right_type_compose(repo_root):
    cfg = compose_config(["study.crows.limit=100", "study.crows.limit=null"], config_dir=repo_root / "conf")
    assert cfg["study"]["crows"]["limit"] is None
    cfg = compose_config(["study.crows.limit=100"], config_dir=repo_root / "conf")
    assert cfg["study"]["crows"]["limit"] == 100


def _help_examples() -> list[str]:
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices["config"]._subparsers._group_actions[0].choices["compose"]
    text = sub.format_help()
    return re.findall(r"e\.g\.\s+([^)\n]+)", text)


def test_every_compose_help_example_composes(repo_root, tmp_path):
    examples = _help_examples()
    assert examples, "the compose help shows an example"
    for example in examples:
        overrides = example.split()
        assert main(["config", "compose", *overrides, "--config-dir", str(repo_root / "conf"),
                     "--output", str(tmp_path / "params.yaml")]) == 0, example


def test_every_readme_compose_example_composes(repo_root, tmp_path):
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^\s*stereolens config compose([^#`\n]*)", readme, flags=re.MULTILINE)
    assert commands
    for args in commands:
        overrides = [a for a in shlex.split(args) if "=" in a and not a.startswith("-")]
        assert main(["config", "compose", *overrides, "--config-dir", str(repo_root / "conf"),
                     "--output", str(tmp_path / "params.yaml")]) == 0, args
