"""A send to a topic whose deletion is under way is refused (TOPIC_NOT_EXIST), though
sends create topics (autoCreateTopicEnable), and so is an admin creation: no message is
stored above the deletion's mark into queues the deletion then removes or leaves behind,
to be acknowledged and never read. Once the deletion is answered, a send creates the
topic again from offset 0."""

from __future__ import annotations

import asyncio

import pytest
from tests.broker import wire
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster


async def test_a_send_while_its_topic_is_deleted_is_refused_not_lost(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Gone", 1))
    for i in range(3):
        await peer.ok(wire.send("Gone", b"old%d" % i))
    slow_writes(monkeypatch, topics_module, held)  # step 2, after the mark, held
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone")))
        await held.entered_soon()
        assert "Gone" in broker.store.topic_deletion_marks()
        sent = await peer(wire.send("Gone", b"during"))
        assert sent.code == ResponseCode.TOPIC_NOT_EXIST, sent.remark
        created = await peer(wire.create_topic("Gone", 1))
        assert created.code == ResponseCode.SYSTEM_ERROR
        assert "being deleted" in (created.remark or "")
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    assert broker.topics.get("Gone") is None
    assert broker.store.topics().get("Gone") is None  # no queue left behind
    sent = await peer.ok(wire.send("Gone", b"after"))  # created again by the send
    assert sent.ext_fields["queueOffset"] == "0"
    await wire.dispatched(broker)
    assert [m.body for m in await peer.messages("Gone")] == [b"after"]
