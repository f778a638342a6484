"""BATCH_REQUEST's shared-header pull form against a live broker: the same answers as
standard children, holds, budgets, errors, and the offer that negotiates it."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    CHILD_FORMS_KEY,
    MERGED_REMARK,
    SHARED_FORM,
    decode_batch_response,
    encode_batch_request,
    encode_shared_request,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

PULL = RequestCode.PULL_MESSAGE


@pytest.fixture
async def topic(peer: Peer, cluster: Cluster) -> str:
    await peer.ok(wire.create_topic("Bs", 8))
    for qid, count in ((1, 3), (5, 1), (2, 40)):
        for i in range(count):
            await peer.ok(wire.send("Bs", f"{qid}:{i}".encode(), queue_id=qid))
    await wire.dispatched(cluster.brokers[0])
    return "Bs"


async def shared(peer: Peer, template: RemotingCommand, positions: list[tuple[int, int]],
                 timeout: float = 10.0, **ext: str) -> list[RemotingCommand]:
    parent = encode_shared_request(PULL, template, positions)
    parent.ext_fields.update(ext)
    resp = await peer(parent, timeout)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, MERGED_REMARK), resp.remark
    assert resp.ext_fields[CHILD_FORM_KEY] == SHARED_FORM
    return decode_batch_response(resp, range(1, len(positions) + 1))


async def standard(peer: Peer, children: list[RemotingCommand]) -> list[RemotingCommand]:
    resp = await peer(encode_batch_request(PULL, children))
    assert resp.code == ResponseCode.SUCCESS
    return decode_batch_response(resp, [c.opaque for c in children])


def view(r: RemotingCommand) -> tuple[object, ...]:
    return r.code, r.opaque, r.remark, r.ext_fields, r.full_body()


async def test_shared_children_get_what_standard_children_get(peer: Peer, topic: str) -> None:
    positions = [(0, 0), (1, 1), (5, 0), (2, 10), (1, 3), (1, 7), (9, 0), (-1, 0), (2, -4)]
    got = await shared(peer, wire.pull(topic, max_nums=4), positions)
    want = await standard(peer, [wire.pull(topic, q, o, max_nums=4) for q, o in positions])
    assert [view(r) for r in got] == [view(r) for r in want]
    assert [r.code for r in got[:4]] == [ResponseCode.PULL_NOT_FOUND, 0, 0, 0]
    assert [m.body for m in decode_messages(got[3].full_body())] == [
        f"2:{i}".encode() for i in range(10, 14)]
    assert got[7].code == ResponseCode.INVALID_PARAMETER  # queueId -1, as alone


async def test_a_bad_template_fails_every_child_as_alone(peer: Peer, topic: str) -> None:
    bad = wire.pull("NoSuchTopic")
    got = await shared(peer, bad, [(0, 0), (1, 0)])
    assert [r.code for r in got] == [ResponseCode.TOPIC_NOT_EXIST] * 2
    unparsable = wire.pull(topic)
    unparsable.ext_fields["maxMsgNums"] = "many"
    got = await shared(peer, unparsable, [(0, 0), (1, 0)])
    assert [r.code for r in got] == [ResponseCode.INVALID_PARAMETER] * 2


async def test_the_budget_is_shared_by_shared_children(peer: Peer, topic: str) -> None:
    got = await shared(peer, wire.pull(topic, max_nums=32), [(2, 0), (1, 0), (5, 0)],
                       maxMsgNums="5")
    found = [r for r in got if r.code == ResponseCode.SUCCESS]
    skipped = [r for r in got if r.code == ResponseCode.PULL_RETRY_IMMEDIATELY]
    assert found and skipped and len(found) + len(skipped) == 3
    assert sum(len(decode_messages(r.full_body())) for r in found) <= 5 + 3


async def test_a_held_shared_parent_is_woken_by_a_send(peer: Peer, topic: str,
                                                       cluster: Cluster) -> None:
    template = wire.pull(topic, sys_flag=wire.PULL_SUSPEND, suspend_ms=10_000)
    task = asyncio.ensure_future(shared(peer, template, [(3, 0), (4, 0)]))
    batch = cluster.brokers[0].batch
    assert batch is not None
    async with asyncio.timeout(5):
        while batch.holds.held_count == 0:  # parked when the parent arrives
            await asyncio.sleep(0.01)
    t0 = time.monotonic()
    await peer.ok(wire.send(topic, b"wake", queue_id=4))
    got = await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < 5
    assert [r.code for r in got] == [ResponseCode.PULL_NOT_FOUND, ResponseCode.SUCCESS]
    assert [m.body for m in decode_messages(got[1].full_body())] == [b"wake"]


async def test_a_standard_pull_parent_may_offer_the_form(peer: Peer, topic: str) -> None:
    parent = encode_batch_request(PULL, [wire.pull(topic, 0), wire.pull(topic, 1)])
    assert CHILD_FORMS_KEY not in (await peer(parent)).ext_fields
    parent = encode_batch_request(PULL, [wire.pull(topic, 0), wire.pull(topic, 1)])
    parent.ext_fields[CHILD_FORMS_KEY] = SHARED_FORM
    resp = await peer(parent)
    assert resp.ext_fields[CHILD_FORMS_KEY] == SHARED_FORM
    assert [r.code for r in decode_batch_response(resp, [1, 2])] == [
        ResponseCode.PULL_NOT_FOUND, ResponseCode.SUCCESS]


async def test_a_shared_form_the_broker_cannot_read_is_refused(peer: Peer, topic: str) -> None:
    parent = encode_shared_request(PULL, wire.pull(topic), [(0, 0), (1, 0)])
    parent.ext_fields[CHILD_FORM_KEY] = "other"
    resp = await peer(parent)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert "childForm" in (resp.remark or "")
    parent = encode_shared_request(PULL, wire.pull(topic), [(0, 0)])
    parent.body_parts = [*(parent.body_parts or []), b"\0" * 5]
    resp = await peer(parent)
    assert resp.code == ResponseCode.INVALID_PARAMETER


async def test_found_messages_are_counted_in_the_stats(peer: Peer, topic: str,
                                                       cluster: Cluster) -> None:
    stats = cluster.brokers[0].stats
    before = stats.get_msgs.total
    got = await shared(peer, wire.pull(topic, max_nums=4), [(1, 0), (2, 0), (0, 0)])
    found = sum(len(decode_messages(r.full_body())) for r in got)
    assert found == 3 + 4
    assert stats.get_msgs.total - before == found
    assert stats.group_get["cg"].total >= found
