"""Logical queues (RIP-21), the cases upstream never tested (spec §8 "extra tests"), each
under the continuous load of :mod:`tests.integration.test_logical_queues`:

* a committing consumer (pull, and a push group) restarted right after a migration;
* sends in flight while the old segment is sealed;
* clients with stale routes at every step of a migration;
* the old leader broker killed during a migration, restarted, the migration resumed;
* committed offsets across 1 -> 2 -> 3 -> 1, with no rebalance of a push group;
* time search and offset reset into an old segment.

Every test ends with :meth:`Load.check`: every acknowledged send consumed exactly once,
in logical order, with no gap.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from collections.abc import Callable

from tests.integration import test_logical_queues as base
from tests.integration.test_logical_queues import TOPIC, Load, N, create, load

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.logical_admin import LogicalQueueAdmin, plan_commit, plan_migration
from tidemq.client.monitor import reset_offset
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import SegmentState, TopicMapping
from tidemq.net import RemotingClient
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

cluster = base.cluster  # the base scenarios' three brokers

QUEUES = [MessageQueue(TOPIC, LOGICAL_BROKER, i) for i in range(N)]
Got = dict[int, list[tuple[int, bytes]]]


async def eventually(holds: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``holds()``: replication, consumption by a push consumer and route
    updates are asynchronous and give the test no event to wait on."""
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.02)


def record(got: Got, msgs: list[MessageExt]) -> None:
    for m in msgs:
        got.setdefault(m.queue_id, []).append((m.queue_offset, m.body))


async def read_until(consumer: PullConsumer, got: Got, done: Callable[[], bool],
                     timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the consumer never caught up"
        record(got, await consumer.poll(timeout=0.2))


def merged(*runs: Got) -> Got:
    return {lq: [x for run in runs for x in run.get(lq, [])] for lq in range(N)}


def has_all(got: Got, state: Load) -> bool:
    return all(set(offs) <= {o for o, _ in got.get(lq, [])} for lq, offs in state.acked.items())


def owns_all(consumer: PushConsumer) -> bool:
    return sorted(q for q in consumer.assignment() if q.topic == TOPIC) == QUEUES


def exactly_once(runs: list[Got], state: Load) -> None:
    """The runs of one group, together: each LQ read from 0 with no gap and no message
    twice, and every acknowledged send at its offset."""
    for lq, got in merged(*runs).items():
        offsets = [o for o, _ in got]
        assert offsets == list(range(len(offsets))), f"LQ {lq}: a gap or a duplicate"
        assert state.acked.get(lq, {}).items() <= dict(got).items(), f"LQ {lq}: lost"


async def pull_group(cluster: Cluster, group: str, consume_from: ConsumeFromWhere = (
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)) -> PullConsumer:
    consumer = PullConsumer(group, cluster.namesrv_addr, consume_from=consume_from)
    await consumer.start()
    consumer.assign(QUEUES)
    return consumer


# ---------------------------------------------------------------------- consumer restart


async def test_pull_consumer_restarted_after_a_migration_resumes_at_its_offset(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    first: Got = {}
    second: Got = {}
    async with load(cluster) as state:
        consumer = await pull_group(cluster, "lq-restart",
                                    consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        for _ in range(5):
            record(first, await consumer.poll(timeout=0.2))
        positions = {mq.queue_id: consumer.position(mq) for mq in QUEUES}
        await consumer.close()  # commits the positions reached
        for lq in (0, 1):
            await lqa.migrate(TOPIC, lq, "broker-c")
        consumer = await pull_group(cluster, "lq-restart")  # right after the migration
        assert {mq.queue_id: await consumer.committed(mq) for mq in QUEUES} == positions
        record(second, await consumer.poll(timeout=0.5))
    try:
        await read_until(consumer, second, lambda: has_all(merged(first, second), state)
                         and all(second.get(lq) for lq in range(N)))
    finally:
        await consumer.close()
    for lq in range(N):  # the second run starts exactly where the first one stopped
        assert second[lq][0][0] == positions[lq]
    exactly_once([first, second], state)


async def test_sends_in_flight_during_the_seal_are_acked_once(cluster: Cluster,
                                                               admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    burst: list[tuple[int, int, bytes]] = []
    async with load(cluster) as state:
        producer = Producer("lq-burst", cluster.namesrv_addr)
        await producer.start()
        migrating = True

        async def sender(i: int) -> None:
            n = 0
            while migrating or n < 3:
                body = f"burst-{i}-{n}".encode()
                n += 1
                res = await producer.send(Message(TOPIC, body), queue=QUEUES[0])
                burst.append((res.queue.queue_id, res.queue_offset, body))

        senders = [asyncio.ensure_future(sender(i)) for i in range(32)]
        await asyncio.sleep(0.1)  # sends are in flight on every connection now
        try:
            mapping = await lqa.migrate(TOPIC, 0, "broker-c")
            await asyncio.sleep(0.1)
        finally:
            migrating = False
            await asyncio.gather(*senders)
            await producer.close()
        for qid, offset, body in burst:  # into the load's ledger: checked on exit
            assert qid == 0
            assert offset not in state.acked.setdefault(0, {}), f"offset {offset} twice"
            state.acked[0][offset] = body
    cut = mapping.queues[0][0].logical_end
    offsets = sorted(o for _, o, _ in burst)
    assert offsets[0] < cut <= offsets[-1], "the burst did not straddle the seal"
    assert mapping.leader(0) is not None and mapping.leader(0).logical_start == cut  # type: ignore[union-attr]


# ---------------------------------------------------------------------- stale routes


async def test_clients_with_stale_routes_work_at_every_step(cluster: Cluster,
                                                            admin: AdminClient) -> None:
    """A producer and a consumer whose route cache is never refreshed, and a plain client
    that still addresses broker-c as if it were the gateway, at each step of a migration
    run step by step (planned, sealed, committed)."""
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    stale_cfg = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), instance_name="stale",
                             poll_name_server_interval=3600.0)
    producer = Producer("lq-stale", config=stale_cfg)
    await producer.start()
    consumer = PullConsumer("lq-stale-c", config=stale_cfg)
    await consumer.start()
    consumer.assign(QUEUES)
    for mq in QUEUES:
        consumer.seek(mq, 0)
    plain = RemotingClient()
    broker_c = next(b for b in cluster.brokers if b.config.broker_name == "broker-c")
    got: Got = {}
    try:
        async with load(cluster) as state:
            # the stale route is cached now (the load may not have acked on LQ 3 yet)
            res = await producer.send(Message(TOPIC, b"warm"), queue=QUEUES[3])
            state.acked.setdefault(3, {})[res.queue_offset] = b"warm"

            async def stale_sends(tag: str) -> None:
                for lq in range(N):
                    res = await producer.send(Message(TOPIC, f"{tag}-{lq}".encode()),
                                              queue=QUEUES[lq])
                    state.acked.setdefault(lq, {})[res.queue_offset] = f"{tag}-{lq}".encode()
                    ext = {"producerGroup": "plain", "topic": TOPIC, "defaultTopic": "TBW102",
                           "defaultTopicQueueNums": "4", "queueId": str(lq), "sysFlag": "0",
                           "bornTimestamp": "0", "flag": "0"}
                    r = await plain.request(broker_c.broker_addr, RemotingCommand.request(
                        RequestCode.SEND_MESSAGE, ext, f"{tag}-plain-{lq}".encode()), 5)
                    assert r.code == 0, r.remark
                    state.acked[lq][int(r.ext_fields["queueOffset"])] = (
                        f"{tag}-plain-{lq}".encode())
                record(got, await consumer.poll(timeout=0.1))

            mapping = await lqa.query(TOPIC)
            planned = plan_migration(mapping, 0, "broker-c")
            assert planned is not None
            await lqa.update(planned)
            await stale_sends("planned")
            # sealed: broker-c still holds the planned mapping; its sends wait for the
            # commit, which is pushed while they are in flight
            broker_a = next(b for b in cluster.brokers if b.config.broker_name == "broker-a")
            resp = await admin._broker(broker_a.broker_addr, RemotingCommand.request(
                RequestCode.SEAL_LOGICAL_QUEUE, {"topic": TOPIC, "lq": "0"}))
            sealed = TopicMapping.from_json(json.loads(resp.full_body()))
            assert sealed.leader(0) is None
            in_flight = asyncio.ensure_future(stale_sends("sealed"))
            await asyncio.sleep(0.05)
            committed = plan_commit(sealed, 0)
            await lqa.update(committed)
            await in_flight
            await stale_sends("committed")
        await read_until(consumer, got, lambda: has_all(got, state))
    finally:
        await plain.close()
        await consumer.close(commit=False)
        await producer.close()
    assert [s.state for s in committed.queues[0]] == [SegmentState.READONLY,
                                                      SegmentState.NORMAL]
    exactly_once([got], state)


# ---------------------------------------------------------------------- broker crash


async def test_old_leader_killed_during_a_migration_then_resumed(cluster: Cluster,
                                                                 admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])  # broker-b holds LQ 1 and LQ 3
    lqa = LogicalQueueAdmin(admin)
    index_b = next(i for i, b in enumerate(cluster.brokers)
                   if b.config.broker_name == "broker-b")
    async with load(cluster, tolerant=True) as state:
        planned = plan_migration(await lqa.query(TOPIC), 1, "broker-c")
        assert planned is not None
        await lqa.update(planned)
        await cluster.brokers[index_b].stop()  # killed after the planned step
        try:
            await lqa.migrate(TOPIC, 1, "broker-c")
        except TideMQError as exc:
            assert "broker-b" in str(exc)
        else:
            raise AssertionError("migrating away from a dead broker succeeded")
        await asyncio.sleep(0.3)  # the other queues keep taking sends meanwhile
        await cluster.restart_broker(index_b)
        m = await lqa.migrate(TOPIC, 1, "broker-c")  # resumes: seal, commit
        await asyncio.sleep(0.5)
    leader = m.leader(1)
    assert leader is not None and leader.broker == "broker-c"
    assert m.queues[1][0].state is SegmentState.READONLY
    assert leader.logical_start == m.queues[1][0].logical_end
    assert state.failed > 0 and sum(len(v) for v in state.acked.values()) > 20


# ---------------------------------------------------------------------- 1 -> 2 -> 3 -> 1


async def test_offsets_survive_1_2_3_1_without_a_rebalance(cluster: Cluster,
                                                           admin: AdminClient) -> None:
    """RIP-21's "double read check", with a push group: it never rebalances because of
    the migrations, and restarted right after the last one it resumes where it was."""
    await create(admin, ["broker-a"])
    lqa = LogicalQueueAdmin(admin)
    runs: list[Got] = [{}, {}]
    run = 0

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        record(runs[run], msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def push() -> PushConsumer:
        c = PushConsumer("lq-push", cluster.namesrv_addr, listener=listener,
                         consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(TOPIC)
        return c

    consumer = push()
    await consumer.start()
    # Settled: the topic's queues and the group's retry queue (its route appears a moment
    # after the first heartbeat, and the rebalance takes it then).
    await eventually(lambda: owns_all(consumer) and any(
        q.topic == f"%RETRY%{consumer.group}" for q in consumer.assignment()))
    started = consumer.rebalance_count
    async with load(cluster) as state:
        for target in ("broker-b", "broker-c"):
            for lq in range(N):
                await lqa.migrate(TOPIC, lq, target)
            await asyncio.sleep(0.2)
        assert consumer.rebalance_count == started  # zero rebalances from migrations
        assert consumer.rebalance_stats.removed == 0
        assert sorted(q for q in consumer.assignment() if q.topic == TOPIC) == QUEUES
        await consumer.close()  # commits what it consumed
        run = 1
        for lq in range(N):
            await lqa.migrate(TOPIC, lq, "broker-a")  # 3 -> 1: back to the first broker
        consumer = push()  # restarted right after the migration
        await consumer.start()
        await asyncio.sleep(0.2)
    try:
        await eventually(lambda: has_all(merged(*runs), state), 20)
    finally:
        await consumer.close()
    for lq in range(N):
        assert (await lqa.query(TOPIC)).queues[lq][-1].broker == "broker-a"
        assert runs[1][lq][0][0] == len(runs[0].get(lq, []))  # resumed at its offset
    exactly_once(runs, state)
    mapping = await lqa.query(TOPIC)
    assert [s.broker for s in mapping.queues[0]] == ["broker-a", "broker-b", "broker-c",
                                                     "broker-a"]
    assert mapping.queues[0][0].queue_id != mapping.queues[0][3].queue_id  # never reused


# ---------------------------------------------------------------------- time and reset


async def test_time_search_and_offset_reset_into_an_old_segment(cluster: Cluster,
                                                               admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    async with load(cluster) as state:
        await asyncio.sleep(0.2)
        await lqa.migrate(TOPIC, 0, "broker-b")
        await asyncio.sleep(0.3)
        mapping = await lqa.migrate(TOPIC, 0, "broker-c")
        await asyncio.sleep(0.3)
    first, second = mapping.queues[0][0], mapping.queues[0][1]
    assert first.logical_end > 5 and second.logical_end > second.logical_start + 5

    # Read LQ 0 whole, with store times, as a client sees it.
    reader = await pull_group(cluster, "lq-time-reader")
    reader.seek(QUEUES[0], 0)
    msgs: list[MessageExt] = []
    end = max(state.acked[0]) + 1
    deadline = time.monotonic() + 20
    while len(msgs) < end:
        assert time.monotonic() < deadline, "LQ 0 could not be read back"
        msgs += [m for m in await reader.poll(timeout=0.5) if m.queue_id == 0]
    await reader.close(commit=False)
    times = [m.store_timestamp for m in msgs]
    assert times == sorted(times) and [m.queue_offset for m in msgs] == list(range(end))

    searcher = await pull_group(cluster, "lq-time")
    probes = [1, first.logical_end // 2, first.logical_end - 1, first.logical_end,
              (second.logical_start + second.logical_end) // 2, end - 1]
    try:
        for offset in probes:  # old segments on broker-a and broker-b, then the open one
            ts = times[offset]
            await searcher.seek_by_timestamp(ts, [QUEUES[0]])
            assert searcher.position(QUEUES[0]) == bisect.bisect_left(times, ts), offset
        await searcher.seek_by_timestamp(times[-1] + 60_000, [QUEUES[0]])
        assert searcher.position(QUEUES[0]) == end  # after everything: the max
        await searcher.seek_by_timestamp(0, [QUEUES[0]])
        assert searcher.position(QUEUES[0]) == 0  # before everything: the first segment
    finally:
        await searcher.close(commit=False)

    # A group at the end, reset into the first (old, sealed) segment: by offset, by time.
    group = "lq-reset"
    consumer = await pull_group(cluster, group)
    for mq in QUEUES:
        consumer.seek(mq, max(state.acked.get(mq.queue_id, {0: b""})) + 1)
    await consumer.instance.send_heartbeat()  # the gateway knows the group now
    await consumer.commit()
    await consumer.close()
    target = first.logical_end // 2
    rows = await reset_offset(admin, group, TOPIC, timestamp=0, queue_id=0, offset=target)
    assert rows == [{"topic": TOPIC, "brokerName": LOGICAL_BROKER, "queueId": 0,
                     "offset": target}]
    consumer = await pull_group(cluster, group)
    try:
        assert await consumer.committed(QUEUES[0]) == target
        got = [m for m in await consumer.poll(timeout=2.0) if m.queue_id == 0]
        assert got[0].queue_offset == target and got[0].body == state.acked[0][target]
    finally:
        await consumer.close(commit=False)
    ts = times[first.logical_end - 2]
    rows = await reset_offset(admin, group, TOPIC, timestamp=ts, queue_id=0)
    assert rows[0]["offset"] == bisect.bisect_left(times, ts) < first.logical_end
    replica = next(b for b in cluster.brokers if b.config.broker_name == "broker-c")
    await eventually(  # replicated to the mapping's other brokers
        lambda: replica.offsets.query(group, TOPIC, 0) == rows[0]["offset"])


# ---------------------------------------------------------------------- piggy-backed commit


async def test_a_commit_piggy_backed_on_a_pull_is_stored_logically(
        cluster: Cluster, admin: AdminClient) -> None:
    """RocketMQ's push consumers commit in the pull's sysFlag; through the gateway that
    offset is logical and must be stored under the LQ, not under the segment's physical
    queue id on the segment's broker (spec §6.4 hazard 1)."""
    await create(admin, ["broker-b", "broker-c"])  # the gateway, broker-a, holds nothing
    plain = RemotingClient()
    group = "lq-piggy"
    try:
        async with load(cluster) as state:
            gateway = (await admin.topic_route(TOPIC)).broker_datas[0].broker_addrs[0]
            await eventually(lambda: len(state.acked.get(2, {})) > 3)
            pull = {"consumerGroup": group, "topic": TOPIC, "queueId": "2",
                    "queueOffset": "0", "maxMsgNums": "2", "sysFlag": "1",  # commit
                    "commitOffset": "3", "suspendTimeoutMillis": "0", "subVersion": "0",
                    "bname": LOGICAL_BROKER}
            r = await plain.request(gateway, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, pull), 5)
            assert r.code == 0 and int(r.ext_fields["nextBeginOffset"]) == 2
    finally:
        await plain.close()
    by_name = {b.config.broker_name: b for b in cluster.brokers}
    assert by_name["broker-a"].broker_addr == gateway
    for name, broker in by_name.items():  # LQ 2 is physical queue 1 of broker-b
        assert broker.offsets.query(group, TOPIC, 1) is None, name
    await eventually(lambda: all(b.offsets.query(group, TOPIC, 2) == 3
                                 for b in by_name.values()))
