"""The layout's rules (ARCHITECTURE.md), checked on the source: no import circles, and who may import what.

Imports are read from the syntax tree, function-level ones included: a lazy
import still makes a circle, it only hides it until the function runs.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("remat", "experiments", "analysis")
MAX_LINES = 400
LENGTH_REASON = "Why over 400 lines:"  # a module may pass the limit by saying why in its docstring


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` (a package is its ``__init__.py``)."""
    out = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODS = modules()


def imported_names(path: Path, module: str, known: dict[str, Path] | None = None) -> set[str]:
    """Every dotted name ``module`` imports anywhere in its file.

    ``from a import b`` gives ``a.b`` where that is a module of ``known``, else ``a``.
    """
    known = MODS if known is None else known
    found = set()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name resolves to its longest known module prefix)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        for name in imported_names(path, module, mods):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != module:
                graph[module].add(name)
    return graph


def cycles(graph: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def top_level_units(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between ``remat``'s top-level modules and subpackages (``remat.milp``, ``remat.schedule``)."""
    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        if module.startswith("remat."):
            out[unit(module)].update(unit(t) for t in targets if t.startswith("remat.") and unit(t) != unit(module))
    return out


GRAPH = import_graph(MODS)


def test_no_import_circles_between_modules():
    assert cycles(GRAPH, sorted(MODS)) == []


def test_remat_subpackages_import_each_other_in_one_direction():
    units = top_level_units(GRAPH)
    assert cycles(units, sorted(units)) == []


def test_the_cycle_finder_finds_a_lazy_circle(tmp_path):
    """The checks above would pass vacuously if the finder missed function-level imports."""
    (tmp_path / "a.py").write_text("def f():\n    from b import g\n")
    (tmp_path / "b.py").write_text("import a\n")
    mods = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert cycles(import_graph(mods), ["a", "b"]) == [["a", "b"]]


@pytest.mark.parametrize(("package", "forbidden"), [
    ("remat", ("hydra", "omegaconf", "mlflow", "dvc", "experiments", "analysis")),
    ("analysis", ("experiments",)),
])
def test_who_may_import_what(package, forbidden):
    offenders = [
        f"{module} imports {name}"
        for module, path in modules((package,)).items()
        for name in imported_names(path, module)
        if name.split(".")[0] in forbidden
    ]
    assert offenders == []


def test_modules_stay_short_or_say_why():
    long = []
    for module, path in MODS.items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and LENGTH_REASON not in (ast.get_docstring(ast.parse(path.read_text())) or ""):
            long.append(f"{module}: {lines} lines")
    assert long == []
