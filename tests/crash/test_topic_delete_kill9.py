"""DELETE_TOPIC_IN_BROKER (and DELETE_LMQ) and kill -9: a ``tidemq broker`` process
killed after the delete was answered, or stopped for good at a step of the delete
(:mod:`stop_at`) and killed there, is started again on the same store.

A delete that was answered stays done. One that was cut off is done all the same once it
began (as Kafka marks a topic deleted first and removes its files after): the topic is
not listed, its queues and consumer offsets are gone, and a topic created again under the
name starts at offset 0 -- never the topic listed with its queues emptied, nor its old
messages or offsets back. A topic the broker never deleted keeps every message. The
same holds for an LMQ: deleted, it stays deleted; created again, it starts at 0.

The checkpoint is not written while the broker runs (``flushIntervalConsumeQueue``), so
each start dispatches the whole commit log again, the deleted topic's records with it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.codec.command import RequestCode
from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess

GONE, KEPT = "Gone", "Kept"
QUEUES = 2
PER_QUEUE = 5
SETTINGS = {"mappedFileSizeCommitLog": SMALL_SEGMENT, "flushIntervalConsumeQueue": "3600000",
            "flushConsumerOffsetInterval": "3600000"}


async def _fill(addr: str, attributes: str | None = None) -> None:
    """Both topics with messages, and group ``cg`` reset to their ends (written before
    the reset is answered)."""
    async with Peer(addr) as peer:
        await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                   json.dumps({"groupName": "cg"}).encode()))
        for topic in (GONE, KEPT):
            await peer.ok(wire.create_topic(topic, QUEUES, attributes=attributes))
            for queue_id in range(QUEUES):
                for n in range(PER_QUEUE):
                    await peer.ok(wire.send(topic, f"{topic}{queue_id}.{n}".encode(),
                                            queue_id=queue_id))
            await peer.ok(wire.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic=topic,
                                       group="cg", timestamp=-1, isForce="true"))


async def _delete(addr: str) -> None:
    async with Peer(addr) as peer:
        await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic=GONE))


async def _delete_until_stopped(broker: BrokerProcess) -> str:
    """The delete, cut off where the broker stops (never answered): the step."""
    async with Peer(broker.addr) as peer:
        request = asyncio.ensure_future(peer(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic=GONE), timeout=120))
        step = await asyncio.to_thread(broker.stopped, 60)
        assert not request.done(), "the delete was answered before the step"
        broker.kill9()
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
    return step


async def _check_deleted(root: Path, addr: str, attributes: str | None = None) -> None:
    async with Peer(addr) as peer:
        table = json.loads((await peer.ok(wire.request(
            RequestCode.GET_ALL_TOPIC_CONFIG))).full_body())["topicConfigTable"]
        assert GONE not in table, "the deleted topic is listed again"
        assert KEPT in table
        for queues in ("consumequeue", "batchconsumequeue"):
            assert not (root / queues / GONE).exists(), "the deleted topic's queues"
        for queue_id in range(QUEUES):
            kept = await collect(peer, KEPT, PER_QUEUE, queue_id=queue_id)
            assert [m.body for m in kept] == [f"{KEPT}{queue_id}.{n}".encode()
                                             for n in range(PER_QUEUE)]
            offset = await peer.ok(wire.request(
                RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg", topic=KEPT,
                queueId=queue_id))
            assert offset.ext_fields["offset"] == str(PER_QUEUE)
        await peer.ok(wire.create_topic(GONE, QUEUES, attributes=attributes))  # starts over
        for queue_id in range(QUEUES):
            assert await peer.max_offset(GONE, queue_id) == 0
            committed = await peer(wire.request(
                RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg", topic=GONE,
                queueId=queue_id))
            assert committed.code != 0, f"cg's old offset {committed.ext_fields} is back"
        await peer.ok(wire.send(GONE, b"new"))
        [new] = await collect(peer, GONE, 1)  # once dispatched
        assert (new.body, new.queue_offset) == (b"new", 0)


@pytest.mark.parametrize("attributes", [None, "+queue.type=BatchCQ"],
                         ids=["SimpleCQ", "BatchCQ"])
def test_an_answered_delete_stays_done_after_kill9(
        tmp_path: Path, namesrv: NameServerApp, attributes: str | None) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    broker.start()
    try:
        asyncio.run(_fill(broker.addr, attributes))
        asyncio.run(_delete(broker.addr))
        broker.kill9()
        broker.start()
        asyncio.run(_check_deleted(tmp_path / "store", broker.addr, attributes))
    finally:
        broker.kill9()


#: Steps of a delete, in order: the deletion marked in the store; the topic table written
#: and the consumer offsets dropped (not written yet); a queue's files removed, the
#: other's not; every queue removed, before the name servers are told and the answer.
STEPS = ("tidemq.store.message_store:MessageStore.begin_delete_topic",
         "tidemq.broker.offsets:OffsetManager.delete_topic",
         "tidemq.store.queues:ConsumeQueueSet.remove",
         "tidemq.store.message_store:MessageStore.delete_topic")


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.rpartition(".")[2])
def test_a_delete_cut_off_by_kill9_is_finished_at_start(
        tmp_path: Path, namesrv: NameServerApp, step: str) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    broker.stop_after(step)
    broker.start()
    try:
        asyncio.run(_fill(broker.addr))
        assert asyncio.run(_delete_until_stopped(broker)) == step
        broker.stop_after(None)
        broker.start()
        asyncio.run(_check_deleted(tmp_path / "store", broker.addr))
    finally:
        broker.kill9()


async def _lmq_fill_and_delete(addr: str) -> None:
    """Messages of Parent fanned out to two LMQs; LMQ x deleted (answered)."""
    async with Peer(addr) as peer:
        await peer.ok(wire.create_topic("Parent", 1))
        for n in range(PER_QUEUE):
            await peer.ok(wire.send("Parent", b"p%d" % n, properties=wire.props(
                INNER_MULTI_DISPATCH="%LMQ%x,%LMQ%y")))
        await peer.ok(wire.request(RequestCode.DELETE_LMQ, lmq="%LMQ%x"))


async def _lmq_check(addr: str) -> None:
    async with Peer(addr) as peer:
        assert await peer.max_offset("%LMQ%x") == 0, "the deleted LMQ is back"
        kept = await collect(peer, "%LMQ%y", PER_QUEUE)
        assert [m.body for m in kept] == [b"p%d" % n for n in range(PER_QUEUE)]
        await peer.ok(wire.send("Parent", b"new", properties=wire.props(
            INNER_MULTI_DISPATCH="%LMQ%x")))
        [new] = await collect(peer, "%LMQ%x", 1)  # at LMQ offset 0, once dispatched
        assert (new.body, await peer.max_offset("%LMQ%x")) == (b"new", 1)


def test_an_answered_lmq_delete_stays_done_after_kill9(tmp_path: Path,
                                                        namesrv: NameServerApp) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, {
        **SETTINGS, "enableLmq": "true", "enableMultiDispatch": "true"})
    broker.start()
    try:
        asyncio.run(_lmq_fill_and_delete(broker.addr))
        broker.kill9()
        broker.start()
        asyncio.run(_lmq_check(broker.addr))
    finally:
        broker.kill9()
