"""Each message's :class:`~tidemq.types.SendResult` of an answered batch, read when asked.

A batch answered as a whole owes each of its messages a result of its own: the message's
``UNIQ_KEY`` as ``msg_id``, its record's offset message id, its queue offset (the batch's
first plus its index), and the batch's status, queue and transaction id. Made field by
field, that is an object, seven stores and two strings cut out of the joined keys and
ids for every message, though a delivery callback usually reads a field or two. Here
the batch's answer is kept once (:class:`BatchAnswer`) and a message's result is an
object holding that answer and its index (:func:`message_results`); its fields are
worked out when read.

Such a result is a :class:`SendResult` in every way a caller can see: ``isinstance``,
its fields, ``==`` and ``hash`` against a plain result with the same fields, ``repr``,
``dataclasses.replace``/``asdict``, ``copy`` and ``pickle`` (which give plain results).

A result kept keeps its batch's answer alive: the record ids as the broker joined them
(a few dozen bytes a message of the batch) and the keys' shared head and counters --
never the batch's bodies or encoding.

A broker answers a batch's record ids joined by commas, all as long as each other when
they name one store host (the usual case): :func:`record_ids` then cuts the one a message
asks for out of the joined text; otherwise it splits the text once. One id for the
whole batch (an inner batch's) is every message's.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import Any, overload

from tidemq.types import MessageQueue, SendResult, SendStatus

__all__ = ["BatchAnswer", "message_results", "record_ids"]


class BatchAnswer:
    """What a batch's messages share of its answer, and each one's key and record id
    (``keys[i]``, ``ids[i]``)."""

    __slots__ = ("first_offset", "ids", "keys", "queue", "status", "transaction_id")

    def __init__(self, status: SendStatus, queue: MessageQueue, first_offset: int,
                 transaction_id: str | None, keys: Sequence[str],
                 ids: Sequence[str]) -> None:
        self.status = status
        self.queue = queue
        self.first_offset = first_offset
        self.transaction_id = transaction_id
        self.keys = keys
        self.ids = ids


class _MessageResult(SendResult):
    """Message ``_index``'s result in the batch answered by ``_answer``."""

    __slots__ = ("_answer", "_index")

    _answer: BatchAnswer
    _index: int

    def __new__(cls, *args: Any, **kwargs: Any) -> SendResult:  # type: ignore[misc]
        # Only dataclasses.replace calls the class: it gets a plain result.
        return SendResult(*args, **kwargs)

    @property
    def status(self) -> SendStatus:
        return self._answer.status

    @property
    def msg_id(self) -> str:
        return self._answer.keys[self._index]

    @property
    def offset_msg_id(self) -> str:
        return self._answer.ids[self._index]

    @property
    def queue(self) -> MessageQueue:
        return self._answer.queue

    @property
    def queue_offset(self) -> int:
        return self._answer.first_offset + self._index

    @property
    def transaction_id(self) -> str | None:
        return self._answer.transaction_id

    @property
    def message_count(self) -> int:
        return 1

    def plain(self) -> SendResult:
        """The same result as a plain :class:`SendResult`."""
        return SendResult(self.status, self.msg_id, self.offset_msg_id, self.queue,
                          self.queue_offset, self.transaction_id, 1)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _MessageResult):
            other = other.plain()
        if not isinstance(other, SendResult):
            return NotImplemented
        return self.plain() == other

    def __hash__(self) -> int:
        return hash(self.plain())

    def __repr__(self) -> str:
        return repr(self.plain())

    def __reduce__(self) -> tuple[type[SendResult], tuple[Any, ...]]:
        return SendResult, dataclasses.astuple(self.plain())


_new = object.__new__
_set_answer = _MessageResult.__dict__["_answer"].__set__
_set_index = _MessageResult.__dict__["_index"].__set__


def message_results(answer: BatchAnswer, start: int, stop: int) -> list[SendResult]:
    """The results of messages ``start`` up to ``stop`` (excluded) of the batch answered
    by ``answer``: an object and two stores a message, each a loop in C."""
    n = stop - start
    results: list[SendResult] = list(map(_new, repeat(_MessageResult, n)))
    sink: deque[None] = deque(maxlen=0)
    run = sink.extend
    run(map(_set_answer, results, repeat(answer, n)))
    run(map(_set_index, results, range(start, stop)))
    return results


class _EvenIds(Sequence[str]):
    """Ids of one width ``width``, joined by commas in ``text``, cut out when read."""

    __slots__ = ("size", "step", "text", "width")

    def __init__(self, text: str, size: int, width: int) -> None:
        self.text, self.size, self.width, self.step = text, size, width, width + 1

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError("record id index out of range")
        start = i * self.step
        return self.text[start : start + self.width]


def record_ids(joined: str, count: int) -> Sequence[str]:
    """The record id of each of ``count`` messages, from their ids joined by commas as a
    broker answers them; any other number of ids than ``count`` (an inner batch's one
    id) is every message's."""
    if joined.count(",") != count - 1:
        return [joined] * count
    step, rest = divmod(len(joined) + 1, count)
    width = step - 1
    # One width: the commas, and only they (counted above), sit every ``step`` chars.
    if not rest and width > 0 and joined[width::step] == "," * (count - 1):
        return _EvenIds(joined, count, width)
    return joined.split(",")
