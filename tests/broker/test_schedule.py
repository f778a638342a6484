"""Delayed messages (remoting.md §2.7 step 6): delay levels and timer messages are parked,
delivered to their real topic and queue never before they are due, and survive a broker
restart without loss or duplication; a lost checkpoint delivers again (at-least-once)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect, view
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.broker.delay import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    DelayError,
    DelayPolicy,
    parse_delay_levels,
)
from tidemq.broker.schedule import ScheduleService
from tidemq.broker.timers import TimerCheckpoint
from tidemq.codec.command import RequestCode
from tidemq.errors import ConfigError, ResponseCode
from tidemq.formats.properties import decode_properties
from tidemq.testing import Cluster
from tidemq.types import MessageExt

LADDER = "100ms 200ms 300ms"
DELAYS = {1: 100, 2: 200, 3: 300}


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- pure parts


def test_delay_levels_parse_with_units() -> None:
    assert parse_delay_levels("100ms 1s 2m 1h 1d") == (100, 1000, 120_000, 3_600_000,
                                                       86_400_000)
    default = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert len(parse_delay_levels(default)) == 18
    for bad in ("", "1x", "s", "1.5s", "-1s"):
        with pytest.raises(ConfigError):
            parse_delay_levels(bad)


def test_divert_decides_where_a_message_waits() -> None:
    policy = DelayPolicy((100, 200), max_timer_ms=10_000, clock=lambda: 1_000)
    assert policy.divert(None, "T", 3) is None
    assert policy.divert("TAGS\x01a\x02", "T", 3) is None
    assert policy.divert("DELAY\x010\x02", "T", 3) is None
    d = policy.divert("DELAY\x017\x02", "T", 3)
    assert d is not None and (d.topic, d.queue_id) == (SCHEDULE_TOPIC, 1)  # clamped to 2
    assert decode_properties(d.properties.encode()) == {
        "DELAY": "2", "REAL_TOPIC": "T", "REAL_QID": "3"}
    d = policy.divert("TIMER_DELAY_MS\x01500\x02", "T", 0)
    assert d is not None and (d.topic, d.queue_id) == (TIMER_TOPIC, 0)
    assert decode_properties(d.properties.encode())["TIMER_OUT_MS"] == "1500"
    d = policy.divert("TIMER_DELAY_SEC\x012\x02", "T", 0)
    assert d is not None and decode_properties(d.properties.encode())["TIMER_OUT_MS"] == "3000"
    assert policy.divert("TIMER_DELIVER_MS\x01999\x02", "T", 0) is None  # already due
    # DELAY wins and the timer request is dropped.
    d = policy.divert("TIMER_DELAY_MS\x01500\x02DELAY\x011\x02", "T", 0)
    assert d is not None and d.topic == SCHEDULE_TOPIC and "TIMER_DELAY_MS" not in d.properties
    # Half and rollback transaction messages are never parked.
    assert policy.divert("DELAY\x011\x02", "T", 0, sys_flag=0x4) is None
    assert policy.divert("DELAY\x011\x02", "T", 0, sys_flag=0x8) is not None
    for bad in ("DELAY\x01x\x02", "TIMER_DELAY_MS\x01soon\x02", "TIMER_DELAY_SEC\x0111\x02"):
        with pytest.raises(DelayError):
            policy.divert(bad, "T", 0)


# ---------------------------------------------------------------- over the wire


@pytest.fixture
async def short(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"message_delay_level": LADDER}) as c:
        yield c


@pytest.fixture
async def peer(short: Cluster) -> AsyncIterator[Peer]:
    async with Peer(short.brokers[0].broker_addr) as p:
        await p.ok(wire.create_topic("Dl", 2))
        yield p


async def send_delayed(peer: Peer, topic: str, body: bytes, queue_id: int = 0,
                       **props: str) -> MessageExt:
    """Send with extra properties; the record as parked (or stored)."""
    resp = await peer.ok(wire.send(topic, body, queue_id=queue_id,
                                   properties=wire.props(tags="t", **props)))
    assert resp.ext_fields["queueId"] == str(queue_id)
    return await view(peer, resp.ext_fields["msgId"])


def _names(text: str) -> list[str]:
    return [pair.split("\x01", 1)[0] for pair in text.split("\x02") if pair]


def test_a_parked_message_holds_each_property_once() -> None:
    """The parked copy sets DELAY (clamped), REAL_TOPIC and REAL_QID; where the sender's
    text already had one of them it is replaced, not written a second time."""
    policy = DelayPolicy((100, 200), max_timer_ms=10_000, clock=lambda: 1_000)
    for sent in ("DELAY\x017\x02", "KEYS\x01k\x02DELAY\x012\x02REAL_TOPIC\x01X\x02",
                 "TIMER_DELAY_MS\x01500\x02REAL_QID\x019\x02"):
        d = policy.divert(sent, "T", 3)
        assert d is not None
        names = _names(d.properties)
        assert len(names) == len(set(names)), d.properties
        props = decode_properties(d.properties.encode())
        assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("T", "3")
    # a text without any of the names is only appended to
    d = policy.divert("KEYS\x01k\x02TIMER_DELAY_MS\x01500\x02", "T", 3)
    assert d is not None and d.properties.startswith("KEYS\x01k\x02TIMER_DELAY_MS\x01500\x02")


def due(held: MessageExt) -> int:
    """When a message parked at a level of :data:`LADDER` is due."""
    return held.store_timestamp + DELAYS[int(held.properties["DELAY"])]


async def counted(service: ScheduleService, delivered: int) -> None:
    """Wait until ``service`` counted ``delivered`` deliveries, and not one more: it counts
    a delivery once the put returns, and the put may have made the message visible (and
    answered a held pull) before that. A counter, without an event."""
    deadline = time.monotonic() + 10
    while service.delivered < delivered and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    assert service.delivered == delivered


async def test_delay_levels_are_delivered_when_due_and_never_before(
        short: Cluster, peer: Peer) -> None:
    sent = {}
    for i, level in enumerate((3, 1, 2, 3, 1, 2, 9)):
        msg = await send_delayed(peer, "Dl", f"m{i}".encode(), queue_id=1, DELAY=str(level))
        assert msg.topic == SCHEDULE_TOPIC
        assert msg.queue_id == min(level, 3) - 1
        sent[msg.body] = msg
    now = await send_delayed(peer, "Dl", b"now", queue_id=1, DELAY="0")
    assert now.topic == "Dl"
    got = await collect(peer, "Dl", 8, queue_id=1)
    order = [m.body for m in got]
    assert sorted(order) == sorted([b"now", *sent])
    # No parked message is ahead of the immediate one unless it was due when that one was
    # stored: none is, unless sending the others took longer than a level's delay (as on a
    # busy machine).
    first = order.index(b"now")
    early = {m.body: (due(sent[m.body]), now.store_timestamp) for m in got[:first]
             if due(sent[m.body]) > now.store_timestamp}
    assert not early, early
    for msg in got[:first] + got[first + 1:]:
        held = sent[msg.body]
        assert msg.store_timestamp >= due(held)
        assert "DELAY" not in msg.properties
        assert (msg.properties["REAL_TOPIC"], msg.properties["REAL_QID"]) == ("Dl", "1")
        assert (msg.uniq_key, msg.tags, msg.born_timestamp) == (
            held.uniq_key, "t", held.born_timestamp)
    # Each level's queue delivers in order.
    for level in (1, 2, 3):
        bodies = [m.body for m in got if sent.get(m.body) and sent[m.body].queue_id == level - 1]
        assert bodies == sorted(bodies, key=lambda b: sent[b].queue_offset)
    await counted(short.brokers[0].schedule, 7)


async def test_the_service_sleeps_until_the_head_is_due(short: Cluster, peer: Peer) -> None:
    service = short.brokers[0].schedule
    idle = service.passes
    await asyncio.sleep(0.3)  # measuring idleness, not waiting for an event
    assert service.passes == idle
    await send_delayed(peer, "Dl", b"x", DELAY="3")
    await collect(peer, "Dl", 1)
    assert service.passes - idle <= 4  # the arrival, the due time, a flush check or two


async def test_timer_messages_are_delivered_at_their_time(short: Cluster, peer: Peer) -> None:
    late = await send_delayed(peer, "Dl", b"late", TIMER_DELAY_MS="400")
    early = await send_delayed(peer, "Dl", b"early", TIMER_DELIVER_MS=str(now_ms() + 150))
    past = await send_delayed(peer, "Dl", b"past", TIMER_DELIVER_MS=str(now_ms() - 5))
    assert (late.topic, early.topic, past.topic) == (TIMER_TOPIC, TIMER_TOPIC, "Dl")
    got = await collect(peer, "Dl", 3)
    assert [m.body for m in got] == [b"past", b"early", b"late"]
    for msg, held in zip(got[1:], (early, late), strict=True):
        due = int(held.properties["TIMER_OUT_MS"])
        assert msg.store_timestamp >= due
        assert msg.properties["TIMER_OUT_MS"] == str(due)
        assert not {"TIMER_DELAY_MS", "TIMER_DELIVER_MS"} & set(msg.properties)


async def test_level_one_of_the_default_ladder_is_a_second(cluster: Cluster) -> None:
    async with Peer(cluster.brokers[0].broker_addr) as p:
        held = await send_delayed(p, "Def", b"one", DELAY="1")
        timed = await send_delayed(p, "Def", b"sec", TIMER_DELAY_SEC="1")
        got = await collect(p, "Def", 2)
    assert got[0].store_timestamp >= held.store_timestamp + 1000
    assert got[1].store_timestamp >= int(timed.properties["TIMER_OUT_MS"])
    assert int(timed.properties["TIMER_OUT_MS"]) >= timed.born_timestamp + 1000


@pytest.mark.parametrize("props", [{"DELAY": "soon"}, {"TIMER_DELAY_MS": "1e3"},
                                   {"TIMER_DELAY_SEC": str(4 * 86400)}])
async def test_unusable_delays_are_message_illegal(peer: Peer, props: dict[str, str]) -> None:
    resp = await peer(wire.send("Dl", properties=wire.props(**props)))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark


async def test_a_delayed_batch_is_message_illegal(peer: Peer) -> None:
    cmd = wire.send_batch("Dl", [(b"a", wire.props())])
    cmd.ext_fields["i"] = wire.props(DELAY="1")
    resp = await peer(cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark


# ---------------------------------------------------------------- restarts


@pytest.fixture
async def long_tail(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Level 4 (1.5 s) is still pending while the broker restarts."""
    async with Cluster(tmp_path, broker={"message_delay_level": LADDER + " 1500ms"}) as c:
        yield c


async def test_restart_delivers_what_was_pending_and_nothing_twice(long_tail: Cluster) -> None:
    short = long_tail
    broker = short.brokers[0]
    async with Peer(broker.broker_addr) as p:
        await p.ok(wire.create_topic("Rs", 1))
        quick = [await send_delayed(p, "Rs", f"q{i}".encode(), DELAY="1") for i in range(4)]
        for i in range(3):
            await send_delayed(p, "Rs", f"l{i}".encode(), DELAY="4")
        for i in range(2):
            await send_delayed(p, "Rs", f"t{i}".encode(), TIMER_DELAY_MS="1500")
        first = await collect(p, "Rs", 4)
        assert sorted(m.uniq_key for m in first) == sorted(m.uniq_key for m in quick)
    broker = await short.restart_broker(0)
    async with Peer(broker.broker_addr) as p:
        got = await collect(p, "Rs", 9)
        assert len({m.uniq_key for m in got}) == 9
        await counted(broker.schedule, 5)  # the four quick ones were not redelivered
        assert broker.store.max_offset("Rs", 0) == 9
        assert len(broker.schedule.timers) == 0
        assert broker.schedule.offsets == {1: 4, 4: 3}


async def test_a_lost_checkpoint_delivers_again(short: Cluster) -> None:
    """A crash after the copy was stored but before its checkpoint: at-least-once."""
    broker = short.brokers[0]
    async with Peer(broker.broker_addr) as p:
        await send_delayed(p, "Again", b"twice", DELAY="1")
        await send_delayed(p, "Again", b"timer", TIMER_DELAY_MS="150")
        await collect(p, "Again", 2)
    await broker.stop()
    layout = broker.layout
    assert json.loads(layout.config_file("delayOffset.json").read_text()) == {
        "offsetTable": {"1": 1}}
    layout.config_file("delayOffset.json").write_text('{"offsetTable": {}}')
    layout.config_file("timerCheckpoint.json").unlink()
    broker = await short.restart_broker(0)
    async with Peer(broker.broker_addr) as p:
        got = await collect(p, "Again", 4)
    assert sorted(m.body for m in got) == [b"timer", b"timer", b"twice", b"twice"]



async def test_parked_messages_can_be_read_over_the_wire(short: Cluster, peer: Peer) -> None:
    """The parking topics are readable like any topic (upstream's admin reads them with
    ``queryMsgByOffset``): one queue per delay level, pulls return what waits there, and
    sending to them stays refused."""
    held = [await send_delayed(peer, "Dl", f"p{i}".encode(), DELAY="3") for i in range(3)]
    timer = await send_delayed(peer, "Dl", b"t", TIMER_DELAY_SEC="3600")
    for topic, queues in ((SCHEDULE_TOPIC, len(DELAYS)), (TIMER_TOPIC, 1)):
        tc = short.brokers[0].topics.get(topic)
        assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums) == (queues, queues)
    got = await collect(peer, SCHEDULE_TOPIC, 3, queue_id=2)
    assert [(m.body, m.queue_offset) for m in got] == [(m.body, m.queue_offset) for m in held]
    assert {m.properties["REAL_TOPIC"] for m in got} == {"Dl"}
    [parked] = await collect(peer, TIMER_TOPIC, 1)
    assert (parked.body, parked.queue_offset) == (b"t", timer.queue_offset)
    resp = await peer(wire.pull(SCHEDULE_TOPIC, len(DELAYS), 0))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "queueId[3]" in resp.remark
    for topic in (SCHEDULE_TOPIC, TIMER_TOPIC):  # forbidden, as upstream: NO_PERMISSION
        resp = await peer(wire.send(topic, b"x"))
        assert (resp.code, resp.remark) == (
            ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")


async def test_a_replica_keeps_progress_further_than_its_masters_copy(tmp_path: Path) -> None:
    """A replica that delivered parked messages while acting for its master keeps that
    progress when the master comes back with older progress and the replica copies it
    (the master takes it back instead), on disk as in memory."""
    async with Cluster(tmp_path, broker={"message_delay_level": LADDER}) as group:
        replica = await group.add_replica(group.brokers[0], slave_metadata_sync_interval=60_000)
        await asyncio.wait_for(replica.metadata_sync.synced.wait(), 30)  # its first copy
        schedule = replica.ctx.schedule
        later = now_ms() + 3_600_000
        acted = TimerCheckpoint(enqueue_offset=4, frontier_ms=later, scan_offset=4)
        schedule.adopt_offsets({1: 7, 2: 3})
        schedule.adopt_timer(acted)
        schedule.adopt_offsets({1: 5, 2: 4, 3: 1})  # the master's older copy
        schedule.adopt_timer(TimerCheckpoint(enqueue_offset=6, frontier_ms=later - 1,
                                             scan_offset=2))
        assert schedule.offsets == {1: 7, 2: 4, 3: 1}
        assert schedule.timer_progress() == acted
        schedule.load()
        assert schedule.offsets == {1: 7, 2: 4, 3: 1}
        assert schedule.timers.checkpoint() == acted


async def test_a_message_due_while_its_topic_is_deleted_waits_for_the_deletion(
        short: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delayed and a timer message fall due while their topic's deletion is under way:
    neither is stored into the queues the deletion removes (acknowledged, then lost).
    Each waits until the deletion is answered and is stored then, from offset 0, so the
    topic created again serves both, as a message sent after the deletion would be."""
    broker = short.brokers[0]
    service = broker.schedule
    await peer.ok(wire.create_topic("Gone", 1))
    await peer.ok(wire.send("Gone", b"old"))
    await send_delayed(peer, "Gone", b"delayed", DELAY="1")
    await send_delayed(peer, "Gone", b"timer", TIMER_DELAY_MS="100")
    slow_writes(monkeypatch, topics_module, held)  # step 2, after the mark, held
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone")))
        await held.entered_soon()
        waited = time.monotonic() + 20  # due, tried and put off (again) meanwhile
        while service.deferred + service.delivered < 2:
            assert time.monotonic() < waited, "no delivery was tried"
            await asyncio.sleep(0.01)
        assert service.delivered == 0
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    await peer.ok(wire.create_topic("Gone", 1))
    got = await collect(peer, "Gone", 2)
    assert sorted(m.body for m in got) == [b"delayed", b"timer"]
    assert [m.queue_offset for m in got] == [0, 1]
    await counted(service, 2)


async def test_a_message_waiting_for_its_topics_deletion_holds_up_no_other_topic(
        short: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delayed message put off while its topic is deleted stopped the whole pass: a
    message of another topic due after it in the same level, and every timer message,
    waited for the deletion too. Only the messages of the topic being deleted wait; they
    are stored, in their order, once the deletion is answered."""
    broker = short.brokers[0]
    service = broker.schedule
    for topic in ("Gone", "Kept"):
        await peer.ok(wire.create_topic(topic, 1))
    service.hold()  # nothing falls due before the deletion begins
    await send_delayed(peer, "Gone", b"gone-1", DELAY="1")
    await send_delayed(peer, "Gone", b"gone-2", DELAY="1")
    await send_delayed(peer, "Kept", b"kept-delayed", DELAY="1")
    await send_delayed(peer, "Gone", b"gone-timer", TIMER_DELAY_MS="100")
    await send_delayed(peer, "Kept", b"kept-timer", TIMER_DELAY_MS="100")
    slow_writes(monkeypatch, topics_module, held)  # step 2, after the mark, held
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone")))
        await held.entered_soon()
        service.release()
        kept = await collect(peer, "Kept", 2, timeout=8)  # while the deletion is held
        assert sorted(m.body for m in kept) == [b"kept-delayed", b"kept-timer"]
        assert not held.release.is_set() and service.deferred >= 3
        assert service.progress()[1] == 0  # recorded: not past gone-1, which waits
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    await peer.ok(wire.create_topic("Gone", 1))
    got = await collect(peer, "Gone", 3)
    assert [m.body for m in got if m.body != b"gone-timer"] == [b"gone-1", b"gone-2"]
    assert sorted(m.body for m in got) == [b"gone-1", b"gone-2", b"gone-timer"]
    await counted(service, 5)
    assert service.progress()[1] == 3


async def test_a_long_property_text_is_still_parked_by_its_delay_or_timer(
        short: Cluster, peer: Peer) -> None:
    """Hundreds of keys before the DELAY or TIMER_ pair (a property text read pair by pair,
    not searched whole) still park the message."""
    keys = " ".join(f"{i:032X}" for i in range(200))
    delayed = await send_delayed(peer, "Dl", b"d", KEYS=keys, DELAY="1")
    timed = await send_delayed(peer, "Dl", b"t", KEYS=keys, TIMER_DELAY_MS="300")
    assert (delayed.topic, timed.topic) == (SCHEDULE_TOPIC, TIMER_TOPIC)
    got = await collect(peer, "Dl", 2)
    assert sorted(m.body for m in got) == [b"d", b"t"]
    assert all(m.properties["KEYS"] == keys for m in got)
