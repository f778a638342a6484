"""``slaveActingMaster``: a master killed with SIGKILL comes back and takes back, before
it registers, the progress its replica recorded meanwhile -- the offsets consumers
committed on the replica, and the delayed and timer messages the replica delivered
for it to another group's master. Separate broker processes, an in-process name
server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.client import ClientConfig, PullConsumer
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess
from .test_replica_serving_kill9 import (
    PER_QUEUE,
    QUEUES,
    TOPIC,
    consumer_halfway,
    has_master,
    stored_offsets,
)
from .test_replication_kill9 import WarmBroker, master_and_replica

ACTING = {"slaveActingMaster": "true", "haSendHeartbeatInterval": "1000",
          # the replica's own copy (which carries its offsets to the master) comes
          # long after the master is back: what the master answers then is its own
          "slaveMetadataSyncInterval": "20000", "messageDelayLevel": "3s"}


@pytest.fixture
def group(tmp_path: Path, namesrv: NameServerApp) -> Iterator[tuple[WarmBroker,
                                                                      BrokerProcess]]:
    yield from master_and_replica(tmp_path, namesrv.address, "ASYNC_MASTER", ACTING)


async def master_gone(namesrv: str, topic: str) -> None:
    async with Peer(namesrv) as ns:
        await wire.eventually_route(ns, topic, lambda r: not any(
            0 in bd.broker_addrs for bd in r.broker_datas if bd.broker_name == "broker-a"),
            timeout=30)


@pytest.mark.timeout(120)
async def test_a_returning_master_answers_the_offsets_committed_on_its_replica(
        group: tuple[WarmBroker, BrokerProcess], namesrv: NameServerApp) -> None:
    master, replica = group
    consumer, got, queues = await consumer_halfway(master, replica, namesrv.address, "ret")
    try:
        await consumer.commit()  # to the master
        master.prepare()
        master.kill9()
        async with asyncio.timeout(60):  # the rest, from the replica
            while any(consumer.position(mq) < PER_QUEUE for mq in queues):
                got += [m.body for m in await consumer.poll(timeout=0.2)]
        await master_gone(namesrv.address, TOPIC)
        await consumer.commit()  # the replica takes it
        assert await stored_offsets(replica.addr, "ret-cg") == [PER_QUEUE] * QUEUES
    finally:
        await consumer.close(commit=False)  # the consumer is gone before the master is back

    await asyncio.to_thread(master.start)  # returns once the master registered
    assert await stored_offsets(master.addr, "ret-cg") == [PER_QUEUE] * QUEUES
    async with Peer(namesrv.address) as ns:
        await wire.eventually_route(ns, TOPIC, has_master, timeout=30)
    # a new member of the group starts where the group is: nothing is consumed twice
    later = PullConsumer("ret-cg", config=ClientConfig(
        namesrv_addr=(namesrv.address,), long_polling_timeout=0.5, instance_name="later"))
    await later.start()
    try:
        later.assign(queues)
        assert [await later.committed(mq) for mq in queues] == [PER_QUEUE] * QUEUES
        again = await later.poll(timeout=0.5)
        assert [m.body for m in again] == []
    finally:
        await later.close(commit=False)
    assert sorted(got) == sorted(b"m%d" % i for i in range(PER_QUEUE * QUEUES))


async def delay_progress(addr: str) -> dict[str, Any]:
    async with Peer(addr) as peer:
        resp = await peer.ok(wire.request(RequestCode.GET_ALL_DELAY_OFFSET))
    body: dict[str, Any] = json.loads(resp.full_body())
    return body


def delivered(progress: dict[str, Any]) -> bool:
    """Whether the delay level's message and the timer message were delivered."""
    timer = int(progress.get("timerCheckpoint", {}).get("scanOffset", 0))
    return int(progress.get("offsetTable", {}).get("1", 0)) >= 1 and timer >= 1


async def first_message(addr: str, topic: str) -> bytes:
    """The body of ``topic``'s first message on ``addr`` (the pull is held until one
    arrives)."""
    async with Peer(addr) as peer:
        resp = await peer(wire.pull(topic, 0, 0, sys_flag=wire.PULL_SUSPEND,
                                    suspend_ms=20_000), timeout=30)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        return bytes(wire.decode_messages(resp.full_body())[0].body)


@pytest.mark.timeout(120)
async def test_messages_the_acting_replica_delivered_are_not_delivered_again(
        group: tuple[WarmBroker, BrokerProcess], namesrv: NameServerApp,
        tmp_path: Path) -> None:
    master, replica = group
    other = BrokerProcess(tmp_path / "b", namesrv.address, {
        **ACTING, "brokerName": "broker-b", "mappedFileSizeCommitLog": SMALL_SEGMENT})
    try:
        await asyncio.gather(asyncio.to_thread(master.start),
                             asyncio.to_thread(replica.start),
                             asyncio.to_thread(other.start))
        for addr in (other.addr, master.addr):  # both groups serve the topic
            async with Peer(addr) as peer:
                await peer.ok(wire.create_topic("Later", 1))
        async with Peer(master.addr) as peer:  # parked for 3 s: a delay level, a timer
            await peer.ok(wire.send("Later", b"level", properties=wire.props(DELAY="1")))
            await peer.ok(wire.send("Later", b"timer",
                                    properties=wire.props(TIMER_DELAY_MS="3000")))
        async with Peer(replica.addr) as peer:
            for parked in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
                while await peer.max_offset(parked, 0) < 1:
                    await asyncio.sleep(0.05)
        master.prepare()
        master.kill9()  # before the messages are due
        await master_gone(namesrv.address, "Later")
        # the replica acts for its master: it delivers both to broker-b
        async with Peer(other.addr) as peer:
            got = []
            while len(got) < 2:
                resp = await peer(wire.pull("Later", 0, len(got), sys_flag=wire.PULL_SUSPEND,
                                            suspend_ms=20_000), timeout=30)
                assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
                got += [bytes(m.body) for m in wire.decode_messages(resp.full_body())]
            assert sorted(got) == [b"level", b"timer"]
        async with asyncio.timeout(30):
            while not delivered(await delay_progress(replica.addr)):
                await asyncio.sleep(0.05)

        await asyncio.to_thread(master.start)  # took the replica's progress back first
        assert delivered(await delay_progress(master.addr))
        async with Peer(master.addr) as peer:  # after anything it would deliver again
            await peer.ok(wire.send("Later", b"sentinel"))
        assert await first_message(master.addr, "Later") == b"sentinel"
        async with Peer(other.addr) as peer:
            assert await peer.max_offset("Later", 0) == 2
    finally:
        other.kill9()
