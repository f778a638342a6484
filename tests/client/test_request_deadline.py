"""One deadline over many requests (:mod:`tidemq.client.request_deadline`), against a
real broker and a real socket on loopback that accepts connections and never answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tidemq.client import AdminClient, monitor
from tidemq.client.request_deadline import NotAsked, current, request_deadline
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import RequestTimeout
from tidemq.testing import Cluster


class HungBroker:
    """A real socket on loopback that accepts every connection, reads what is sent and
    never answers; counts the bytes it was sent."""

    def __init__(self) -> None:
        self.received = 0
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._held.append(writer)
        while chunk := await reader.read(65536):
            self.received += len(chunk)

    async def close(self) -> None:
        for writer in self._held:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def hung() -> AsyncIterator[tuple[HungBroker, str]]:
    broker = HungBroker()
    addr = await broker.start()
    try:
        yield broker, addr
    finally:
        await broker.close()


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[AdminClient]:
    client = AdminClient(cluster.namesrv_addr)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def _runtime() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)


async def test_a_broker_that_did_not_answer_is_not_asked_again_in_the_scope(
        admin: AdminClient, cluster: Cluster, hung: tuple[HungBroker, str]) -> None:
    broker, addr = hung
    healthy = cluster.brokers[0].broker_addr
    with request_deadline(0.3, floor=0.2) as scope:
        with pytest.raises(RequestTimeout) as first:
            await admin.instance.request(addr, _runtime())
        assert not isinstance(first.value, NotAsked)
        sent = broker.received
        with pytest.raises(NotAsked) as again:
            await admin.instance.request(addr, _runtime())
        assert again.value.address == addr and broker.received == sent
        assert list(scope.unanswered) == [addr]
        assert "no answer within" in scope.unanswered[addr]
        # Past the deadline, a broker not yet asked still gets the floor to answer.
        assert (await admin.instance.request(healthy, _runtime())).code == 0
    assert current() is None
    with pytest.raises(RequestTimeout) as outside:  # outside the scope: its own timeout
        await admin.instance.request(addr, _runtime(), timeout=0.2)
    assert not isinstance(outside.value, NotAsked)


async def test_a_scope_ends_for_the_tasks_it_started(admin: AdminClient,
                                                     hung: tuple[HungBroker, str]) -> None:
    """A task started in the scope that outlives it (a producer's background work) keeps
    its requests' own timeouts once the scope closes."""
    _broker, addr = hung
    seen: asyncio.Queue[object] = asyncio.Queue()

    async def later() -> None:
        await seen.get()
        seen.put_nowait(current())

    with request_deadline(0.2):
        with pytest.raises(RequestTimeout):
            await admin.instance.request(addr, _runtime())
        task = asyncio.create_task(later())
    seen.put_nowait("go")
    await task
    assert seen.get_nowait() is None


async def test_views_merge_the_brokers_that_answered(admin: AdminClient, cluster: Cluster,
                                                     hung: tuple[HungBroker, str]) -> None:
    _broker, addr = hung
    healthy = cluster.brokers[0].broker_addr
    await admin.create_topic("Merged", read_queue_nums=2, write_queue_nums=2)
    with pytest.raises(RequestTimeout):  # outside a scope, one failure fails the view
        await monitor.topic_stats(admin, "Merged", addresses=[healthy, addr])
    with request_deadline(0.3) as scope:
        stats = await monitor.topic_stats(admin, "Merged", addresses=[healthy, addr])
        assert list(scope.unanswered) == [addr]
    assert [q.queue_id for q in stats.queues] == [0, 1], "what answered is left out too"
    with request_deadline(0.3), pytest.raises(RequestTimeout):  # a change: all or nothing
        await monitor.reset_offset(admin, "g", "Merged", timestamp=0,
                                   addresses=[addr, healthy])
