"""The message property string (specs/store.md §1.5, specs/remoting.md §3.1).

Layout (UTF-8 text)::

    name \\x01 value \\x02 name \\x01 value \\x02 ...

* The writer emits ``\\x02`` after every pair, the last included; pairs with an empty
  name or value are skipped.
* The reader splits on ``\\x02``, ignores segments shorter than 3 characters, splits each
  at the first ``\\x01`` and drops pairs with an empty side. A repeated name keeps the
  last value.
* Stored length is a signed short: at most 32 767 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.errors import CorruptRecord

__all__ = [
    "MAX_PROPERTIES_BYTES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PropertyKey",
    "decode_properties",
    "encode_properties",
    "parse_property_text",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767


class PropertyKey:
    """Well-known property names."""

    TAGS = "TAGS"
    KEYS = "KEYS"
    UNIQ_KEY = "UNIQ_KEY"
    WAIT = "WAIT"
    DELAY = "DELAY"
    CLUSTER = "CLUSTER"
    INNER_NUM = "INNER_NUM"
    INNER_BASE = "INNER_BASE"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    RETRY_TOPIC = "RETRY_TOPIC"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    SHARDING_KEY = "__SHARDINGKEY"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    TRANSIENT_PREFIX = "__RMQ.TRANSIENT."


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Encode ``props`` in insertion order; empty names or values are skipped."""
    if not props:
        return b""
    text = "".join(
        f"{name}\x01{value}\x02" for name, value in props.items() if name and value is not None
        and value != ""
    )
    return text.encode("utf-8")


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """Decode a property string; invalid UTF-8 raises :class:`CorruptRecord`."""
    if not data:
        return {}
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"properties are not UTF-8: {exc}") from None
    return parse_property_text(text)


def parse_property_text(text: str) -> dict[str, str]:
    """:func:`decode_properties` of text already decoded: pairs with an empty name or value
    are dropped, the last of a repeated name wins."""
    out: dict[str, str] = {}
    for segment in text.split("\x02"):
        if len(segment) < 3:
            continue
        name, sep, value = segment.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out
