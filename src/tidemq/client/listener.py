"""What a push consumer's listener is given and what it answers.

A listener takes a batch of messages (``consume_batch_max_size`` of them, 1 by default;
orderly consumers: in queue order) and answers a :class:`ConsumeStatus`:

* :attr:`ConsumeStatus.CONSUME_SUCCESS` -- processed; the offset moves past them;
* :attr:`ConsumeStatus.RECONSUME_LATER` -- not processed. A concurrent consumer sends
  each message of the batch back to the broker for a later retry (``%RETRY%<group>``,
  then ``%DLQ%<group>``); an orderly consumer suspends the queue for
  ``suspend_current_queue_time`` and retries the same batch locally (Java
  ``SUSPEND_CURRENT_QUEUE_A_MOMENT``).

A listener that raises, or returns anything else, counts as ``RECONSUME_LATER``.
Messages that came back through the retry topic carry their original topic; their
``reconsume_times`` says how many deliveries failed before.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

from tidemq.types import MessageExt

__all__ = ["AsyncListener", "BlockingListener", "ConsumeStatus"]


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


#: ``async def listener(msgs) -> ConsumeStatus`` (:class:`~tidemq.client.PushConsumer`).
AsyncListener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]
#: ``def listener(msgs) -> ConsumeStatus``, run in a thread
#: (:class:`~tidemq.client.ThreadedPushConsumer`).
BlockingListener = Callable[[list[MessageExt]], ConsumeStatus]
