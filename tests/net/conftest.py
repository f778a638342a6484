"""Fixtures for tidemq.net: a server on 127.0.0.1 port 0, a client, raw-socket peers.

Every async test here runs twice: on the stdlib event loop and on uvloop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import uvloop
from tests.net.support import RawPeer, make_server

from tidemq.net import RemotingClient, RemotingServer


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def server() -> AsyncIterator[RemotingServer]:
    srv = make_server()
    await srv.start()
    yield srv
    await srv.close(drain_timeout=0.2)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    cli = RemotingClient(request_timeout=5.0)
    yield cli
    await cli.close()


@pytest.fixture
async def raw_peers() -> AsyncIterator[list[RawPeer]]:
    """Raw peers the test opens (append them); closed at the end."""
    peers: list[RawPeer] = []
    yield peers
    for peer in peers:
        await peer.close()
