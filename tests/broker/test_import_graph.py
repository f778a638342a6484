"""The modules of ``tidemq.broker`` import each other without a circle, and no processor
reaches for the broker application (they are handed a
:class:`~tidemq.broker.context.BrokerContext`). The circle finder and the graph are the
repository's (:mod:`tests.test_import_graph`): imports under ``if TYPE_CHECKING:`` and
inside functions count."""

from __future__ import annotations

import grimp
import pytest
from tests.test_import_graph import circles


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("tidemq")


def test_the_broker_package_has_no_import_circle(graph: grimp.ImportGraph) -> None:
    assert graph.find_modules_directly_imported_by("tidemq.broker.app"), "graph not read"
    assert circles(graph, "tidemq.broker") == []


def test_only_the_broker_app_builds_processors(graph: grimp.ImportGraph) -> None:
    assert sorted(graph.find_modules_that_directly_import("tidemq.broker.app")
                  & {m for m in graph.modules if m.startswith("tidemq.broker.")}) == []
