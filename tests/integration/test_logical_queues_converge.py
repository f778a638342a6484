"""Logical queues (RIP-21): the brokers' copies of a mapping converge after an interrupted
migration -- by re-running the admin command, and by the brokers themselves.

The kill -9 matrix over separate processes is :mod:`tests.crash.test_logical_kill9`; these
are the same repairs, in-process and step by step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.integration.test_logical_queues import TOPIC, N, create

from tidemq.broker.app import BrokerApp
from tidemq.client import AdminClient, Producer
from tidemq.client.logical_admin import LogicalQueueAdmin, plan_commit, plan_migration
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import BrokerResponseError
from tidemq.formats.logical_mapping import TopicMapping
from tidemq.formats.logical_migration import complete, forced_cut
from tidemq.store.message_store import MessageInput
from tidemq.testing import Cluster
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

SYNC_MS = 200


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=3, broker={"logical_sync_interval": SYNC_MS}) as c:
        yield c


def broker(cluster: Cluster, name: str) -> BrokerApp:
    return next(b for b in cluster.brokers if b.config.broker_name == name)


def copies(cluster: Cluster) -> dict[str, TopicMapping | None]:
    return {b.config.broker_name: b.logical.get(TOPIC) for b in cluster.brokers}


async def push_to(admin: AdminClient, app: BrokerApp, mapping: TopicMapping) -> None:
    await admin._broker(app.broker_addr, RemotingCommand.request(
        RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {}, json.dumps(mapping.to_json()).encode()))


async def seal_on(admin: AdminClient, app: BrokerApp, lq: int) -> TopicMapping:
    resp = await admin._broker(app.broker_addr, RemotingCommand.request(
        RequestCode.SEAL_LOGICAL_QUEUE, {"topic": TOPIC, "lq": str(lq)}))
    return TopicMapping.from_json(json.loads(resp.full_body()))


async def one_mapping(cluster: Cluster, timeout: float = 15.0) -> TopicMapping:
    """Wait for every broker to hold the same copy (the brokers sync on a timer: there is
    no event to wait on), and return it."""
    deadline = time.monotonic() + timeout
    while True:
        held = copies(cluster)
        values = list(held.values())
        if values[0] is not None and all(v == values[0] for v in values):
            return values[0]
        assert time.monotonic() < deadline, f"the copies never converged: {held}"
        await asyncio.sleep(0.05)


async def send(cluster: Cluster, lq: int, body: bytes) -> int:
    producer = Producer("converge-producer", cluster.namesrv_addr)
    await producer.start()
    try:
        res = await producer.send(Message(TOPIC, body),
                                  queue=MessageQueue(TOPIC, LOGICAL_BROKER, lq))
        return res.queue_offset
    finally:
        await producer.close()


async def test_rerunning_the_migration_repairs_a_commit_pushed_to_one_broker(
        cluster: Cluster, admin: AdminClient) -> None:
    """Issue #22: the admin died while pushing the commit -- only the new leader has it.
    Re-running the command used to answer "(already)" and leave three copies."""
    for app in cluster.brokers:  # only the admin repairs here
        app.logical_processor.sync = _no_sync  # type: ignore[method-assign]
    await create(admin, ["broker-a", "broker-b"])  # LQ 1 on broker-b
    lqa = LogicalQueueAdmin(admin)
    planned = plan_migration(await lqa.query(TOPIC), 1, "broker-c")
    assert planned is not None
    await push_to(admin, broker(cluster, "broker-b"), planned)
    await push_to(admin, broker(cluster, "broker-c"), planned)  # broker-a missed it
    sealed = await seal_on(admin, broker(cluster, "broker-b"), 1)
    await push_to(admin, broker(cluster, "broker-c"), plan_commit(sealed, 1))
    assert len({json.dumps(m.to_json()) if m else "" for m in copies(cluster).values()}) == 3

    steps: list[tuple[str, bool]] = []
    m = await lqa.migrate(TOPIC, 1, "broker-c", lambda s, now, _m: steps.append((s, now)))
    assert steps[0] == ("synced", True)
    assert all(c == m for c in copies(cluster).values())
    leader = m.leader(1)
    assert leader is not None and leader.broker == "broker-c"
    assert leader.logical_start == m.queues[1][0].logical_end


async def _planned_by_hand(cluster: Cluster, admin: AdminClient, lq: int
                           ) -> tuple[LogicalQueueAdmin, TopicMapping]:
    """The topic on broker-a and broker-b, ``lq`` planned to move to broker-c and pushed
    to every broker; the brokers' own syncs off, so that only the caller's steps run."""
    for app in cluster.brokers:
        app.logical_processor.sync = _no_sync  # type: ignore[method-assign]
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    planned = plan_migration(await lqa.query(TOPIC), lq, "broker-c")
    assert planned is not None
    await lqa.update(planned)
    return lqa, planned


async def _no_sync() -> list[str]:
    return []


async def test_a_broker_that_missed_a_migration_catches_up_when_restarted(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    index_c = next(i for i, b in enumerate(cluster.brokers)
                   if b.config.broker_name == "broker-c")
    down = cluster.brokers[index_c]
    await down.stop()
    m = await lqa.migrate(TOPIC, 0, "broker-b")  # broker-c is down: it misses every push
    assert down.logical.get(TOPIC) != m
    await cluster.restart_broker(index_c)
    assert await one_mapping(cluster) == m


async def test_a_sealed_queue_is_committed_by_the_brokers_when_the_admin_died(
        cluster: Cluster, admin: AdminClient) -> None:
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    assert await send(cluster, 2, b"before") == 0  # LQ 2 on broker-a
    planned = plan_migration(await lqa.query(TOPIC), 2, "broker-c")
    assert planned is not None
    await lqa.update(planned)
    sealed = await seal_on(admin, broker(cluster, "broker-a"), 2)  # then the admin died
    assert sealed.leader(2) is None
    m = await one_mapping(cluster)
    leader = m.leader(2)
    assert leader is not None and leader.broker == "broker-c" and leader.logical_start == 1
    assert await send(cluster, 2, b"after") == 1  # writable again, contiguous
    assert N == 4


async def test_the_seal_takes_the_admins_copy_even_below_the_leaders_epoch(
        cluster: Cluster, admin: AdminClient) -> None:
    """The old leader's housekeeping may bump its epoch (an expiry) between the planned
    push and the seal: the seal must still go through with the planned copy."""
    await create(admin, ["broker-a", "broker-b"])
    lqa = LogicalQueueAdmin(admin)
    planned = plan_migration(await lqa.query(TOPIC), 0, "broker-c")
    assert planned is not None
    await lqa.update(planned)
    old_leader = broker(cluster, "broker-a")
    bumped = dataclasses.replace(planned, epoch=planned.epoch + 1)
    assert old_leader.logical.update(bumped)  # what an expiry there does to the epoch
    mapping = await lqa._seal(planned, 0, "broker-a", await admin.masters())
    assert mapping.leader(0) is None and mapping.epoch == bumped.epoch + 1


async def _seal_raced_by_a_cut(cluster: Cluster, admin: AdminClient) -> TopicMapping:
    """LQ 1 leads on broker-b, which stored two sends nobody else heard of, then sealed
    at its exact end (2) as the admin tool, which took it for dead, cut it at the end the
    others knew (0) and pushed the cut to broker-a and broker-c before it died. broker-b
    then committed the migration by itself at its own end, as its sync does when no peer
    answers. Returns the cut. Only the caller's repairs run: the brokers' timers do not."""
    _, planned = await _planned_by_hand(cluster, admin, 1)  # LQ 1 on broker-b
    old = broker(cluster, "broker-b")
    segment = planned.queues[1][0]
    for body in (b"unseen-0", b"unseen-1"):
        old.store.put(TOPIC, segment.queue_id, MessageInput(body, b""))
    sealed = await seal_on(admin, old, 1)
    assert sealed.queues[1][0].physical_end == 2
    cut = forced_cut(planned, 1, segment.physical_start, planned.epoch + 1)
    for name in ("broker-a", "broker-c"):
        await push_to(admin, broker(cluster, name), cut)
    assert old.logical.absorb(sealed)  # its own commit, at its own end
    own = old.logical.get(TOPIC)
    assert own is not None and own.leader(1) is not None and own.leader(1).logical_start == 2
    return cut


def _converged_on_the_cut(cluster: Cluster, cut: TopicMapping) -> TopicMapping:
    held = copies(cluster)
    m = held["broker-a"]
    assert m is not None and all(c == m for c in held.values()), held
    old, new = m.queues[1][0], m.leader(1)
    assert old.forced and old.logical_end == cut.queues[1][0].logical_end == 0
    assert new is not None and new.broker == "broker-c" and new.logical_start == 0
    return m


async def test_rerunning_a_migration_whose_seal_raced_a_forced_cut_converges(
        cluster: Cluster, admin: AdminClient) -> None:
    """Issue #22: the old leader's own commit at its sealed end contradicted the cut, and
    re-running the migration stopped, asking for updateLogicalQueueMapping --force."""
    cut = await _seal_raced_by_a_cut(cluster, admin)
    lqa = LogicalQueueAdmin(admin)
    steps: list[tuple[str, bool]] = []
    m = await lqa.migrate(TOPIC, 1, "broker-c", lambda s, now, _m: steps.append((s, now)))
    assert steps[0] == ("synced", True)
    assert _converged_on_the_cut(cluster, cut) == m
    assert await send(cluster, 1, b"after") == 0  # writable, from the cut on


async def test_the_brokers_converge_on_a_cut_that_raced_a_seal(
        cluster: Cluster, admin: AdminClient) -> None:
    """The same race repaired by the brokers' own reconciliation, without the admin tool:
    one round of every broker's sync leaves one mapping, the cut's."""
    cut = await _seal_raced_by_a_cut(cluster, admin)
    for _ in range(2):  # the second round carries what the first one merged last
        for app in cluster.brokers:
            await app.logical_processor.sync_service.sync()
    _converged_on_the_cut(cluster, cut)


async def test_a_forced_cut_pushed_to_a_broker_that_committed_it_already_counts_as_taken(
        cluster: Cluster, admin: AdminClient) -> None:
    """The admin tool pushes a forced cut to the live brokers one after another. The first
    syncs it to its peers, which commit the migration it completes (epoch + 1), so the
    push that reaches such a peer later is older than its copy. That broker refuses the
    copy as older, but it knows every fact of it: the cut is taken there, not failed (CI:
    "ILLEGAL_OPERATION: mapping epoch N is older than N+1")."""
    lqa, planned = await _planned_by_hand(cluster, admin, 0)  # LQ 0 on broker-a
    cut = forced_cut(planned, 0, 0, planned.epoch + 1)
    committed = complete(cut)
    assert committed.epoch > cut.epoch
    await push_to(admin, broker(cluster, "broker-c"), committed)  # heard it from a peer
    live = {n: a for n, a in (await admin.masters()).items() if n != "broker-a"}
    report = await lqa._push(cut, live)
    assert sorted(report.reached) == ["broker-b", "broker-c"] and not report.missed
    assert broker(cluster, "broker-c").logical.get(TOPIC) == committed
    assert broker(cluster, "broker-b").logical.get(TOPIC) == cut


async def test_a_push_refused_by_a_newer_incarnation_of_the_topic_still_fails(
        cluster: Cluster, admin: AdminClient) -> None:
    """A broker holding the topic created again (deleted meanwhile) refuses a step of the
    old incarnation; that copy knows nothing of it, though a merge would keep it whole."""
    lqa, planned = await _planned_by_hand(cluster, admin, 0)
    newer = dataclasses.replace(planned, epoch=planned.epoch + 10,
                                created=planned.created + 10)
    await push_to(admin, broker(cluster, "broker-c"), newer)
    cut = forced_cut(planned, 0, 0, planned.epoch + 1)
    live = {n: a for n, a in (await admin.masters()).items() if n != "broker-a"}
    with pytest.raises(BrokerResponseError, match="older than the one held"):
        await lqa._push(cut, live)
