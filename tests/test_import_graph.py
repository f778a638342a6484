"""No import circles between the modules of a package.

A circle makes import order matter, hides which module owns what, and is usually broken
with a function-level import or an ``if TYPE_CHECKING:`` block -- both of which count
here, since both still tie the two modules together. The graph is grimp's (the one
import-linter checks the layer contracts on).
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ["tidemq.client", "tidemq.namesrv", "tidemq.cli", "tidemq.broker"]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("tidemq")


def circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module among ``package``'s
    modules (Tarjan's algorithm, iterative), each sorted."""
    modules = sorted(m for m in graph.modules if m.startswith(package + "."))
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # ``node`` is done: its low link bounds its parent's
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circles_are_found() -> None:
    """The finder itself: a three-module circle, a self-contained module and a tail."""
    g = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c", "p.d", "p.e"):
        g.add_module(name)
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),
                               ("p.d", "p.a"), ("p.e", "p.d")):
        g.add_import(importer=importer, imported=imported)
    assert circles(g, "p") == [["p.a", "p.b", "p.c"]]
    g.remove_import(importer="p.c", imported="p.a")
    assert circles(g, "p") == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(graph: grimp.ImportGraph, package: str) -> None:
    assert circles(graph, package) == [], f"import circles inside {package}"
