"""PollTrace: the message trace of a pull consumer's deliveries.

A message handed out by ``poll`` is recorded as SubBefore at once and remembered; the
commit that moves its queue past it records its SubAfter (cost: from the poll to the
commit, success). At most ``limit`` messages are remembered: past it the oldest are
forgotten (their SubAfter is dropped and counted in :attr:`Tracer.dropped`), so a
consumer that never commits holds bounded memory.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Sequence

from tidemq.client.stamps import now_ms
from tidemq.client.tracer import Tracer, sub_before_records
from tidemq.codec.trace import ConsumeReturn, SubAfterRecord, TraceRecord
from tidemq.types import MessageExt, MessageQueue

__all__ = ["PollTrace"]

#: request id, poll time (epoch ms), queue offset, msgId and keys of a polled message (not
#: the message: its body is not kept)
_Polled = tuple[str, int, int, str, str]


def _sub_after(polled: list[_Polled], end_ms: int) -> list[TraceRecord]:
    return [SubAfterRecord(request_id, msg_id, end_ms - begin, True, keys,
                           ConsumeReturn.SUCCESS, end_ms)
            for request_id, begin, _, msg_id, keys in polled]


class PollTrace:
    """See the module docstring."""

    def __init__(self, tracer: Tracer, group: str, limit: int) -> None:
        self.tracer = tracer
        self.group = group
        self.limit = limit
        self._waiting: dict[MessageQueue, collections.deque[_Polled]] = {}
        self._count = 0

    def polled(self, msgs: Sequence[MessageExt]) -> None:
        if not msgs:
            return
        request_id, begin = uuid.uuid4().hex.upper(), now_ms()
        self.tracer.record(sub_before_records(self.group, request_id, msgs, begin))
        for m in msgs:
            mq = MessageQueue(m.topic, m.broker_name, m.queue_id)
            self._waiting.setdefault(mq, collections.deque()).append(
                (request_id, begin, m.queue_offset, m.msg_id, " ".join(m.keys)))
        self._count += len(msgs)
        while self._count > self.limit:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        mq = min((q for q, d in self._waiting.items() if d), key=lambda q: self._waiting[q][0][1])
        self._waiting[mq].popleft()
        self._count -= 1
        self.tracer.dropped += 1

    def committed(self, queue: MessageQueue, offset: int) -> None:
        """``queue``'s consumed offset is now ``offset``: what it covers was consumed."""
        waiting = self._waiting.get(queue)
        if not waiting:
            return
        done: list[_Polled] = []
        while waiting and waiting[0][2] < offset:
            done.append(waiting.popleft())
        if done:
            self._count -= len(done)
            self.tracer.record(_sub_after(done, now_ms()))
