"""Messages on the wire: decoding pull/query/view bodies, building send requests.

Decoding (specs/remoting.md §3.3, store.md §3.6). A PULL_MESSAGE, QUERY_MESSAGE or
VIEW_MESSAGE_BY_ID body is stored commit-log records laid end to end, in the layout of
:mod:`tidemq.formats.record`. :func:`decode_messages` turns it into
:class:`~tidemq.types.MessageExt` objects the way the Java client does:

* a COMPRESSED body (sysflag bit 0) is decompressed with the algorithm in bits 8-10
  (:mod:`tidemq.codec.compression`), bounded by ``max_decompressed``, and the bit cleared;
* an inner batch (NEED_UNWRAP and INNER_BATCH both set) is split into its entries
  (:mod:`tidemq.formats.batch`); entry ``i`` gets ``queue_offset = outer + i``, its own
  flag, body and properties, and the outer record's topic, queue, hosts, times, sysflag
  and commit-log offset;
* ``msg_id`` is the ``UNIQ_KEY`` property, else the offset id (:mod:`tidemq.formats.msgid`).

The common record -- V1 magic, IPv4 hosts, neither compressed nor batched -- is decoded
by a fast path with one ``struct`` unpack and cached host and topic strings; any other
record, or one that does not check out, goes through :func:`tidemq.formats.record.decode_record`.
Anything malformed raises :class:`~tidemq.errors.CorruptRecord` (the Java client silently
drops the rest of the body instead).

Sending (§2.7, §3.2, §3.4). :func:`send_request` and :func:`batch_send_request` build the
SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE commands (or SEND_MESSAGE with V1 keys) from
:class:`~tidemq.types.Message` objects, adding a ``UNIQ_KEY`` where there is none.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

import numpy as np

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import (
    COMPRESSED,
    CompressionType,
    compress,
    compression_of,
    decompress,
    sys_flag_for,
)
from tidemq.codec.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import CorruptRecord, LocalProtocolError
from tidemq.formats import record as rec
from tidemq.formats.batch import ENTRY_OVERHEAD, encode_batch, iter_batch, uniform_layout
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    PropertyKey,
    decode_properties,
    encode_properties,
)
from tidemq.types import Message, MessageExt

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED",
    "SendOptions",
    "batch_send_request",
    "decode_messages",
    "encode_batch_body",
    "send_request",
]

Buffer = bytes | bytearray | memoryview

#: Default bound on one decompressed body (the Java broker's own message limit is 4 MiB).
DEFAULT_MAX_DECOMPRESSED = 16 * 1024 * 1024

NEED_UNWRAP = 0x40
INNER_BATCH = 0x80
#: Records with any of these bits take the general path.
_SLOW_FLAGS = (
    COMPRESSED | NEED_UNWRAP | INNER_BATCH | rec.SYSFLAG_BORNHOST_V6 | rec.SYSFLAG_STOREHOST_V6
)

#: The record's fixed part for IPv4 hosts, TOTALSIZE through BODYLENGTH: one unpack.
_FIXED_V4 = rec.FIXED_V4
_FIXED_SIZE = rec.FIXED_V4_SIZE
_I16 = struct.Struct(">h")


class _Decoder:
    """State for one body: caches of host and topic strings shared by its records."""

    def __init__(self, check_crc: bool, unwrap: bool, max_decompressed: int) -> None:
        self.check_crc = check_crc
        self.unwrap = unwrap
        self.max_decompressed = max_decompressed
        self.hosts: dict[tuple[bytes, int], str] = {}
        self.topics: dict[bytes, str] = {}

    def host(self, ip: bytes, port: int) -> str:
        key = (ip, port)
        text = self.hosts.get(key)
        if text is None:
            text = self.hosts[key] = str(rec.HostAddr(ip, port))
        return text

    def fast(self, view: memoryview, pos: int, end: int) -> tuple[MessageExt, int] | None:
        """Decode the common record at ``pos``, or ``None`` to take the general path."""
        if end - pos < rec.MIN_RECORD_SIZE:
            return None
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len
         ) = _FIXED_V4.unpack_from(view, pos)
        stop = pos + total
        if (magic != rec.MAGIC_V1 or sys_flag & _SLOW_FLAGS or total < rec.MIN_RECORD_SIZE
                or stop > end or body_len < 0):
            return None
        body_end = pos + _FIXED_SIZE + body_len
        if body_end + 3 > stop:
            return None
        topic_len = view[body_end]
        topic_end = body_end + 1 + topic_len
        if topic_len > 127 or topic_end + 2 > stop:
            return None
        (props_len,) = _I16.unpack_from(view, topic_end)
        if topic_end + 2 + props_len != stop or props_len < 0:
            return None
        body = bytes(view[pos + _FIXED_SIZE : body_end])
        if self.check_crc and rec.body_crc(body) != crc:
            return None
        raw_topic = bytes(view[body_end + 1 : topic_end])
        topic = self.topics.get(raw_topic)
        if topic is None:
            try:
                topic = self.topics[raw_topic] = raw_topic.decode("utf-8")
            except UnicodeDecodeError:
                return None
        props = decode_properties(view[topic_end + 2 : stop])
        msg_id = props.get(PropertyKey.UNIQ_KEY) or encode_offset_msg_id(
            rec.HostAddr(store_ip, store_port), phys
        )
        msg = MessageExt(
            topic, body, props, queue_id, queue_offset, phys, total, sys_flag, born_ts,
            self.host(born_ip, born_port), store_ts, self.host(store_ip, store_port),
            reconsume, flag, crc, prepared, msg_id,
        )
        return msg, stop

    def general(self, view: memoryview, pos: int, out: list[MessageExt]) -> int:
        """Decode any record at ``pos`` into ``out``; returns the next position."""
        r = rec.decode_record(view, pos, check_crc=self.check_crc)
        if isinstance(r, rec.Blank):
            raise CorruptRecord("end-of-segment marker inside a message body", offset=pos)
        sys_flag = r.sys_flag
        ctype = compression_of(sys_flag)
        body: Buffer = r.body
        if ctype is not None:
            try:
                body = decompress(r.body, ctype, self.max_decompressed)
            except CorruptRecord as exc:
                raise CorruptRecord(exc.reason, offset=pos) from None
            sys_flag &= ~COMPRESSED
        born_host = self.host(*r.born_host)
        store_host = self.host(*r.store_host)
        offset_id = encode_offset_msg_id(r.store_host, r.physical_offset)
        if self.unwrap and sys_flag & NEED_UNWRAP and sys_flag & INNER_BATCH:
            layout = uniform_layout(body)
            if layout is not None:
                self.unwrap_uniform(r, bytes(body), layout, sys_flag, born_host, store_host,
                                    offset_id, out)
                return pos + r.total_size
            try:
                entries = list(iter_batch(body))
            except CorruptRecord as exc:
                raise CorruptRecord(f"inner batch: {exc.reason}", offset=pos) from None
            for i, entry in enumerate(entries):
                props = decode_properties(entry.properties)
                out.append(MessageExt(
                    r.topic, bytes(entry.body), props, r.queue_id, r.queue_offset + i,
                    r.physical_offset, entry.size, sys_flag, r.born_timestamp, born_host,
                    r.store_timestamp, store_host, r.reconsume_times, entry.flag, 0,
                    r.prepared_tx_offset, props.get(PropertyKey.UNIQ_KEY) or offset_id,
                ))
            return pos + r.total_size
        props = decode_properties(r.properties)
        out.append(MessageExt(
            r.topic, bytes(body), props, r.queue_id, r.queue_offset, r.physical_offset,
            r.total_size, sys_flag, r.born_timestamp, born_host, r.store_timestamp,
            store_host, r.reconsume_times, r.flag, r.body_crc, r.prepared_tx_offset,
            props.get(PropertyKey.UNIQ_KEY) or offset_id,
        ))
        return pos + r.total_size


    @staticmethod
    def unwrap_uniform(r: rec.Record, data: bytes, layout: tuple[int, int], sys_flag: int,
                       born_host: str, store_host: str, offset_id: str,
                       out: list[MessageExt]) -> None:
        """Split an inner batch whose entries share one layout (proven by
        :func:`~tidemq.formats.batch.uniform_layout`): columns at fixed offsets, the
        property texts decoded in one go when they are ASCII (they nearly always are)."""
        size, blen = layout
        n = len(data) // size
        props_at = ENTRY_OVERHEAD + blen
        starts = range(0, len(data), size)
        rows = np.frombuffer(data, dtype=np.uint8).reshape(n, size)
        flags = rows[:, 12:16].copy().view(">i4").ravel().tolist()
        plen = size - props_at
        joined = rows[:, props_at:].tobytes()
        if not plen:
            texts = [""] * n
        elif joined.isascii():
            text = joined.decode("ascii")
            texts = [text[k : k + plen] for k in range(0, len(text), plen)]
        else:
            try:
                texts = [data[at + props_at : at + size].decode("utf-8") for at in starts]
            except UnicodeDecodeError as exc:
                raise CorruptRecord(f"properties are not UTF-8: {exc}") from None
        topic, queue_id, phys = r.topic, r.queue_id, r.physical_offset
        born_ts, store_ts, reconsume = r.born_timestamp, r.store_timestamp, r.reconsume_times
        prepared, base = r.prepared_tx_offset, r.queue_offset
        append = out.append
        for i, at in enumerate(starts):
            props: dict[str, str] = {}
            for segment in texts[i].split("\x02"):  # formats.properties, inlined
                name, sep, value = segment.partition("\x01")
                if sep and name and value:
                    props[name] = value
            append(MessageExt(
                topic, data[at + 20 : at + 20 + blen], props, queue_id, base + i, phys, size,
                sys_flag, born_ts, born_host, store_ts, store_host, reconsume, flags[i], 0,
                prepared, props.get(PropertyKey.UNIQ_KEY) or offset_id,
            ))


def decode_messages(
    body: Buffer,
    *,
    check_crc: bool = False,
    unwrap: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> list[MessageExt]:
    """Decode a pull/query/view body into messages, oldest first (see module docstring).

    ``check_crc`` verifies each stored body CRC; ``unwrap=False`` keeps inner batches as one
    message whose body is the batch encoding. Raises :class:`CorruptRecord`.
    """
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    dec = _Decoder(check_crc, unwrap, max_decompressed)
    out: list[MessageExt] = []
    pos, end = 0, len(view)
    fast = dec.fast
    while pos < end:
        hit = fast(view, pos, end)
        if hit is not None:
            out.append(hit[0])
            pos = hit[1]
        else:
            pos = dec.general(view, pos, out)
    return out


# ---------------------------------------------------------------- building sends


@dataclasses.dataclass(frozen=True, slots=True)
class SendOptions:
    """Producer-wide settings for building send requests.

    ``compress_over``: single bodies at least this long are compressed (0 disables), as
    the Java producer does at 4 KiB with ZLIB level 5. ``v1`` sends SEND_MESSAGE (10)
    with V1 keys (``sendSmartMsg=false``; what the C++ client always does), batches
    included (with ``batch=true``).
    """

    producer_group: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    compress_over: int = 4096
    compression: CompressionType = CompressionType.ZLIB
    compression_level: int | None = None
    v1: bool = False


def _with_key(msg: Message, keys: UniqKeyGenerator, now_ms: int) -> dict[str, str]:
    props = dict(msg.properties)
    if not props.get(PropertyKey.UNIQ_KEY):
        props[PropertyKey.UNIQ_KEY] = keys.next_key(now_ms)
    return props


def _properties_text(props: dict[str, str], what: str) -> bytes:
    data = encode_properties(props)
    if len(data) > MAX_PROPERTIES_BYTES:
        raise LocalProtocolError(
            f"{what}: properties take {len(data)} bytes, the limit is {MAX_PROPERTIES_BYTES}"
        )
    return data


def _command(header: SendMessageRequestHeader, opts: SendOptions, code: RequestCode,
             body: bytes) -> RemotingCommand:
    if opts.v1:
        return RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext(), body)
    return RemotingCommand.request(code, header.convert(SendMessageRequestHeaderV2).to_ext(), body)


def send_request(
    msg: Message,
    opts: SendOptions,
    *,
    queue_id: int,
    now_ms: int,
    keys: UniqKeyGenerator,
    broker_name: str | None = None,
    sys_flag: int = 0,
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
) -> RemotingCommand:
    """A send of one message to ``queue_id``; ``now_ms`` is the born timestamp and the
    clock for a new ``UNIQ_KEY``. ``msg`` itself is not modified."""
    if not msg.topic:
        raise LocalProtocolError("message has no topic")
    props = _properties_text(_with_key(msg, keys, now_ms), msg.topic)
    body = bytes(msg.body)
    if 0 < opts.compress_over <= len(body) and not sys_flag & COMPRESSED:
        body = compress(body, opts.compression, opts.compression_level)
        sys_flag |= sys_flag_for(opts.compression)
    header = SendMessageRequestHeader(
        producer_group=opts.producer_group, topic=msg.topic, default_topic=opts.default_topic,
        default_topic_queue_nums=opts.default_topic_queue_nums, queue_id=queue_id,
        sys_flag=sys_flag, born_timestamp=now_ms, flag=msg.flag,
        properties=props.decode("utf-8") or None, reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times, broker_name=broker_name,
    )
    return _command(header, opts, RequestCode.SEND_MESSAGE_V2, body)


def encode_batch_body(msgs: Sequence[Message]) -> bytes:
    """The §3.2 batch body of ``msgs``, properties as they are (add ``UNIQ_KEY``s first)."""
    entries = []
    for msg in msgs:
        props = _properties_text(msg.properties, msg.topic)
        entries.append((bytes(msg.body), props, msg.flag))
    return encode_batch(entries)


def _check_batch(msgs: Sequence[Message]) -> None:
    """The Java producer's rules for a ``MessageBatch``."""
    if not msgs:
        raise LocalProtocolError("a batch needs at least one message")
    topic = msgs[0].topic
    wait = msgs[0].properties.get(PropertyKey.WAIT)
    for msg in msgs:
        if msg.topic != topic:
            raise LocalProtocolError(f"batch mixes topics {topic!r} and {msg.topic!r}")
        if msg.properties.get(PropertyKey.WAIT) != wait:
            raise LocalProtocolError("batch messages must share the WAIT property")
        if msg.properties.get(PropertyKey.DELAY, "0") not in ("", "0", "-1"):
            raise LocalProtocolError("batch messages cannot have a delay level")
    if topic.startswith("%RETRY%"):
        raise LocalProtocolError(f"cannot send a batch to retry topic {topic!r}")


def batch_send_request(
    msgs: Sequence[Message],
    opts: SendOptions,
    *,
    queue_id: int,
    now_ms: int,
    keys: UniqKeyGenerator,
    broker_name: str | None = None,
    compression: CompressionType | None = None,
) -> RemotingCommand:
    """A SEND_BATCH_MESSAGE of ``msgs`` (one topic) to ``queue_id``.

    Each message without a ``UNIQ_KEY`` gets one; the batch gets its own (the header's
    properties, with the first message's ``WAIT``), which a BatchCQ broker returns as
    ``batchUniqId``. With ``compression`` the whole batch body is compressed (RIP-26
    end-to-end compression; Java never compresses batches).
    """
    _check_batch(msgs)
    keyed = [dataclasses.replace(m, properties=_with_key(m, keys, now_ms)) for m in msgs]
    body = encode_batch_body(keyed)
    sys_flag = 0
    if compression is not None:
        body = compress(body, compression, opts.compression_level)
        sys_flag |= sys_flag_for(compression)
    batch_props = {PropertyKey.UNIQ_KEY: keys.next_key(now_ms)}
    wait = msgs[0].properties.get(PropertyKey.WAIT)
    if wait is not None:
        batch_props[PropertyKey.WAIT] = wait
    header = SendMessageRequestHeader(
        producer_group=opts.producer_group, topic=msgs[0].topic,
        default_topic=opts.default_topic,
        default_topic_queue_nums=opts.default_topic_queue_nums, queue_id=queue_id,
        sys_flag=sys_flag, born_timestamp=now_ms, flag=0,
        properties=encode_properties(batch_props).decode("utf-8"), batch=True,
        broker_name=broker_name,
    )
    return _command(header, opts, RequestCode.SEND_BATCH_MESSAGE, body)
