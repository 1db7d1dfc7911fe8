"""Every documented command example is accepted by the real parser (issue #18: "test every example").

* Every ``stereolens ...`` command in a fenced block of README.md, a study's README
  or docs/ is parsed by :func:`stereolens.cli.build_parser`.  A synopsis line
  (``[--truncate]``, ``{pll,causal}``, ``raw|standardised``) is expanded into every
  variant it stands for, and each must parse.
* Every ``e.g. VALUE`` in an option's ``--help`` text is a value that option accepts.
* Every ``dvc ...`` command shown is accepted by DVC's own parser.
* Every pipeline path such a command names (``data/``, ``reports/``, ``models/``) is one a dvc.yaml stage
  writes (the per-model layout), and every ``examples/`` or ``conf/`` path exists (issue #33).

The ``config compose`` examples are also composed for real, in
``tests/config/test_config_typed.py``.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
from pathlib import Path

import pytest

from stereolens.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "src/stereolens/studies").glob("*/README.md")),
        *sorted((REPO / "docs").rglob("*.md"))]


def documented_commands(program: str = "stereolens") -> list[tuple[str, str]]:
    """(document, command) for every ``program`` command in a fenced code block (``VAR=value`` prefixes dropped)."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^\$\s*", "", line.strip())
                # a command ends at a comment, a pipe, a redirection or the next command of the line
                # (a "|" between words without spaces is a synopsis's alternatives)
                for command in re.split(r"\s+(?:\|\|?|&&|;|>>?|2>|#)\s+|;\s*|\s+#", line):
                    command = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", command.strip())
                    if command.startswith(f"{program} "):
                        found.append((str(doc.relative_to(REPO)), command))
    return found


def variants(command: str) -> list[list[str]]:
    """The argument lists a synopsis stands for: each ``[...]`` present and absent, each alternative
    of ``{a,b}`` and ``a|b``; a one-letter metavariable (``N``) stands for a number."""
    groups: list[list[str]] = []
    inside = False
    for word in shlex.split(command)[1:]:
        if inside:
            groups[-1].append(word)
        else:
            groups.append([word])
        inside = (inside or word.startswith("[")) and not word.endswith("]")
    options = []
    for group in groups:
        optional = group[0].startswith("[")
        words = [w.strip("[]") if optional else w for w in group]
        alternatives = [[]]
        for word in words:
            choices = word.strip("{}").split(",") if word.startswith("{") else word.split("|")
            choices = ["1" if re.fullmatch(r"[A-Z]", c) else c for c in choices]
            alternatives = [a + [c] for a in alternatives for c in choices]
        options.append(alternatives + ([[]] if optional else []))
    return [[w for part in choice for w in part] for choice in itertools.product(*options)]


COMMANDS = documented_commands()


def test_the_documents_hold_commands():
    assert len(COMMANDS) >= 20 and any(doc == "README.md" for doc, _ in COMMANDS)


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}: {c}"[:90] for d, c in COMMANDS])
def test_every_documented_command_parses(doc, command):
    parser = build_parser()
    for argv in variants(command):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"{doc}: `{command}` does not parse as {argv}"  # 0: --help


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def help_examples() -> list[tuple[str, argparse.Action, str]]:
    """(command, option, value) for every ``e.g. VALUE`` (or ``e.g. A or B``) in an option's help."""
    out = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            match = re.search(r"e\.g\.\s+([^),;:]+)", action.help or "")
            if match and action.option_strings:
                for value in match.group(1).split(" or "):
                    out.append((" ".join(path), action, value.strip()))
    return out


def test_every_help_example_is_a_value_its_option_accepts():
    examples = help_examples()
    assert len(examples) >= 5
    for command, action, value in examples:
        parsed = action.type(value) if callable(action.type) else value
        if action.choices is not None:
            assert parsed in action.choices, f"stereolens {command} {action.option_strings[0]}: e.g. {value!r}"


DVC_COMMANDS = documented_commands("dvc")


def test_every_documented_dvc_command_parses_with_dvcs_own_parser():
    """`dvc exp run --temp`, `dvc exp push origin <name>`, `dvc remote modify ... endpointurl`: DVC 3.67.1's CLI
    accepts each command as the docs spell it (placeholders such as <name> are plain arguments to it)."""
    from dvc.cli import parse_args

    assert len(DVC_COMMANDS) >= 40 and any("exp push" in c for _, c in DVC_COMMANDS)
    for doc, command in DVC_COMMANDS:
        try:
            parse_args(shlex.split(command)[1:])
        except SystemExit as exc:
            pytest.fail(f"{doc}: `{command}` is not a dvc command line (exit {exc.code})")


# Paths a documented command reads must be where the pipeline writes them (issue #33: after the per-model
# layout, `stereolens lineage reports/crows/summary.json` and `release pcs`'s data/interim/pcs/scores.csv
# named files no stage writes any more).  Pipeline paths must be a dvc.yaml output (foreach expanded over
# params.yaml's models) or lie inside one, or be tracked by git; examples/ and conf/ paths must exist.
PIPELINE_ROOTS = ("data/", "reports/", "models/")
REPO_ROOTS = ("examples/", "conf/")


def documented_paths() -> list[tuple[str, str, str]]:
    """(document, command, path) for every path under the pipeline's or the repository's folders a command names."""
    found = []
    for doc, command in COMMANDS:
        for word in shlex.split(command)[1:]:
            path = word.strip("[]{}").split("=", 1)[-1]
            if path.startswith(PIPELINE_ROOTS + REPO_ROOTS):
                found.append((doc, command, path.rstrip("/")))
    return found


PATHS = documented_paths()


def test_the_documents_name_per_model_paths():
    assert any("/gemma3-270m/" in path for _, _, path in PATHS)


@pytest.fixture(scope="module")
def pipeline_outputs() -> list[str]:
    from stereolens.lineage.graph import load_stages

    return [out.path for stage in load_stages(REPO) for out in stage.outs]


@pytest.mark.parametrize("doc,command,path", PATHS, ids=[f"{d}: {p}"[:90] for d, _, p in PATHS])
def test_every_path_a_documented_command_names_is_where_the_pipeline_writes_it(doc, command, path, pipeline_outputs):
    from stereolens.lineage.graph import contains

    if path.startswith(REPO_ROOTS):
        assert (REPO / path).exists(), f"{doc}: `{command}` names {path}, which the repository does not hold"
        return
    tracked = (REPO / path).exists() and not any(contains(out, path) for out in pipeline_outputs)
    assert tracked or any(contains(out, path) for out in pipeline_outputs), \
        f"{doc}: `{command}` names {path}, which no dvc.yaml stage writes (a path from before the per-model layout?)"
