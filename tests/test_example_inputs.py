"""The example input files under examples/ run through the commands docs/cli.md shows them with,
and the columns the page lists beside each file are the file's columns."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from stereolens.cli import main

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs/cli.md").read_text(encoding="utf-8")
SECTION = PAGE.split("## Example inputs", 1)[1].split("\n## ", 1)[0]
COMMANDS = [line for block in re.findall(r"```bash\n(.*?)```", SECTION, flags=re.S)
            for line in block.splitlines() if line.startswith("stereolens ")]
# file -> the cell of its columns, e.g. "`id, sent_stereo, sent_anti` (...)"
TABLE = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(examples/[^`]+)` \| ([^|]+) \|", SECTION, flags=re.M)}
DEFAULT_MODEL = "models/gemma3-270m"


def test_every_example_file_is_documented_and_used():
    files = {p.relative_to(REPO).as_posix() for p in (REPO / "examples").iterdir() if p.is_file()}
    assert files and set(TABLE) == files
    for name in files:
        assert any(name in command for command in COMMANDS), f"no command in docs/cli.md reads {name}"


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_documented_columns_are_the_files_columns(name):
    listed = re.match(r"`([^`]+)`", TABLE[name]).group(1)
    columns = [c.strip() for c in listed.split(",")]
    required = {c for c in columns if not c.startswith("[")}
    allowed = {c.strip("[]") for c in columns}
    header = set(pd.read_csv(REPO / name, nrows=0).columns)
    assert required <= header <= allowed, f"{name}: header {sorted(header)}, documented {listed}"


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.split()[1:3]))
def test_every_documented_example_command_exits_0(command, tmp_path, monkeypatch, tiny_causal_lm_dir):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "data/seed/pcs").mkdir(parents=True)  # pcs analyze checks features against it from the repo root
    shutil.copy(REPO / "data/seed/pcs/rubrics.yaml", tmp_path / "data/seed/pcs/rubrics.yaml")
    monkeypatch.chdir(tmp_path)
    args = [str(tiny_causal_lm_dir) if a == DEFAULT_MODEL else a for a in shlex.split(command, comments=True)[1:]]
    assert main(args) == 0, command
    output = Path(args[args.index("--output") + 1])
    assert output.exists() and (output.is_file() or any(output.iterdir()))
