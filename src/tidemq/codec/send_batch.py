"""SEND_BATCH_MESSAGE encoded once per batch: keyed entries, end-to-end compression, and
the request of an inner (RIP-26) or an outer batch (specs/store.md §1.8, §3.3, §3.5).

A batch is encoded before its first attempt; retries reuse the bytes, so the ids the
application sees never change between attempts. Each entry is laid out as
:mod:`tidemq.formats.batch` says; its properties are the message's own, then ``UNIQ_KEY``
(generated when absent), then ``WAIT=true`` (when absent) -- byte for byte what
:func:`tidemq.codec.message.batch_send_request` sends.

==========  ==============================================  ===========================
batch       header properties                               body
==========  ==============================================  ===========================
inner       ``UNIQ_KEY`` (batch key), ``INNER_NUM`` (n),    the entries, compressed when
            ``WAIT`` (the messages' own)                    that pays (sysflag bits 0,
                                                            8-10: ``sys_flag_for``)
outer       ``UNIQ_KEY`` (batch key), ``WAIT``              the entries, uncompressed
==========  ==============================================  ===========================

A BatchCQ broker stores an inner batch as one record of ``n`` messages; any broker splits
an outer batch into ``n`` records. Compression is kept only when it saves at least
``min_saving`` of the body (:func:`tidemq.codec.compression.compress_if_smaller`).

Fast path: messages with bodies of one length and equal properties (a producer loop, a
benchmark) are laid out as rows of one ``(n, entry size)`` array -- the constant columns
broadcast, the bodies copied in one go, the keys' counter digits computed as a column --
so the cost per message is a few hundred nanoseconds. Anything else takes a plain loop.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

import numpy as np

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compress_if_smaller
from tidemq.codec.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import LocalProtocolError
from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.properties import MAX_PROPERTIES_BYTES, PropertyKey, encode_properties
from tidemq.types import Message

__all__ = ["EncodedBatch", "encode_send_batch", "send_batch_request"]

_HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE (0)
    "i"  # BODYCRC (0)
    "i"  # FLAG
    "i"  # BODYLENGTH
)
_PROPS_LEN = struct.Struct(">h")
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_SHIFTS = np.array([12, 8, 4, 0], dtype=np.int64)
_KEY_TAG = f"{PropertyKey.UNIQ_KEY}\x01"
_WAIT_TRUE = f"{PropertyKey.WAIT}\x01true\x02"


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch ready to send: its body (compressed or not), the keys of its messages."""

    topic: str
    body: bytes
    #: Compression bits for the header's sysflag (0: not compressed).
    sys_flag: int
    count: int
    #: Bytes of the uncompressed entries.
    raw_size: int
    #: The messages' ``UNIQ_KEY``s, in order, laid end to end (each ``key_width`` long,
    #: except when a message brought a key of another length: then see ``given_keys``).
    keys_text: str
    key_width: int
    #: The batch's own ``UNIQ_KEY`` (the broker returns it as ``batchUniqId``).
    batch_key: str
    wait: str
    inner: bool
    given_keys: tuple[str, ...] | None = None

    @property
    def keys(self) -> list[str]:
        """Each message's ``UNIQ_KEY``."""
        if self.given_keys is not None:
            return list(self.given_keys)
        w, text = self.key_width, self.keys_text
        return [text[i : i + w] for i in range(0, len(text), w)]

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag)


def _check(msgs: Sequence[Message]) -> tuple[str, str]:
    """The Java producer's rules for a ``MessageBatch``; returns (topic, shared WAIT).
    A message without ``WAIT`` counts as ``WAIT=true``, the value it is sent with."""
    if not msgs:
        raise LocalProtocolError("a batch needs at least one message")
    topic = msgs[0].topic
    if topic.startswith("%RETRY%"):
        raise LocalProtocolError(f"cannot send a batch to retry topic {topic!r}")
    for m in msgs:
        if m.topic != topic:
            raise LocalProtocolError(f"batch mixes topics {topic!r} and {m.topic!r}")
    first = msgs[0].properties
    wait = first.get(PropertyKey.WAIT, "true")
    for m in msgs:
        p = m.properties
        if p is first and m is not msgs[0]:
            continue
        if p.get(PropertyKey.WAIT, "true") != wait:
            raise LocalProtocolError("batch messages must share the WAIT property")
        if p.get(PropertyKey.DELAY, "0") not in ("", "0", "-1"):
            raise LocalProtocolError("batch messages cannot have a delay level")
    return topic, wait


def _uniform(msgs: Sequence[Message]) -> bool:
    """Whether every message has the first one's body length, flag and properties, and
    none brings its own ``UNIQ_KEY``."""
    first = msgs[0]
    p0, n0, f0 = first.properties, len(first.body), first.flag
    if PropertyKey.UNIQ_KEY in p0:
        return False
    return all(len(m.body) == n0 and m.flag == f0 and (m.properties is p0 or m.properties == p0)
               for m in msgs)


def _props_head(props: dict[str, str]) -> str:
    """The property text before ``UNIQ_KEY``: the message's own properties."""
    return encode_properties(props).decode("utf-8") if props else ""


def _encode_uniform(msgs: Sequence[Message], keys: UniqKeyGenerator,
                    now_ms: int) -> tuple[bytes, str, int]:
    first = msgs[0]
    n, blen = len(msgs), len(first.body)
    head_text, counters = keys.reserve(now_ms, n)
    width = len(head_text) + 4
    before = (_props_head(first.properties) + _KEY_TAG).encode("utf-8")
    after = ("\x02" + ("" if PropertyKey.WAIT in first.properties else _WAIT_TRUE)).encode()
    plen = len(before) + width + len(after)
    if plen > MAX_PROPERTIES_BYTES:
        raise LocalProtocolError(f"{first.topic}: properties take {plen} bytes, the limit is "
                                 f"{MAX_PROPERTIES_BYTES}")
    size = ENTRY_OVERHEAD + blen + plen
    rows = np.empty((n, size), dtype=np.uint8)
    rows[:, :20] = np.frombuffer(_HEAD.pack(size, 0, 0, first.flag, blen), dtype=np.uint8)
    if blen:
        rows[:, 20 : 20 + blen] = np.frombuffer(
            b"".join([m.body for m in msgs]), dtype=np.uint8).reshape(n, blen)
    p = 20 + blen
    rows[:, p : p + 2] = np.frombuffer(_PROPS_LEN.pack(plen), dtype=np.uint8)
    p += 2
    rows[:, p : p + len(before)] = np.frombuffer(before, dtype=np.uint8)
    p += len(before)
    key_cols = rows[:, p : p + width]
    key_cols[:, : width - 4] = np.frombuffer(head_text.encode("ascii"), dtype=np.uint8)
    count = np.asarray(counters, dtype=np.int64) & 0xFFFF
    key_cols[:, width - 4 :] = _HEX[(count[:, None] >> _SHIFTS) & 15]
    p += width
    rows[:, p:] = np.frombuffer(after, dtype=np.uint8)
    keys_text = np.ascontiguousarray(key_cols).tobytes().decode("ascii")
    return rows.tobytes(), keys_text, width


def _encode_loop(msgs: Sequence[Message], keys: UniqKeyGenerator,
                 now_ms: int) -> tuple[bytes, list[str]]:
    head_text, counters = keys.reserve(now_ms, len(msgs))
    parts: list[bytes] = []
    out_keys: list[str] = []
    add = parts.append
    for msg, counter in zip(msgs, counters, strict=True):
        props = msg.properties
        key = props.get(PropertyKey.UNIQ_KEY) or f"{head_text}{counter & 0xFFFF:04X}"
        out_keys.append(key)
        if PropertyKey.UNIQ_KEY in props:
            full = dict(props)
            full[PropertyKey.UNIQ_KEY] = key
            full.setdefault(PropertyKey.WAIT, "true")
            raw = encode_properties(full)
        else:
            tail = "" if PropertyKey.WAIT in props else _WAIT_TRUE
            raw = f"{_props_head(props)}{_KEY_TAG}{key}\x02{tail}".encode()
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise LocalProtocolError(f"{msg.topic}: properties take {len(raw)} bytes, the "
                                     f"limit is {MAX_PROPERTIES_BYTES}")
        body = msg.body
        add(_HEAD.pack(ENTRY_OVERHEAD + len(body) + len(raw), 0, 0, msg.flag, len(body)))
        add(body)
        add(_PROPS_LEN.pack(len(raw)))
        add(raw)
    return b"".join(parts), out_keys


def encode_send_batch(
    msgs: Sequence[Message],
    *,
    keys: UniqKeyGenerator,
    now_ms: int,
    inner: bool,
    compression: CompressionType | None = None,
    level: int | None = None,
    min_saving: float = 0.05,
) -> EncodedBatch:
    """Encode ``msgs`` (one topic) once; ``inner`` batches are compressed with
    ``compression`` when that saves at least ``min_saving`` of the body. Raises
    :class:`LocalProtocolError` for batches Java's rules refuse."""
    topic, wait = _check(msgs)
    given: tuple[str, ...] | None = None
    if _uniform(msgs):
        raw, keys_text, width = _encode_uniform(msgs, keys, now_ms)
    else:
        raw, key_list = _encode_loop(msgs, keys, now_ms)
        width = len(key_list[0])
        if any(len(k) != width for k in key_list):
            given = tuple(key_list)
        keys_text = "".join(key_list)
    body, sys_flag = raw, 0
    if inner and compression is not None:
        body, sys_flag = compress_if_smaller(raw, compression, level, min_saving)
    return EncodedBatch(topic, body, sys_flag, len(msgs), len(raw), keys_text, width,
                        keys.next_key(now_ms), wait, inner, given)


def send_batch_request(
    batch: EncodedBatch,
    *,
    producer_group: str,
    queue_id: int,
    now_ms: int,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    broker_name: str | None = None,
    v1: bool = False,
) -> RemotingCommand:
    """SEND_BATCH_MESSAGE (or SEND_MESSAGE with ``batch=true`` when ``v1``) of ``batch`` to
    ``queue_id``; see the module docstring for what inner batches add."""
    props = f"{_KEY_TAG}{batch.batch_key}\x02"
    if batch.inner:
        props += f"{PropertyKey.INNER_NUM}\x01{batch.count}\x02"
    props += f"{PropertyKey.WAIT}\x01{batch.wait}\x02"
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=batch.topic, default_topic=default_topic,
        default_topic_queue_nums=default_topic_queue_nums, queue_id=queue_id,
        sys_flag=batch.sys_flag, born_timestamp=now_ms, flag=0, properties=props, batch=True,
        broker_name=broker_name,
    )
    if v1:
        return RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext(), batch.body)
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                   header.convert(SendMessageRequestHeaderV2).to_ext(),
                                   batch.body)
