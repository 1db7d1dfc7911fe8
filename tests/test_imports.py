"""The project's modules import each other without cycles, and the command line is imported by none.

The graph is built from the source text with ``ast``: every ``import`` and
``from ... import`` anywhere in a module counts, at module level or inside a
function (a function-level import is where a cycle hides: it makes the cycle run
at call time instead of import time, it does not remove it).  An edge goes to
the module the statement names (``from stereolens.models import registry`` ->
``stereolens.models.registry``, ``from stereolens.models import load_model`` ->
``stereolens.models``).  The parent packages Python also runs on the way are not
edges: a package's ``__init__`` re-exporting its own modules would otherwise
make every module of the package a cycle with it.

The top-level :mod:`stereolens.cli` imports every package's ``cli`` module to
build the parser, so nothing but ``__main__`` may import it; shared command-line
plumbing lives in :mod:`stereolens.cli_support`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "stereolens"
ENTRY_POINT = "stereolens.cli"
MAY_IMPORT_ENTRY_POINT = {"stereolens.__main__"}


def project_modules(src: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}`` for every module of ``package`` under ``src``."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _deepest_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a project module (``pkg.mod.Class`` -> ``pkg.mod``)."""
    parts = name.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from X import ...`` reads, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def import_graph(src: Path, package: str) -> dict[str, dict[str, int]]:
    """``{module: {imported project module: line of the first such import}}``, every import counted."""
    modules = project_modules(src, package)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, module, path.name == "__init__.py")
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _deepest_module(name, modules) if name.split(".")[0] == package else None
                if target and target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[module] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def a_cycle(graph: dict[str, dict[str, int]], group: list[str]) -> list[str]:
    """One closed path through ``group`` (first module repeated at the end), found breadth-first."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target in members and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    raise AssertionError(f"{group} is not strongly connected")  # pragma: no cover - Tarjan guarantees it


def describe_cycle(graph: dict[str, dict[str, int]], cycle: list[str], modules: dict[str, Path]) -> str:
    steps = [f"{a} (line {graph[a][b]} of {modules[a].name})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join([*steps, cycle[-1]])


def cycles_report(src: Path, package: str) -> list[str]:
    graph = import_graph(src, package)
    modules = project_modules(src, package)
    return [describe_cycle(graph, a_cycle(graph, group), modules) for group in strongly_connected(graph)]


# --------------------------------------------------------------------------- tests
def test_the_project_has_no_import_cycle():
    cycles = cycles_report(SRC, PACKAGE)
    assert not cycles, (
        "import cycles (move the shared piece to the module that should own it or a small new module; "
        "a function-level import does not break a cycle):\n" + "\n".join(cycles)
    )


def test_only_main_imports_the_command_line_entry_point():
    graph = import_graph(SRC, PACKAGE)
    assert ENTRY_POINT in graph
    importers = sorted(m for m, edges in graph.items() if ENTRY_POINT in edges and m not in MAY_IMPORT_ENTRY_POINT)
    assert not importers, (
        f"{ENTRY_POINT} imports every command module, so they must not import it "
        f"(shared plumbing goes in stereolens.cli_support): {', '.join(importers)}"
    )


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_checker_finds_a_cycle_closed_inside_a_function(tmp_path):
    # a -> b at module level, b -> c by a relative import, c -> a inside a function: one cycle of three;
    # d imports the package's __init__, which re-exports a: an edge to the package, not to its parents
    src = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import thing\n",
        "pkg/a.py": "from pkg import b\nthing = 1\n",
        "pkg/b.py": "from .sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "def late():\n    from pkg.a import thing\n    return thing\n",
        "pkg/d.py": "import pkg.sub.c\nfrom pkg import thing\n",
    })
    graph = import_graph(src, "pkg")
    assert graph["pkg.d"] == {"pkg.sub.c": 1, "pkg": 2}
    assert graph["pkg.b"] == {"pkg.sub.c": 1}
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert cycles_report(src, "pkg") == [
        "pkg.a (line 1 of a.py) -> pkg.b (line 1 of b.py) -> pkg.sub.c (line 2 of c.py) -> pkg.a"
    ]


def test_the_checker_passes_a_package_that_only_layers(tmp_path):
    src = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.top import run\n",
        "pkg/low.py": "VALUE = 1\n",
        "pkg/top.py": "from pkg.low import VALUE\n\ndef run():\n    from pkg import low\n    return low.VALUE\n",
    })
    assert cycles_report(src, "pkg") == []
