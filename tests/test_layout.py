"""The folder tree is the architecture: shared engines, and one package per study.

These checks make the recipe for adding a study (docs/adding-a-study.md) true: a
study folder without its README, config, its line in conf/config.yaml, DVC block,
summary among the report stage's deps or tests fails here, as does an optional
``config.py`` or ``plan.py`` that breaks its contract, and so does an engine that
reaches into a study or a study that reaches into another.
"""

from __future__ import annotations

import ast
import importlib
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


def _dvc_stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


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


def test_tests_mirror_every_engine():
    engines = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"studies"}
    missing = sorted(e for e in engines if not any((REPO / "tests" / e).glob("test_*.py")))
    assert not missing, f"engine packages without tests/<engine>/test_*.py: {missing}"


def test_every_study_and_only_a_study_has_its_line_in_the_config_defaults():
    defaults = yaml.safe_load((REPO / "conf" / "config.yaml").read_text(encoding="utf-8"))["defaults"]
    study_lines = {key.split("/", 1)[1]: value for entry in defaults if isinstance(entry, dict)
                   for key, value in entry.items() if key.startswith("study/")}
    missing = [s for s in STUDIES if study_lines.get(s) != "default"]
    assert not missing, f"conf/config.yaml defaults lack '- study/NAME: default' for: {missing}"
    assert set(study_lines) <= set(STUDIES), f"conf/config.yaml names no-such studies: {set(study_lines) - set(STUDIES)}"


def test_every_study_summary_is_written_per_model_by_its_block_and_read_by_the_report_stage():
    """The multi-model layout: each study writes reports/<study>/<model_id>/summary.json from a stage of its
    block that runs per model (a foreach over model_ids, or the primary model only: ``${model.id}``), and the
    report stage reads the study's folder."""
    stages = _dvc_stages()
    report_deps = set(stages["report"]["deps"])
    blocks = _dvc_study_blocks()
    for study in STUDIES:
        assert f"reports/{study}" in report_deps, f"dvc.yaml: the report stage's deps lack reports/{study}"
        writers = []
        for name in blocks.get(study, []):
            body = stages[name].get("do", stages[name])
            written = [*body.get("metrics", []), *body.get("outs", [])]
            if f"reports/{study}/${{item}}/summary.json" in written:
                assert stages[name].get("foreach") == "${model_ids}", f"dvc.yaml: {name} writes per model but " \
                                                                      "is no foreach over ${model_ids}"
                writers.append(name)
            elif f"reports/{study}/${{model.id}}/summary.json" in written:
                writers.append(name)
        assert writers, f"dvc.yaml: no stage of the {study} block writes reports/{study}/<model_id>/summary.json"
    assert not {d for d in report_deps if d.endswith("/summary.json")}, "the report stage reads study folders"


def _config_keys(node, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return {prefix}
    own = {prefix} if prefix else set()
    return own.union(*(_config_keys(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()))


@pytest.mark.parametrize("study", [s for s in STUDIES if (PACKAGE / "studies" / s / "config.py").is_file()])
def test_a_study_config_module_types_keys_its_default_has(study):
    """``config.py`` (optional) holds ``SCHEMA``, the JSON Schema of the study's config group (checked at compose
    time and when a stage loads its params), and may hold ``PARAM_TYPES``: a type for keys whose default is null
    (a non-null default already fixes its key's type)."""
    module = importlib.import_module(f"stereolens.studies.{study}.config")
    schema = getattr(module, "SCHEMA", None)
    assert isinstance(schema, dict) and "object" in schema.get("type", ()), (
        f"studies/{study}/config.py defines no SCHEMA (an object schema built with stereolens.config.schema)")
    types = getattr(module, "PARAM_TYPES", {})
    assert isinstance(types, dict), f"studies/{study}/config.py: PARAM_TYPES is not a dict"
    default = yaml.safe_load((REPO / "conf" / "study" / study / "default.yaml").read_text(encoding="utf-8"))
    keys = _config_keys(default)
    for key, declared in types.items():
        assert key in keys, f"studies/{study}/config.py types {key!r}, which is not a key of its default.yaml"
        kinds = declared if isinstance(declared, tuple) else (declared,)
        assert all(isinstance(k, type) for k in kinds), f"studies/{study}/config.py: {key!r} -> {declared!r}"


@pytest.mark.parametrize("study", [s for s in STUDIES if (PACKAGE / "studies" / s / "plan.py").is_file()])
def test_a_study_plan_module_plans_from_one_composed_config(study):
    """``plan.py`` (optional) holds ``plan(params) -> rows`` for `stereolens plan`."""
    path = PACKAGE / "studies" / study / "plan.py"
    plans = [n for n in ast.parse(path.read_text(encoding="utf-8")).body
             if isinstance(n, ast.FunctionDef) and n.name == "plan"]
    assert plans, f"{path.relative_to(REPO)} defines no top-level plan(params)"
    arguments = plans[0].args
    assert len(arguments.posonlyargs + arguments.args) == 1 and not arguments.kwonlyargs, (
        f"{path.relative_to(REPO)}: plan takes one argument, the composed config")


def test_the_recipe_is_written_down_with_every_checked_step():
    recipe = (REPO / "docs" / "adding-a-study.md").read_text(encoding="utf-8")
    for step in ("src/stereolens/studies/NAME/", "__init__.py", "stages.py", "cli.py", "config.py", "SCHEMA", "PARAM_TYPES",
                 "plan.py", "README.md", "**Paper.**", "**What is implemented**", "**Deviations", "**Run it alone**",
                 "conf/study/NAME/default.yaml", "conf/config.yaml", "study/NAME: default", "data/seed/NAME/",
                 "# --- study: NAME ---", "NAME_", "reports/NAME/<model_id>/summary.json", "tests/studies/NAME/",
                 "tests/test_layout.py", "tests/test_dvc_deps.py"):
        assert step in recipe, f"docs/adding-a-study.md does not mention {step!r}"
