"""Integration fixtures: a real name server and two brokers on 127.0.0.1 port 0.

``cluster`` is one name server and brokers ``broker-a`` and ``broker-b`` with store
directories under ``tmp_path``; both have registered with the name server before the test
starts. ``peer`` is a wire-level client of ``broker-a``, ``namesrv`` one of the name server,
``admin`` a started admin client of the cluster (of a module's own ``cluster`` where it
defines one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker.wire import Peer

from tidemq.client import AdminClient
from tidemq.testing import Cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=2) as c:
        yield c


@pytest.fixture
async def peer(cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(cluster.brokers[0].broker_addr) as p:
        yield p


@pytest.fixture
async def namesrv(cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[AdminClient]:
    a = AdminClient(cluster.namesrv_addr)
    await a.start()
    yield a
    await a.close()
