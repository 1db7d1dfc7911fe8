"""`stereolens stage NAME`: every stage dvc.yaml runs is registered and parses its arguments;
an unknown name is refused in one error line; a name cannot be taken twice."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from stereolens.cli import build_parser, main
from stereolens.stages.cli import STAGE_MODULES
from stereolens.stages.registry import STAGES, stage

REPO = Path(__file__).resolve().parents[2]


def _dvc_commands() -> list[tuple[str, list[str]]]:
    """``(dvc stage, argv)`` of every command dvc.yaml runs, foreach items filled in."""
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    commands = []
    for name, definition in yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"].items():
        items = definition.get("foreach", [None])
        if isinstance(items, str):  # ${study.leakage.languages}: a params key
            node = params
            for part in items.strip("${}").split("."):
                node = node[part]
            items = node
        cmd = definition.get("do", definition)["cmd"]
        commands += [(f"{name}@{item}" if item else name, cmd.replace("${item}", str(item)).split()) for item in items]
    return commands


COMMANDS = _dvc_commands()


@pytest.mark.parametrize(("dvc_stage", "argv"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_dvc_command_resolves_to_its_registered_stage_function(dvc_stage, argv):
    assert argv[:2] == ["stereolens", "stage"], f"{dvc_stage} runs {' '.join(argv)}"
    args = build_parser().parse_args(argv[1:])
    assert args.stage_name == argv[2] and argv[2] in STAGES
    assert args.params == "params.yaml"
    # the parsed command calls exactly the registered function, under its name (its default arguments)
    assert args.func.__defaults__ == (STAGES[argv[2]].func, argv[2])
    # what `stereolens stage` parses with (the stage commands only) reads the same arguments the same way
    stage_only = vars(build_parser("stage").parse_args(argv[1:]))
    assert stage_only.pop("func").__defaults__ == args.func.__defaults__
    assert stage_only == {k: v for k, v in vars(args).items() if k != "func"}


def test_a_stage_start_parses_without_importing_the_other_commands():
    """DVC starts `stereolens stage NAME` for every stage: its parser leaves scipy.stats (1.2 s) and the other
    commands' modules to the stages that use them."""
    import subprocess
    import sys

    probe = ("import sys; from stereolens.cli import build_parser; build_parser('stage'); "
             "print(sorted(m for m in ('scipy.stats', 'stereolens.stats.cli', 'stereolens.lineage.cli') "
             "if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


def test_every_registered_stage_is_run_by_dvc_and_lives_in_a_stage_module():
    run = {argv[2] for _, argv in COMMANDS}
    assert set(STAGES) == run, f"registered but never run: {sorted(set(STAGES) - run)}"
    assert {d.func.__module__ for d in STAGES.values()} <= set(STAGE_MODULES)


def test_an_unknown_stage_is_refused_in_one_error_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stage", "crows-scroe"])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("usage:")]
    assert len(errors) == 1, errors
    assert "invalid choice: 'crows-scroe'" in errors[0] and "'crows-score'" in errors[0]


def test_a_stage_name_cannot_be_taken_by_a_second_function():
    def first(args: argparse.Namespace) -> None:
        """Do the first thing."""

    def second(args: argparse.Namespace) -> None:
        """Do the second thing."""

    name = "test-registry-double"
    try:
        stage(name)(first)
        stage(name)(first)  # importing a module twice registers the same function again: fine
        assert STAGES[name].func is first and STAGES[name].help == "Do the first thing."
        with pytest.raises(RuntimeError, match="'test-registry-double' registered twice"):
            stage(name)(second)
        assert STAGES[name].func is first
    finally:
        STAGES.pop(name, None)


def test_a_stage_gets_its_own_arguments_and_params(tmp_path):
    args = build_parser().parse_args(["stage", "leakage-fit", "--language", "hi", "--params", str(tmp_path / "p.yaml")])
    assert (args.language, args.params) == ("hi", str(tmp_path / "p.yaml"))
