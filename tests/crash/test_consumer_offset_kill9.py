"""A push consumer's commit that the broker answered but had not written yet -- the
broker killed -9 before its offset flush (``flushConsumerOffsetInterval`` is an hour
here) -- is back on the broker started again on the same store: the consumer, still
running and with nothing new to consume, sends its position again at its next round."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT
from tests.client.received import Received

from tidemq.client import ClientConfig, PushConsumer, PushOptions
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.codec.command import RequestCode
from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess

TOPIC = "Idle"
GROUP = "idle-c"
COUNT = 10
SETTINGS = {"mappedFileSizeCommitLog": SMALL_SEGMENT,
            "flushConsumerOffsetInterval": "3600000"}


async def _committed(addr: str) -> str | None:
    """The group's committed offset of the topic's queue, as the broker answers it."""
    async with Peer(addr) as peer:
        answer = await peer(wire.request(
            RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=0,
            setZeroIfNotFound="false"))
    return answer.ext_fields.get("offset") if answer.code == 0 else None


def _written(store: Path) -> int | None:
    """The group's offset of the topic's queue 0 in the offsets file the broker wrote
    (``None``: not written)."""
    path = store / "config" / "consumerOffset.json"
    if not path.exists():
        return None
    table = json.loads(path.read_text()).get("offsetTable", {})
    return {int(q): int(o) for q, o in table.get(f"{TOPIC}@{GROUP}", {}).items()}.get(0)


async def _until_committed(addr: str, offset: str, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while await _committed(addr) != offset:
            await asyncio.sleep(0.1)


async def test_a_commit_lost_to_kill9_comes_back_from_the_running_consumer(
        tmp_path: Path, namesrv: NameServerApp) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    await asyncio.to_thread(broker.start)
    received = Received(COUNT)

    consumer = PushConsumer(
        GROUP, listener=received.listener,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        config=ClientConfig(namesrv_addr=(namesrv.address,), pull_error_backoff=0.2,
                            long_polling_timeout=2.0),
        options=PushOptions(persist_consumer_offset_interval=0.5))
    try:
        async with Peer(broker.addr) as peer:
            await peer.ok(wire.create_topic(TOPIC, 1))
            for n in range(COUNT):
                await peer.ok(wire.send(TOPIC, b"m%d" % n))
        async with Peer(namesrv.address) as ns:
            await wire.eventually_route(ns, TOPIC, timeout=30)
        consumer.subscribe(TOPIC)
        await consumer.start()
        await asyncio.wait_for(received.all_in.wait(), 60)
        await _until_committed(broker.addr, str(COUNT), 60)

        await asyncio.to_thread(broker.kill9)
        assert _written(tmp_path / "store") != COUNT  # answered, never written
        await asyncio.to_thread(broker.start)
        await _until_committed(broker.addr, str(COUNT), 60)
    finally:
        await consumer.close()
        broker.kill9()
    assert sorted(received.bodies) == sorted(b"m%d" % n for n in range(COUNT))
