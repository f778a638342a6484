"""Light message queues (RIP-28) for producers: one write, many queues.

::

    result = await send_to_lmqs(producer, Message("Devices", b"reboot"),
                                ["%LMQ%device-1", "%LMQ%device-2"])

A message sent with ``INNER_MULTI_DISPATCH`` (the LMQ names, comma separated) is stored
once, on a queue of its *parent topic*, and the broker indexes it into every named LMQ;
its offset in each LMQ is assigned under the broker's append lock and stored in the
record as ``INNER_MULTI_QUEUE_OFFSET`` (same order as the names). The record's own
``queue_offset`` is its offset in the parent queue. LMQs are not registered with the
name server: they live on the broker that stored the message, i.e. on the brokers of
the parent topic's route. :class:`~tidemq.client.lmq_consumer.LmqConsumer` reads them.

Name rules (checked here before anything is sent, and again by the broker): ``%LMQ%``
followed by one or more of ``A-Z a-z 0-9 _ | % -``, at most 255 bytes, each name once.
The broker also caps the names per message (``maxLmqTargetsPerMessage``, default 64),
refuses retry, DLQ and system parent topics, and refuses everything when it runs
without ``enableLmq`` and ``enableMultiDispatch``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tidemq.client.errors import InvalidMessageError
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageExt, MessageQueue, SendResult

if TYPE_CHECKING:
    from tidemq.client.producer import Producer

__all__ = [
    "LMQ_PREFIX",
    "MAX_LMQ_NAME_BYTES",
    "LmqMessage",
    "is_lmq",
    "lmq_message",
    "lmq_offsets",
    "send_to_lmqs",
    "validate_lmq_name",
]

LMQ_PREFIX = "%LMQ%"
MAX_LMQ_NAME_BYTES = 255
_NAME = re.compile(r"%LMQ%[A-Za-z0-9_|%-]+")


def is_lmq(topic: str) -> bool:
    return topic.startswith(LMQ_PREFIX)


def validate_lmq_name(name: str) -> None:
    """Raise :class:`InvalidMessageError` unless ``name`` is a legal LMQ name."""
    if not name:
        raise InvalidMessageError("an LMQ name is empty")
    if not name.startswith(LMQ_PREFIX):
        raise InvalidMessageError(f"{name!r} is not a light message queue (names start with "
                                  f"{LMQ_PREFIX})")
    if len(name.encode()) > MAX_LMQ_NAME_BYTES:
        raise InvalidMessageError(f"LMQ name {name[:40]!r}... is longer than "
                                  f"{MAX_LMQ_NAME_BYTES} bytes")
    if _NAME.fullmatch(name) is None:
        raise InvalidMessageError(f"LMQ name {name!r} must be {LMQ_PREFIX} followed by "
                                  "A-Z a-z 0-9 _ | % -")


def lmq_message(msg: Message, lmqs: Iterable[str], *, parent_topic: str | None = None
                ) -> Message:
    """A copy of ``msg`` (on ``parent_topic`` if given) that fans out to ``lmqs``."""
    names = list(lmqs)
    if not names:
        raise InvalidMessageError("a fan-out needs at least one LMQ")
    for name in names:
        validate_lmq_name(name)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidMessageError(f"LMQ {dup!r} is named twice")
    topic = parent_topic if parent_topic is not None else msg.topic
    if is_lmq(topic):
        raise InvalidMessageError("the parent topic cannot itself be an LMQ", topic=topic)
    props = {k: v for k, v in msg.properties.items()
             if k != PropertyKey.INNER_MULTI_QUEUE_OFFSET}
    props[PropertyKey.INNER_MULTI_DISPATCH] = ",".join(names)
    return dataclasses.replace(msg, topic=topic, properties=props)


async def send_to_lmqs(producer: Producer, msg: Message, lmqs: Sequence[str], *,
                       parent_topic: str | None = None, **send_options: Any) -> SendResult:
    """Send ``msg`` once to its parent topic (``parent_topic`` or ``msg.topic``), indexed
    into every LMQ of ``lmqs`` on the broker that stores it. ``send_options`` go to
    :meth:`Producer.send` (``queue``, ``sharding_key``, ``selector``, ``timeout``); the
    result describes the record in the parent queue."""
    return await producer.send(lmq_message(msg, lmqs, parent_topic=parent_topic),
                               **send_options)


def lmq_offsets(msg: MessageExt | Message) -> dict[str, int]:
    """The LMQs a stored message was indexed into, with its offset in each (empty when
    the message did not fan out or the two properties do not pair up)."""
    names = msg.properties.get(PropertyKey.INNER_MULTI_DISPATCH)
    offsets = msg.properties.get(PropertyKey.INNER_MULTI_QUEUE_OFFSET)
    if not names or not offsets:
        return {}
    name_list = names.split(",")
    try:
        offset_list = [int(x) for x in offsets.split(",")]
    except ValueError:
        return {}
    if len(name_list) != len(offset_list):
        return {}
    return dict(zip(name_list, offset_list, strict=True))


@dataclasses.dataclass(frozen=True, slots=True)
class LmqMessage:
    """A message as read from one LMQ.

    ``queue`` is the LMQ on its broker (``queue.topic`` is the LMQ name, queue id 0) and
    ``offset`` the message's offset in it. ``message`` is the stored record: its
    ``topic``, ``queue_id`` and ``queue_offset`` are those of the parent queue.
    """

    queue: MessageQueue
    offset: int
    message: MessageExt

    @property
    def lmq(self) -> str:
        return self.queue.topic

    @property
    def broker_name(self) -> str:
        return self.queue.broker_name

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def tags(self) -> str | None:
        return self.message.tags

    @property
    def parent_topic(self) -> str:
        return self.message.topic
