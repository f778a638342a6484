"""PollTrace: the message trace of a pull or LMQ consumer's deliveries.

A message handed out by ``poll`` or ``poll_batches`` is recorded as SubBefore at once and
remembered; the commit that moves its queue past it records its SubAfter (cost: from the
poll to the commit, success). At most ``limit`` messages are remembered: past it the oldest are
forgotten (their SubAfter is dropped and counted in :attr:`Tracer.dropped`), so a
consumer that never commits holds bounded memory.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Sequence

from tidemq.client.lmq import LmqMessage
from tidemq.client.message_batch import MessageBatch
from tidemq.client.stamps import now_ms
from tidemq.client.tracer import REGION, Tracer
from tidemq.codec.trace import ConsumeReturn, SubAfterRecord, SubBeforeRecord, TraceRecord
from tidemq.types import MessageExt, MessageQueue

__all__ = ["PollTrace"]

#: request id, poll time (epoch ms), queue offset, msgId and keys of a polled message (not
#: the message: its body is not kept)
_Polled = tuple[str, int, int, str, str]
#: queue, queue offset, msgId, keys and retries of a message handed out
_Row = tuple[MessageQueue, int, str, str, int]


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
        """``poll`` handed out ``msgs``."""
        self._record([(MessageQueue(m.topic, m.broker_name, m.queue_id), m.queue_offset,
                       m.msg_id, " ".join(m.keys), m.reconsume_times) for m in msgs])

    def polled_lmq(self, msgs: Sequence[LmqMessage]) -> None:
        """An LMQ consumer's ``poll`` handed out ``msgs``: each is waiting at its offset in
        its LMQ (a commit of the LMQ covers it), recorded under the stored message's id."""
        self._record([(m.queue, m.offset, m.message.msg_id, " ".join(m.message.keys),
                       m.message.reconsume_times) for m in msgs])

    def polled_batches(self, batches: Sequence[MessageBatch]) -> None:
        """``poll_batches`` handed out ``batches`` (their messages, read from the columns)."""
        rows: list[_Row] = []
        for batch in batches:
            offsets, retries = batch.queue_offsets.tolist(), batch.reconsume_times.tolist()
            rows += [(batch.queue, offsets[i], batch.msg_id(i), " ".join(batch.keys(i)),
                      retries[i]) for i in range(len(batch))]
        self._record(rows)

    def _record(self, rows: list[_Row]) -> None:
        if not rows:
            return
        request_id, begin = uuid.uuid4().hex.upper(), now_ms()
        self.tracer.record([SubBeforeRecord(begin, REGION, self.group, request_id, msg_id,
                                            retries, keys)
                            for _, _, msg_id, keys, retries in rows])
        for mq, offset, msg_id, keys, _ in rows:
            self._waiting.setdefault(mq, collections.deque()).append(
                (request_id, begin, offset, msg_id, keys))
        self._count += len(rows)
        while self._count > self.limit:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        mq = min((q for q, d in self._waiting.items() if d), key=lambda q: self._waiting[q][0][1])
        self._waiting[mq].popleft()
        self._count -= 1
        self.tracer.drop(1, "a polled message was forgotten before a commit covered it")

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
