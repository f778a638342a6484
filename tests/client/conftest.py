"""Fixtures for the client tests: a fake name server and two fake brokers on port 0, and
a real one-broker cluster (``cluster``) for the tests that need a real store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

from tidemq.client import ClientConfig
from tidemq.testing import Cluster


@pytest.fixture
async def namesrv() -> AsyncIterator[FakeNameServer]:
    ns = FakeNameServer()
    await ns.start()
    yield ns
    await ns.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A real name server and one real broker on loopback; modules needing more override it."""
    async with Cluster(tmp_path, brokers=1) as running:
        yield running


@pytest.fixture
async def brokers() -> AsyncIterator[list[FakeBroker]]:
    pair = [FakeBroker("broker-a"), FakeBroker("broker-b")]
    for b in pair:
        await b.start()
    yield pair
    for b in pair:
        await b.close()


@pytest.fixture
def config(namesrv: FakeNameServer) -> ClientConfig:
    """Short timeouts so failures show up fast."""
    return ClientConfig(
        namesrv_addr=(namesrv.address,), request_timeout=2.0, send_msg_timeout=3.0,
        long_polling_timeout=1.0, pull_error_backoff=0.05,
    )
