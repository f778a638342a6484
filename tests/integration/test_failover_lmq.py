"""Light message queues on a replicated group that fails over, with real processes on
loopback: three name servers with the controller embedded, broker-a as three
SYNC_MASTER brokers in controller mode with LMQ on.

Fan-out sends acknowledged by the first master are read from the master elected after
it is killed -9: each LMQ's offsets are dense from 0, every acknowledged message is in
each of its LMQs exactly once and in order, and the new master's own fan-outs continue
each LMQ's offsets where the old master's ended. A consumer group's LMQ offset committed
on the old master (and copied by its replicas) is the new master's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.crash.broker_process import BrokerProcess
from tests.integration.failover_group import (
    GROUP,
    TOPIC,
    broker_group,
    eventually,
    has_topic,
    namesrvs,
    start_first_master,
)
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, LmqConsumer, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.client.lmq import send_to_lmqs
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue, PullStatus, SendStatus

__all__ = ["namesrvs"]  # fixture

LMQS = ["%LMQ%inbox-a", "%LMQ%inbox-b", "%LMQ%inbox-c"]


def lmqs_of(i: int) -> list[str]:
    """Message ``i`` fans out to inbox-a always, to b or c by turns."""
    return [LMQS[0], LMQS[1 + i % 2]]


@pytest.fixture
def lmq_brokers(namesrvs: list[ControllerProcess],
                tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with broker_group(namesrvs, tmp_path, enableLmq="true",
                      enableMultiDispatch="true") as group:
        yield group


async def read_lmq(reader: LmqConsumer, lmq: str) -> list[tuple[int, bytes]]:
    """(LMQ offset, body) of everything in ``lmq``, from offset 0."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        result = await reader.pull(lmq, offset, max_nums=32)
        if result.status is not PullStatus.FOUND:
            return out
        out += [(m.offset, bytes(m.message.body)) for m in result.messages]
        offset = result.next_offset


async def send_fan_out(p: Producer, i: int, prefix: str) -> bool:
    """Whether fan-out ``i`` was acknowledged (SEND_OK) by the group's master."""
    body = f"{prefix}{i:04d}".encode()
    try:
        result = await send_to_lmqs(p, Message(TOPIC, body), lmqs_of(i),
                                    queue=MessageQueue(TOPIC, GROUP, 0))
    except TideMQError:
        return False
    return result.status is SendStatus.SEND_OK


async def test_lmq_messages_acknowledged_before_a_kill9_are_on_the_new_master(
        namesrvs: list[ControllerProcess], lmq_brokers: list[BrokerProcess]) -> None:
    brokers = lmq_brokers
    addrs = [c.addr for c in namesrvs]
    config = ClientConfig(namesrv_addr=addrs, request_timeout=3.0)
    async with AdminClient(config=config) as admin, Producer("lmq-failover",
                                                             config=config) as p:
        controllers = ControllerAdmin(admin.instance.request, addrs)
        await start_first_master(controllers, brokers)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        await eventually(group, lambda g: g.master_broker_id == 1  # type: ignore[attr-defined]
                         and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]
        await admin.create_topic(TOPIC, broker_addr=brokers[0].addr, read_queue_nums=1,
                                 write_queue_nums=1)
        for replica in brokers[1:]:
            await eventually(lambda r=replica: has_topic(admin, r.addr), bool)

        async def routed() -> bool:  # the name servers know the topic's queue
            try:
                route = await admin.topic_route(TOPIC)
            except TideMQError:
                return False
            return any(d.broker_name == GROUP for d in route.broker_datas)

        await eventually(routed, bool)
        # 40 acknowledged fan-outs; a send the master stored but could not confirm on
        # its replicas in time (FLUSH_SLAVE_TIMEOUT on a busy machine) is not acked and
        # may or may not be read later, as the check below allows
        acked: list[int] = []
        i = 0
        while len(acked) < 40:
            assert i < 400, f"only {len(acked)} of {i} fan-outs acknowledged"
            if await send_fan_out(p, i, "old"):
                acked.append(i)
            i += 1
        async with LmqConsumer("lmq-failover-g", broker_addr=brokers[0].addr,
                               config=config) as old_reader:
            await old_reader.commit({old_reader.queue(LMQS[1]): 7})
        for replica in brokers[1:]:  # the replicas copy LMQ offsets every 500 ms
            async with LmqConsumer("lmq-failover-g", broker_addr=replica.addr,
                                   config=config) as on_replica:
                await eventually(lambda c=on_replica: c.committed(LMQS[1]),
                                 lambda offset: offset == 7)

        brokers[0].kill9()
        n = 0
        while not await send_fan_out(p, 1000 + n, "new"):  # until the new master acks
            n += 1
            await asyncio.sleep(0.05)
        new_acked = [1000 + n]
        i = 1001 + n
        while len(new_acked) < 11:
            assert i < 1400 + n, f"only {len(new_acked)} fan-outs acknowledged after the kill"
            if await send_fan_out(p, i, "new"):
                new_acked.append(i)
            i += 1

        g = await group()
        new = brokers[g.master_broker_id - 1]  # type: ignore[attr-defined]
        async with LmqConsumer("lmq-failover-check", broker_addr=new.addr,
                               config=config) as reader:
            for lmq in LMQS:
                want = [f"old{i:04d}".encode() for i in acked if lmq in lmqs_of(i)]
                want += [f"new{i:04d}".encode() for i in new_acked if lmq in lmqs_of(i)]
                # an acknowledged send reaches its LMQs when the new master has dispatched
                # it, which a busy machine may not have done yet: read until the last is in
                got = await eventually(lambda q=lmq: read_lmq(reader, q),
                                       lambda got, last=want[-1]: last in {b for _, b in got})
                offsets = [o for o, _ in got]
                assert offsets == list(range(len(got))), f"{lmq}: offsets not dense"
                bodies = [b for _, b in got]
                assert len(set(bodies)) == len(bodies), f"{lmq}: a message twice"
                assert [b for b in bodies if b in set(want)] == want, lmq
        async with LmqConsumer("lmq-failover-g", broker_addr=new.addr,
                               config=config) as group_reader:
            assert await group_reader.committed(LMQS[1]) == 7
