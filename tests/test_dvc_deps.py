"""`dvc repro` reruns a stage when any code it runs changes.

A stage's code is the import closure of its entry point: ``stereolens stage NAME``
calls the function registered as NAME (``stereolens.stages.registry``); that
function's own imports (the CLI imports lazily, so imports inside functions
count), the module-level imports of the module it lives in, and then, for every
project module reached, everything that module imports anywhere in its text.
Every module of that closure must lie under one of the stage's ``deps`` in
``dvc.yaml`` (a file, or a folder holding it); otherwise a change to it would
leave the stage's outputs stale.

Two approximations, both on the side of rerunning too often, never too seldom:
a project module reached is taken whole (all its functions' imports, not only
those of the functions the stage calls), and a string naming a project module
(``"stereolens.models.hf:HFMaskedLM"`` in the backend table, the lazy
``importlib.import_module("stereolens.scoring.engine")``) counts as an import.
Only the stage module itself is followed function by function, so that a stage
is not made to depend on what its sibling stages import.
"""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "stereolens"
# The command-line plumbing between `stereolens stage NAME` and the stage function: it
# parses arguments and looks the name up, computes nothing a stage writes, and imports
# every stage module (so following it would make every stage depend on all code).
ROUTING = {
    "stereolens",  # the package root: a docstring and __version__
    "stereolens.__main__",
    "stereolens.cli",
    "stereolens.studies",  # study discovery for the command line
    "stereolens.stages.cli",
    "stereolens.stages.registry",
}
MODULE_STRING = re.compile(rf"^({PACKAGE}(?:\.\w+)+)(?::\w+)?$")


# --------------------------------------------------------------------------- modules
def module_path(module: str) -> Path | None:
    """The source file of a project module, or None for anything else."""
    base = SRC.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def parse(module: str) -> ast.Module:
    return ast.parse(module_path(module).read_text(encoding="utf-8"))


def _is_package(module: str) -> bool:
    return module_path(module).name == "__init__.py"


def _absolute(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _with_parents(module: str) -> set[str]:
    """Importing ``a.b.c`` runs ``a/__init__``, ``a/b/__init__`` and ``a/b/c``."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def imported_by(nodes: list[ast.AST], module: str, tree: ast.Module) -> set[str]:
    """Project modules that ``nodes`` (statements of ``module``, walked whole) import or name in a string."""
    skip = _docstrings(tree)
    found: set[str] = set()
    for statement in nodes:
        for node in ast.walk(statement):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, module)
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                match = MODULE_STRING.match(node.value)
                if match:
                    parts = match.group(1).split(".")
                    # the longest prefix that is a module ("pkg.mod.Class" names pkg.mod)
                    names = [next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                                   if module_path(".".join(parts[:i]))), "")]
            for name in names:
                if name.split(".")[0] == PACKAGE and module_path(name):
                    found |= _with_parents(name)
    return found


def module_closure(start: set[str], followed: set[str] = frozenset()) -> set[str]:
    """``start`` and every project module reachable from it, each module taken whole
    except those in ``followed`` (already followed function by function)."""
    seen: set[str] = set(followed)
    todo = [m for m in start if m not in ROUTING]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        tree = parse(module)
        todo.extend(m for m in imported_by(tree.body, module, tree) if m not in seen and m not in ROUTING)
    return seen


# --------------------------------------------------------------------------- stages
@functools.cache
def registered_stages() -> dict[str, tuple[str, str]]:
    """``{stage name: (module, function name)}`` from the registry the CLI dispatches through."""
    import importlib

    from stereolens.stages.cli import STAGE_MODULES
    from stereolens.stages.registry import STAGES

    for name in STAGE_MODULES:
        importlib.import_module(name)
    return {name: (d.func.__module__, d.func.__name__) for name, d in STAGES.items()}


def _top_level_definitions(tree: ast.Module) -> dict[str, ast.AST]:
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs[name.id] = node
    return defs


def stage_closure(stage: str) -> set[str]:
    """Project modules the stage ``stage`` runs: see the module docstring."""
    module, function = registered_stages()[stage]
    tree = parse(module)
    definitions = _top_level_definitions(tree)
    # the stage module runs its module-level statements on import, and of its functions
    # the stage function and the same-module helpers it names, transitively
    body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    body += [d for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             for d in n.decorator_list]
    reached, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name in reached or name not in definitions:
            continue
        reached.add(name)
        body.append(definitions[name])
        todo.extend(n.id for n in ast.walk(definitions[name]) if isinstance(n, ast.Name))
    start = imported_by(body, module, tree) | _with_parents(module)
    return module_closure(start, followed={module})


# --------------------------------------------------------------------------- dvc.yaml
@functools.cache
def dvc_stages() -> dict[str, dict]:
    """``{dvc stage: {"command": stage name, "deps": [...]}}`` for every ``stereolens stage`` command."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    found = {}
    for dvc_name, definition in stages.items():
        body = definition.get("do", definition)
        words = body["cmd"].split()
        assert words[:2] == ["stereolens", "stage"], f"{dvc_name}: command {body['cmd']!r} is not a stage"
        found[dvc_name] = {"command": words[2], "deps": [str(d) for d in body.get("deps", [])]}
    return found


def covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


def missing_deps(dvc_name: str) -> list[str]:
    """Modules the stage runs that no dep of it covers, as repository paths."""
    stage = dvc_stages()[dvc_name]
    paths = sorted(module_path(m).relative_to(REPO).as_posix() for m in stage_closure(stage["command"]))
    return [p for p in paths if not covered(p, stage["deps"])]


# --------------------------------------------------------------------------- tests
def test_the_closure_follows_lazy_imports_and_backend_strings():
    closure = stage_closure("stereo-evaluate")
    # engine.py imports masked and causal; the model registry names its backends as strings
    assert {"stereolens.scoring.masked", "stereolens.scoring.causal", "stereolens.models.hf"} <= closure
    assert not closure & ROUTING
    # a stage does not inherit what its sibling stages import lazily
    assert "stereolens.studies.pcs.judging" not in stage_closure("pcs-calibration-set")
    assert "stereolens.studies.pcs.judging" in stage_closure("pcs-judge")


def test_every_dvc_stage_runs_a_registered_stage():
    unknown = {name: s["command"] for name, s in dvc_stages().items() if s["command"] not in registered_stages()}
    assert not unknown, f"dvc.yaml runs stages nobody registered: {unknown}"


@pytest.mark.parametrize("dvc_name", sorted(dvc_stages()))
def test_code_deps_cover_the_stage_import_closure(dvc_name):
    missing = missing_deps(dvc_name)
    assert not missing, (
        f"dvc.yaml stage {dvc_name} runs code it does not depend on (add the file or its folder to its deps): "
        + ", ".join(missing)
    )


# --------------------------------------------------------------------------- dvc status
def _dvc(repo: Path, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, f"dvc {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def code_pipeline(tmp_path_factory) -> Path:
    """A copy of the code with this dvc.yaml's stages cut down to their code deps, and a lock
    recording the code as it is: `dvc status` there reports exactly the stages a code edit
    invalidates (the real lock and data outputs are not needed, nor touched)."""
    repo = tmp_path_factory.mktemp("pipeline")
    shutil.copytree(SRC, repo / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("params.yaml", ".dvcignore", ".dvc/config"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, repo / name)
    pipeline = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    for name, definition in pipeline["stages"].items():
        body = definition.get("do", definition)
        code_only = {"cmd": body["cmd"], "deps": [d for d in body.get("deps", []) if str(d).startswith("src/")]}
        if "do" in definition:
            definition["do"] = code_only
        elif "matrix" in definition:
            pipeline["stages"][name] = {"matrix": definition["matrix"], **code_only}
        else:
            pipeline["stages"][name] = code_only
    (repo / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False), encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _dvc(repo, "commit", "--force", "--quiet")
    return repo


def _stale_stages(repo: Path) -> set[str]:
    """dvc.yaml stage names `dvc status` reports changed (``leakage_scores@hi`` counts as ``leakage_scores``)."""
    import json

    return {name.split("@")[0] for name in json.loads(_dvc(repo, "status", "--json") or "{}")}


@pytest.mark.parametrize("module", ["stereolens.scoring.masked", "stereolens.io"])
def test_touching_a_module_makes_dvc_status_list_every_stage_that_runs_it(code_pipeline, module):
    assert _stale_stages(code_pipeline) == set(), "the code pipeline should start up to date"
    path = code_pipeline / module_path(module).relative_to(REPO)
    original = path.read_text(encoding="utf-8")
    expected = {name for name, s in dvc_stages().items() if module in stage_closure(s["command"])}
    assert expected, f"no stage runs {module}"
    try:
        path.write_text(original + "\n# touched by tests/test_dvc_deps.py\n", encoding="utf-8")
        stale = _stale_stages(code_pipeline)
    finally:
        path.write_text(original, encoding="utf-8")
    missed = sorted(expected - stale)
    assert not missed, f"after editing {path.relative_to(code_pipeline)}, dvc status misses stage(s) running it: {missed}"


@pytest.mark.parametrize(("module", "expected"), [
    ("stereolens.report.site", {"report"}), ("stereolens.report.profile", {"report"}),
    ("stereolens.lineage.release", set()),
])
def test_report_look_and_lineage_tools_rerun_only_what_runs_them(code_pipeline, module, expected):
    # the study stages need the report contract (what a summary.json must hold) and the markdown
    # renderer, not the site's HTML or the profile: a comment in site.py must leave their outputs
    # current; likewise they need lineage's graph and provenance, not the release or reproduce tools
    path = code_pipeline / module_path(module).relative_to(REPO)
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original + "\n# touched by tests/test_dvc_deps.py\n", encoding="utf-8")
        stale = _stale_stages(code_pipeline)
    finally:
        path.write_text(original, encoding="utf-8")
    assert stale == expected, f"after editing {path.relative_to(code_pipeline)}, dvc status lists {sorted(stale)}"


def test_bytecode_and_a_study_readme_change_no_stage(code_pipeline):
    # Python writes __pycache__ beside the code it imports, and a study README is prose: neither
    # changes what a stage computes, so neither may make `dvc status` call a stage modified
    study = code_pipeline / "src" / "stereolens" / "studies" / "stereo"
    readme = study / "README.md"
    original = readme.read_text(encoding="utf-8")
    cache = study / "__pycache__"
    try:
        cache.mkdir()
        (cache / "stages.cpython-311.pyc").write_bytes(b"\x00bytecode")
        readme.write_text(original + "\nA sentence added by tests/test_dvc_deps.py.\n", encoding="utf-8")
        assert _stale_stages(code_pipeline) == set()
        # the same folder does count a change to its code (the check above can fail)
        (study / "stages.py").write_text((study / "stages.py").read_text(encoding="utf-8") + "\n# touched\n",
                                         encoding="utf-8")
        assert "stereo_evaluate" in _stale_stages(code_pipeline)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        readme.write_text(original, encoding="utf-8")
        stages = study / "stages.py"
        stages.write_text(stages.read_text(encoding="utf-8").removesuffix("\n# touched\n"), encoding="utf-8")
