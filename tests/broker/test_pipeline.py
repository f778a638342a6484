"""The request pipeline over real TCP: an interceptor given to the broker sees every
request -- single, batch-protocol child (standard and shared forms, sends, pulls and
offsets, a held parent woken and read again), logical-queue traffic -- exactly once, and
can refuse any of them, one batch child included, with a code and a remark."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import cast

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.logical import Segment, TopicMapping
from tidemq.broker.pipeline import Check, Handler, Pipeline
from tidemq.codec.batch_protocol import (
    MERGED_REMARK,
    decode_batch_response,
    encode_batch_request,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.shared_send import SendAnswer, decode_send_answers, encode_shared_send
from tidemq.errors import ResponseCode
from tidemq.net import Connection
from tidemq.testing import Cluster

SEND = RequestCode.SEND_MESSAGE_V2
PULL = RequestCode.PULL_MESSAGE
BATCH = RequestCode.BATCH_REQUEST
WATCHED = {SEND, RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE, PULL,
           RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET, BATCH}
#: What the refusing check looks at.
GATED = (SEND, RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE, PULL)


class Seen:
    """The counting interceptor: (code, what the request is about) for every request."""

    rewrites = False

    def __init__(self) -> None:
        self.counts: Counter[tuple[int, str]] = Counter()

    def wrap(self, code: int, proceed: Handler) -> Handler:
        if code not in WATCHED:
            return proceed

        def count(conn: Connection, request: RemotingCommand
                  ) -> Awaitable[RemotingCommand | None] | RemotingCommand | None:
            self.counts[(code, _about(request))] += 1
            return proceed(conn, request)

        return count

    def take(self) -> Counter[tuple[int, str]]:
        out, self.counts = self.counts, Counter()
        return out


def _about(request: RemotingCommand) -> str:
    ext = request.ext_fields
    if request.code == BATCH:
        return "parent"
    if request.code in (SEND, RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE):
        return bytes(request.body).decode(errors="replace")
    return f"{ext.get('topic')}/{ext.get('queueId')}"


def _deny(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
    """The shape of an ACL: sends of the body ``deny`` and anything on topic ``Secret``."""
    topic = request.ext_fields.get("topic") or request.ext_fields.get("b")
    if bytes(request.body) == b"deny" or topic == "Secret":
        return request.response(ResponseCode.NO_PERMISSION, f"denied: {topic}")
    return None


@pytest.fixture
async def seen() -> Seen:
    return Seen()


@pytest.fixture
async def broker(tmp_path: Path, seen: Seen) -> AsyncIterator[BrokerApp]:
    async with Cluster(tmp_path, brokers=0) as cluster:
        bc, sc = cluster.broker_config(0)
        app = BrokerApp(bc, sc, interceptors=[seen, Check(_deny, codes=GATED)])
        await app.start()
        cluster.brokers.append(app)  # stopped with the cluster
        yield app


@pytest.fixture
async def peer(broker: BrokerApp, seen: Seen) -> AsyncIterator[Peer]:
    async with Peer(broker.broker_addr) as p:
        await p.ok(wire.create_topic("Pt", 4))
        await p.ok(wire.create_topic("Secret", 4))
        seen.take()
        yield p


def _code(answer: SendAnswer | RemotingCommand) -> int:
    return answer.code if isinstance(answer, RemotingCommand) else ResponseCode.SUCCESS


async def merged(peer: Peer, code: int, children: list[RemotingCommand]
                 ) -> list[RemotingCommand]:
    resp = await peer(encode_batch_request(code, children))
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, MERGED_REMARK), resp.remark
    return decode_batch_response(resp, [c.opaque for c in children])


async def test_single_requests_are_seen_once(peer: Peer, seen: Seen) -> None:
    await peer.ok(wire.send("Pt", b"v2", queue_id=1))
    await peer.ok(wire.send("Pt", b"v1", code=RequestCode.SEND_MESSAGE, queue_id=1))
    batch = wire.send_batch("Pt", [(b"e", wire.props())] * 3, queue_id=2)
    await peer.ok(batch)
    await peer(wire.pull("Pt", 1))
    await peer.ok(wire.request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="cg",
                               topic="Pt", queueId=1, commitOffset=0))
    batch_body = bytes(batch.body)
    assert seen.take() == {
        (SEND, "v2"): 1, (RequestCode.SEND_MESSAGE, "v1"): 1,
        (RequestCode.SEND_BATCH_MESSAGE, batch_body.decode(errors="replace")): 1,
        (PULL, "Pt/1"): 1, (RequestCode.UPDATE_CONSUMER_OFFSET, "Pt/1"): 1}


async def test_batch_children_are_seen_once_each(peer: Peer, seen: Seen,
                                                 broker: BrokerApp) -> None:
    sends = [wire.send("Pt", f"s{q}".encode(), queue_id=q) for q in range(4)]
    assert [r.code for r in await merged(peer, SEND, sends)] == [ResponseCode.SUCCESS] * 4
    await wire.dispatched(broker)
    got = await merged(peer, PULL, [wire.pull("Pt", q) for q in range(4)])
    assert [r.code for r in got] == [ResponseCode.SUCCESS] * 4
    offsets = [wire.request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg",
                            topic="Pt", queueId=q) for q in (0, 1)]
    await merged(peer, RequestCode.QUERY_CONSUMER_OFFSET, offsets)
    shared = encode_shared_send(RemotingCommand.request(SEND, dict(sends[0].ext_fields)), [
        (0, 0, 1, 0, b"", b"x0"), (1, 0, 1, 0, b"", b"x1")])
    resp = await peer(shared)
    assert [_code(a) for a in decode_send_answers(resp.full_body(), 2)] == [0, 0]
    assert seen.take() == {
        (BATCH, "parent"): 4,
        **{(SEND, f"s{q}"): 1 for q in range(4)},
        **{(PULL, f"Pt/{q}"): 1 for q in range(4)},
        **{(RequestCode.QUERY_CONSUMER_OFFSET, f"Pt/{q}"): 1 for q in (0, 1)},
        (SEND, "x0"): 1, (SEND, "x1"): 1}


async def test_a_held_parent_read_again_is_not_seen_again(peer: Peer, seen: Seen,
                                                          broker: BrokerApp) -> None:
    kids = [wire.pull("Pt", q, sys_flag=wire.PULL_SUSPEND, suspend_ms=20_000) for q in (0, 3)]
    parent = asyncio.ensure_future(merged(peer, PULL, kids))
    assert broker.batch is not None
    for _ in range(500):
        if broker.batch.holds.held_count:
            break
        await asyncio.sleep(0.01)
    assert broker.batch.holds.held_count == 1
    await peer.ok(wire.send("Pt", b"wake", queue_id=3))
    got = await asyncio.wait_for(parent, 10)
    assert [r.code for r in got] == [ResponseCode.PULL_NOT_FOUND, ResponseCode.SUCCESS]
    assert seen.take() == {(BATCH, "parent"): 1, (PULL, "Pt/0"): 1, (PULL, "Pt/3"): 1,
                           (SEND, "wake"): 1}


async def test_logical_queue_traffic_is_seen_once(peer: Peer, seen: Seen,
                                                  broker: BrokerApp) -> None:
    mapping = TopicMapping("Lq", 1, {lq: (Segment("broker-a", lq, 0),) for lq in (0, 1)})
    await peer.ok(wire.request(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING,
                               json.dumps(mapping.to_json()).encode()))
    resp = await peer.ok(wire.send("Lq", b"l1", queue_id=1))
    assert resp.ext_fields["queueId"] == "1"
    got = await merged(peer, SEND, [wire.send("Lq", b"l0", queue_id=0)])
    assert got[0].code == ResponseCode.SUCCESS
    await wire.dispatched(broker)
    assert (await peer.ok(wire.pull("Lq", 1))).code == ResponseCode.SUCCESS
    assert [r.code for r in await merged(peer, PULL, [wire.pull("Lq", 0)])] == [0]
    assert seen.take() == {(SEND, "l1"): 1, (SEND, "l0"): 1, (BATCH, "parent"): 2,
                           (PULL, "Lq/1"): 1, (PULL, "Lq/0"): 1}


async def test_an_interceptor_refuses_requests_and_single_children(
        peer: Peer, broker: BrokerApp) -> None:
    resp = await peer(wire.send("Secret", b"hi"))
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "denied: Secret")
    got = await merged(peer, SEND, [wire.send("Pt", b"ok", queue_id=0),
                                    wire.send("Pt", b"deny", queue_id=0),
                                    wire.send("Secret", b"ok", queue_id=0)])
    assert [(r.code, r.remark) for r in got] == [
        (ResponseCode.SUCCESS, None), (ResponseCode.NO_PERMISSION, "denied: Pt"),
        (ResponseCode.NO_PERMISSION, "denied: Secret")]
    template = RemotingCommand.request(SEND, dict(wire.send("Pt", b"").ext_fields))
    resp = await peer(encode_shared_send(template, [(0, 0, 1, 0, b"", b"a"),
                                                    (0, 0, 1, 0, b"", b"deny")]))
    answers = decode_send_answers(resp.full_body(), 2)
    assert [_code(a) for a in answers] == [ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION]
    await wire.dispatched(broker)
    got = await merged(peer, PULL, [wire.pull("Pt", 0), wire.pull("Secret", 0)])
    assert [r.code for r in got] == [ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION]
    # Refused before the handler: nothing of them was stored.
    assert await peer.max_offset("Secret", 0) == 0
    assert await peer.max_offset("Pt", 0) == 2


def test_interceptors_wrap_outermost_first() -> None:
    order: list[str] = []

    class Tag:
        rewrites = False

        def __init__(self, name: str) -> None:
            self.name = name

        def wrap(self, code: int, proceed: Handler) -> Handler:
            def tagged(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
                order.append(self.name)
                return proceed(conn, request)  # type: ignore[return-value]
            return tagged

    pipeline = Pipeline()
    pipeline.register(7, lambda conn, request: order.append("handler"))  # type: ignore[func-returns-value]
    pipeline.intercept(Tag("a"), Tag("b"))
    chain = pipeline.compose(7, pipeline.handler(7))  # type: ignore[arg-type]
    chain(None, RemotingCommand.request(7))  # type: ignore[arg-type]
    assert order == ["a", "b", "handler"]


async def test_shared_children_let_through_late_are_stored(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=0) as cluster:
        bc, sc = cluster.broker_config(0)
        app = BrokerApp(bc, sc, interceptors=[wire.LetThroughLater([SEND])])
        await app.start()
        cluster.brokers.append(app)
        async with Peer(app.broker_addr) as peer:
            await peer.ok(wire.create_topic("Pl", 4))
            template = RemotingCommand.request(SEND, dict(wire.send("Pl", b"").ext_fields))
            resp = await peer(encode_shared_send(template, [(0, 0, 1, 0, b"", b"a"),
                                                            (0, 0, 1, 0, b"", b"b"),
                                                            (9, 0, 1, 0, b"", b"c")]))
            answers = decode_send_answers(resp.full_body(), 3)
            assert [_code(a) for a in answers] == [
                ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.INVALID_PARAMETER]
            assert [a.queue_offset for a in answers[:2]] == [0, 1]  # type: ignore[union-attr]
            await wire.dispatched(app)  # the consume queue is written by the dispatch thread
            assert await peer.max_offset("Pl", 0) == 2


class _Clearing(Seen):
    """The counting interceptor, clearing (or not) a shared send parent's children of
    topic ``Pt`` at once; ``asked`` counts the questions."""

    def __init__(self, answer: bool) -> None:
        super().__init__()
        self.answer = answer
        self.asked = 0

    def clears(self, code: int, conn: Connection, template: RemotingCommand) -> bool:
        self.asked += 1
        return self.answer and template.ext_fields.get("b") == "Pt"


def test_clears_asks_only_the_interceptors_that_wrap_the_code() -> None:
    class Leaves:
        rewrites = False

        def wrap(self, code: int, proceed: Handler) -> Handler:
            return proceed

    pipeline = Pipeline()
    pipeline.register(SEND, lambda conn, request: None)
    template = RemotingCommand.request(SEND, {"b": "Pt"})
    conn = cast(Connection, None)
    assert pipeline.clears(SEND, conn, template)  # no interceptor
    yes, no = _Clearing(True), _Clearing(False)
    pipeline.intercept(Leaves(), yes)
    assert pipeline.clears(SEND, conn, template)
    assert not pipeline.clears(SEND, conn, RemotingCommand.request(SEND, {"b": "Other"}))
    pipeline.intercept(no)
    assert not pipeline.clears(SEND, conn, template)
    pipeline.intercept(Check(_deny, codes=GATED))  # a Check decides per request
    no.answer = True
    assert not pipeline.clears(SEND, conn, template)
    assert pipeline.clears(RequestCode.GET_MAX_OFFSET, conn, template)  # nobody wraps it


@pytest.mark.parametrize("answer", [True, False])
async def test_shared_children_cleared_at_once_are_not_seen_one_by_one(
        tmp_path: Path, answer: bool) -> None:
    """An interceptor that clears a shared send parent's children does not see them one
    by one; one that does not sees each (and could refuse it). Either way every child is
    stored and answered the same."""
    gate = _Clearing(answer)
    async with Cluster(tmp_path, brokers=0) as cluster:
        bc, sc = cluster.broker_config(0)
        app = BrokerApp(bc, sc, interceptors=[gate])
        await app.start()
        cluster.brokers.append(app)
        async with Peer(app.broker_addr) as peer:
            await peer.ok(wire.create_topic("Pt", 4))
            gate.take()
            template = RemotingCommand.request(SEND, dict(wire.send("Pt", b"").ext_fields))
            resp = await peer(encode_shared_send(template, [
                (0, 0, 1, 0, b"", b"a"), (0, 0, 1, 0, b"TAGS\x01t\x02", b"b"),
                (9, 0, 1, 0, b"", b"c"), (0, 0, 1, -1, b"", b"d")]))
            answers = decode_send_answers(resp.full_body(), 4)
            assert [_code(a) for a in answers] == [
                ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.INVALID_PARAMETER,
                ResponseCode.SUCCESS]
            assert [a.queue_offset for a in answers if isinstance(a, SendAnswer)] == [0, 1, 2]
            # A child whose numbers are not plain (flag -1) runs the chain either way.
            assert gate.take() == ({(BATCH, "parent"): 1, (SEND, "d"): 1} if answer else
                                   {(BATCH, "parent"): 1, (SEND, "a"): 1, (SEND, "b"): 1,
                                    (SEND, "c"): 1, (SEND, "d"): 1})
            assert gate.asked == 1
            await wire.dispatched(app)
            assert await peer.max_offset("Pt", 0) == 3
