"""Which queue a message goes to: plain functions, no I/O.

* :func:`select_round_robin` -- the Java producer's default: the next queue in turn,
  skipping the broker whose send just failed when another broker has queues;
* :func:`select_by_key` -- the same key always lands on the same queue (ordered sends
  by sharding key), with Java's ``String.hashCode`` so every client agrees;
* any :data:`QueueSelector` callable ``(queues, message) -> queue`` the caller supplies.

:class:`SendPlan` drives the attempts of one send with them: which queue to try next,
and whether a failure is worth another attempt (remoting.md §2.1: the retriable codes,
lost connections and timeouts). The async and blocking producers share it.

Consumer-side assignment (rebalance strategies) is :mod:`tidemq.client.allocate`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence

from tidemq.errors import BrokerResponseError, ConnectionLost, RequestTimeout, TideMQError
from tidemq.formats.hashing import java_string_hash
from tidemq.types import Message, MessageQueue

__all__ = [
    "QueueSelector",
    "RoundRobin",
    "SendPlan",
    "is_retriable",
    "select_by_key",
    "select_round_robin",
]

#: A caller's own choice: ``(queues, message) -> one of queues``.
QueueSelector = Callable[[Sequence[MessageQueue], Message], MessageQueue]


class RoundRobin:
    """A counter starting at a random point (as Java's ``ThreadLocalIndex``)."""

    def __init__(self, start: int | None = None) -> None:
        self._count: Iterator[int] = itertools.count(
            random.randrange(1 << 16) if start is None else start
        )

    def next(self) -> int:
        return next(self._count)


def select_round_robin(queues: Sequence[MessageQueue], counter: RoundRobin,
                       avoid_broker: str | None = None) -> MessageQueue:
    """The next queue in turn, not on ``avoid_broker`` if any other broker has one."""
    if not queues:
        raise ValueError("no queues to choose from")
    n = len(queues)
    if avoid_broker is not None:
        for _ in range(n):
            mq = queues[counter.next() % n]
            if mq.broker_name != avoid_broker:
                return mq
    return queues[counter.next() % n]


def select_by_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """Java ``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)``."""
    if not queues:
        raise ValueError("no queues to choose from")
    n = len(queues)
    h = java_string_hash(key)
    index = abs(h) % n  # Java: (h % n) with the sign of h, then abs -- same value
    return queues[index]


def is_retriable(exc: BaseException) -> bool:
    """Whether a send failing with ``exc`` should be tried again (elsewhere)."""
    if isinstance(exc, BrokerResponseError):
        return exc.retriable
    return isinstance(exc, ConnectionLost | RequestTimeout)


class SendPlan:
    """The attempts of one send: call :meth:`next_queue` before each, :meth:`failed` after
    a failure. Only a default (round-robin) choice is retried; a send to a fixed queue, by
    key or through a selector fails at once, as an ordered send must stay on its queue.
    A fixed ``queue`` must be one of ``msg``'s topic."""

    def __init__(
        self,
        msg: Message,
        *,
        attempts: int,
        counter: RoundRobin,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
    ) -> None:
        if queue is not None and queue.topic != msg.topic:
            raise ValueError(f"queue {queue} is not a queue of topic {msg.topic!r}")
        chosen = (queue is not None) + (sharding_key is not None) + (selector is not None)
        if chosen > 1:
            raise ValueError("give at most one of queue, sharding_key and selector")
        self._msg = msg
        self._counter = counter
        self.fixed_queue = queue
        self._key = sharding_key
        self._selector = selector
        self.retrying = chosen == 0
        self.attempts_left = max(1, attempts) if self.retrying else 1
        self.avoid_broker: str | None = None
        self.errors: list[TideMQError] = []

    def next_queue(self, queues: Sequence[MessageQueue]) -> MessageQueue | None:
        """The queue of the next attempt, or ``None`` when none is left."""
        if self.attempts_left <= 0:
            return None
        self.attempts_left -= 1
        if self.fixed_queue is not None:
            return self.fixed_queue
        if self._key is not None:
            return select_by_key(queues, self._key)
        if self._selector is not None:
            mq = self._selector(queues, self._msg)
            if mq not in queues:
                raise ValueError(f"the selector chose {mq}, which is not a publish queue")
            return mq
        return select_round_robin(queues, self._counter, self.avoid_broker)

    def failed(self, queue: MessageQueue, exc: TideMQError) -> bool:
        """Record a failed attempt on ``queue``; ``True`` if another attempt should follow."""
        self.errors.append(exc)
        self.avoid_broker = queue.broker_name
        return self.retrying and self.attempts_left > 0 and is_retriable(exc)
