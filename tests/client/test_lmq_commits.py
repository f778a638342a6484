"""LmqConsumer commits against a scripted fake broker (answers in an order a real one
gives only under load)."""

from __future__ import annotations

import asyncio

from tests.client.fakes import FakeBroker, hold_commit_answer

from tidemq.client import ClientConfig, LmqConsumer, LmqMessage

LMQ = "%LMQ%inbox"


async def _poll(consumer: LmqConsumer, count: int) -> list[LmqMessage]:
    out: list[LmqMessage] = []
    async with asyncio.timeout(10):
        while len(out) < count:
            out += await consumer.poll(timeout=1.0)
    return out


async def test_a_commit_answered_after_a_seek_is_not_taken_as_committed(
        brokers: list[FakeBroker], config: ClientConfig) -> None:
    """A commit sent before a seek and answered after the commit that followed the seek:
    the queue does not take the old offset as committed, so when polling reaches it
    again it is committed again (else the broker kept the later commit's offset)."""
    a = brokers[0]
    for i in range(4):
        await a.put(LMQ, 0, b"m%d" % i, {})
    held, release = hold_commit_answer(a, 4)
    async with LmqConsumer("cg", broker_addr=a.address, config=config) as consumer:
        consumer.subscribe(LMQ)
        assert [m.offset for m in await _poll(consumer, 4)] == [0, 1, 2, 3]
        before = asyncio.create_task(consumer.commit())
        await held.wait()
        consumer.seek(LMQ, 0)
        await consumer.commit()
        assert a.offsets[("cg", LMQ, 0)] == 0
        release.set()
        await before
        assert [m.offset for m in await _poll(consumer, 4)] == [0, 1, 2, 3]
        await consumer.commit()
        assert a.offsets[("cg", LMQ, 0)] == 4
