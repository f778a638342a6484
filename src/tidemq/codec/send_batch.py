"""SEND_BATCH_MESSAGE encoded once per batch: keyed entries, end-to-end compression, and
the request of an inner (RIP-26) or an outer batch (docs/reference/store.md §1.8, §3.3, §3.5).

A batch is encoded before its first attempt (:func:`encode_send_batch`); retries reuse
the bytes, so the ids the application sees never change between attempts, and the request
of an attempt (:func:`send_batch_request`) is only its header. Each entry is laid out as
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
an outer batch into ``n`` records (and could not split a compressed one). Compression is
kept only when it saves at least ``min_saving`` of the body
(:func:`tidemq.codec.compression.compress_if_smaller`).

Fast paths: the batch is checked with one comprehension and one ``list.count`` per field
(not a Python step per message and field). When the messages have one flag and equal
properties without ``UNIQ_KEY`` (a producer loop, a benchmark) their entries share one
layout and differ only in their bodies, body lengths and the last four digits of their
keys (:meth:`~tidemq.codec.uniqkey.UniqKeyGenerator.reserve`), so they are written as
columns with numpy: bodies of one length into copies of the first entry
(``_encode_uniform``), bodies of any lengths joined with the runs between them, made as
columns in one buffer (``_encode_shared``). Anything else takes a plain loop.
:func:`encode_send_bodies` takes such a batch as its topic, shared properties and a list of
bodies, and writes the same columns without a :class:`Message` per body.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple, overload

import numpy as np
import numpy.typing as npt

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compress_if_smaller
from tidemq.codec.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import LocalProtocolError
from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.properties import MAX_PROPERTIES_BYTES, PropertyKey, encode_properties
from tidemq.types import Message

__all__ = [
    "EncodedBatch",
    "KeyRun",
    "MixedTopicsError",
    "encode_send_batch",
    "encode_send_bodies",
    "send_batch_request",
]

_HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE (0)
    "i"  # BODYCRC (0)
    "i"  # FLAG
    "i"  # BODYLENGTH
)
_PROPS_LEN = struct.Struct(">h")
_KEY_TAG = f"{PropertyKey.UNIQ_KEY}\x01"
_WAIT_TRUE = f"{PropertyKey.WAIT}\x01true\x02"
#: Request ext per (form, group, topic, defaults, queue, sysflag, broker): only the born
#: timestamp and the properties change between batches.
_templates: dict[tuple[object, ...], dict[str, str]] = {}
_MAX_TEMPLATES = 65536
#: Up to this many entries a uniform batch is joined from its parts rather than written
#: as columns (:func:`_encode_uniform`).
_JOIN_AT_MOST = 16
_V1_KEYS = tuple(SendMessageRequestHeader.ext_keys()[f] for f in ("born_timestamp", "properties"))
_V2_KEYS = tuple(
    SendMessageRequestHeaderV2.ext_keys()[f] for f in ("born_timestamp", "properties"))
# The two codes read once: an attribute of an enum class goes through the enum type's
# ``__getattr__`` hook (Python 3.11), several times slower than a global.
_SEND_MESSAGE, _SEND_BATCH_MESSAGE = RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE


@functools.cache
def _hex4() -> list[bytes]:
    """The last four key digits of every counter value (built once, on first use)."""
    return [b"%04X" % i for i in range(0x10000)]


class KeyRun(Sequence[str]):
    """The keys of a run of counters -- ``head`` and the last four hex digits of each
    counter, as the encoder writes them -- each made when it is read."""

    __slots__ = ("counters", "head")

    def __init__(self, head: str, counters: range) -> None:
        self.head, self.counters = head, counters

    def __len__(self) -> int:
        return len(self.counters)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            head = self.head
            return [f"{head}{c & 0xFFFF:04X}" for c in self.counters[i]]
        return f"{self.head}{self.counters[i] & 0xFFFF:04X}"


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch's entries, encoded once, and the keys of its messages."""

    topic: str
    #: The uncompressed batch encoding (formats/batch).
    entries: bytes
    count: int
    #: The batch's own ``UNIQ_KEY`` (a BatchCQ broker returns it as ``batchUniqId``).
    batch_key: str
    #: The messages' shared ``WAIT`` value.
    wait: str
    #: The messages' keys: ``key_head`` plus four hex digits of each counter (a run of
    #: consecutive values), unless ``listed_keys`` names them one by one.
    key_head: str = ""
    key_counters: range = range(0)
    listed_keys: tuple[str, ...] | None = None
    #: The shortest and the longest message body, bytes.
    min_body: int = 0
    max_body: int = 0

    @property
    def keys(self) -> list[str]:
        """Each message's ``UNIQ_KEY``, in order."""
        if self.listed_keys is not None:
            return list(self.listed_keys)
        return self.joined_keys.split(",")

    @property
    def key_view(self) -> Sequence[str]:
        """:attr:`keys` as a sequence that makes a key when it is read and holds nothing
        of the batch's entries."""
        if self.listed_keys is not None:
            return self.listed_keys
        return KeyRun(self.key_head, self.key_counters)

    @property
    def joined_keys(self) -> str:
        """The messages' ``UNIQ_KEY``\\ s joined by commas (an outer batch's ``msg_id``):
        the shared head, then each counter's four digits from a table -- one ``join``."""
        if self.listed_keys is not None:
            return ",".join(self.listed_keys)
        n = len(self.key_counters)
        if not n:
            return ""
        head = self.key_head.encode("ascii")
        table = _hex4()
        start = self.key_counters[0] & 0xFFFF
        digits = table[start : start + n]
        if len(digits) < n:  # the 16-bit counter wraps inside this batch
            digits += table[: n - len(digits)]
        return (head + (b"," + head).join(digits)).decode("ascii")

    def compressed(self, ctype: CompressionType, level: int | None = None,
                   min_saving: float = 0.05) -> tuple[bytes, int]:
        """``(body, sysflag bits)`` for an inner batch: the entries compressed with
        ``ctype`` when that saves at least ``min_saving``, else as they are."""
        return compress_if_smaller(self.entries, ctype, level, min_saving)


class MixedTopicsError(LocalProtocolError):
    """A batch whose messages name more than one topic: ``topic`` (the first message's)
    and ``other`` (the least other one)."""

    def __init__(self, topic: str, other: str) -> None:
        super().__init__(f"batch mixes topics {topic!r} and {other!r}")
        self.topic = topic
        self.other = other


def _check_props(props: dict[str, str], wait: str) -> None:
    if props.get(PropertyKey.WAIT, "true") != wait:
        raise LocalProtocolError("batch messages must share the WAIT property")
    if props.get(PropertyKey.DELAY, "0") not in ("", "0", "-1"):
        raise LocalProtocolError("batch messages cannot have a delay level")


class _Shape(NamedTuple):
    topic: str
    wait: str
    #: One flag, equal properties without ``UNIQ_KEY``: one layout but for the bodies.
    shared: bool
    min_body: int
    max_body: int
    #: The messages' bodies and their lengths, in order.
    bodies: list[bytes]
    lengths: list[int]

    @property
    def uniform(self) -> bool:
        """One layout, bodies of one length too."""
        return self.shared and self.min_body == self.max_body


def _check(msgs: Sequence[Message]) -> _Shape:
    """The Java producer's rules for a ``MessageBatch``, and the batch's shape. A message
    without ``WAIT`` counts as ``WAIT=true``, the value it is sent with.

    Each field is read with one comprehension over the batch and compared with one
    ``list.count`` (the first message's value against all of them): a batch from one
    producer loop costs a few C loops, not a Python step per message and field."""
    n = len(msgs)
    if not n:
        raise LocalProtocolError("a batch needs at least one message")
    first = msgs[0]
    topic = first.topic
    if topic.startswith("%RETRY%"):
        raise LocalProtocolError(f"cannot send a batch to retry topic {topic!r}")
    topics = [m.topic for m in msgs]
    if topics.count(topic) != n:
        raise MixedTopicsError(topic, min(set(topics) - {topic}))
    props = [m.properties for m in msgs]
    p0 = first.properties
    wait = p0.get(PropertyKey.WAIT, "true")
    same_props = props.count(p0) == n
    if same_props:
        _check_props(p0, wait)
    else:
        for p in props:
            _check_props(p, wait)
    bodies = [m.body for m in msgs]
    lengths = list(map(len, bodies))
    lo = hi = lengths[0]
    if lengths.count(lo) != n:
        lo, hi = min(lengths), max(lengths)
    shared = (same_props and PropertyKey.UNIQ_KEY not in p0
              and [m.flag for m in msgs].count(first.flag) == n)
    return _Shape(topic, wait, shared, lo, hi, bodies, lengths)


def _props_head(props: dict[str, str]) -> str:
    """The property text before ``UNIQ_KEY``: the message's own properties."""
    return encode_properties(props).decode("utf-8") if props else ""


def _too_long(topic: str, plen: int) -> LocalProtocolError:
    return LocalProtocolError(f"{topic}: properties take {plen} bytes, the limit is "
                              f"{MAX_PROPERTIES_BYTES}")


@functools.cache
def _hex4_column() -> npt.NDArray[np.void]:
    """:func:`_hex4` as one column of 4-byte items (for strided writes; made once)."""
    return np.frombuffer(b"".join(_hex4()), dtype="V4")


@functools.lru_cache(maxsize=1024)
def _row_type(size: int, blen: int, at: int) -> np.dtype[np.void]:
    """The row type of a uniform batch per entry size, body length and key digits'
    offset: the body and the key digits as fields at their offsets."""
    return np.dtype({"names": ["body", "key"], "formats": [f"V{blen}", "V4"],
                     "offsets": [_HEAD.size, at], "itemsize": size})


class _Layout(NamedTuple):
    """What the entries of a batch of one layout share: the text around the key's last
    four digits (``before``: the properties length and the message's own properties,
    then ``UNIQ_KEY`` and the shared head of the keys; ``after``: the rest)."""

    before: bytes
    after: bytes
    plen: int


def _layout(first: Message, head_text: str) -> _Layout:
    text = (_props_head(first.properties) + _KEY_TAG + head_text).encode("utf-8")
    after = ("\x02" + ("" if PropertyKey.WAIT in first.properties else _WAIT_TRUE)).encode()
    plen = len(text) + 4 + len(after)
    if plen > MAX_PROPERTIES_BYTES:
        raise _too_long(first.topic, plen)
    return _Layout(_PROPS_LEN.pack(plen) + text, after, plen)


def _key_digits(counters: Sequence[int]) -> npt.NDArray[np.void]:
    """The last four key digits of each of ``counters`` (a run), as a column."""
    n = len(counters)
    start = counters[0] & 0xFFFF
    table = _hex4_column()
    if start + n <= len(table):
        return table[start : start + n]
    wrapped: npt.NDArray[np.void] = table[np.arange(start, start + n) & 0xFFFF]
    return wrapped  # the 16-bit counter wraps inside this batch


def _encode_uniform(first: Message, bodies: list[bytes], head_text: str,
                    counters: Sequence[int], *, join_at_most: int = _JOIN_AT_MOST) -> bytes:
    """Entries differing only in body bytes and key digits. Up to ``join_at_most``
    entries, joined from their parts; more, as columns: the first entry (with blank body
    and digits) repeated ``n`` times, then the bodies and the digits written into it as
    two strided columns (whose fixed cost a few entries do not repay)."""
    n, blen = len(bodies), len(bodies[0])
    before, after, plen = _layout(first, head_text)
    size = ENTRY_OVERHEAD + blen + plen
    head = _HEAD.pack(size, 0, 0, first.flag, blen)
    if n <= join_at_most:
        hex4 = _hex4()
        parts: list[bytes] = []
        for body, counter in zip(bodies, counters, strict=True):
            parts += (head, body, before, hex4[counter & 0xFFFF], after)
        return b"".join(parts)
    at = len(head) + blen + len(before)  # where the key's last four digits go
    buf = bytearray(head + bytes(blen) + before + b"0000" + after) * n
    rows = np.frombuffer(buf, dtype=_row_type(size, blen, at))
    if blen:
        rows["body"] = np.frombuffer(b"".join(bodies), dtype=rows.dtype["body"])
    rows["key"] = _key_digits(counters)
    return bytes(buf)


@functools.lru_cache(maxsize=1024)
def _gap_type(before: int, after: int) -> np.dtype[np.void]:
    """The type of the run between two bodies of a shared-layout batch per length of the
    text before the key digits and after them: the digits, then the next entry's
    TOTALSIZE and BODYLENGTH."""
    head = before + 4 + after
    return np.dtype({"names": ["key", "total", "blen"], "formats": ["V4", ">i4", ">i4"],
                     "offsets": [before, head, head + 16], "itemsize": head + _HEAD.size})


def _encode_shared(first: Message, bodies: list[bytes], lengths: list[int], head_text: str,
                   counters: Sequence[int]) -> bytes:
    """Entries of one layout but for their bodies (of any lengths). Between body ``i``
    and body ``i + 1`` lies the same run but for entry ``i``'s key digits and entry
    ``i + 1``'s lengths: those runs are made as columns in one buffer, cut, and joined
    with the bodies."""
    n = len(bodies)
    before, after, plen = _layout(first, head_text)
    gap_type = _gap_type(len(before), len(after))
    step = gap_type.itemsize
    buf = bytearray(before + b"0000" + after + _HEAD.pack(0, 0, 0, first.flag, 0)) * n
    gaps = np.frombuffer(buf, dtype=gap_type)
    rest = np.array(lengths[1:], dtype=np.int32)
    gaps["blen"][:-1] = rest
    gaps["total"][:-1] = rest + (ENTRY_OVERHEAD + plen)
    gaps["key"] = _key_digits(counters)
    runs = bytes(buf)
    cut = list(map(runs.__getitem__, map(slice, range(0, n * step, step),
                                         range(step, (n + 1) * step, step))))
    cut[-1] = cut[-1][: -_HEAD.size]  # no entry follows the last one
    parts = [runs] * (2 * n + 1)
    parts[0] = _HEAD.pack(ENTRY_OVERHEAD + lengths[0] + plen, 0, 0, first.flag, lengths[0])
    parts[1::2] = bodies
    parts[2::2] = cut
    return b"".join(parts)


def _encode_loop(msgs: Sequence[Message], keys: UniqKeyGenerator,
                 now_ms: int) -> tuple[bytes, list[str]]:
    """Any batch; keys are made only for messages without one, in order."""
    need = sum(1 for m in msgs if not m.properties.get(PropertyKey.UNIQ_KEY))
    fresh = iter(keys.next_keys(now_ms, need))
    parts: list[bytes] = []
    out_keys: list[str] = []
    add = parts.append
    for msg in msgs:
        props = msg.properties
        key = props.get(PropertyKey.UNIQ_KEY) or next(fresh)
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
            raise _too_long(msg.topic, len(raw))
        body = msg.body
        add(_HEAD.pack(ENTRY_OVERHEAD + len(body) + len(raw), 0, 0, msg.flag, len(body)))
        add(body)
        add(_PROPS_LEN.pack(len(raw)))
        add(raw)
    return b"".join(parts), out_keys


def encode_send_batch(msgs: Sequence[Message], *, keys: UniqKeyGenerator,
                      now_ms: int) -> EncodedBatch:
    """Encode ``msgs`` (one topic) once, giving keys to messages without one. Raises
    :class:`LocalProtocolError` for batches Java's rules refuse (:class:`MixedTopicsError`
    for more than one topic)."""
    shape = _check(msgs)
    if shape.shared:
        return _encode_columns(msgs[0], shape.wait, shape.bodies, shape.lengths,
                               shape.min_body, shape.max_body, keys, now_ms)
    raw, key_list = _encode_loop(msgs, keys, now_ms)
    return EncodedBatch(shape.topic, raw, len(msgs), keys.next_key(now_ms), shape.wait,
                        "", range(0), tuple(key_list), shape.min_body, shape.max_body)


def encode_send_bodies(topic: str, bodies: list[bytes], *, keys: UniqKeyGenerator,
                       now_ms: int, properties: dict[str, str] | None = None,
                       flag: int = 0) -> EncodedBatch:
    """:func:`encode_send_batch` of messages that share ``topic``, ``properties`` (without
    ``UNIQ_KEY``) and ``flag`` and differ only in their ``bodies``: the same bytes and
    keys, written as columns straight from the list of bodies, with no :class:`Message`
    per body (the auto-batching producer's ``produce`` keeps bodies only)."""
    n = len(bodies)
    if not n:
        raise LocalProtocolError("a batch needs at least one message")
    if topic.startswith("%RETRY%"):
        raise LocalProtocolError(f"cannot send a batch to retry topic {topic!r}")
    props = properties or {}
    if PropertyKey.UNIQ_KEY in props:
        raise LocalProtocolError("messages given as bodies get their keys from the encoder: "
                                 "no UNIQ_KEY property")
    wait = props.get(PropertyKey.WAIT, "true")
    _check_props(props, wait)
    lengths = list(map(len, bodies))
    lo = hi = lengths[0]
    if lengths.count(lo) != n:
        lo, hi = min(lengths), max(lengths)
    return _encode_columns(Message(topic, bodies[0], props, flag), wait, bodies, lengths,
                           lo, hi, keys, now_ms)


def _encode_columns(first: Message, wait: str, bodies: list[bytes], lengths: list[int],
                    lo: int, hi: int, keys: UniqKeyGenerator, now_ms: int) -> EncodedBatch:
    """Entries of one layout but for their bodies (``first``'s topic, properties and
    flag), keyed in one run of counters."""
    head_text, counters = keys.reserve(now_ms, len(bodies))
    if lo == hi:
        raw = _encode_uniform(first, bodies, head_text, counters)
    else:
        raw = _encode_shared(first, bodies, lengths, head_text, counters)
    return EncodedBatch(first.topic, raw, len(bodies), keys.next_key(now_ms), wait,
                        head_text, counters, None, lo, hi)


def send_batch_request(
    batch: EncodedBatch,
    *,
    inner: bool,
    producer_group: str,
    queue_id: int,
    now_ms: int,
    body: bytes | None = None,
    sys_flag: int = 0,
    default_topic: str = "TBW102",
    default_topic_queue_nums: int = 4,
    broker_name: str | None = None,
    v1: bool = False,
) -> RemotingCommand:
    """SEND_BATCH_MESSAGE (or SEND_MESSAGE with ``batch=true`` when ``v1``) of ``batch`` to
    ``queue_id``: an ``inner`` batch adds ``INNER_NUM`` and may carry a compressed
    ``body`` with its ``sys_flag`` bits (:meth:`EncodedBatch.compressed`); an outer
    batch always sends the entries as they are."""
    props = f"{_KEY_TAG}{batch.batch_key}\x02"
    if inner:
        props += f"{PropertyKey.INNER_NUM}\x01{batch.count}\x02"
    else:
        body, sys_flag = None, 0
    props += f"{PropertyKey.WAIT}\x01{batch.wait}\x02"
    key = (v1, producer_group, batch.topic, default_topic, default_topic_queue_nums,
           queue_id, sys_flag, broker_name)
    template = _templates.get(key)
    if template is None:
        cls = SendMessageRequestHeader if v1 else SendMessageRequestHeaderV2
        header = cls(
            producer_group=producer_group, topic=batch.topic, default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums, queue_id=queue_id,
            sys_flag=sys_flag, born_timestamp=0, flag=0, properties="", batch=True,
            broker_name=broker_name,
        )
        if len(_templates) >= _MAX_TEMPLATES:
            _templates.clear()
        template = _templates[key] = header.to_ext()
    ext = template.copy()  # the keys keep their places: the same ext as to_ext()
    born_key, props_key = _V1_KEYS if v1 else _V2_KEYS
    ext[born_key] = str(now_ms)
    ext[props_key] = props
    code = _SEND_MESSAGE if v1 else _SEND_BATCH_MESSAGE
    return RemotingCommand.request(code, ext, batch.entries if body is None else body)
