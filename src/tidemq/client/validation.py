"""Producer-side checks of topics, groups and messages (Java ``Validators``).

They run before anything is sent, so a bad message fails with a clear
:class:`~tidemq.client.errors.InvalidMessageError` instead of a broker's terse code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tidemq.client.errors import (
    InvalidMessageError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooBigError,
)
from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.properties import encode_properties, property_error
from tidemq.types import Message

__all__ = [
    "NOT_ALLOWED_SEND_TOPICS",
    "TOPIC_PATTERN",
    "batch_size",
    "check_batch",
    "check_message",
    "check_properties",
    "validate_group",
    "validate_topic",
]

#: Legal topic (and group) names: remoting.md §2.7 rule 1.
TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_%|-]{1,127}")
_GROUP_PATTERN = re.compile(r"[A-Za-z0-9_%|-]{1,255}")

#: System topics a producer may not send to (Java ``TopicValidator``), plus the
#: auto-creation template.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC",
    "rmq_sys_wheel_timer",
})


def validate_topic(topic: str) -> None:
    """Raise :class:`InvalidTopicError` unless ``topic`` is a legal topic name."""
    if not topic:
        raise InvalidTopicError("the topic is empty", topic=topic)
    if TOPIC_PATTERN.fullmatch(topic) is None:
        raise InvalidTopicError(
            "a topic is 1-127 characters out of A-Z a-z 0-9 _ % | -", topic=topic
        )


def validate_group(group: str) -> None:
    """Raise ``ValueError`` unless ``group`` is a legal group name."""
    if _GROUP_PATTERN.fullmatch(group) is None:
        raise ValueError(f"group {group!r} is not 1-255 characters out of A-Z a-z 0-9 _ % | -")


def check_message(msg: Message, max_size: int) -> None:
    """Java ``Validators.checkMessage``: legal, sendable topic; non-empty body within
    ``max_size``; and no property separator in a property name or value."""
    validate_topic(msg.topic)
    if msg.topic in NOT_ALLOWED_SEND_TOPICS:
        raise InvalidTopicError("this is a system topic; messages cannot be sent to it",
                           topic=msg.topic)
    size = len(msg.body)
    if size == 0:
        raise InvalidMessageError("the message body is empty", topic=msg.topic)
    if size > max_size:
        raise MessageTooBigError(topic=msg.topic, size=size, limit=max_size)
    check_properties(msg)


def check_properties(msg: Message) -> None:
    """Raise :class:`InvalidPropertyError` if a property name or value holds a separator
    of the property string (it would be cut or dropped when read back)."""
    for name, value in msg.properties.items():
        if ("\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value):
            reason = property_error(name, value) or "a separator in the property"
            raise InvalidPropertyError(reason, topic=msg.topic, name=name)


def batch_size(msgs: Sequence[Message]) -> int:
    """Bytes of the encoded batch body (remoting.md §3.2), before compression."""
    return sum(
        ENTRY_OVERHEAD + len(m.body) + len(encode_properties(m.properties)) for m in msgs
    )


def check_batch(msgs: Sequence[Message], max_size: int) -> None:
    """Every message valid, one topic, and the encoded batch within ``max_size``."""
    if not msgs:
        raise InvalidMessageError("a batch needs at least one message")
    topic = msgs[0].topic
    for msg in msgs:
        if msg.topic != topic:
            raise InvalidMessageError(f"a batch mixes topics {topic!r} and {msg.topic!r}",
                                 topic=topic)
        check_message(msg, max_size)
    if topic.startswith("%RETRY%"):
        raise InvalidTopicError("a batch cannot go to a retry topic", topic=topic)
    size = batch_size(msgs)
    if size > max_size:
        raise MessageTooBigError(topic=topic, size=size, limit=max_size)
