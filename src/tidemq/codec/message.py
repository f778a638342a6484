"""Messages on the wire: decoding pull/query/view bodies, building send requests.

Decoding (docs/reference/remoting.md §3.3, store.md §3.6). A PULL_MESSAGE, QUERY_MESSAGE or
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
by the record package's fast path (:func:`tidemq.formats.record.messages.decode_plain_messages`:
compiled when built, else one ``struct`` unpack per record; cached strings, the message's
slots filled directly);
any other record, or one that does not check out, goes through
:func:`tidemq.formats.record.decode_record`. Property texts are checked to be UTF-8 here
but parsed only when a message's ``properties`` (or ``msg_id``, ``tags``, ``keys``) is
first read (:class:`~tidemq.types.MessageExt`): a consumer that reads only bodies never
builds the dicts. Anything malformed raises :class:`~tidemq.errors.CorruptRecord` (the
Java client silently drops the rest of the body instead), at decode time.

Sending (§2.7, §3.2, §3.4). :func:`send_request` and :func:`batch_send_request` build the
SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE commands (or SEND_MESSAGE with V1 keys) from
:class:`~tidemq.types.Message` objects, adding a ``UNIQ_KEY`` where there is none.
"""

from __future__ import annotations

import binascii
import dataclasses
import struct
from collections.abc import Sequence

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
from tidemq.codec.schema import INT32, INT64
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import CorruptRecord, LocalProtocolError
from tidemq.formats import record as rec
from tidemq.formats.batch import (
    ENTRY_OFF_BODY,
    ENTRY_OFF_FLAG,
    ENTRY_OVERHEAD,
    encode_batch,
    iter_batch,
    uniform_layout,
)
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    PropertyKey,
    encode_properties,
    property_text,
)
from tidemq.formats.record.messages import decode_plain_messages
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

NEED_UNWRAP = rec.SYSFLAG_NEED_UNWRAP
INNER_BATCH = rec.SYSFLAG_INNER_BATCH
_I32 = struct.Struct(">i")

_new = object.__new__


def _checked_text(raw: bytes, offset: int) -> bytes:
    """``raw`` if it is UTF-8 (property text is decoded lazily, but checked here)."""
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecord(f"properties are not UTF-8: {exc}", offset=offset) from None
    return raw


#: ``"ip:port"`` of the hosts seen in records, shared by every body decoded: formatting
#: one through ``ipaddress`` costs more than decoding a small message, and every message
#: of a pull would pay it twice. Bounded: cleared when it holds :data:`_HOSTS_MAX`.
_HOSTS: dict[tuple[bytes, int], str] = {}
_HOSTS_MAX = 4096


def _host_text(ip: bytes, port: int) -> str:
    key = (ip, port)
    text = _HOSTS.get(key)
    if text is None:
        if len(_HOSTS) >= _HOSTS_MAX:
            _HOSTS.clear()
        text = _HOSTS[key] = str(rec.HostAddr(ip, port))
    return text


class _Decoder:
    """State for one body: caches of host and topic strings shared by its records, and
    what every message of the body gets (queue id, broker name, added properties)."""

    def __init__(self, check_crc: bool, unwrap: bool, max_decompressed: int,
                 queue_id: int | None = None, broker_name: str = "",
                 extra: dict[str, str] | None = None) -> None:
        self.check_crc = check_crc
        self.unwrap = unwrap
        self.max_decompressed = max_decompressed
        self.queue_id = queue_id
        self.broker_name = broker_name
        self.extra = extra or None
        #: store host -> the ``_lazy`` pair of its messages (offset id prefix, extra)
        self.lazies: dict[tuple[bytes, int], tuple[str, dict[str, str] | None]] = {}

    def host(self, ip: bytes, port: int) -> str:
        return _host_text(ip, port)

    def lazy(self, ip: bytes, port: int) -> tuple[str, dict[str, str] | None]:
        key = (ip, port)
        pair = self.lazies.get(key)
        if pair is None:
            prefix = binascii.hexlify(ip + _I32.pack(port)).decode("ascii").upper()
            pair = self.lazies[key] = (prefix, self.extra)
        return pair

    def message(self, topic: str, body: bytes, raw_props: bytes, queue_id: int,
                queue_offset: int, phys: int, size: int, sys_flag: int, born_ts: int,
                born_host: str, store_ts: int, store: tuple[bytes, int], reconsume: int,
                flag: int, crc: int, prepared: int, offset: int) -> MessageExt:
        """A message whose properties are decoded on first use (the general paths)."""
        msg: MessageExt = _new(MessageExt)
        msg.topic = topic
        msg.body = body
        msg._properties = None
        msg._raw_properties = _checked_text(raw_props, offset)
        msg._msg_id = None
        msg._lazy = self.lazy(*store)
        msg.queue_id = queue_id if self.queue_id is None else self.queue_id
        msg.queue_offset = queue_offset
        msg.commit_log_offset = phys
        msg.store_size = size
        msg.sys_flag = sys_flag
        msg.born_timestamp = born_ts
        msg.born_host = born_host
        msg.store_timestamp = store_ts
        msg.store_host = self.host(*store)
        msg.reconsume_times = reconsume
        msg.flag = flag
        msg.body_crc = crc
        msg.prepared_transaction_offset = prepared
        msg.broker_name = self.broker_name
        return msg

    def plain(self, data: bytes, pos: int, out: list[MessageExt]) -> int:
        """Decode the common records from ``pos`` into ``out``; returns where the first
        record that needs the general path starts (``len(data)`` when none does)."""
        return decode_plain_messages(data, pos, out, self.check_crc, self.queue_id,
                                     self.broker_name, self.host, self.lazy)

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
        store = (r.store_host.ip, r.store_host.port)
        if self.unwrap and sys_flag & NEED_UNWRAP and sys_flag & INNER_BATCH:
            layout = uniform_layout(body)
            if layout is not None:
                self.unwrap_uniform(r, bytes(body), layout, sys_flag, born_host, store, pos,
                                    out)
                return pos + r.total_size
            try:
                entries = list(iter_batch(body))
            except CorruptRecord as exc:
                raise CorruptRecord(f"inner batch: {exc.reason}", offset=pos) from None
            for i, entry in enumerate(entries):
                out.append(self.message(
                    r.topic, bytes(entry.body), bytes(entry.properties), r.queue_id,
                    r.queue_offset + i, r.physical_offset, entry.size, sys_flag,
                    r.born_timestamp, born_host, r.store_timestamp, store, r.reconsume_times,
                    entry.flag, 0, r.prepared_tx_offset, pos,
                ))
            return pos + r.total_size
        out.append(self.message(
            r.topic, bytes(body), r.properties, r.queue_id, r.queue_offset, r.physical_offset,
            r.total_size, sys_flag, r.born_timestamp, born_host, r.store_timestamp, store,
            r.reconsume_times, r.flag, r.body_crc, r.prepared_tx_offset, pos,
        ))
        return pos + r.total_size

    def unwrap_uniform(self, r: rec.Record, data: bytes, layout: tuple[int, int],
                       sys_flag: int, born_host: str, store: tuple[bytes, int], offset: int,
                       out: list[MessageExt]) -> None:
        """Split an inner batch whose entries share one layout (proven by
        :func:`~tidemq.formats.batch.uniform_layout`): fields at fixed offsets, the flags
        gathered in one go, the property texts checked in one go when they are ASCII
        (they nearly always are) and decoded only when read."""
        import numpy as np  # here: decoding a plain pull body (or none) needs no numpy

        size, blen = layout
        n = len(data) // size
        props_at = ENTRY_OVERHEAD + blen
        rows = np.frombuffer(data, dtype=np.uint8).reshape(n, size)
        flags = rows[:, ENTRY_OFF_FLAG : ENTRY_OFF_FLAG + 4].copy().view(">i4").ravel().tolist()
        if size > props_at and not rows[:, props_at:].tobytes().isascii():
            for at in range(0, len(data), size):
                _checked_text(data[at + props_at : at + size], offset)
        topic, phys, base = r.topic, r.physical_offset, r.queue_offset
        queue_id = r.queue_id if self.queue_id is None else self.queue_id
        born_ts, store_ts, reconsume = r.born_timestamp, r.store_timestamp, r.reconsume_times
        prepared, broker_name = r.prepared_tx_offset, self.broker_name
        lazy, store_host = self.lazy(*store), self.host(*store)
        append = out.append
        end = len(data)
        for queue_offset, b0, b1, p1, flag in zip(
                range(base, base + n), range(ENTRY_OFF_BODY, end, size),
                range(ENTRY_OFF_BODY + blen, end, size),
                range(size, end + size, size), flags, strict=True):
            msg: MessageExt = _new(MessageExt)
            msg.topic = topic
            msg.body = data[b0:b1]
            msg._properties = None
            msg._raw_properties = data[b1 + 2 : p1]
            msg._msg_id = None
            msg._lazy = lazy
            msg.queue_id = queue_id
            msg.queue_offset = queue_offset
            msg.commit_log_offset = phys
            msg.store_size = size
            msg.sys_flag = sys_flag
            msg.born_timestamp = born_ts
            msg.born_host = born_host
            msg.store_timestamp = store_ts
            msg.store_host = store_host
            msg.reconsume_times = reconsume
            msg.flag = flag
            msg.body_crc = 0
            msg.prepared_transaction_offset = prepared
            msg.broker_name = broker_name
            append(msg)


def decode_messages(
    body: Buffer,
    *,
    check_crc: bool = False,
    unwrap: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    queue_id: int | None = None,
    broker_name: str = "",
    extra_properties: dict[str, str] | None = None,
) -> list[MessageExt]:
    """Decode a pull/query/view body into messages, oldest first (see module docstring).

    ``check_crc`` verifies each stored body CRC; ``unwrap=False`` keeps inner batches as one
    message whose body is the batch encoding. What a consumer sets on every message of a
    pull is set here, without a pass of its own: ``queue_id`` (the requested queue's id,
    instead of the stored one), ``broker_name``, and ``extra_properties``, added to each
    message's properties when they are first read (as ``properties.update(extra)``; the
    mapping is shared, not copied: do not change it). Raises :class:`CorruptRecord`.
    """
    data = body if isinstance(body, bytes) else bytes(body)
    dec = _Decoder(check_crc, unwrap, max_decompressed, queue_id, broker_name,
                   extra_properties)
    out: list[MessageExt] = []
    end = len(data)
    pos = dec.plain(data, 0, out)
    if pos < end:
        view = memoryview(data)
        while pos < end:
            pos = dec.plain(data, dec.general(view, pos, out), out)
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
    #: The send headers built for these options, by topic and broker (a cache: not
    #: compared, hashed or shown).
    templates: dict[tuple[str, str | None], dict[str, str]] = dataclasses.field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False)


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
    props = msg.properties
    if not props.get(PropertyKey.UNIQ_KEY):  # else sent as they are: no copy
        props = _with_key(msg, keys, now_ms)
    text = property_text(props)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > MAX_PROPERTIES_BYTES:
        raise LocalProtocolError(f"{msg.topic}: properties take {size} bytes, the limit is "
                                 f"{MAX_PROPERTIES_BYTES}")
    body = bytes(msg.body)
    if 0 < opts.compress_over <= len(body) and not sys_flag & COMPRESSED:
        body = compress(body, opts.compression, opts.compression_level)
        sys_flag |= sys_flag_for(opts.compression)
    if (text and reconsume_times is None and max_reconsume_times is None and not opts.v1
            and _I32_MIN <= queue_id <= _I32_MAX and _I32_MIN <= sys_flag <= _I32_MAX
            and _I32_MIN <= msg.flag <= _I32_MAX and 0 <= now_ms <= _I64_MAX):
        # The usual send: the header's fixed fields from a template, five filled in.
        templates = opts.templates
        template = templates.get((msg.topic, broker_name))
        if template is None:
            if len(templates) >= _TEMPLATES_KEPT:
                templates.clear()
            template = templates[msg.topic, broker_name] = _send_template(
                opts, msg.topic, broker_name)
        ext = template.copy()
        ext["e"], ext["f"], ext["g"] = str(queue_id), str(sys_flag), str(now_ms)
        ext["h"], ext["i"] = str(msg.flag), text
        return RemotingCommand(_SEND_V2, ext_fields=ext, body=body)
    header = SendMessageRequestHeader(
        producer_group=opts.producer_group, topic=msg.topic, default_topic=opts.default_topic,
        default_topic_queue_nums=opts.default_topic_queue_nums, queue_id=queue_id,
        sys_flag=sys_flag, born_timestamp=now_ms, flag=msg.flag,
        properties=text or None, reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times, broker_name=broker_name,
    )
    return _command(header, opts, RequestCode.SEND_MESSAGE_V2, body)


_I32_MIN, _I32_MAX = INT32
_I64_MAX = INT64[1]
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
#: Templates a :class:`SendOptions` keeps (one per topic and broker); beyond, it starts over.
_TEMPLATES_KEPT = 4096


def _send_template(opts: SendOptions, topic: str, broker_name: str | None) -> dict[str, str]:
    """The SEND_MESSAGE_V2 ext of a send to ``topic`` on ``broker_name`` as the header
    schema gives it (its key order too), the per-message keys e-i to fill in. Kept in
    ``opts.templates``: callers copy it."""
    header = SendMessageRequestHeader(
        producer_group=opts.producer_group, topic=topic, default_topic=opts.default_topic,
        default_topic_queue_nums=opts.default_topic_queue_nums, queue_id=0, sys_flag=0,
        born_timestamp=0, flag=0, properties="-", broker_name=broker_name)
    return header.convert(SendMessageRequestHeaderV2).to_ext()


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
