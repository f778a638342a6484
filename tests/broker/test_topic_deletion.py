"""A send to a topic whose deletion is under way is refused (TOPIC_NOT_EXIST), though
sends create topics (autoCreateTopicEnable), and so is an admin creation: no message is
stored above the deletion's mark into queues the deletion then removes or leaves behind,
to be acknowledged and never read. Once the deletion is answered, a send creates the
topic again from offset 0."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.broker import wire
from tests.broker.delivery import send_back, stored
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.client.logical_admin import plan_create
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.formats.logical_mapping import TopicMapping
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


async def test_a_mapping_change_while_a_logical_topic_is_deleted_does_not_create_it_again(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """A logical-queue mapping pushed while its topic's deletion is under way registered
    the topic again: a send was then stored above the deletion's mark, answered, and
    removed with the queue. The topic stays out of the table until the deletion is
    answered, and a send meanwhile is refused."""
    broker = cluster.brokers[0]
    mapping = plan_create("Lq", 1, [broker.config.broker_name])
    await peer.ok(_push(mapping))
    await peer.ok(wire.send("Lq", b"old"))
    slow_writes(monkeypatch, topics_module, held)  # step 2, after the mark, held
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Lq")))
        await held.entered_soon()
        await peer.ok(_push(mapping.replace(0, mapping.queues[0], mapping.epoch + 1)))
        assert broker.topics.get("Lq") is None
        sent = await peer(wire.send("Lq", b"during"))
        assert sent.code == ResponseCode.TOPIC_NOT_EXIST, sent.remark
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    assert broker.store.topics().get("Lq") is None  # no queue left behind


async def test_each_writer_answers_the_stores_refusal_in_its_own_terms(
        cluster: Cluster, peer: Peer) -> None:
    """The store refuses a topic's puts while it is deleted, whatever the topic table
    says: a send (single or batch) is answered TOPIC_NOT_EXIST, a send-back into the
    group's DLQ SYSTEM_ERROR, as while the deletion removes them from the table."""
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("Held", 1))
    original = await stored(peer, "Held")
    await peer.ok(send_back(original.commit_log_offset, "g", -1))  # creates %DLQ%g
    for topic in ("Held", "%DLQ%g"):
        broker.store.refuse_topic(topic, "a test holds it")
    end = broker.store.commitlog.max_offset
    for cmd in (wire.send("Held", b"x"), wire.send_batch("Held", [(b"a", ""), (b"b", "")])):
        sent = await peer(cmd)
        assert (sent.code, sent.remark) == (ResponseCode.TOPIC_NOT_EXIST,
                                            "topic[Held] not exist, apply first please!")
    back = await peer(send_back(original.commit_log_offset, "g", -1))
    assert back.code == ResponseCode.SYSTEM_ERROR
    assert "topic %DLQ%g is being deleted" in (back.remark or "")
    assert broker.store.commitlog.max_offset == end  # nothing stored
    broker.store.admit_topic("Held")
    sent = await peer.ok(wire.send("Held", b"after"))
    assert sent.ext_fields["queueOffset"] == "1"


def _push(mapping: TopicMapping) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {},
                                   json.dumps(mapping.to_json()).encode())
