"""The modules of ``tidemq.broker`` import each other without a circle.

The graph is read from the source with :mod:`ast`: every ``import`` and ``from ... import``
counts, those under ``if TYPE_CHECKING:`` and inside functions included -- a circle that
only the type checker walks is still a circle of ideas.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tidemq.broker

ROOT = Path(tidemq.broker.__file__).parent
PACKAGE = "tidemq.broker"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PACKAGE, *parts))] = path
    return out


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = _package_of(name, path).split(".")
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join([*pkg, base] if base else pkg)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                if (target in modules and target != name
                        and modules[target].name != "__init__.py"):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_broker_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert graph.get(f"{PACKAGE}.app"), "the graph was not read"
    assert cycles(graph) == []


def test_the_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_processors_do_not_import_the_broker_app() -> None:
    graph = import_graph()
    users = sorted(m for m, targets in graph.items() if f"{PACKAGE}.app" in targets)
    assert users == []
