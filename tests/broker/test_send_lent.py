"""Sends read their bodies in the connection's receive buffer (lent bodies, not copied out
of it): many requests pipelined into few writes -- uniform and mixed outer batches, single
sends, inner batches -- each read after others that reuse the buffer, store exactly the
bytes sent; and a send to a logical queue, which may be forwarded or held after the
buffer is reused, keeps a copy of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.codes import SEND_CODES
from tidemq.client import AdminClient
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import FrameDecoder, frame_bytes
from tidemq.codec.message import decode_messages
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.testing import Cluster

ROUNDS = 40


def _body(tag: str, i: int, size: int) -> bytes:
    return (f"{tag}{i:07d}".encode() * (size // 8 + 1))[:size]


async def _pipelined(addr: str, cmds: list[RemotingCommand], writes: int
                     ) -> list[RemotingCommand]:
    """Write ``cmds`` over one raw connection in ``writes`` writes without waiting, then
    read every answer; the answers in request order."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        frames = []
        for opaque, cmd in enumerate(cmds, 1):
            cmd.opaque = opaque
            frames.append(frame_bytes(cmd))
        step = -(-len(frames) // writes)
        for at in range(0, len(frames), step):
            writer.write(b"".join(frames[at : at + step]))
        await writer.drain()
        decoder = FrameDecoder()
        answers: dict[int, RemotingCommand] = {}
        while len(answers) < len(cmds):
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            assert chunk, "the broker closed the connection"
            decoder.receive_data(chunk)
            while (answer := decoder.next_command()) is not None:
                answers[answer.opaque] = answer
        return [answers[opaque] for opaque in range(1, len(cmds) + 1)]
    finally:
        writer.close()
        await writer.wait_closed()


async def _bodies(peer: Peer, topic: str, queue_id: int, count: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while len(out) < count:
        resp = await peer.ok(wire.pull(topic, queue_id, offset, max_nums=32))
        msgs = decode_messages(resp.full_body())
        assert msgs, f"{topic}/{queue_id} ends at {offset}, {count} messages expected"
        out += [m.body for m in msgs]
        offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def test_pipelined_sends_store_the_bytes_sent(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("Lent", 4))
    await peer.ok(wire.create_topic("LentInner", 1, attributes="+queue.type=BatchCQ"))
    cmds: list[RemotingCommand] = []
    uniform: list[bytes] = []
    mixed: list[bytes] = []
    singles: list[bytes] = []
    inner: list[bytes] = []
    for r in range(ROUNDS):
        bodies = [_body("u", r * 100 + i, 128) for i in range(100)]
        uniform += bodies
        cmds.append(wire.send_batch("Lent", [(b, wire.props()) for b in bodies], queue_id=0))
        bodies = [_body("m", r * 10 + i, 16 + 37 * i) for i in range(10)]
        mixed += bodies
        cmds.append(wire.send_batch("Lent", [(b, wire.props(tags=f"t{i}"))
                                             for i, b in enumerate(bodies)], queue_id=1))
        singles.append(_body("s", r, 300))
        cmds.append(wire.send("Lent", singles[-1], queue_id=2, properties=wire.props()))
        bodies = [_body("i", r * 20 + i, 64) for i in range(20)]
        inner += bodies
        cmd = wire.send_batch("LentInner", [], queue_id=0)
        cmd.body = encode_batch([(b, encode_properties({"UNIQ_KEY": wire.uniq_key()}), 0)
                                 for b in bodies])
        cmd.ext_fields["i"] = encode_properties({"UNIQ_KEY": wire.uniq_key()}).decode()
        cmds.append(cmd)
    answers = await _pipelined(cluster.brokers[0].broker_addr, cmds, writes=3)
    assert [(a.code, a.remark) for a in answers] == [(0, None)] * len(cmds)
    await wire.dispatched(cluster.brokers[0])
    assert await _bodies(peer, "Lent", 0, len(uniform)) == uniform
    assert await _bodies(peer, "Lent", 1, len(mixed)) == mixed
    assert await _bodies(peer, "Lent", 2, len(singles)) == singles
    assert await _bodies(peer, "LentInner", 0, len(inner)) == inner


async def test_pipelined_sends_through_a_logical_queue_keep_their_bodies(
        cluster: Cluster) -> None:
    """The gateway forwards each send to the segment's broker after it has read on:
    the forwarded body is its own copy."""
    async with AdminClient(cluster.namesrv_addr) as admin:
        mapping = await LogicalQueueAdmin(admin).create("LentLogical", 1, ["broker-b"])
    segment = mapping.leader(0)
    assert segment is not None and segment.broker == "broker-b"
    gateway, holder = cluster.brokers
    assert gateway.logical_processor.lqs.get("LentLogical") is not None
    sent = [_body("l", i, 2000) for i in range(200)]
    ext = {"producerGroup": "plain", "topic": "LentLogical", "defaultTopic": "TBW102",
           "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
           "bornTimestamp": "0", "flag": "0"}
    cmds = [RemotingCommand.request(RequestCode.SEND_MESSAGE, dict(ext), body)
            for body in sent]
    answers = await _pipelined(gateway.broker_addr, cmds, writes=4)
    assert [(a.code, a.remark) for a in answers] == [(0, None)] * len(cmds)
    # forwarded sends may overtake each other: each answer names where its body is
    at = {int(a.ext_fields["queueOffset"]): body for a, body in zip(answers, sent, strict=True)}
    assert sorted(at) == list(range(len(sent)))
    await wire.dispatched(holder)
    async with Peer(holder.broker_addr) as peer:
        stored = await _bodies(peer, "LentLogical", segment.queue_id, len(sent))
    assert stored == [at[offset] for offset in range(len(sent))]


async def test_sends_an_interceptor_lets_through_later_store_the_bytes_sent(
        tmp_path: Path) -> None:
    """A lent body is valid only during the call: a send that a processor or interceptor
    defers is given its own copy before the connection reads on."""
    async with Cluster(tmp_path, brokers=0) as cluster:
        bc, sc = cluster.broker_config(0)
        app = BrokerApp(bc, sc, interceptors=[wire.LetThroughLater(SEND_CODES, turns=3)])
        await app.start()
        cluster.brokers.append(app)
        async with Peer(app.broker_addr) as peer:
            await peer.ok(wire.create_topic("LentLater", 1))
            sent = [_body("d", i, 1000) for i in range(300)]
            cmds = [wire.send("LentLater", body, queue_id=0, properties=wire.props())
                    for body in sent]
            answers = await _pipelined(app.broker_addr, cmds, writes=30)
            assert [(a.code, a.remark) for a in answers] == [(0, None)] * len(cmds)
            at = {int(a.ext_fields["queueOffset"]): body
                  for a, body in zip(answers, sent, strict=True)}
            await wire.dispatched(app)
            stored = await _bodies(peer, "LentLater", 0, len(sent))
        assert stored == [at[offset] for offset in range(len(sent))]
