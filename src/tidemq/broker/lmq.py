"""Light message queues on the broker (RIP-28): validating ``INNER_MULTI_DISPATCH``.

A message names its LMQs in the property, comma separated. Every name must start with
``%LMQ%``, have something after the prefix, use only topic characters (so no path
separators, NUL or dots that could escape a directory), fit 255 bytes, and appear once;
a message may name at most ``maxLmqTargetsPerMessage`` queues. Retry, DLQ and system
topics cannot be parents. The decision is a plain function returning the names or the
reason for refusing them.
"""

from __future__ import annotations

import re

from tidemq.broker.topics import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPICS
from tidemq.store.lmq_store import LMQ_PREFIX

__all__ = ["LMQ_PREFIX", "MAX_LMQ_NAME", "parent_refusal", "parse_lmq_targets"]

MAX_LMQ_NAME = 255
_NAME_RE = re.compile(r"%LMQ%[A-Za-z0-9_|%-]+")
#: A whole value of good names (one C-level match for the usual case).
_NAMES_RE = re.compile(r"%LMQ%[A-Za-z0-9_|%-]+(?:,%LMQ%[A-Za-z0-9_|%-]+)*")


def parent_refusal(parent_topic: str) -> str | None:
    """Why ``parent_topic`` cannot carry ``INNER_MULTI_DISPATCH``, or ``None`` when it can.

    Checked before the topic name itself, so a fan-out to a system topic is refused for
    what it is (MESSAGE_ILLEGAL) rather than as a send to a forbidden name."""
    if parent_topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) or parent_topic in SYSTEM_TOPICS:
        return f"{parent_topic} cannot carry INNER_MULTI_DISPATCH (retry, DLQ or system topic)"
    return None


def parse_lmq_targets(value: str, parent_topic: str, max_targets: int) -> list[str] | str:
    """The LMQ names of an ``INNER_MULTI_DISPATCH`` value, or why it is refused."""
    refusal = parent_refusal(parent_topic)
    if refusal is not None:
        return refusal
    names = value.split(",")
    if len(names) > max_targets:
        return f"INNER_MULTI_DISPATCH names {len(names)} queues; the limit is {max_targets}"
    if (_NAMES_RE.fullmatch(value) is not None and len(set(names)) == len(names)
            and max(map(len, names)) <= MAX_LMQ_NAME):  # ASCII: characters are bytes
        return names
    seen: set[str] = set()
    for name in names:
        if not name:
            return "INNER_MULTI_DISPATCH contains an empty queue name"
        if not name.startswith(LMQ_PREFIX):
            return f"{name!r} is not a light message queue (names start with {LMQ_PREFIX})"
        if len(name.encode()) > MAX_LMQ_NAME:
            return f"LMQ name {name[:40]!r}... is longer than {MAX_LMQ_NAME} bytes"
        if not _NAME_RE.fullmatch(name):
            return f"LMQ name {name!r} must be {LMQ_PREFIX} followed by [A-Za-z0-9_|%-]"
        if name in seen:
            return f"LMQ {name!r} is named twice"
        seen.add(name)
    return names
