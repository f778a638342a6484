"""BATCH_REQUEST's shared-header send form against a live broker: the answers and the
stored messages of standard children, errors per child (a topic being deleted among
them), SYNC_FLUSH, the offer that negotiates it, and a broker that cannot read it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    CHILD_FORMS_KEY,
    MERGED_REMARK,
    SEND_SHARED_FORM,
    decode_batch_response,
    encode_batch_request,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.shared_send import (
    RawEntry,
    decode_send_answers,
    encode_shared_send,
    send_answer_command,
)
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import MAX_PROPERTIES_BYTES
from tidemq.store.config import FlushDiskType
from tidemq.testing import Cluster

SEND = RequestCode.SEND_MESSAGE_V2


@pytest.fixture
async def topic(peer: Peer) -> str:
    await peer.ok(wire.create_topic("Ss", 8))
    return "Ss"


def entry(cmd: RemotingCommand) -> RawEntry:
    """A standard send child as a shared-form entry."""
    ext = cmd.ext_fields
    return (int(ext["e"]), int(ext["f"]), int(ext["g"]), int(ext["h"]),
            ext.get("i", "").encode(), bytes(cmd.body))


async def shared(peer: Peer, children: list[RemotingCommand]) -> list[RemotingCommand]:
    parent = encode_shared_send(RemotingCommand.request(SEND, dict(children[0].ext_fields)),
                                [entry(c) for c in children])
    resp = await peer(parent)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, MERGED_REMARK), resp.remark
    assert resp.ext_fields[CHILD_FORM_KEY] == SEND_SHARED_FORM
    answers = decode_send_answers(resp.full_body(), len(children))
    return [send_answer_command(a, i, resp.ext_fields) for i, a in enumerate(answers, 1)]


async def standard(peer: Peer, children: list[RemotingCommand]) -> list[RemotingCommand]:
    resp = await peer(encode_batch_request(SEND, children))
    assert resp.code == ResponseCode.SUCCESS
    return decode_batch_response(resp, [c.opaque for c in children])


def copy(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.request(cmd.code, dict(cmd.ext_fields), bytes(cmd.body))


def view(r: RemotingCommand) -> tuple[object, ...]:
    ext = dict(r.ext_fields)
    ext.pop("msgId", None)
    ext.pop("queueOffset", None)
    return r.code, r.opaque, r.remark, ext


def kids(topic: str) -> list[RemotingCommand]:
    return [
        wire.send(topic, b"a", queue_id=0),
        wire.send(topic, b"b" * 5000, queue_id=3, flag=7),
        wire.send(topic, b"c", queue_id=99),  # no such queue: INVALID_PARAMETER
        wire.send(topic, b"d", queue_id=5, properties=wire.props(tags="t", keys="k1 k2")),
        wire.send(topic, b"e", queue_id=5, properties=""),  # no properties at all
        wire.send(topic, b"f", queue_id=1, sys_flag=0, properties=wire.props(DELAY="1")),
        wire.send(topic, b"", queue_id=2),
    ]


async def test_shared_children_get_what_standard_children_get(peer: Peer, topic: str,
                                                              cluster: Cluster) -> None:
    sent = kids(topic)
    got = await shared(peer, sent)
    want = await standard(peer, [copy(c) for c in sent])
    assert [view(r) for r in got] == [view(r) for r in want]
    assert [r.code for r in got] == [0, 0, ResponseCode.INVALID_PARAMETER, 0, 0, 0, 0]
    await wire.dispatched(cluster.brokers[0])
    for qid in (0, 3, 5, 2):
        msgs = await peer.messages(topic, qid)
        assert len(msgs) == 2 * (1 + (qid == 5))
        alike = [(m.body, m.flag, m.sys_flag, m.born_timestamp,
                  {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}) for m in msgs]
        half = len(alike) // 2
        assert alike[:half] == alike[half:]  # the shared copies, then the standard ones
    assert (await peer.messages(topic, 5))[0].properties["KEYS"] == "k1 k2"


async def test_answers_carry_the_stored_positions(peer: Peer, topic: str,
                                                  cluster: Cluster) -> None:
    got = await shared(peer, [wire.send(topic, b"x", queue_id=q) for q in (4, 4, 6)])
    assert [(r.ext_fields["queueId"], r.ext_fields["queueOffset"]) for r in got] == [
        ("4", "0"), ("4", "1"), ("6", "0")]
    assert len({r.ext_fields["msgId"] for r in got}) == 3
    assert {r.ext_fields["MSG_REGION"] for r in got} == {"DefaultRegion"}
    # The usual parent (answered by column) too: each msgId names its record's offset.
    kids = [wire.send(topic, b"y%d" % q, queue_id=q) for q in range(8)]
    got = await shared(peer, kids)
    await wire.dispatched(cluster.brokers[0])
    for q, answer in enumerate(got):
        stored = (await peer.messages(topic, q))[-1]
        assert bytes(stored.body) == b"y%d" % q
        assert decode_offset_msg_id(answer.ext_fields["msgId"])[1] == stored.commit_log_offset
        assert answer.ext_fields["queueOffset"] == str(stored.queue_offset)


async def test_bad_children_are_answered_alone(peer: Peer, topic: str) -> None:
    good = wire.send(topic, b"ok", queue_id=1)
    parent = encode_shared_send(RemotingCommand.request(SEND, dict(good.ext_fields)), [
        entry(good), (1, 0, 0, 0, b"\xff\xfe", b"bad props"), (-5, 0, 0, 0, b"", b"neg"),
        (1, 0, 0, 0, b"", b"x" * (5 * 1024 * 1024))])
    resp = await peer(parent)
    assert resp.code == ResponseCode.SUCCESS
    answers = [send_answer_command(a, i, resp.ext_fields) for i, a in
               enumerate(decode_send_answers(resp.full_body(), 4), 1)]
    assert [a.code for a in answers] == [0, ResponseCode.INVALID_PARAMETER,
                                         ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL]
    assert "UTF-8" in (answers[1].remark or "")


async def test_a_logical_or_unknown_topic_goes_through_the_processor(peer: Peer) -> None:
    kids = [wire.send("NoSuchTopicHere", b"a", queue_id=0, default_topic="NoDefault")] * 2
    got = await shared(peer, kids)
    want = await standard(peer, [wire.send("NoSuchTopicHere", b"a", queue_id=0,
                                           default_topic="NoDefault") for _ in range(2)])
    assert [view(r) for r in got] == [view(r) for r in want]
    assert got[0].code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize(("ext", "body", "reason"), [
    ({"dispatchCode": "11"}, b"", "not supported for dispatchCode 11"),
    ({}, b"", "needs a template"),
    ({}, b"\0\0\0\x10garbage", "claims"),
])
async def test_malformed_parents_are_refused(peer: Peer, ext: dict[str, str], body: bytes,
                                             reason: str) -> None:
    parent = RemotingCommand.request(RequestCode.BATCH_REQUEST, {
        "dispatchCode": "310", CHILD_FORM_KEY: SEND_SHARED_FORM, **ext}, body)
    resp = await peer(parent)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert reason in (resp.remark or "")


async def test_a_standard_send_parent_may_offer_the_form(peer: Peer, topic: str) -> None:
    parent = encode_batch_request(SEND, [wire.send(topic, b"a"), wire.send(topic, b"b")])
    parent.ext_fields[CHILD_FORMS_KEY] = SEND_SHARED_FORM
    resp = await peer(parent)
    assert resp.ext_fields[CHILD_FORMS_KEY] == SEND_SHARED_FORM


async def test_sync_flush_children_answer_once_flushed(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, store={"flush_disk_type": FlushDiskType.SYNC_FLUSH}) as c,
                Peer(c.brokers[0].broker_addr) as peer):
        await peer.ok(wire.create_topic("Sf", 4))
        got = await shared(peer, [wire.send("Sf", b"durable", queue_id=q) for q in range(4)]
                           + [wire.send("Sf", queue_id=77)])
        assert [r.code for r in got] == [0, 0, 0, 0, ResponseCode.INVALID_PARAMETER]
        assert c.brokers[0].store.flusher is not None
        assert c.brokers[0].store.flusher.flushed_offset >= (
            c.brokers[0].store.commitlog.max_offset)


async def test_children_keep_their_order_in_each_queue(peer: Peer, topic: str,
                                                       cluster: Cluster) -> None:
    """Plain children are stored together, the others (a delay, a property naming
    ``INNER_``, a refusal) on their own: each queue still holds them in child order."""
    bodies = [b"p0", b"inner", b"p1", b"bad queue", b"delayed", b"p2"]
    sent = [wire.send(topic, bodies[0], queue_id=1),
            wire.send(topic, bodies[1], queue_id=1, properties=wire.props(X_INNER_Y="v")),
            wire.send(topic, bodies[2], queue_id=1),
            wire.send(topic, bodies[3], queue_id=77),
            wire.send(topic, bodies[4], queue_id=1, properties=wire.props(DELAY="1")),
            wire.send(topic, bodies[5], queue_id=1)]
    got = await shared(peer, sent)
    assert [r.code for r in got] == [0, 0, 0, ResponseCode.INVALID_PARAMETER, 0, 0]
    assert [got[i].ext_fields["queueOffset"] for i in (0, 1, 2, 5)] == ["0", "1", "2", "3"]
    await wire.dispatched(cluster.brokers[0])
    assert [m.body for m in await peer.messages(topic, 1)] == [b"p0", b"inner", b"p1", b"p2"]


# ---------------------------------------------------------------- fan-out children (RIP-28)

LMQ_STORE = {"enable_lmq": True, "enable_multi_dispatch": True,
             "max_lmq_targets_per_message": 4}


def _room_props(names: str, room: int) -> str:
    """A fan-out's property text (CLUSTER included) leaving ``room`` bytes under the
    properties' limit before the broker adds the LMQ offsets."""
    base = wire.props(CLUSTER="c", INNER_MULTI_DISPATCH=names)
    pad = MAX_PROPERTIES_BYTES - room - len(base.encode()) - len("PAD\x01\x02")
    return base + "PAD\x01" + "p" * pad + "\x02"


def fan_kids(tag: str) -> list[RemotingCommand]:
    """Fan-out children to parent ``P<tag>`` and LMQs ``%LMQ%<tag>-*``, and what each
    one tests: LMQs named by several children, plain children between them, children
    refused alone for their LMQs, their queue or their properties, and children that
    take the one-by-one path (another INNER_ property, a delay)."""
    topic, a, b, c = f"P{tag}", f"%LMQ%{tag}-a", f"%LMQ%{tag}-b", f"%LMQ%{tag}-c"

    def fan(body: bytes, names: str, queue_id: int = 0, **extra: str) -> RemotingCommand:
        props = wire.props(**extra) + f"INNER_MULTI_DISPATCH\x01{names}\x02"
        return wire.send(topic, body, queue_id=queue_id, properties=props)

    return [
        fan(b"f0", f"{a},{b}", 0),
        wire.send(topic, b"p0", queue_id=0),
        fan(b"f1", f"{b}", 1, tags="t1", keys="k1"),
        fan(b"bad name", f"{a},%LMQ%{tag}/x"),  # MESSAGE_ILLEGAL, nothing taken
        fan(b"twice", f"{c},{c}"),  # MESSAGE_ILLEGAL
        fan(b"too many", ",".join(f"%LMQ%{tag}-n{i}" for i in range(5))),
        fan(b"bad queue", f"{a}", 77),  # INVALID_PARAMETER
        fan(b"assigned", f"{a}", INNER_MULTI_QUEUE_OFFSET="3"),  # one by one: refused
        wire.send(topic, b"over", properties=_room_props(f"{a},{c}", 10)),  # offsets push
        wire.send(topic, b"fits", queue_id=2, properties=_room_props(f"{a},{c}", 29)),
        fan(b"user key", f"{c}", 2, MY_INNER_KEY="v"),  # one by one: stored
        fan(b"delayed", f"{a}", DELAY="1"),  # the standard child: refused
        fan(b"f2", f"{c},{a},{b}", 1),
        wire.send(topic, b"p1", queue_id=1),
        fan(b"", f"{a}", 3),
    ]


@pytest.fixture
async def lmq_peer(tmp_path: Path) -> AsyncIterator[tuple[Cluster, Peer]]:
    async with Cluster(tmp_path, brokers=1, store=LMQ_STORE) as c, \
            Peer(c.brokers[0].broker_addr) as p:
        for tag in ("one", "two"):
            await p.ok(wire.create_topic(f"P{tag}", 4))
        yield c, p


def usual_fan_kids(tag: str) -> list[RemotingCommand]:
    """Fan-out children of one shape (a producer's usual parent, read by column), one
    naming a bad LMQ and one naming a queue of the parent twice."""
    topic = f"P{tag}"
    names = [f"%LMQ%{tag}-a,%LMQ%{tag}-b", f"%LMQ%{tag}-b", f"%LMQ%{tag}/bad",
             f"%LMQ%{tag}-c,%LMQ%{tag}-a", f"%LMQ%{tag}-a,%LMQ%{tag}-a", f"%LMQ%{tag}-c"]
    return [wire.send(topic, b"u%d" % i, queue_id=i % 3, properties=(
        f"UNIQ_KEY\x01{tag}{i}\x02INNER_MULTI_DISPATCH\x01{n}\x02"))
        for i, n in enumerate(names)]


@pytest.mark.parametrize("make", [fan_kids, usual_fan_kids], ids=["mixed", "usual"])
async def test_fan_out_children_get_what_single_sends_get(
        lmq_peer: tuple[Cluster, Peer], make: Callable[[str], list[RemotingCommand]]) -> None:
    """A shared parent's fan-out children (stored together) are answered, and leave
    the records, parent queues and LMQs, that the same messages sent one request each
    leave: the same codes and remarks, queue offsets and LMQ offsets in child order."""
    cluster, peer = lmq_peer
    got = await shared(peer, make("one"))
    want = [await peer(c) for c in make("two")]

    def same(r: RemotingCommand) -> tuple[object, ...]:
        ext = {k: v for k, v in r.ext_fields.items() if k in ("queueId", "queueOffset")}
        return r.code, (r.remark or "").replace("one", "two"), ext

    assert [same(r) for r in got] == [same(r) for r in want]
    assert [r.code for r in got].count(0) == (8 if make is fan_kids else 4)
    await wire.dispatched(cluster.brokers[0])

    async def stored(tag: str) -> dict[str, list[tuple[object, ...]]]:
        out: dict[str, list[tuple[object, ...]]] = {}
        for queue in [f"P{tag}/{q}" for q in range(4)] + [
                f"%LMQ%{tag}-{n}/0" for n in "abc"]:
            name, qid = queue.rsplit("/", 1)
            if await peer.max_offset(name, int(qid)) == 0:  # nothing stored: no pull
                out[queue.replace(tag, "x")] = []
                continue
            out[queue.replace(tag, "x")] = [
                (m.body, m.queue_offset, m.properties.get("INNER_MULTI_DISPATCH", "")
                 .replace(tag, "x"), m.properties.get("INNER_MULTI_QUEUE_OFFSET"),
                 m.properties.get("TAGS"), m.properties.get("KEYS"))
                for m in await peer.messages(name, int(qid), max_nums=32)]
        return out

    mine = await stored("one")
    assert mine == await stored("two")
    assert [m[0] for m in mine["%LMQ%x-a/0"]] == (
        [b"f0", b"fits", b"f2", b""] if make is fan_kids else [b"u0", b"u3"])


async def test_fan_out_children_are_stored_in_one_run(lmq_peer: tuple[Cluster, Peer]) -> None:
    """The fan-out children of a parent are written under one hold of the append lock:
    the append hooks see one run of bytes holding all of them (no roll in between)."""
    cluster, peer = lmq_peer
    runs: list[tuple[int, int]] = []
    cluster.brokers[0].store.add_append_hook(
        lambda start, view: runs.append((start, start + len(view))))
    got = await shared(peer, [wire.send("Pone", b"m%d" % i, queue_id=i % 4, properties=(
        wire.props() + f"INNER_MULTI_DISPATCH\x01%LMQ%r{i % 3},%LMQ%s\x02")) for i in range(12)])
    assert [r.code for r in got] == [0] * 12
    phys = [int(r.ext_fields["msgId"][-16:], 16) for r in got]
    assert phys == sorted(phys)
    assert any(start <= phys[0] and phys[-1] < end for start, end in runs), runs
    await wire.dispatched(cluster.brokers[0])
    assert [int(m.properties["INNER_MULTI_QUEUE_OFFSET"].split(",")[1])
            for m in await peer.messages("%LMQ%s", 0, max_nums=32)] == list(range(12))


async def test_children_of_a_topic_being_deleted_are_refused(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    """The store refuses the puts of a topic whose deletion is under way: each child
    of a shared parent is answered TOPIC_NOT_EXIST, as a single send is, and none is
    stored."""
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("%DLQ%gone", 1))
    for name in (topic, "%DLQ%gone"):
        broker.store.refuse_topic(name, "a test holds it")
    end = broker.store.commitlog.max_offset
    for name, queues in ((topic, (0, 3, 3)), ("%DLQ%gone", (0, 0))):
        single = await peer(wire.send(name, b"one", queue_id=0))
        got = await shared(peer, [wire.send(name, b"x%d" % q, queue_id=q) for q in queues])
        assert [(r.code, r.remark) for r in got] == [(single.code, single.remark)] * len(
            queues)
        assert single.code == ResponseCode.TOPIC_NOT_EXIST
        assert single.remark == f"topic[{name}] not exist, apply first please!"
    assert broker.store.commitlog.max_offset == end  # nothing stored
    broker.store.admit_topic(topic)
    got = await shared(peer, [wire.send(topic, b"after", queue_id=3)])
    assert (got[0].code, got[0].ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, "0")


async def test_children_sent_while_their_topic_is_deleted_are_refused_not_lost(
        peer: Peer, topic: str, cluster: Cluster, held: Held,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-deletion (the topic table's write held, after the store's mark), a shared
    parent's children are refused as single sends are; none is stored above the mark
    and lost with the queues the deletion removes."""
    broker = cluster.brokers[0]
    await peer.ok(wire.send(topic, b"old", queue_id=3))
    slow_writes(monkeypatch, topics_module, held)
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)))
        await held.entered_soon()
        single = await peer(wire.send(topic, b"one", queue_id=3))
        got = await shared(peer, [wire.send(topic, b"x%d" % q, queue_id=q)
                                  for q in (0, 3, 3)])
        assert single.code == ResponseCode.TOPIC_NOT_EXIST, single.remark
        assert [(r.code, r.remark) for r in got] == [(single.code, single.remark)] * 3
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    assert broker.store.topics().get(topic) is None  # no queue left behind
    got = await shared(peer, [wire.send(topic, b"after", queue_id=0)])
    assert (got[0].code, got[0].ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, "0")
