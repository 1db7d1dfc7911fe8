"""The folder tree is the architecture: shared engines, and one package per study.

These checks make the README's recipe for adding a study true: a study folder
without its README, config, DVC block or tests fails here, and so does an engine
that reaches into a study or a study that reaches into another.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from stereolens.studies import study_names

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "stereolens"
STUDIES = study_names()
# The two modules that discover studies to build the command line.
DISCOVERY = {PACKAGE / "cli.py", PACKAGE / "stages" / "cli.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _dvc_study_blocks() -> dict[str, list[str]]:
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    blocks = {}
    for match in re.finditer(r"# --- study: (\w+) ---\n(.*?)# --- end study: \1 ---", text, re.S):
        blocks[match.group(1)] = re.findall(r"^  (\w+):\s*$", match.group(2), re.M)
    return blocks


def test_the_known_studies_are_discovered():
    assert {"crows", "leakage", "pcs"} <= set(STUDIES)


@pytest.mark.parametrize("study", STUDIES)
def test_every_study_has_readme_config_dvc_block_and_tests(study):
    readme = PACKAGE / "studies" / study / "README.md"
    assert readme.is_file(), f"{readme} is missing"
    text = readme.read_text(encoding="utf-8")
    for heading in ("**Paper.**", "**What is implemented**", "**Deviations", "**Run it alone**"):
        assert heading in text, f"{readme} lacks the section {heading}"
    default = REPO / "conf" / "study" / study / "default.yaml"
    assert default.is_file(), f"{default} is missing"
    yaml.safe_load(default.read_text(encoding="utf-8"))
    blocks = _dvc_study_blocks()
    assert blocks.get(study), f"dvc.yaml has no '# --- study: {study} ---' block with stages"
    assert all(name.startswith(f"{study}_") for name in blocks[study]), blocks[study]
    tests = REPO / "tests" / "studies" / study
    assert any(tests.glob("test_*.py")), f"{tests} holds no tests"


def test_every_dvc_study_block_and_seed_folder_belongs_to_a_study():
    assert set(_dvc_study_blocks()) <= set(STUDIES)
    seed_folders = {p.name for p in (REPO / "data" / "seed").iterdir() if p.is_dir()}
    assert seed_folders <= set(STUDIES), f"seed folders without a study: {seed_folders - set(STUDIES)}"
    assert {p.name for p in (REPO / "conf" / "study").iterdir() if p.is_dir()} <= set(STUDIES)


def test_stages_of_a_study_are_named_after_it():
    from stereolens.stages.cli import STAGE_MODULES  # noqa: F401  (importing registers every stage)
    from stereolens.stages.registry import STAGES

    for name, definition in STAGES.items():
        module = definition.func.__module__
        if module.startswith("stereolens.studies."):
            study = module.split(".")[2]
            assert name.startswith(f"{study}-"), f"stage {name!r} lives in study {study!r}"


def test_engines_never_import_a_study():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "studies" in path.relative_to(PACKAGE).parts or path in DISCOVERY:
            continue
        bad = {m for m in _imports(path) if m.startswith("stereolens.studies")}
        if bad:
            offenders.append(f"{path.relative_to(REPO)}: {sorted(bad)}")
    assert not offenders, "engines must hold nothing study-specific:\n" + "\n".join(offenders)


@pytest.mark.parametrize("study", STUDIES)
def test_a_study_never_imports_another_study(study):
    offenders = []
    for path in (PACKAGE / "studies" / study).rglob("*.py"):
        for module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["stereolens", "studies"] and len(parts) > 2 and parts[2] != study:
                offenders.append(f"{path.relative_to(REPO)} imports {module}")
    assert not offenders, "shared code belongs in an engine:\n" + "\n".join(offenders)


def test_tests_mirror_the_tree():
    engines = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"studies"}
    for folder in (REPO / "tests").iterdir():
        if folder.is_dir() and folder.name not in ("__pycache__", "studies"):
            assert folder.name in engines, f"tests/{folder.name}/ matches no engine package"
    for folder in (REPO / "tests" / "studies").iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            assert folder.name in STUDIES, f"tests/studies/{folder.name}/ matches no study"
