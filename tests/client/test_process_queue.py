"""ProcessQueue's buffer: bulk put of a pull, duplicates, done, the commit offset (pure)."""

from __future__ import annotations

from tidemq.client.process_queue import Limits, ProcessQueue
from tidemq.client.rebalance import QueueEvent
from tidemq.types import MessageExt, MessageQueue

MQ = MessageQueue("T", "broker-a", 0)


def _msg(offset: int, size: int = 10) -> MessageExt:
    return MessageExt("T", bytes(size), {}, 0, offset, offset * 100, 100, 0, 0, "h:1", 0,
                      "s:2", 0)


async def test_put_in_bulk_then_done() -> None:
    pq = ProcessQueue(MQ, limits=Limits(messages=5, bytes=1000, span=0))
    pq.fetch_offset = 10
    assert pq.fire(QueueEvent.STARTED) and pq.active
    first = [_msg(i) for i in range(4)]
    assert pq.put(first) == first
    assert (pq.buffered, pq.body_bytes, pq.commit_offset) == (4, 40, 0)
    again = [_msg(3), _msg(4, 5), _msg(4, 7), _msg(5)]  # 3 is buffered, 4 comes twice
    added = pq.put(iter(again))
    assert [(m.queue_offset, len(m.body)) for m in added] == [(4, 5), (5, 10)]
    assert (pq.buffered, pq.body_bytes) == (6, 55)
    assert pq.over_limit() and not pq.space.is_set()
    pq.done([*first[:2], _msg(42)])
    assert (pq.buffered, pq.body_bytes, pq.commit_offset) == (4, 35, 2)
    assert pq.space.is_set() and pq.has(first[2]) and not pq.has(_msg(2))
    pq.done(pq.head(10))
    assert (pq.buffered, pq.body_bytes, pq.commit_offset) == (0, 0, 10)
