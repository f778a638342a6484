"""A real cluster for the CLI tests, on an event loop in a background thread.

The ``tidemq admin`` commands call ``asyncio.run`` themselves, so the cluster cannot live
on the test's loop: :class:`ThreadedCluster` runs :class:`tidemq.testing.Cluster` (one
name server, two brokers on 127.0.0.1 port 0) on a loop of its own in a daemon thread.
One cluster serves the whole module; tests use topics of their own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidemq.testing import Cluster

T = TypeVar("T")


class ThreadedCluster:
    def __init__(self, root: Path, brokers: int = 2, broker: dict[str, Any] | None = None,
                 namesrv: dict[str, Any] | None = None,
                 store: dict[str, Any] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cli-cluster",
                                       daemon=True)
        self.cluster = Cluster(root, brokers=brokers, broker=broker, namesrv=namesrv,
                               store=store)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the cluster's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> ThreadedCluster:
        self.thread.start()
        self.call(self.cluster.start())
        return self

    def stop(self) -> None:
        try:
            self.call(self.cluster.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    @property
    def broker_addrs(self) -> list[str]:
        return [b.broker_addr for b in self.cluster.brokers]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedCluster]:
    running = ThreadedCluster(tmp_path_factory.mktemp("cli-cluster")).start()
    try:
        yield running
    finally:
        running.stop()
