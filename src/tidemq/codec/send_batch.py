"""SEND_BATCH_MESSAGE encoded once per batch: keyed entries, end-to-end compression, and
the request of an inner (RIP-26) or an outer batch (specs/store.md §1.8, §3.3, §3.5).

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

Fast path: when the messages have bodies of one length, one flag and equal properties
(a producer loop, a benchmark), entries differ only in their body bytes and the last four
digits of their key, so the body is one ``join`` of constant runs, the bodies and digits
from a table -- a few hundred nanoseconds per message. Anything else takes a plain loop.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import struct
from collections.abc import Sequence

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
_KEY_TAG = f"{PropertyKey.UNIQ_KEY}\x01"
_WAIT_TRUE = f"{PropertyKey.WAIT}\x01true\x02"
_BODY = operator.attrgetter("body")
#: Request ext per (form, group, topic, defaults, queue, sysflag, broker): only the born
#: timestamp and the properties change between batches.
_templates: dict[tuple[object, ...], dict[str, str]] = {}
_MAX_TEMPLATES = 65536
_V1_KEYS = tuple(SendMessageRequestHeader.ext_keys()[f] for f in ("born_timestamp", "properties"))
_V2_KEYS = tuple(
    SendMessageRequestHeaderV2.ext_keys()[f] for f in ("born_timestamp", "properties"))


@functools.cache
def _hex4() -> list[bytes]:
    """The last four key digits of every counter value (built once, on first use)."""
    return [b"%04X" % i for i in range(0x10000)]


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
    #: The messages' keys: ``key_head`` plus four hex digits of each counter, unless
    #: ``listed_keys`` names them one by one.
    key_head: str = ""
    key_counters: Sequence[int] = ()
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
    def joined_keys(self) -> str:
        """The messages' ``UNIQ_KEY``\\ s joined by commas (an outer batch's ``msg_id``):
        the shared head, then each counter's four digits from a table -- one ``join``."""
        if self.listed_keys is not None:
            return ",".join(self.listed_keys)
        head = self.key_head.encode("ascii")
        table = _hex4()
        digits = [table[c & 0xFFFF] for c in self.key_counters]
        return (head + (b"," + head).join(digits)).decode("ascii") if digits else ""

    def compressed(self, ctype: CompressionType, level: int | None = None,
                   min_saving: float = 0.05) -> tuple[bytes, int]:
        """``(body, sysflag bits)`` for an inner batch: the entries compressed with
        ``ctype`` when that saves at least ``min_saving``, else as they are."""
        return compress_if_smaller(self.entries, ctype, level, min_saving)


def _check_props(props: dict[str, str], wait: str) -> None:
    if props.get(PropertyKey.WAIT, "true") != wait:
        raise LocalProtocolError("batch messages must share the WAIT property")
    if props.get(PropertyKey.DELAY, "0") not in ("", "0", "-1"):
        raise LocalProtocolError("batch messages cannot have a delay level")


@dataclasses.dataclass(frozen=True, slots=True)
class _Shape:
    topic: str
    wait: str
    #: Bodies of one length, one flag, equal properties without ``UNIQ_KEY``.
    uniform: bool
    min_body: int
    max_body: int


def _check(msgs: Sequence[Message]) -> _Shape:
    """The Java producer's rules for a ``MessageBatch``, and the batch's shape. A message
    without ``WAIT`` counts as ``WAIT=true``, the value it is sent with."""
    if not msgs:
        raise LocalProtocolError("a batch needs at least one message")
    topic = msgs[0].topic
    if topic.startswith("%RETRY%"):
        raise LocalProtocolError(f"cannot send a batch to retry topic {topic!r}")
    topics = {m.topic for m in msgs}
    if len(topics) > 1:
        other = min(topics - {topic})
        raise LocalProtocolError(f"batch mixes topics {topic!r} and {other!r}")
    props = [m.properties for m in msgs]
    p0 = props[0]
    wait = p0.get(PropertyKey.WAIT, "true")
    same_props = props.count(p0) == len(props)
    if same_props:
        _check_props(p0, wait)
    else:
        for p in props:
            _check_props(p, wait)
    lengths = [len(m.body) for m in msgs]
    lo, hi = min(lengths), max(lengths)
    uniform = (same_props and lo == hi and PropertyKey.UNIQ_KEY not in p0
               and len({m.flag for m in msgs}) == 1)
    return _Shape(topic, wait, uniform, lo, hi)


def _props_head(props: dict[str, str]) -> str:
    """The property text before ``UNIQ_KEY``: the message's own properties."""
    return encode_properties(props).decode("utf-8") if props else ""


def _too_long(topic: str, plen: int) -> LocalProtocolError:
    return LocalProtocolError(f"{topic}: properties take {plen} bytes, the limit is "
                              f"{MAX_PROPERTIES_BYTES}")


def _encode_uniform(msgs: Sequence[Message], head_text: str, counters: list[int]) -> bytes:
    """Entries differing only in body bytes and key digits: constant runs between them."""
    first = msgs[0]
    n, blen = len(msgs), len(first.body)
    key_head = head_text.encode("ascii")
    before = (_props_head(first.properties) + _KEY_TAG).encode("utf-8") + key_head
    after = ("\x02" + ("" if PropertyKey.WAIT in first.properties else _WAIT_TRUE)).encode()
    plen = len(before) + 4 + len(after)
    if plen > MAX_PROPERTIES_BYTES:
        raise _too_long(first.topic, plen)
    size = ENTRY_OVERHEAD + blen + plen
    lead = _HEAD.pack(size, 0, 0, first.flag, blen)
    middle = _PROPS_LEN.pack(plen) + before
    start = counters[0] & 0xFFFF
    table = _hex4()
    digits = table[start : start + n]
    if len(digits) < n:  # the 16-bit counter wraps inside this batch
        digits += table[: n - len(digits)]
    # entry i = lead, body i, middle, digits i, after -- "after + lead" is one run
    parts: list[bytes] = [after + lead] * (4 * n)
    parts[0] = lead
    parts[1::4] = map(_BODY, msgs)
    parts[2::4] = [middle] * n
    parts[3::4] = digits
    parts.append(after)
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
    :class:`LocalProtocolError` for batches Java's rules refuse."""
    shape = _check(msgs)
    head_text, counters = "", list[int]()
    listed: tuple[str, ...] | None = None
    if shape.uniform:
        head_text, counters = keys.reserve(now_ms, len(msgs))
        raw = _encode_uniform(msgs, head_text, counters)
    else:
        raw, key_list = _encode_loop(msgs, keys, now_ms)
        listed = tuple(key_list)
    return EncodedBatch(shape.topic, raw, len(msgs), keys.next_key(now_ms), shape.wait,
                        head_text, counters, listed, shape.min_body, shape.max_body)


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
    code = RequestCode.SEND_MESSAGE if v1 else RequestCode.SEND_BATCH_MESSAGE
    return RemotingCommand.request(code, ext, batch.entries if body is None else body)
