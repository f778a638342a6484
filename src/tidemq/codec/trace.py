"""Message trace records: the body of a message in the trace topic (RocketMQ's
``TraceDataEncoder``), sans-IO.

A trace message's body is UTF-8 text: records laid end to end, each ended by ``0x02``
(upstream's ``FIELD_SPLITOR``), its fields separated by ``0x01`` (``CONTENT_SPLITOR``).
The first field names the record's type; the rest, in order:

==============  ==============================================================================
type            fields after the type
==============  ==============================================================================
Pub             timestamp (epoch ms, send start), region id, producer group, topic, msgId,
                tags, keys, store host, body length, cost (ms), message type (ordinal),
                offsetMsgId, success (``true``/``false``)
SubBefore       timestamp (epoch ms, consume start), region id, consumer group, request id,
                msgId, retry times, keys
SubAfter        request id, msgId, cost (ms), success, keys, context code, timestamp
                (epoch ms, consume end)
EndTransaction  timestamp (epoch ms), region id, producer group, topic, msgId, tags, keys,
                store host, message type (ordinal), transaction id, transaction state
                (``COMMIT_MESSAGE`` / ``ROLLBACK_MESSAGE`` / ``UNKNOW``), from check
                (``true``/``false``)
==============  ==============================================================================

Message types (ordinals): 0 normal, 1 transaction half, 2 transaction commit, 3 delay,
4 order. Context codes of SubAfter (upstream's ``ConsumeReturnType``): 0 success,
1 time out, 2 exception, 3 returned null, 4 failed.

A SubBefore and the SubAfter of the same delivery share a request id; the SubAfter does
not repeat the group. Older writers end a Pub after ``success`` or a SubAfter after
``success``/``keys``; Java drops trailing empty fields when it splits, so a decoder
accepts a record missing its trailing optional fields. An unknown type is skipped (a
newer writer's record), a record that lacks a required field or has a bad number is
reported by :func:`decode_trace_data` and the others are kept.

A trace message carries the msgIds and keys of its records in its ``KEYS`` property,
separated by spaces, so the broker's key index finds the records of a message by its id.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "CONTENT_SEPARATOR",
    "DEFAULT_TRACE_TOPIC",
    "RECORD_SEPARATOR",
    "TRACE_PRODUCER_GROUP",
    "ConsumeReturn",
    "EndTransactionRecord",
    "MessageType",
    "PubRecord",
    "PubTexts",
    "SubAfterRecord",
    "SubBeforeRecord",
    "TraceDecoding",
    "TraceRecord",
    "decode_trace_data",
    "encode_pubs",
    "encode_record",
    "encode_trace_data",
    "pub_parts",
    "trace_keys",
]

CONTENT_SEPARATOR = "\x01"
RECORD_SEPARATOR = "\x02"
DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: The producer group trace messages are sent under (upstream's ``_INNER_TRACE_PRODUCER``).
TRACE_PRODUCER_GROUP = "_INNER_TRACE_PRODUCER"


class MessageType(enum.IntEnum):
    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ConsumeReturn(enum.IntEnum):
    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURN_NULL = 3
    FAILED = 4


@dataclasses.dataclass(frozen=True, slots=True)
class PubRecord:
    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    body_length: int
    cost_ms: int
    msg_type: MessageType
    offset_msg_id: str
    success: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SubBeforeRecord:
    timestamp: int
    region_id: str
    group: str
    request_id: str
    msg_id: str
    retry_times: int
    keys: str


@dataclasses.dataclass(frozen=True, slots=True)
class SubAfterRecord:
    request_id: str
    msg_id: str
    cost_ms: int
    success: bool
    keys: str
    context_code: int = ConsumeReturn.SUCCESS
    timestamp: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class EndTransactionRecord:
    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    msg_type: MessageType
    transaction_id: str
    transaction_state: str
    from_check: bool


TraceRecord = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord


def _b(value: bool) -> str:
    return "true" if value else "false"


def _fields(record: TraceRecord) -> tuple[object, ...]:
    if isinstance(record, PubRecord):
        return ("Pub", record.timestamp, record.region_id, record.group, record.topic,
                record.msg_id, record.tags, record.keys, record.store_host,
                record.body_length, record.cost_ms, int(record.msg_type),
                record.offset_msg_id, _b(record.success))
    if isinstance(record, SubBeforeRecord):
        return ("SubBefore", record.timestamp, record.region_id, record.group,
                record.request_id, record.msg_id, record.retry_times, record.keys)
    if isinstance(record, SubAfterRecord):
        return ("SubAfter", record.request_id, record.msg_id, record.cost_ms,
                _b(record.success), record.keys, int(record.context_code), record.timestamp)
    return ("EndTransaction", record.timestamp, record.region_id, record.group, record.topic,
            record.msg_id, record.tags, record.keys, record.store_host,
            int(record.msg_type), record.transaction_id, record.transaction_state,
            _b(record.from_check))


def _check_text(value: object) -> None:
    if isinstance(value, str) and (CONTENT_SEPARATOR in value or RECORD_SEPARATOR in value):
        raise ValueError(f"a trace field may not contain 0x01 or 0x02: {value!r}")


def encode_record(record: TraceRecord) -> str:
    """One record, its separator included. A text field holding a separator is a
    ``ValueError`` (the record could not be read back)."""
    fields = _fields(record)
    for value in fields:
        _check_text(value)
    return CONTENT_SEPARATOR.join(map(str, fields)) + RECORD_SEPARATOR


class PubTexts(NamedTuple):
    """Pub records of one send as the text they share and the text each has alone:
    record ``i`` is ``prefix + cores[i] + suffix``."""

    prefix: str
    cores: list[str]
    suffix: str

    def texts(self) -> list[str]:
        """Each record's whole text."""
        return [f"{self.prefix}{core}{self.suffix}" for core in self.cores]


def encode_pubs(timestamp: int, region_id: str, group: str, topic: str, store_host: str,
                cost_ms: int, msg_type: MessageType, success: bool, msg_ids: Sequence[str],
                tags: Sequence[str], keys: Sequence[str], body_lengths: Sequence[int],
                offset_ids: Sequence[str]) -> PubTexts:
    """Pub records of one send of several messages, given as columns (message ``i`` is
    ``msg_ids[i]``, ``tags[i]`` ...): what :func:`encode_record` makes of each, with the
    fields the messages share checked and joined once and the others checked in one
    pass. When every message has the same tags, keys and body length (a producer loop's
    batch), a record's own text is its msgId and offsetMsgId joined by the text between
    them, one C call each. A text field holding a separator is a ``ValueError``."""
    after_time, host = _pub_shared(region_id, group, topic, store_host)
    n = len(msg_ids)
    if not (len(tags) == len(keys) == len(body_lengths) == len(offset_ids) == n):
        raise ValueError("the columns of encode_pubs differ in length")
    c = CONTENT_SEPARATOR
    start = f"Pub{c}{timestamp}{after_time}"
    cost = f"{c}{cost_ms}{c}{int(msg_type)}{c}"
    end = _TRUE_END if success else _FALSE_END
    if n == 1:  # a single send: its fields checked at once, no column work
        m, t, k, o = msg_ids[0], tags[0], keys[0], offset_ids[0]
        _check_columns((m, t, k, o))
        return PubTexts(start, [f"{m}{c}{t}{c}{k}{host}{body_lengths[0]}{cost}{o}"], end)
    if n and (tags.count(tags[0]) == n and keys.count(keys[0]) == n
              and body_lengths.count(body_lengths[0]) == n):
        start, mid, end = pub_parts(timestamp, region_id, group, topic, store_host, cost_ms,
                                    msg_type, success, tags[0], keys[0], body_lengths[0])
        # the two columns checked as they are (a memchr a separator and column), not
        # counted through the records' whole text
        _check_columns(msg_ids, offset_ids)
        return PubTexts(start, list(map(mid.join, zip(msg_ids, offset_ids, strict=True))),
                        end)
    _check_columns(msg_ids, tags, keys, offset_ids)
    return PubTexts(start, [f"{m}{c}{t}{c}{k}{host}{size}{cost}{o}"
                            for m, t, k, size, o in zip(msg_ids, tags, keys, body_lengths,
                                                        offset_ids, strict=True)], end)


def pub_parts(timestamp: int, region_id: str, group: str, topic: str, store_host: str,
              cost_ms: int, msg_type: MessageType, success: bool, tags: str, keys: str,
              body_length: int) -> tuple[str, str, str]:
    """The text that Pub records of one send whose messages share their tags, keys and
    body length have in common: a record is ``prefix + msgId + mid + offsetMsgId +
    suffix``. A text field holding a separator is a ``ValueError``."""
    after_time, host = _pub_shared(region_id, group, topic, store_host)
    _check_text(tags)
    _check_text(keys)
    c = CONTENT_SEPARATOR
    return (f"Pub{c}{timestamp}{after_time}",
            f"{c}{tags}{c}{keys}{host}{body_length}{c}{cost_ms}{c}{int(msg_type)}{c}",
            _TRUE_END if success else _FALSE_END)


_TRUE_END = f"{CONTENT_SEPARATOR}true{RECORD_SEPARATOR}"
_FALSE_END = f"{CONTENT_SEPARATOR}false{RECORD_SEPARATOR}"


@functools.lru_cache(maxsize=256)
def _pub_shared(region_id: str, group: str, topic: str, store_host: str) -> tuple[str, str]:
    """The text of a Pub record after its timestamp up to its msgId, and around its store
    host, checked once per producer, topic and broker (a separator is a ``ValueError``)."""
    for value in (region_id, group, topic, store_host):
        _check_text(value)
    c = CONTENT_SEPARATOR
    return f"{c}{region_id}{c}{group}{c}{topic}{c}", f"{c}{store_host}{c}"


def _check_columns(*columns: Sequence[str]) -> None:
    for column in columns:
        joined = "".join(column)
        if CONTENT_SEPARATOR in joined or RECORD_SEPARATOR in joined:
            raise ValueError(f"a trace field may not contain 0x01 or 0x02: {joined!r}")


def encode_trace_data(records: Iterable[TraceRecord]) -> bytes:
    """The body of a trace message holding ``records``."""
    return "".join(encode_record(r) for r in records).encode()


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The keys a trace message holding ``records`` is indexed under: each record's msgId
    and, when it has any, its keys (as upstream's ``TraceTransferBean``), each once."""
    seen: dict[str, None] = {}
    for record in records:
        for key in (record.msg_id, *record.keys.split(" ")):
            if key:
                seen.setdefault(key, None)
    return list(seen)


@dataclasses.dataclass(frozen=True, slots=True)
class TraceDecoding:
    """What a trace body held: its records, and why each record that was not read was
    refused (its index among the body's records, and the reason)."""

    records: list[TraceRecord]
    refused: list[tuple[int, str]]


def _bool(text: str) -> bool:
    # Java's Boolean.parseBoolean: "true" in any case, anything else false.
    return text.lower() == "true"


def _msg_type(text: str) -> MessageType:
    try:
        return MessageType(int(text))
    except ValueError:
        raise ValueError(f"message type {text!r} is not one of 0..4") from None


def _at(line: Sequence[str], i: int) -> str:
    return line[i] if i < len(line) else ""


def _decode_line(line: list[str]) -> TraceRecord | None:
    kind = line[0]
    if kind == "Pub":
        if len(line) < 12:
            raise ValueError(f"a Pub record has 12 to 14 fields, this one {len(line)}")
        offset_id, success = (line[12], _at(line, 13)) if len(line) >= 14 else (
            "", _at(line, 12))
        return PubRecord(int(line[1]), line[2], line[3], line[4], line[5], line[6], line[7],
                         line[8], int(line[9]), int(line[10]), _msg_type(line[11]),
                         offset_id, _bool(success))
    if kind == "SubBefore":
        if len(line) < 7:
            raise ValueError(f"a SubBefore record has 7 or 8 fields, this one {len(line)}")
        return SubBeforeRecord(int(line[1]), line[2], line[3], line[4], line[5], int(line[6]),
                               _at(line, 7))
    if kind == "SubAfter":
        if len(line) < 5:
            raise ValueError(f"a SubAfter record has 5 to 8 fields, this one {len(line)}")
        return SubAfterRecord(line[1], line[2], int(line[3]), _bool(line[4]), _at(line, 5),
                              int(line[6]) if _at(line, 6) else 0,
                              int(line[7]) if _at(line, 7) else 0)
    if kind == "EndTransaction":
        if len(line) < 12:
            raise ValueError(f"an EndTransaction record has 12 or 13 fields, this one "
                             f"{len(line)}")
        return EndTransactionRecord(int(line[1]), line[2], line[3], line[4], line[5], line[6],
                                    line[7], line[8], _msg_type(line[9]), line[10], line[11],
                                    _bool(_at(line, 12)))
    return None


def decode_trace_data(data: bytes | str) -> TraceDecoding:
    """The records of a trace message's body (undecodable UTF-8 is replaced, so a damaged
    byte costs its field, not the body)."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    records: list[TraceRecord] = []
    refused: list[tuple[int, str]] = []
    for index, chunk in enumerate(text.split(RECORD_SEPARATOR)):
        if not chunk:
            continue
        try:
            record = _decode_line(chunk.split(CONTENT_SEPARATOR))
        except ValueError as exc:
            refused.append((index, str(exc)))
            continue
        if record is not None:
            records.append(record)
    return TraceDecoding(records, refused)
