"""A replica taking its master's topic-deletion marks, killed with ``kill -9``: the mark
written and the queues not cut yet, or after an answered copy. Started again, it holds
the master's mark and serves the topic created again with its new messages only, from
offset 0 -- neither the old messages back nor the new ones lost. Master and replica are
``tidemq broker`` processes; the deletion and the creation happen before the replica
starts, so its first copy takes the mark while its log copy runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer

from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess
from .test_replication_kill9 import WarmBroker, master_and_replica, topic_on

#: The replica's step after which it is killed: the marks written, pending.
ADOPT = "tidemq.store.deleted_topics:DeletedTopics.adopt"
OLD, NEW = 6, 4
SETTINGS = {"slaveMetadataSyncInterval": "3600000",  # a copy at start only
            "flushIntervalConsumeQueue": "3600000"}  # each start dispatches the whole log


@pytest.fixture
def pair(tmp_path: Path, namesrv: NameServerApp) -> Iterator[tuple[WarmBroker, BrokerProcess]]:
    yield from master_and_replica(tmp_path, namesrv.address, "ASYNC_MASTER", SETTINGS)


async def _delete_and_create_again(addr: str) -> None:
    async with Peer(addr) as peer:
        await peer.ok(wire.create_topic("T", 1))
        for i in range(OLD):
            await peer.ok(wire.send("T", b"old%d" % i))
        await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="T"))
        await peer.ok(wire.create_topic("T", 1))
        for i in range(NEW):
            await peer.ok(wire.send("T", b"new%d" % i))


async def _check(replica: str) -> None:
    await topic_on(replica, "T")
    async with Peer(replica) as peer:
        got = await collect(peer, "T", NEW, timeout=30)
        assert [(m.body, m.queue_offset) for m in got] == [
            (b"new%d" % i, i) for i in range(NEW)]
        assert await peer.max_offset("T") == NEW


@pytest.mark.parametrize("cut", [True, False], ids=["mark-written", "copied"])
def test_a_replica_killed_taking_a_mark_serves_the_new_topic_only(
        pair: tuple[WarmBroker, BrokerProcess], cut: bool) -> None:
    master, replica = pair
    master.start()
    asyncio.run(_delete_and_create_again(master.addr))
    if cut:
        replica.stop_after(ADOPT)
        replica.start()
        assert replica.stopped(60) == ADOPT
    else:
        replica.start()
        asyncio.run(_check(replica.addr))
    replica.kill9()
    replica.stop_after(None)
    replica.start()
    asyncio.run(_check(replica.addr))


def test_a_replica_killed_taking_a_mark_keeps_the_topic_created_again(
        pair: tuple[WarmBroker, BrokerProcess]) -> None:
    """Started again with its master down, so that no copy comes: the topic created again
    on the master is in the replica's table, where the copy it took before the mark put
    it, and not dropped as a deletion of its own that a stop cut off."""
    master, replica = pair
    master.start()
    asyncio.run(_delete_and_create_again(master.addr))
    replica.stop_after(ADOPT)
    replica.start()
    assert replica.stopped(60) == ADOPT
    master.kill9()
    replica.kill9()
    replica.stop_after(None)
    replica.start()

    async def config() -> int:
        async with Peer(replica.addr) as peer:
            resp = await peer(wire.request(RequestCode.GET_TOPIC_CONFIG, topic="T"))
            return resp.code

    assert asyncio.run(config()) == ResponseCode.SUCCESS
