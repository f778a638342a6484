"""Light message queues on the broker (RIP-28): validating ``INNER_MULTI_DISPATCH``.

A message names its LMQs in the property, comma separated. Every name must start with
``%LMQ%``, have something after the prefix, use only topic characters (so no path
separators, NUL or dots that could escape a directory), fit 255 bytes, and appear once;
a message may name at most ``maxLmqTargetsPerMessage`` queues. Retry, DLQ and system
topics cannot be parents. The decision is a plain function returning the names or the
reason for refusing them; a batch's usual messages are decided together
(:func:`batch_lmq_targets`), with one match over all their names.
"""

from __future__ import annotations

import re

from tidemq.broker.topics import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPICS
from tidemq.store.lmq_store import LMQ_PREFIX

__all__ = ["LMQ_PREFIX", "MAX_LMQ_NAME", "batch_lmq_targets", "names_lmqs", "parent_refusal",
           "parse_lmq_targets"]

MAX_LMQ_NAME = 255
_NAME_RE = re.compile(r"%LMQ%[A-Za-z0-9_|%-]+")
#: A whole value of good names no longer than MAX_LMQ_NAME (ASCII: characters are
#: bytes), in one C-level match for the usual case.
_NAMES_RE = re.compile("%LMQ%[A-Za-z0-9_|%-]{{1,{n}}}(?:,%LMQ%[A-Za-z0-9_|%-]{{1,{n}}})*".format(
    n=MAX_LMQ_NAME - len(LMQ_PREFIX)))
_DISPATCH = "INNER_MULTI_DISPATCH\x01"
_DISPATCH_PAIR = "\x02" + _DISPATCH
_OFFSETS = "INNER_MULTI_QUEUE_OFFSET\x01"


def names_lmqs(text: str) -> bool:
    """Whether the property string ``text`` has a pair named exactly
    ``INNER_MULTI_DISPATCH`` (at the start or right after a ``\\x02``), whatever its
    value: a fan-out, to be checked and refused if the value is bad. A longer name that
    merely ends in it, such as ``MY_INNER_MULTI_DISPATCH``, is a user property."""
    return text.startswith(_DISPATCH) or _DISPATCH_PAIR in text


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


def _dispatch_value(text: str) -> str | None:
    """The ``INNER_MULTI_DISPATCH`` value of a well-formed property string that names it
    once, as its first pair or after a separator, and has no ``INNER_MULTI_QUEUE_OFFSET``
    (``None``: anything else, for the full parse to decide)."""
    at = text.find(_DISPATCH)
    if (at < 0 or (at and text[at - 1] != "\x02") or _OFFSETS in text
            or text.find(_DISPATCH, at + 1) >= 0):
        return None
    start = at + len(_DISPATCH)
    end = text.find("\x02", start)
    return text[start:] if end < 0 else text[start:end]


def batch_lmq_targets(texts: list[str | None], max_targets: int) -> list[list[str]] | None:
    """The LMQ names of each of a batch's well-formed property strings (``None``: a
    message naming none, given ``[]``), decided together: one match over every name of
    the batch (it bounds their length too), a set per message. ``None`` when any message
    needs :func:`parse_lmq_targets` (a refusal, an unusual string): its answers are the
    same.
    The parent topic is checked by the caller."""
    values: list[str] = []
    for text in texts:
        if text is not None:
            value = _dispatch_value(text)
            if not value:
                return None
            values.append(value)
    if _NAMES_RE.fullmatch(",".join(values)) is None:
        return None
    out: list[list[str]] = []
    names_of = iter(values)
    for text in texts:
        if text is None:
            out.append([])
            continue
        names = next(names_of).split(",")
        if len(names) > max_targets or len(set(names)) != len(names):
            return None
        out.append(names)
    return out
