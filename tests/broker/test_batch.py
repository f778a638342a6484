"""BATCH_REQUEST (20000) against a live broker: merges, partial failures, held pulls,
limits, zero-copy pull bodies, and a broker with the feature disabled."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.codec.batch_protocol import (
    DISPATCH_CODE_KEY,
    MERGED_REMARK,
    decode_batch_response,
    decode_children,
    encode_batch_request,
    encode_children,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ConnectionLost, ResponseCode
from tidemq.store.config import FlushDiskType
from tidemq.testing import Cluster

MAX_OFFSET = RequestCode.GET_MAX_OFFSET


async def merged(peer: Peer, code: int, children: list[RemotingCommand],
                 timeout: float = 10.0) -> list[RemotingCommand]:
    parent = encode_batch_request(code, children)
    resp = await peer(parent, timeout)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    assert resp.remark == MERGED_REMARK
    return decode_batch_response(resp, [c.opaque for c in children])


def raw_parent(code: int, body: bytes, **ext: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.BATCH_REQUEST,
                                   {DISPATCH_CODE_KEY: str(code), **ext}, body)


def max_offset(topic: str, queue_id: int) -> RemotingCommand:
    return wire.request(MAX_OFFSET, topic=topic, queueId=queue_id)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for a broker-side state with no event of its own (a parent being parked when
    its request arrives, or dropped when its connection's close is noticed)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture
async def topic(peer: Peer) -> str:
    await peer.ok(wire.create_topic("Bt", 8))
    return "Bt"


# ---------------------------------------------------------------- sends and offsets


async def test_children_are_answered_in_request_order(peer: Peer, topic: str,
                                                      cluster: Cluster) -> None:
    for qid, count in ((1, 3), (5, 1), (2, 2)):
        for _ in range(count):
            await peer.ok(wire.send(topic, queue_id=qid))
    await wire.dispatched(cluster.brokers[0])
    order = [5, 0, 2, 7, 1, 2]
    got = await merged(peer, MAX_OFFSET, [max_offset(topic, q) for q in order])
    assert [int(r.ext_fields["offset"]) for r in got] == [1, 0, 2, 0, 3, 2]
    assert [r.opaque for r in got] == list(range(1, len(order) + 1))


async def test_sends_to_many_queues_in_one_rpc(peer: Peer, topic: str,
                                               cluster: Cluster) -> None:
    kids = [wire.send(topic, f"m{q}".encode(), queue_id=q) for q in range(8)]
    kids.append(wire.send_batch(topic, [(b"b1", wire.props()), (b"b2", wire.props())],
                                code=RequestCode.SEND_MESSAGE_V2, queue_id=3))
    got = await merged(peer, RequestCode.SEND_MESSAGE_V2, kids)
    assert all(r.code == ResponseCode.SUCCESS for r in got), [r.remark for r in got]
    assert [int(r.ext_fields["queueId"]) for r in got] == [*range(8), 3]
    assert int(got[-1].ext_fields["queueOffset"]) == 1
    await wire.dispatched(cluster.brokers[0])
    assert [m.body for m in await peer.messages(topic, 3)] == [b"m3", b"b1", b"b2"]


async def test_one_bad_child_does_not_fail_its_siblings(peer: Peer, topic: str,
                                                        cluster: Cluster) -> None:
    bad_field = wire.send(topic, queue_id=1)
    bad_field.ext_fields["e"] = "not-a-number"
    kids = [wire.send(topic, queue_id=0), wire.send("bad topic!", queue_id=0), bad_field,
            wire.send(topic, queue_id=9999), wire.send(topic, queue_id=2)]
    got = await merged(peer, RequestCode.SEND_MESSAGE_V2, kids)
    assert [r.code for r in got] == [0, ResponseCode.INVALID_PARAMETER,
                                     ResponseCode.INVALID_PARAMETER,
                                     ResponseCode.INVALID_PARAMETER, 0]
    assert all(r.remark for r in got[1:4])
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset(topic, 0) == 1 and await peer.max_offset(topic, 2) == 1


async def test_malformed_children_get_their_own_error(peer: Peer, topic: str) -> None:
    good = max_offset(topic, 0)
    good.opaque = 1
    wrong_code = wire.request(RequestCode.GET_MIN_OFFSET, topic=topic, queueId=0)
    wrong_code.opaque = 2
    bad_header = struct.pack(">ii", 4 + 5, 5) + b"{nope"  # a whole frame, JSON garbage
    body = b"".join(bytes(b) for b in encode_children([good, wrong_code])) + bad_header
    resp = await peer(raw_parent(MAX_OFFSET, body))
    assert resp.code == ResponseCode.SUCCESS
    kids = decode_children(resp.body)
    codes = [(k.command.code, k.command.opaque) for k in kids if k.command is not None]
    assert codes == [(0, 1), (ResponseCode.INVALID_PARAMETER, 2),
                     (ResponseCode.INVALID_PARAMETER, 0)]
    assert "dispatchCode" in (kids[1].command.remark or "")  # type: ignore[union-attr]


async def _fill(peer: Peer, cluster: Cluster, topic: str, counts: dict[int, int]) -> None:
    """``counts[q]`` messages in queue ``q``, dispatched: offsets up to them can be
    committed."""
    for qid, count in counts.items():
        for _ in range(count):
            await peer.ok(wire.send(topic, queue_id=qid))
    await wire.dispatched(cluster.brokers[0])


async def test_offset_commits_and_queries_in_one_rpc(peer: Peer, topic: str,
                                                     cluster: Cluster) -> None:
    await _fill(peer, cluster, topic, {q: 1 + q for q in range(4)})
    commits = [wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="cg",
                            topic=topic, queueId=q, commitOffset=1 + q) for q in range(4)]
    got = await merged(peer, RequestCode.UPDATE_CONSUMER_OFFSET, commits)
    assert [r.code for r in got] == [0] * 4
    queries = [wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg",
                            topic=topic, queueId=q) for q in (3, 0, 6)]
    got = await merged(peer, RequestCode.QUERY_CONSUMER_OFFSET, queries)
    assert [r.code for r in got] == [0, 0, ResponseCode.QUERY_NOT_FOUND]
    assert [r.ext_fields.get("offset") for r in got[:2]] == ["4", "1"]


async def test_a_oneway_parent_is_processed_and_not_answered(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    await _fill(peer, cluster, topic, {q: 2 for q in range(3)})
    commits = [wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="ow",
                            topic=topic, queueId=q, commitOffset=2) for q in range(3)]
    await peer.client.oneway(peer.addr, encode_batch_request(
        RequestCode.UPDATE_CONSUMER_OFFSET, commits, oneway=True))
    query = wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="ow", topic=topic,
                         queueId=2)
    assert (await peer.ok(query)).ext_fields["offset"] == "2"  # same connection: in order
    assert cluster.brokers[0].committed_offset("ow", topic, 0) == 2


# ---------------------------------------------------------------- parent errors and limits


@pytest.mark.parametrize(("ext", "body", "why"), [
    ({}, b"", "dispatchCode"),
    ({DISPATCH_CODE_KEY: "abc"}, b"", "not an int"),
    ({DISPATCH_CODE_KEY: str(RequestCode.HEART_BEAT)}, b"", "not supported"),
    ({DISPATCH_CODE_KEY: "30"}, b"\x00\x00\x00\x10\x00\x00\x00\x02abc", "claims"),
    ({DISPATCH_CODE_KEY: "30"}, b"\x00\x00", "trailing"),
])
async def test_malformed_parents_are_refused_with_a_remark(
        peer: Peer, ext: dict[str, str], body: bytes, why: str) -> None:
    resp = await peer(RemotingCommand.request(RequestCode.BATCH_REQUEST, ext, body))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert why in (resp.remark or "")
    await peer.ok(wire.create_topic("StillServed", 1))


async def test_duplicate_opaques_refuse_the_parent(peer: Peer, topic: str) -> None:
    a, b = max_offset(topic, 0), max_offset(topic, 1)
    a.opaque = b.opaque = 7
    resp = await peer(raw_parent(MAX_OFFSET, b"".join(bytes(x) for x in encode_children([a, b]))))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "opaque 7" in (resp.remark or "")


async def test_limits_on_children_and_bytes(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, broker={"batch_max_children": 3,
                                          "batch_max_bytes": 2000}) as c,
                Peer(c.brokers[0].broker_addr) as peer):
        await peer.ok(wire.create_topic("Lim", 4))
        got = await merged(peer, MAX_OFFSET, [max_offset("Lim", q) for q in range(3)])
        assert len(got) == 3
        resp = await peer(encode_batch_request(
            MAX_OFFSET, [max_offset("Lim", q % 4) for q in range(4)]))
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert "more than 3 children" in (resp.remark or "")
        big = wire.send("Lim", b"x" * 3000)
        resp = await peer(encode_batch_request(RequestCode.SEND_MESSAGE_V2, [big]))
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert "exceeds the limit of 2000" in (resp.remark or "")
        assert await peer.max_offset("Lim", 0) == 0


async def test_a_broker_with_the_feature_disabled_says_not_supported(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, broker={"batch_protocol_enable": False}) as c,
                Peer(c.brokers[0].broker_addr) as peer):
        resp = await peer(encode_batch_request(MAX_OFFSET, [max_offset("X", 0)]))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_sync_flush_sends_answer_when_every_flush_is_confirmed(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, store={"flush_disk_type": FlushDiskType.SYNC_FLUSH}) as c,
                Peer(c.brokers[0].broker_addr) as peer):
        await peer.ok(wire.create_topic("Sf", 4))
        kids = [wire.send("Sf", b"durable", queue_id=q) for q in range(4)]
        bad = wire.send("Sf", queue_id=77)
        got = await merged(peer, RequestCode.SEND_MESSAGE_V2, [*kids[:2], bad, *kids[2:]])
        assert [r.code for r in got] == [0, 0, ResponseCode.INVALID_PARAMETER, 0, 0]
        assert [r.ext_fields.get("queueId") for r in got] == ["0", "1", None, "2", "3"]
        assert c.brokers[0].store.flusher is not None
        flushed = c.brokers[0].store.flusher.flushed_offset
        assert flushed >= c.brokers[0].store.commitlog.max_offset


# ---------------------------------------------------------------- pulls


def pulls(topic: str, queues: list[int], *, suspend_ms: int = 0, offset: int = 0,
          flags: int = 0, **kw: Any) -> list[RemotingCommand]:
    flag = flags | (wire.PULL_SUSPEND if suspend_ms else 0)
    return [wire.pull(topic, q, offset, sys_flag=flag, suspend_ms=suspend_ms, **kw)
            for q in queues]


async def test_a_pull_answers_at_once_when_any_child_has_data(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    await peer.ok(wire.send(topic, b"only", queue_id=6))
    await wire.dispatched(cluster.brokers[0])
    t0 = time.monotonic()
    got = await merged(peer, RequestCode.PULL_MESSAGE, pulls(topic, [0, 6, 3],
                                                             suspend_ms=10_000))
    assert time.monotonic() - t0 < 5
    assert [r.code for r in got] == [ResponseCode.PULL_NOT_FOUND, 0,
                                     ResponseCode.PULL_NOT_FOUND]
    assert [m.body for m in decode_messages(got[1].full_body())] == [b"only"]
    assert got[1].ext_fields["nextBeginOffset"] == "1"


async def test_a_held_parent_is_woken_by_any_child_queue(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    assert broker.batch is not None
    parent = asyncio.ensure_future(merged(peer, RequestCode.PULL_MESSAGE,
                                          pulls(topic, [0, 1, 2, 3], suspend_ms=20_000)))
    await until(lambda: broker.batch is not None and broker.batch.holds.held_count == 1)
    assert not parent.done()
    t0 = time.monotonic()
    async with Peer(broker.broker_addr) as other:
        await other.ok(wire.send(topic, b"wake", queue_id=2))
    got = await asyncio.wait_for(parent, 5)
    assert time.monotonic() - t0 < 5
    assert [r.code for r in got] == [19, 19, 0, 19]
    assert [m.body for m in decode_messages(got[2].full_body())] == [b"wake"]
    assert broker.batch.holds.held_count == 0 and broker.batch.holds.woken == 1


async def test_a_held_parent_times_out_with_each_childs_not_found(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    t0 = time.monotonic()
    got = await merged(peer, RequestCode.PULL_MESSAGE,
                       pulls(topic, [0, 1], suspend_ms=300, offset=0))
    assert time.monotonic() - t0 >= 0.25
    assert [r.code for r in got] == [ResponseCode.PULL_NOT_FOUND] * 2
    assert [r.ext_fields["nextBeginOffset"] for r in got] == ["0", "0"]
    batch = cluster.brokers[0].batch
    assert batch is not None and batch.holds.expired == 1


async def test_a_failing_child_is_answered_without_holding(peer: Peer, topic: str) -> None:
    kids = pulls(topic, [0], suspend_ms=20_000) + pulls("NoSuchTopic", [0], suspend_ms=20_000)
    got = await merged(peer, RequestCode.PULL_MESSAGE, kids, timeout=5)
    assert [r.code for r in got] == [ResponseCode.PULL_NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST]


async def test_a_pull_child_answered_later_is_waited_for_without_a_hold(
        peer: Peer, topic: str, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor may answer later through the connection (a logical-queue pull forwarded
    to another broker does): the parent waits for that child and is not held."""
    batch = cluster.brokers[0].batch
    assert batch is not None
    real = batch._chain(RequestCode.PULL_MESSAGE)
    assert real is not None

    def late(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        resp = real(conn, cmd)
        if cmd.ext_fields["queueId"] != "1":
            return resp  # type: ignore[return-value]
        asyncio.get_running_loop().call_later(0.05, conn.send_response, resp)
        return None

    monkeypatch.setattr(batch, "_pull_processor", None)  # every child runs the chain
    monkeypatch.setattr(batch, "_chain", lambda code: late)
    t0 = time.monotonic()
    got = await merged(peer, RequestCode.PULL_MESSAGE, pulls(topic, [0, 1, 2],
                                                             suspend_ms=10_000))
    assert time.monotonic() - t0 < 5
    assert [(r.code, r.opaque) for r in got] == [(19, 1), (19, 2), (19, 3)]
    assert batch.holds.held_count == 0


async def test_a_closed_connection_drops_its_held_parent(topic: str, cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    assert broker.batch is not None
    peer = Peer(broker.broker_addr)
    parent = asyncio.ensure_future(peer(encode_batch_request(
        RequestCode.PULL_MESSAGE, pulls(topic, [0, 1], suspend_ms=20_000)), 30))
    await until(lambda: broker.batch is not None and broker.batch.holds.held_count == 1)
    await peer.close()
    with pytest.raises(ConnectionLost):
        await parent
    await until(lambda: broker.batch is not None and broker.batch.holds.held_count == 0)


async def test_the_pull_budget_stops_reading_and_asks_for_a_retry(
        peer: Peer, topic: str, cluster: Cluster) -> None:
    for q in range(4):
        await peer.ok(wire.send_batch(topic, [(b"x" * 10, wire.props())] * 5, queue_id=q))
    await wire.dispatched(cluster.brokers[0])
    parent = encode_batch_request(RequestCode.PULL_MESSAGE, pulls(topic, [0, 1, 2, 3]))
    parent.ext_fields["maxMsgNums"] = "7"  # total over all children
    resp = await peer(parent)
    got = decode_batch_response(resp, [1, 2, 3, 4])
    counts = [len(decode_messages(r.full_body())) if r.code == 0 else 0 for r in got]
    assert sum(counts) == 7
    retried = [r for r in got if r.code == ResponseCode.PULL_RETRY_IMMEDIATELY]
    assert retried and all(r.ext_fields["nextBeginOffset"] == "0" for r in retried)


async def test_pulled_records_go_out_as_store_memoryviews(
        peer: Peer, topic: str, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    await peer.ok(wire.send(topic, b"zero-copy", queue_id=4))
    await wire.dispatched(broker)
    [conn] = broker.server.connections
    sent: list[RemotingCommand] = []
    original = conn.send_response

    def spy(cmd: RemotingCommand) -> bool:
        sent.append(cmd)
        return original(cmd)

    monkeypatch.setattr(conn, "send_response", spy)
    got = await merged(peer, RequestCode.PULL_MESSAGE, pulls(topic, [4, 5]))
    assert got[0].code == 0
    [parent] = [c for c in sent if c.remark == MERGED_REMARK]
    assert parent.body_parts is not None
    views = [p for p in parent.body_parts if isinstance(p, memoryview)]
    assert views and all(b"zero-copy" in bytes(v) for v in views)


async def test_pull_children_commit_their_offset_once(peer: Peer, topic: str,
                                                      cluster: Cluster) -> None:
    await _fill(peer, cluster, topic, {0: 4, 1: 9})  # a commit may not pass the queue
    kids = pulls(topic, [0, 1], suspend_ms=200, flags=wire.PULL_COMMIT)
    for kid, off in zip(kids, (4, 9), strict=True):
        kid.ext_fields["commitOffset"] = str(off)
        kid.ext_fields["queueOffset"] = str(off)  # at the end: held, then run again
    await merged(peer, RequestCode.PULL_MESSAGE, kids)
    broker: BrokerApp = cluster.brokers[0]
    assert broker.committed_offset("cg", topic, 0) == 4
    assert broker.committed_offset("cg", topic, 1) == 9
