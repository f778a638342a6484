"""A logical-queue migration while the master of the group it leaves fails over, with
real processes on loopback: three name servers with the controller embedded, broker-a as
three SYNC_MASTER brokers in controller mode, broker-b a single broker.

LQ 0 leads on broker-a. The migration to broker-b is started, and broker-a's master is
killed -9 as soon as the target segment is planned. The brokers' copies of the mapping
converge to one with every logical queue writable; the migration, run again once the
controllers elected a new master of broker-a, seals the segment there and commits it on
broker-b; every send acknowledged before, during and after is read exactly once, in
logical order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    SEGMENT,
    broker_settings,
    eventually,
    namesrvs,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, Message, Producer, PullConsumer
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.client.logical_admin import LogicalQueueAdmin, writable
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import TopicMapping
from tidemq.types import LOGICAL_BROKER, MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

TOPIC = "LogicalFailover"
SYNC = {"logicalSyncInterval": "300"}


@pytest.fixture
def cluster(namesrvs: list[ControllerProcess],
            tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    """broker-a's three brokers (ids 1, 2, 3), then broker-b."""
    addrs = ";".join(c.addr for c in namesrvs)
    group = [BrokerProcess(tmp_path / f"a{i}", addrs,
                           {**broker_settings(addrs), **SYNC, "brokerId": str(i)})
             for i in (1, 2, 3)]
    other = BrokerProcess(tmp_path / "b", addrs, {
        **SYNC, "brokerName": "broker-b", "mappedFileSizeCommitLog": str(SEGMENT)})
    try:
        yield [*group, other]
    finally:
        for b in [*group, other]:
            b.kill9()


async def copy_on(admin: AdminClient, addr: str) -> TopicMapping | None:
    try:
        resp = await admin._broker(addr, RemotingCommand.request(
            RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": TOPIC}))
    except TideMQError:
        return None
    return TopicMapping.from_json(json.loads(resp.full_body()))


async def one_mapping(admin: AdminClient, addrs: list[str],
                      timeout: float = 60.0) -> TopicMapping:
    """Wait until every broker answers with the same copy (they reconcile on a timer)."""
    deadline = time.monotonic() + timeout
    while True:
        held = [await copy_on(admin, a) for a in addrs]
        first = held[0]
        if first is not None and all(h == first for h in held):
            return first
        assert time.monotonic() < deadline, f"the copies never converged: {held}"
        await asyncio.sleep(0.1)


async def send_until_acked(p: Producer, body: bytes, acked: dict[int, bytes]) -> None:
    while True:
        try:
            res = await p.send(Message(TOPIC, body), queue=MessageQueue(TOPIC, LOGICAL_BROKER, 0))
        except TideMQError:
            await asyncio.sleep(0.05)
            continue
        if res.status is SendStatus.SEND_OK:
            assert res.queue_offset not in acked, "a logical offset given twice"
            acked[res.queue_offset] = body
            return
        await asyncio.sleep(0.05)


async def test_a_migration_across_a_failover_converges_and_loses_nothing(
        namesrvs: list[ControllerProcess], cluster: list[BrokerProcess]) -> None:
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0,
                          poll_name_server_interval=1.0)
    a1, a2, a3, b = cluster
    async with AdminClient(config=config) as admin, Producer("lq-failover",
                                                             config=config) as p:
        controllers = ControllerAdmin(admin.instance.request, addrs)
        await start_first_master(controllers, [a1, a2, a3])
        b.start()

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                         and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        lqa = LogicalQueueAdmin(admin)
        await lqa.create(TOPIC, 2, ["broker-a", "broker-b"])
        mapping = await one_mapping(admin, [a1.addr, b.addr])
        leader = mapping.leader(0)
        assert leader is not None and leader.broker == "broker-a"
        acked: dict[int, bytes] = {}
        for i in range(30):
            await send_until_acked(p, b"before%03d" % i, acked)

        def step(name: str, _now: bool, _m: TopicMapping) -> None:
            if name == "planned":
                a1.kill9()  # broker-a's master dies as the migration starts

        with contextlib.suppress(TideMQError):  # the seal finds broker-a's master gone
            await lqa.migrate(TOPIC, 0, "broker-b", step)
        g = await eventually(group, lambda g: g.master_broker_id in (2, 3))  # type: ignore[attr-defined]
        new = cluster[g.master_broker_id - 1]  # type: ignore[attr-defined]
        for i in range(10):  # LQ 0 takes sends again: on broker-a's new master
            await send_until_acked(p, b"during%03d" % i, acked)
        mapping = await one_mapping(admin, [new.addr, b.addr])
        assert writable(mapping) == [0, 1], mapping

        mapping = await lqa.migrate(TOPIC, 0, "broker-b")
        leader = mapping.leader(0)
        assert leader is not None and leader.broker == "broker-b" and mapping.pending(0) is None
        assert await one_mapping(admin, [new.addr, b.addr], timeout=10) == mapping
        for i in range(10):
            await send_until_acked(p, b"after%03d" % i, acked)

        consumer = PullConsumer("lq-failover-reader", config=config)
        await consumer.start()
        queue = MessageQueue(TOPIC, LOGICAL_BROKER, 0)
        consumer.assign([queue])
        consumer.seek(queue, 0)
        got: list[tuple[int, bytes]] = []
        try:
            deadline = time.monotonic() + 30
            while not set(acked) <= {o for o, _ in got}:
                assert time.monotonic() < deadline, f"not read: {set(acked) - dict(got).keys()}"
                got += [(m.queue_offset, bytes(m.body))
                        for m in await consumer.poll(timeout=0.2)]
        finally:
            await consumer.close(commit=False)
        offsets = [o for o, _ in got]
        assert offsets == list(range(len(offsets))), "a gap or a duplicate"
        assert acked.items() <= dict(got).items()
        assert a2 is not None and a3 is not None
