"""Light message queues on the wire (RIP-28): fan-out sends, LMQ pulls, offsets, deletion."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import PULL_SUSPEND, Peer

from tidemq.codec.bodies import KVTable, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.properties import MAX_PROPERTIES_BYTES
from tidemq.testing import Cluster
from tidemq.types import MessageExt

LMQ_STORE = {"enable_lmq": True, "enable_multi_dispatch": True,
             "max_lmq_targets_per_message": 8}


@pytest.fixture
async def lmq_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, brokers=1, store=LMQ_STORE) as c:
        yield c


@pytest.fixture
async def lmq_peer(lmq_cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(lmq_cluster.brokers[0].broker_addr) as p:
        await p.ok(wire.create_topic("Parent", 4))
        yield p


def fan_out(names: str, body: bytes = b"m", *, topic: str = "Parent", queue_id: int = 0,
            **extra: str) -> RemotingCommand:
    # Written by hand: the property encoder would drop an empty value altogether.
    props = wire.props(**extra) + f"INNER_MULTI_DISPATCH\x01{names}\x02"
    return wire.send(topic, body, queue_id=queue_id, properties=props)


def lmq_offset(msg: MessageExt, name: str) -> int:
    names = msg.properties["INNER_MULTI_DISPATCH"].split(",")
    offsets = msg.properties["INNER_MULTI_QUEUE_OFFSET"].split(",")
    return int(offsets[names.index(name)])


async def read_lmq(peer: Peer, name: str, start: int = 0) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = start
    while True:
        resp = await peer(wire.pull(name, 0, offset, max_nums=5))
        if resp.code != ResponseCode.SUCCESS:
            assert resp.code == ResponseCode.PULL_NOT_FOUND, (resp.code, resp.remark)
            return out
        msgs = decode_messages(resp.full_body())
        assert [lmq_offset(m, name) for m in msgs] == list(range(offset, offset + len(msgs)))
        out += msgs
        offset = int(resp.ext_fields["nextBeginOffset"])


async def test_concurrent_fan_out_over_several_parent_queues(lmq_cluster: Cluster,
                                                            lmq_peer: Peer) -> None:
    """Four connections, 200 sends in flight together over four parent queues: every LMQ
    is dense from 0 and holds each message naming it exactly once."""
    pool = [f"%LMQ%dev-{i}" for i in range(10)]
    rng = random.Random(7)
    plan = [(f"b{i}".encode(), rng.sample(pool, rng.randint(1, 6))) for i in range(200)]
    peers = [Peer(lmq_cluster.brokers[0].broker_addr) for _ in range(4)]
    try:
        await asyncio.gather(*(peers[i % 4].ok(fan_out(",".join(names), body, queue_id=i % 4))
                               for i, (body, names) in enumerate(plan)))
    finally:
        for p in peers:
            await p.close()
    await wire.dispatched(lmq_cluster.brokers[0])
    want: dict[str, set[bytes]] = defaultdict(set)
    for body, names in plan:
        for name in names:
            want[name].add(body)
    for name in pool:
        msgs = await read_lmq(lmq_peer, name)
        assert len(msgs) == len({m.body for m in msgs}) == len(want[name])
        assert {m.body for m in msgs} == want[name]
        assert await lmq_peer.max_offset(name) == len(msgs)
        assert all(m.topic == "Parent" for m in msgs)  # the record stays the parent's
    parent_total = sum([await lmq_peer.max_offset("Parent", q) for q in range(4)])
    assert parent_total == 200  # written once each


async def test_send_answer_is_the_parent_queue(lmq_cluster: Cluster, lmq_peer: Peer) -> None:
    resp = await lmq_peer.ok(fan_out("%LMQ%a,%LMQ%b", queue_id=2))
    assert resp.ext_fields["queueId"] == "2" and resp.ext_fields["queueOffset"] == "0"
    resp = await lmq_peer.ok(fan_out("%LMQ%b", queue_id=2))
    assert resp.ext_fields["queueOffset"] == "1"
    await wire.dispatched(lmq_cluster.brokers[0])
    [msg] = await lmq_peer.messages("%LMQ%a")
    assert msg.properties["INNER_MULTI_QUEUE_OFFSET"] == "0,0"
    assert [lmq_offset(m, "%LMQ%b") for m in await lmq_peer.messages("%LMQ%b")] == [0, 1]


@pytest.mark.parametrize(("names", "why"), [
    ("", "empty queue name"),
    ("%LMQ%a,,%LMQ%b", "empty queue name"),
    ("%LMQ%a,", "empty queue name"),
    ("%LMQ%", "must be %LMQ% followed by"),
    ("%LMQ%../etc", "must be %LMQ% followed by"),
    ("%LMQ%a/b", "must be %LMQ% followed by"),
    ("%LMQ%a\\b", "must be %LMQ% followed by"),
    ("%LMQ%a b", "must be %LMQ% followed by"),
    ("%LMQ%a\n", "must be %LMQ% followed by"),
    ("%LMQ%b,%LMQ%a\n", "must be %LMQ% followed by"),
    ("%LMQ%" + "x" * 251, "longer than 255 bytes"),
    (",".join(f"%LMQ%n{i}" for i in range(9)), "the limit is 8"),
    ("plain", "is not a light message queue"),
    ("%LMQ%a,Orders", "is not a light message queue"),
    ("%LMQ%a,%LMQ%b,%LMQ%a", "named twice"),
])
async def test_bad_targets_are_refused_and_nothing_is_stored(
        lmq_cluster: Cluster, lmq_peer: Peer, names: str, why: str) -> None:
    store = lmq_cluster.brokers[0].store
    before = store.commitlog.max_offset
    resp = await lmq_peer(fan_out(names))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert why in (resp.remark or "")
    await wire.dispatched(lmq_cluster.brokers[0])
    assert store.commitlog.max_offset == before
    assert await lmq_peer.max_offset("Parent", 0) == 0
    assert store.lmq is not None and store.lmq.stats() == (0, 0)


@pytest.mark.parametrize("parent", ["%RETRY%cg", "%DLQ%cg", "RMQ_SYS_TRACE_TOPIC"])
async def test_retry_dlq_and_system_parents_are_refused(lmq_cluster: Cluster, lmq_peer: Peer,
                                                       parent: str) -> None:
    store = lmq_cluster.brokers[0].store
    before = store.commitlog.max_offset
    resp = await lmq_peer(fan_out("%LMQ%a", topic=parent))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert f"{parent} cannot carry INNER_MULTI_DISPATCH" in (resp.remark or "")
    assert store.commitlog.max_offset == before


@pytest.mark.parametrize("delay", [{"DELAY": "1"}, {"TIMER_DELAY_SEC": "60"}])
async def test_delayed_fan_out_is_refused_naming_the_delay(
        lmq_cluster: Cluster, lmq_peer: Peer, delay: dict[str, str]) -> None:
    store = lmq_cluster.brokers[0].store
    before = store.commitlog.max_offset
    resp = await lmq_peer(fan_out("%LMQ%a", **delay))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark == "INNER_MULTI_DISPATCH cannot be combined with DELAY or TIMER_* properties"
    assert store.commitlog.max_offset == before


async def test_other_refusals(lmq_cluster: Cluster, lmq_peer: Peer) -> None:
    store = lmq_cluster.brokers[0].store
    before = store.commitlog.max_offset
    # The broker assigns the offsets; a producer may not.
    resp = await lmq_peer(fan_out("%LMQ%a", INNER_MULTI_QUEUE_OFFSET="7"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "assigned by the broker" in resp.remark
    # An LMQ is written by fan-out only, never as a topic of its own.
    resp = await lmq_peer(wire.send("%LMQ%direct", b"x"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "parent topic" in resp.remark
    # One bad target in a batch refuses the whole batch.
    good = wire.props(INNER_MULTI_DISPATCH="%LMQ%a")
    bad = wire.props(INNER_MULTI_DISPATCH="%LMQ%a/b")
    resp = await lmq_peer(wire.send_batch("Parent", [(b"1", good), (b"2", bad)]))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "must be %LMQ%" in resp.remark
    resp = await lmq_peer(wire.send_batch("Parent", [(b"1", good), (b"2", wire.props(
        INNER_MULTI_DISPATCH="%LMQ%b", INNER_MULTI_QUEUE_OFFSET="3"))]))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "assigned by the broker" in resp.remark
    assert store.commitlog.max_offset == before
    assert store.lmq is not None and store.lmq.stats() == (0, 0)


def batch_entry(body: bytes, names: str = "") -> tuple[bytes, str]:
    return body, (wire.props(INNER_MULTI_DISPATCH=names) if names else wire.props())


async def test_batched_fan_out(lmq_cluster: Cluster, lmq_peer: Peer) -> None:
    """An outer batch mixing plain and fan-out messages is stored as one batch on the
    parent queue; each message goes to its own LMQs, an LMQ named twice in the batch gets
    consecutive offsets, and single fan-outs before and after continue the same offsets,
    also across a restart."""
    await lmq_peer.ok(fan_out("%LMQ%a", b"s0", queue_id=1))
    resp = await lmq_peer.ok(wire.send_batch("Parent", [
        batch_entry(b"p1"), batch_entry(b"b1", "%LMQ%a,%LMQ%b"), batch_entry(b"b2", "%LMQ%b"),
        batch_entry(b"p2"), batch_entry(b"b3", "%LMQ%c,%LMQ%a")], queue_id=1))
    assert resp.ext_fields["queueOffset"] == "1" and len(resp.ext_fields["msgId"].split(",")) == 5
    await lmq_peer.ok(fan_out("%LMQ%b", b"s1", queue_id=2))
    await wire.dispatched(lmq_cluster.brokers[0])
    want = {"%LMQ%a": [b"s0", b"b1", b"b3"], "%LMQ%b": [b"b1", b"b2", b"s1"],
            "%LMQ%c": [b"b3"]}
    for name, bodies in want.items():
        assert [m.body for m in await read_lmq(lmq_peer, name)] == bodies  # offsets checked
    parent = await lmq_peer.messages("Parent", 1)
    assert [m.body for m in parent] == [b"s0", b"p1", b"b1", b"b2", b"p2", b"b3"]
    assert "INNER_MULTI_QUEUE_OFFSET" not in parent[1].properties
    broker = await lmq_cluster.restart_broker(0)
    async with Peer(broker.broker_addr) as again:
        await again.ok(wire.send_batch("Parent", [batch_entry(b"r1", "%LMQ%c,%LMQ%a"),
                                                  batch_entry(b"r2", "%LMQ%new")]))
        await wire.dispatched(broker)
        assert [m.body for m in await read_lmq(again, "%LMQ%a")] == [*want["%LMQ%a"], b"r1"]
        assert [m.body for m in await read_lmq(again, "%LMQ%c")] == [b"b3", b"r1"]
        assert [m.body for m in await read_lmq(again, "%LMQ%new")] == [b"r2"]


async def test_batched_fan_out_after_deleting_an_lmq(lmq_cluster: Cluster,
                                                     lmq_peer: Peer) -> None:
    """A batch naming a deleted LMQ re-creates it from offset 0, even when the batch is
    sent before the deletion's older entries were dispatched."""
    await lmq_peer.ok(wire.send_batch("Parent", [batch_entry(b"o%d" % i, "%LMQ%d,%LMQ%k")
                                                 for i in range(3)]))
    await lmq_peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%d"))
    await lmq_peer.ok(wire.send_batch("Parent", [batch_entry(b"n0", "%LMQ%d"),
                                                 batch_entry(b"n1", "%LMQ%k,%LMQ%d")]))
    await wire.dispatched(lmq_cluster.brokers[0])
    assert [m.body for m in await read_lmq(lmq_peer, "%LMQ%d")] == [b"n0", b"n1"]
    assert [m.body for m in await read_lmq(lmq_peer, "%LMQ%k")] == [b"o0", b"o1", b"o2", b"n1"]


async def test_lmq_disabled_refuses_fan_out(cluster: Cluster, peer: Peer) -> None:
    store = cluster.brokers[0].store
    before = store.commitlog.max_offset
    resp = await peer(fan_out("%LMQ%a", topic="Plain"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert "enableLmq" in resp.remark
    assert store.commitlog.max_offset == before
    resp = await peer(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%a"))
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize("key", ["MY_INNER_MULTI_DISPATCH", "XINNER_MULTI_DISPATCH"])
async def test_a_key_ending_in_the_fan_out_key_is_an_ordinary_property(
        lmq_cluster: Cluster, lmq_peer: Peer, key: str) -> None:
    """Only a pair named exactly INNER_MULTI_DISPATCH fans out: a longer name ending in it
    is a user property, stored as it is, alone and in a batch, on any parent topic."""
    store = lmq_cluster.brokers[0].store
    await lmq_peer.ok(wire.send("Parent", b"one", properties=wire.props(**{key: "%LMQ%a"})))
    await lmq_peer.ok(wire.send("%RETRY%cg", b"retry", properties=wire.props(**{key: "x"})))
    await lmq_peer.ok(wire.send_batch("Parent", [
        (b"b1", wire.props(**{key: "%LMQ%a"})), (b"b2", wire.props() + f"{key}\x01\x02"),
        batch_entry(b"b3", "%LMQ%b")]))
    await wire.dispatched(lmq_cluster.brokers[0])
    msgs = await lmq_peer.messages("Parent")
    assert [m.body for m in msgs] == [b"one", b"b1", b"b2", b"b3"]
    assert msgs[0].properties[key] == "%LMQ%a" and msgs[1].properties[key] == "%LMQ%a"
    assert "INNER_MULTI_QUEUE_OFFSET" not in msgs[0].properties
    assert await read_lmq(lmq_peer, "%LMQ%a") == []
    assert [m.body for m in await read_lmq(lmq_peer, "%LMQ%b")] == [b"b3"]
    assert store.lmq is not None and store.lmq.stats()[0] == 1


async def test_a_key_ending_in_the_fan_out_key_needs_no_lmq(cluster: Cluster, peer: Peer) -> None:
    """A broker without LMQs stores such a property instead of refusing a fan-out."""
    await peer.ok(wire.create_topic("Plain", 1))
    props = wire.props(MY_INNER_MULTI_DISPATCH="%LMQ%a")
    await peer.ok(wire.send("Plain", b"one", properties=props))
    await peer.ok(wire.send_batch("Plain", [(b"b1", props), (b"b2", wire.props())]))
    await wire.dispatched(cluster.brokers[0])
    assert [m.body for m in await peer.messages("Plain")] == [b"one", b"b1", b"b2"]


async def test_lmq_is_a_one_queue_topic(lmq_peer: Peer) -> None:
    await lmq_peer.ok(fan_out("%LMQ%one"))
    resp = await lmq_peer(wire.pull("%LMQ%one", 1, 0))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    resp = await lmq_peer(wire.pull("%LMQ%never", 0, 0))
    assert resp.code == ResponseCode.PULL_NOT_FOUND  # unknown LMQs are empty, not errors


async def test_long_poll_on_an_lmq_is_woken_by_a_fan_out(lmq_cluster: Cluster,
                                                        lmq_peer: Peer) -> None:
    broker = lmq_cluster.brokers[0]
    held = asyncio.ensure_future(lmq_peer(wire.pull(
        "%LMQ%inbox", 0, 0, sys_flag=PULL_SUSPEND, suspend_ms=20_000), timeout=30))
    await lmq_peer.ok(wire.request(RequestCode.GET_MAX_OFFSET, topic="%LMQ%inbox", queueId=0))
    assert not held.done() and broker.pull_holds.held_count == 1
    async with Peer(broker.broker_addr) as producer:
        await producer.ok(fan_out("%LMQ%elsewhere"))
        await wire.dispatched(broker)
        assert not held.done()  # a different LMQ does not wake it
        await producer.ok(fan_out("%LMQ%elsewhere,%LMQ%inbox", b"for you"))
    resp = await asyncio.wait_for(held, 10)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.full_body())] == [b"for you"]
    assert broker.pull_holds.held_count == 0


async def test_consumer_offsets_are_kept_per_lmq_and_group(lmq_cluster: Cluster,
                                                          lmq_peer: Peer) -> None:
    await lmq_peer.ok(fan_out("%LMQ%o1,%LMQ%o2"))
    await wire.dispatched(lmq_cluster.brokers[0])  # an offset is committed once pulled
    await lmq_peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g1",
                                   topic="%LMQ%o1", queueId=0, commitOffset=1))
    resp = await lmq_peer.ok(wire.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                          consumerGroup="g1", topic="%LMQ%o1", queueId=0))
    assert resp.ext_fields["offset"] == "1"
    resp = await lmq_peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g2",
                                       topic="%LMQ%o1", queueId=0, setZeroIfNotFound="false"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    broker = lmq_cluster.brokers[0]
    assert broker.store.lmq is not None
    assert broker.store.lmq.offsets_of("%LMQ%o1") == {"g1": 1}
    assert broker.offsets.query("g1", "%LMQ%o1", 0) is None  # not in the JSON offsets
    # Committing through a pull's COMMIT_OFFSET flag lands in the same place.
    await wire.dispatched(broker)
    await lmq_peer.ok(wire.pull("%LMQ%o2", 0, 0, group="g1", sys_flag=wire.PULL_COMMIT,
                                commit_offset=1))
    assert broker.store.lmq.committed_offset("g1", "%LMQ%o2") == 1
    resp = await lmq_peer.ok(wire.request(RequestCode.GET_MIN_OFFSET, topic="%LMQ%o2",
                                          queueId=0))
    assert resp.ext_fields["offset"] == "0"


async def test_delete_lmq_drops_entries_and_offsets(lmq_cluster: Cluster,
                                                   lmq_peer: Peer) -> None:
    for i in range(3):
        await lmq_peer.ok(fan_out("%LMQ%del,%LMQ%stay", b"old%d" % i))
    # Offset 0 is valid whether or not the three were dispatched yet.
    await lmq_peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g",
                                   topic="%LMQ%del", queueId=0, commitOffset=0))
    await lmq_peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%del"))
    await wire.dispatched(lmq_cluster.brokers[0])  # the three were maybe not dispatched yet:
    assert await lmq_peer.max_offset("%LMQ%del") == 0  # the tombstone drops them anyway
    resp = await lmq_peer(wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g",
                                       topic="%LMQ%del", queueId=0, setZeroIfNotFound="false"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert len(await read_lmq(lmq_peer, "%LMQ%stay")) == 3
    resp = await lmq_peer(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%del"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    resp = await lmq_peer(wire.request(RequestCode.DELETE_LMQ, lmq="Parent"))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    await lmq_peer.ok(fan_out("%LMQ%del", b"new"))
    await wire.dispatched(lmq_cluster.brokers[0])
    assert [m.body for m in await read_lmq(lmq_peer, "%LMQ%del")] == [b"new"]


async def test_a_deleted_lmq_leaves_no_meters(lmq_cluster: Cluster, lmq_peer: Peer) -> None:
    await lmq_peer.ok(fan_out("%LMQ%gone", b"x"))
    await wire.dispatched(lmq_cluster.brokers[0])
    assert len(await read_lmq(lmq_peer, "%LMQ%gone")) == 1
    stats = lmq_cluster.brokers[0].ctx.stats
    assert "%LMQ%gone@cg" in stats.topic_group_get
    await lmq_peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%gone"))
    assert "%LMQ%gone@cg" not in stats.topic_group_get  # a million LMQs come and go


async def test_runtime_info_counts_lmqs_and_survives_restart(lmq_cluster: Cluster,
                                                            lmq_peer: Peer) -> None:
    for i in range(4):
        await lmq_peer.ok(fan_out(f"%LMQ%r{i},%LMQ%all", b"r%d" % i))
    await wire.dispatched(lmq_cluster.brokers[0])
    resp = await lmq_peer.ok(wire.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = decode_body(resp.full_body(), KVTable).table
    assert (table["lmqEnabled"], table["lmqCount"], table["lmqEntries"]) == ("true", "5", "8")
    broker = await lmq_cluster.restart_broker(0)
    async with Peer(broker.broker_addr) as again:
        assert [m.body for m in await read_lmq(again, "%LMQ%all")] == [b"r0", b"r1", b"r2",
                                                                      b"r3"]
        await again.ok(fan_out("%LMQ%all", b"r4"))
        await wire.dispatched(broker)
        assert await again.max_offset("%LMQ%all") == 5


def near_limit_props(names: str, room: int) -> str:
    """A fan-out's property text (CLUSTER included, so the broker adds none) that leaves
    ``room`` bytes under the properties' limit before the broker appends the offsets."""
    base = wire.props(CLUSTER="c", INNER_MULTI_DISPATCH=names)
    pad = MAX_PROPERTIES_BYTES - room - len(base.encode()) - len("PAD\x01\x02")
    return base + "PAD\x01" + "p" * pad + "\x02"


@pytest.mark.parametrize("batch", [0, 2, 9], ids=["single", "batch-of-2", "batch-of-9"])
async def test_offsets_pushing_properties_over_the_limit_are_refused(
        lmq_cluster: Cluster, lmq_peer: Peer, batch: int) -> None:
    """The properties' length is a 2-byte field: a fan-out whose properties fit the limit
    only until the broker appends INNER_MULTI_QUEUE_OFFSET is refused before anything is
    stored, and the LMQ offsets it would have taken are given to the next send."""
    store = lmq_cluster.brokers[0].store
    before = store.commitlog.max_offset
    text = near_limit_props("%LMQ%a,%LMQ%b", 10)  # the offsets need 29 bytes
    assert len(text.encode()) == MAX_PROPERTIES_BYTES - 10
    if batch:
        entries = [batch_entry(b"s%d" % i, "%LMQ%a") for i in range(batch - 1)]
        cmd = wire.send_batch("Parent", [*entries, (b"big", text)])
    else:
        cmd = wire.send("Parent", b"big", properties=text)
    resp = await lmq_peer(cmd)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (resp.code, resp.remark)
    assert f"exceed {MAX_PROPERTIES_BYTES}" in (resp.remark or "")
    assert "INNER_MULTI_QUEUE_OFFSET" in (resp.remark or "")
    await wire.dispatched(lmq_cluster.brokers[0])
    assert store.commitlog.max_offset == before
    assert await lmq_peer.max_offset("Parent", 0) == 0
    assert store.lmq is not None and store.lmq.stats() == (0, 0)
    # Room enough for the offsets: stored at the limit, and read back whole.
    await lmq_peer.ok(wire.send("Parent", b"fits",
                                properties=near_limit_props("%LMQ%a,%LMQ%b", 29)))
    await wire.dispatched(lmq_cluster.brokers[0])
    [msg] = await read_lmq(lmq_peer, "%LMQ%b")
    assert msg.properties["INNER_MULTI_QUEUE_OFFSET"] == "0,0"
