"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The processor is a plain function (no task per request): it validates, appends to the
store and answers at once under ASYNC_FLUSH. Batches are split into one record per entry
on ordinary topics (outer batch, remoting.md §3.2).

Fast path: a plain single send (SEND_MESSAGE_V2 / SEND_MESSAGE to an existing, writable,
ordinary topic; no batch, delay, timer, LMQ, inner-batch or retry-topic features; numbers
as plain digits) is read straight from the ext map (:func:`decode_send_fields`), checked,
appended and answered without the header schema object. Anything else -- every error
included -- goes the generic way, so codes and remarks are the generic path's. A batch
whose entries share one layout and differ only in their UNIQ_KEY values is split with a
few array comparisons instead of a property parse per entry; from 16 entries on it goes
to the store as columns over the request body (:class:`UniformBatch`), its keys to the
index as columns (:class:`KeyColumns`), and the offset message ids of the reply are one
hex conversion.

SYNC_FLUSH (:class:`GroupCommitWaiters`): sends waiting for durability are queued on the
event loop in commit-log order. One flush request per loop iteration triggers the group
commit; the flusher's listener posts one callback per commit with the durable offset,
which answers every waiter up to it. A request that fails or times out answers its
waiters FLUSH_DISK_TIMEOUT, as a per-message future would have.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import random
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any, Literal, overload

import numpy as np

from tidemq.broker.context import BrokerContext
from tidemq.broker.lmq import parse_lmq_targets
from tidemq.broker.processors.decode import decoded
from tidemq.broker.processors.retry import route_send
from tidemq.broker.topics import PERM_WRITE, RETRY_PREFIX, validate_topic
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compression_of, decompress
from tidemq.codec.headers import (
    SendFields,
    SendMessageRequestHeader,
    decode_send_fields,
    decode_send_header,
)
from tidemq.codec.shared_send import PlainAnswer
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    ResponseCode,
    StoreReadOnly,
    error_for_code,
)
from tidemq.formats.batch import ENTRY_OVERHEAD, count_entries, iter_batch, uniform_layout
from tidemq.formats.crecords import joined_offset_ids, offset_ids, uniform_entries
from tidemq.formats.hashing import tags_code
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    decode_properties,
    encode_properties,
    parse_property_text,
    property_text_error,
)
from tidemq.formats.record import HostAddr, pack_host
from tidemq.net import Connection
from tidemq.store.append import UniformBatch
from tidemq.store.flush import FlushService, FlushStatus
from tidemq.store.index_keys import KeyColumns
from tidemq.store.lmq_store import LMQ_PREFIX
from tidemq.store.message_store import MessageInput, PutResult

__all__ = ["GroupCommitWaiters", "SendProcessor"]

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_INNER_BATCH = 0x80
_SEND = RequestCode.SEND_MESSAGE
_SEND_V2 = RequestCode.SEND_MESSAGE_V2
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_SUCCESS = int(ResponseCode.SUCCESS)
_TIMEOUT = int(ResponseCode.FLUSH_DISK_TIMEOUT)
#: Returned by the fast path for "not the plain case: take the generic path".
_GENERIC = RemotingCommand(code=-1)
#: A durable-wait entry: connection, request, reply queue id, put result, batchUniqId.
_Pending = tuple[Connection, RemotingCommand, int, PutResult, str | None]
#: Uniform batches with fewer entries than this are split without arrays
#: (see ``SendProcessor._uniform_batch``).
_UNIFORM_MIN = 16
#: Batches with fewer entries than this are walked.
_UNIFORM_SMALL = 4
#: An entry's TOTALSIZE and BODYLENGTH; its PROPERTIESLENGTH (formats/batch).
_SIZE_AND_BLEN = struct.Struct(">i12xi")
_PLEN = struct.Struct(">h")
#: A uniform batch split: bodies, flags, stored property bytes, UNIQ_KEYs (or ``None``).
_Split = tuple[list[memoryview], list[int], list[bytes], list[str] | None]
#: ``MessageInput`` from a 5-tuple without the keyword-argument call.
_new_input: Callable[[tuple[Any, ...]], MessageInput] = functools.partial(
    tuple.__new__, MessageInput)


def _store_refusal(exc: MessageTooLarge | StoreReadOnly | ValueError) -> Exception:
    """The response error for a put the store refused: a read-only store is
    SERVICE_NOT_AVAILABLE, anything about the message itself MESSAGE_ILLEGAL."""
    code = (ResponseCode.SERVICE_NOT_AVAILABLE if isinstance(exc, StoreReadOnly)
            else ResponseCode.MESSAGE_ILLEGAL)
    return error_for_code(code, str(exc))


def _offset_ids(prefix: str, phys: Sequence[int]) -> str:
    """The offset message ids of a batch's records at ``phys`` joined by commas: each is
    ``prefix`` and the offset as 16 upper-case hex digits. Records of one size (``phys``
    a range) are one :func:`~tidemq.formats.crecords.offset_ids` call; beyond a few
    records, :func:`~tidemq.formats.crecords.joined_offset_ids` instead of a format per
    record."""
    if type(phys) is range:
        return offset_ids(prefix, phys.start, phys.step, len(phys))
    if len(phys) < _UNIFORM_SMALL:
        return ",".join(map(f"{prefix}%016X".__mod__, phys))
    return joined_offset_ids(prefix, phys)


def _first_layout(body: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(entry size, body length)`` when the batch is whole entries of the first entry's
    size and the first entry is well formed -- :func:`uniform_layout`'s checks of the
    first entry, not of the others -- else ``None``."""
    n_bytes = len(body)
    if n_bytes < ENTRY_OVERHEAD:
        return None
    size, blen = _SIZE_AND_BLEN.unpack_from(body)
    if size < ENTRY_OVERHEAD or n_bytes % size or not 0 <= blen <= size - ENTRY_OVERHEAD:
        return None
    (plen,) = _PLEN.unpack_from(body, 20 + blen)
    if ENTRY_OVERHEAD + blen + plen != size:
        return None
    return size, blen


_MULTI_DISPATCH_KEY = b"INNER_MULTI_DISPATCH\x01"
_NO_BATCH_FAN_OUT = ("INNER_MULTI_DISPATCH (LMQ fan-out) is not supported in batches: send "
                     "such messages one by one")


def _first_fans_out(plain: bytes | bytearray | memoryview) -> bool:
    """Whether the first message of a batch body (already counted, so well formed) names
    LMQs. Only the first: scanning every message's properties would cost an inner batch
    of small messages a tenth of its whole send path, and the TideMQ client refuses any
    batch holding such a message before sending it."""
    first = next(iter_batch(plain), None)
    return first is not None and _MULTI_DISPATCH_KEY in bytes(first.properties)


def _inner_count(plain: bytes | bytearray | memoryview) -> int:
    """:func:`count_entries` of an inner batch body. The usual batch of entries of one
    layout is proven with ten strided bytes slices -- every entry's TOTALSIZE,
    BODYLENGTH and PROPERTIESLENGTH bytes equal the first entry's, the check of
    :func:`uniform_layout` -- which keep the GIL (array gathers may drop it, and a busy
    dispatcher thread then holds the loop up). Anything else is counted by
    :func:`count_entries`, errors included."""
    layout = _first_layout(plain)
    if layout is not None:
        size, blen = layout
        n = len(plain) // size
        if n >= _UNIFORM_SMALL:
            data = plain if type(plain) is bytes else bytes(plain)
            for off in (0, 1, 2, 3, 16, 17, 18, 19, 20 + blen, 21 + blen):
                if data[off::size] != data[off : off + 1] * n:
                    break
            else:
                return n
    return count_entries(plain)


class GroupCommitWaiters:
    """SYNC_FLUSH sends waiting for their group commit, answered on the event loop.

    ``wait(end, item)`` queues ``item`` until the commit log is durable up to ``end``
    (ends arrive in increasing order: every append happens on the loop thread).
    ``complete(item, durable)`` is called on the loop for each, exactly once.
    """

    def __init__(self, flusher: FlushService, complete: Callable[[Any, bool], None]) -> None:
        self._flusher = flusher
        self._complete = complete
        self._queue: deque[tuple[int, Any]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asking = False
        flusher.add_flush_listener(self._flushed_threadsafe)

    def __len__(self) -> int:
        return len(self._queue)

    def wait(self, end: int, item: Any) -> bool:
        """Queue ``item``; ``False`` (nothing queued) when ``end`` is durable already."""
        if end <= self._flusher.flushed_offset:
            return False
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._queue.append((end, item))
        if not self._asking:
            self._asking = True
            loop.call_soon(self._ask)
        return True

    def _ask(self) -> None:
        """One flush request for everything queued in this loop iteration."""
        self._asking = False
        if self._queue:
            end = self._queue[-1][0]
            if end <= self._flusher.flushed_offset:
                return  # flushed meanwhile: the listener's callback answers them
            self._flusher.request(end).add_done_callback(
                functools.partial(self._requested_threadsafe, end))

    def _flushed_threadsafe(self, offset: int) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._flushed, offset)

    def _requested_threadsafe(self, end: int, fut: concurrent.futures.Future[FlushStatus]
                              ) -> None:
        if fut.cancelled() or fut.result() is not FlushStatus.FLUSHED:
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._failed, end)

    def _flushed(self, offset: int) -> None:
        queue, complete = self._queue, self._complete
        while queue and queue[0][0] <= offset:
            complete(queue.popleft()[1], True)

    def _failed(self, end: int) -> None:
        """The request for ``end`` timed out or failed: its waiters are answered."""
        queue, complete = self._queue, self._complete
        durable = self._flusher.flushed_offset
        while queue and queue[0][0] <= end:
            e, item = queue.popleft()
            complete(item, e <= durable)


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self._cluster_prop = f"CLUSTER\x01{cfg.broker_cluster_name}\x02".encode()
        self._region = cfg.region_id
        self._trace = "true" if cfg.trace_on else "false"
        self._max_body = cfg.max_message_size
        self._index = ctx.store_config.message_index_enable
        self._hosts: dict[str, HostAddr] = {}
        self._max_inflated = cfg.max_inner_batch_inflated_bytes
        self._topics = ctx.topics
        self._plain_topics: set[str] = set()
        self._sync = ctx.store_config.sync_flush
        self._waiters: GroupCommitWaiters | None = None
        self._id_host: HostAddr | None = None
        self._id_prefix = ""

    def register(self, server: object) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.process)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ validation

    def _header(self, cmd: RemotingCommand) -> SendMessageRequestHeader:
        return decoded(lambda: decode_send_header(cmd.code, cmd.ext_fields))

    def _queue(self, h: SendMessageRequestHeader) -> int:
        why = validate_topic(h.topic)
        if why is not None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
        topics = self.ctx.topics
        tc = topics.get(h.topic)
        if tc is None:
            tc = topics.create_on_send(h.topic, h.default_topic, h.default_topic_queue_nums)
            if tc is None:
                raise error_for_code(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please!",
                )
            self.ctx.topics_changed()
        if not tc.perm & PERM_WRITE or not self.ctx.config.broker_permission & PERM_WRITE:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the topic[{h.topic}] sending is forbidden")
        qid = h.queue_id
        if qid < 0:
            return random.randrange(tc.write_queue_nums)
        if qid >= max(tc.read_queue_nums, tc.write_queue_nums):
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{qid}] is illegal, topic:[{h.topic}] topicConfig.writeQueueNums:"
                f"[{tc.write_queue_nums}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        return qid

    def _message(self, body: bytes | bytearray | memoryview, props_text: str | None,
                 flag: int) -> tuple[MessageInput, bool]:
        """The store input for one message, and whether the producer waits for the flush."""
        if len(body) > self._max_body:
            raise MessageTooLarge(len(body), self._max_body)
        raw = props_text.encode("utf-8") if props_text else b""
        problem = property_text_error(props_text) if props_text else None
        if problem is not None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, problem)
        props = parse_property_text(props_text) if props_text else {}
        if "CLUSTER" not in props:
            raw += self._cluster_prop
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        keys: tuple[str, ...] = ()
        if self._index:
            uniq = props.get("UNIQ_KEY")
            ks = [k for k in props.get("KEYS", "").split(" ") if k]
            keys = ((uniq,) if uniq else ()) + tuple(ks)
        wait = props.get("WAIT", "true").lower() != "false"
        return MessageInput(body, raw, flag, tags_code(props.get("TAGS")), keys), wait

    def _batch(self, body: bytes | bytearray | memoryview
               ) -> tuple[Sequence[MessageInput], bool]:
        uniform = self._uniform_batch(body)
        if uniform is not None:
            return uniform
        msgs: list[MessageInput] = []
        wait = True
        try:
            for entry in iter_batch(body):
                props = entry.properties.tobytes().decode("utf-8") if entry.properties else None
                if props and "INNER_MULTI_DISPATCH\x01" in props:
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, _NO_BATCH_FAN_OUT)
                m, w = self._message(entry.body, props, entry.flag)
                msgs.append(m)
                wait = wait and w
        except (CorruptRecord, UnicodeDecodeError) as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
        if not msgs:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        return msgs, wait

    def _uniform_batch(self, body: bytes | bytearray | memoryview
                       ) -> tuple[Sequence[MessageInput], bool] | None:
        """:meth:`_batch` for the usual producer batch, or ``None`` (walk it entry by entry).

        The usual batch has entries of one layout whose property strings are the same
        bytes except for the UNIQ_KEY value (ASCII, no separator in it). Then the first
        entry's properties describe every entry (TAGS, KEYS, WAIT, CLUSTER), the values are
        valid UTF-8, and only the UNIQ_KEYs are read per entry -- which is what the walk
        would find, entry by entry. Anything else, errors included, is walked; so are
        batches of fewer than :data:`_UNIFORM_SMALL` entries, where checking the layout
        costs more than the walk. Batches of fewer than :data:`_UNIFORM_MIN` entries (an
        auto-batcher's at a low rate) are compared with bytes slices, larger ones with
        arrays and handed to the store as columns (:class:`UniformBatch`), never as an
        object per message.
        """
        first_size = int.from_bytes(body[:4], "big")
        if first_size <= 0 or len(body) < _UNIFORM_SMALL * first_size:
            return None
        # A large batch: the array split checks every entry's lengths with its properties.
        large = len(body) >= _UNIFORM_MIN * first_size
        layout = _first_layout(body) if large else uniform_layout(body)
        if layout is None:
            return None
        size, blen = layout
        if blen > self._max_body:
            return None
        data = body if isinstance(body, bytes) else bytes(body)
        n = len(data) // size
        pstart = ENTRY_OVERHEAD + blen
        plen = size - pstart
        first = data[pstart : pstart + plen]
        try:
            text = first.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if "INNER_MULTI_DISPATCH\x01" in text or property_text_error(text) is not None:
            return None
        props = parse_property_text(text)
        uniq = props.get("UNIQ_KEY")
        ustart = uend = plen
        if uniq is not None:
            ustart = text.find("UNIQ_KEY\x01") + 9
            uend = ustart + len(uniq)
            if (not text.isascii() or text.count("UNIQ_KEY\x01") != 1
                    or (ustart > 9 and text[ustart - 10] != "\x02")
                    or text[uend : uend + 1] not in ("", "\x02")):
                return None
        cluster = b"" if "CLUSTER" in props else self._cluster_prop
        if plen + len(cluster) > MAX_PROPERTIES_BYTES:
            return None
        ks = tuple(k for k in props.get("KEYS", "").split(" ") if k)
        wait = props.get("WAIT", "true").lower() != "false"
        if large:
            batch = self._array_split(data, n, size, blen, cluster, ustart, uend,
                                      tags_code(props.get("TAGS")), ks if self._index else None)
            return None if batch is None else (batch, wait)
        split = self._small_split(data, n, size, blen, cluster, ustart, uend)
        if split is None:
            return None
        bodies, flags, raws, uniqs = split
        keys: Iterable[tuple[str, ...]]
        if not self._index:
            keys = repeat((), n)
        elif uniqs is None:
            keys = repeat(ks, n)
        else:
            keys = [(u, *ks) for u in uniqs] if ks else list(zip(uniqs))
        tags = repeat(tags_code(props.get("TAGS")), n)
        return list(map(_new_input, zip(bodies, raws, flags, tags, keys, strict=True))), wait

    @staticmethod
    def _small_split(data: bytes, n: int, size: int, blen: int, cluster: bytes, ustart: int,
                     uend: int) -> _Split | None:
        """Bodies, flags, stored property bytes and UNIQ_KEYs (``None``: the entries have
        none) of a small batch of uniform layout, as :meth:`_array_split` checks it, with
        bytes slices: for a few entries, array set-up costs more than the comparisons."""
        pstart = ENTRY_OVERHEAD + blen
        plen = size - pstart
        first = data[pstart : pstart + plen]
        head, tail = first[:ustart], first[uend:]
        view = memoryview(data)
        bodies: list[memoryview] = []
        flags: list[int] = []
        raws: list[bytes] = []
        uniqs: list[str] | None = None if ustart == uend else []
        bstart = ENTRY_OVERHEAD - 2
        for base in range(0, n * size, size):
            props = data[base + pstart : base + size]
            if props[:ustart] != head or props[uend:] != tail:
                return None
            if uniqs is not None:
                value = props[ustart:uend]
                if not value.isascii() or 1 in value or 2 in value:
                    return None
                uniqs.append(value.decode("ascii"))
            bodies.append(view[base + bstart : base + bstart + blen])
            flags.append(int.from_bytes(data[base + 12 : base + 16], "big", signed=True))
            raws.append(props + cluster if cluster else props)
        return bodies, flags, raws, uniqs

    @staticmethod
    def _array_split(data: bytes, n: int, size: int, blen: int, cluster: bytes, ustart: int,
                     uend: int, tags: int, keys: tuple[str, ...] | None) -> UniformBatch | None:
        """The messages of a batch whose first entry is well formed (:func:`_first_layout`)
        as columns over ``data``, or ``None`` unless every entry repeats the first one's
        length fields (then each is well formed, as :func:`uniform_layout` proves it) and
        property bytes except the UNIQ_KEY value (``ustart:uend`` of the properties;
        empty: the entries have none), and that value is separator-free ASCII.
        ``keys``: the KEYS every entry has (``None``: nothing is indexed)."""
        if not uniform_entries(data, n, size, blen, ustart, uend):
            return None
        uniq = None
        if ustart != uend:  # uniform_entries let 0x01 through: a pair it splits is walked
            pstart = ENTRY_OVERHEAD + blen
            rows = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
            uniq = rows[:, pstart + ustart : pstart + uend]
            if (uniq == 1).any():
                return None
        key_columns = None
        if keys is not None and (keys or ustart != uend):
            key_columns = KeyColumns(uniq, keys, n)
        return UniformBatch(data, n, size, blen, cluster, tags, key_columns)

    def _lmq_targets(self, h: SendMessageRequestHeader) -> list[str]:
        if self.store.lmq is None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_DISPATCH needs enableLmq=true and "
                                 "enableMultiDispatch=true on this broker")
        props = decode_properties((h.properties or "").encode("utf-8"))
        if "INNER_MULTI_QUEUE_OFFSET" in props:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_QUEUE_OFFSET is assigned by the broker")
        targets = parse_lmq_targets(props.get("INNER_MULTI_DISPATCH", ""), h.topic,
                                    self.ctx.store_config.max_lmq_targets_per_message)
        if isinstance(targets, str):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, targets)
        return targets

    def _born_host(self, address: str) -> HostAddr:
        host = self._hosts.get(address)
        if host is None:
            if len(self._hosts) > 65536:
                self._hosts.clear()
            try:
                host = pack_host(address)
            except ValueError:
                host = self.store.store_host
            self._hosts[address] = host
        return host

    # ------------------------------------------------------------------ processing

    def _inner_batch(self, topic: str, qid: int, text: str | None, sys_flag: int,
                     born_timestamp: int, body: bytes | bytearray | memoryview, born: HostAddr
                     ) -> tuple[PutResult, bool, str] | None:
        """Store a batch sent to a BatchCQ topic as ONE record (RIP-26), or ``None`` when it
        is not an inner batch (no batch-level UNIQ_KEY: split it as an outer batch). Also
        whether the producer waits for the flush, and the batch-level UNIQ_KEY.
        ``text``, ``sys_flag``, ``born_timestamp``: the send header's fields.

        The body is never trusted: a compressed body is inflated once with a hard output
        cap (decompression bombs stop there), the entries are counted with a structural
        walk (a uniform-size proof for the usual shape), and a claimed INNER_NUM must
        match. Only the original bytes are stored; consumers decompress.
        """
        problem = property_text_error(text) if text else None
        if problem is not None:  # stored as the record's properties
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, problem)
        props = decode_properties(text.encode("utf-8")) if text else {}
        uniq = props.get("UNIQ_KEY")
        if uniq is None:
            return None
        plain: bytes | bytearray | memoryview = body
        if sys_flag & SYSFLAG_COMPRESSED:
            try:
                ctype = compression_of(sys_flag) or CompressionType.ZLIB
                plain = decompress(body, ctype, self._max_inflated)
            except CorruptRecord as exc:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                     f"inner batch body rejected: {exc.reason}") from None
        try:
            count = _inner_count(plain)
        except CorruptRecord as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"inner batch body is malformed: {exc}") from None
        if "INNER_MULTI_DISPATCH" in props or _first_fans_out(plain):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, _NO_BATCH_FAN_OUT)
        claimed = props.pop("INNER_NUM", None)
        props.pop("INNER_BASE", None)
        if claimed is not None and claimed != str(count):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM says {claimed} but the batch holds {count} messages")
        if count == 0 or count > 0x7FFF:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"an inner batch holds 1..32767 messages, not {count}")
        props.setdefault("CLUSTER", self.ctx.config.broker_cluster_name)
        raw = encode_properties(props)
        keys = (uniq, *(k for k in props.get("KEYS", "").split(" ") if k))
        wait = props.get("WAIT", "true").lower() != "false"
        result = self.store.put_inner_batch(
            topic, qid, body, raw, count, tags_code=tags_code(props.get("TAGS")),
            keys=keys if self._index else (), sys_flag=sys_flag,
            born_timestamp=born_timestamp, born_host=born, wait_flush=False)
        self.ctx.stats.on_put(topic, count, len(body))
        return result, wait, uniq

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code in (_SEND_V2, _SEND):
            fields = decode_send_fields(code, cmd.ext_fields)
            if fields is not None:
                response = self._fast(conn, cmd, fields)
                if response is not _GENERIC:
                    return response
        elif code == _SEND_BATCH:
            fields = decode_send_fields(code, cmd.ext_fields, batch=True)
            if fields is not None:
                response = self._fast_batch(conn, cmd, fields)
                if response is not _GENERIC:
                    return response
        return self._process(conn, cmd)

    def child(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
              ) -> RemotingCommand | PlainAnswer | bool | None:
        """A shared send parent's child from ``fields`` already read (its ext may be
        empty): the fast path's answer -- a success answered at once as a
        :class:`~tidemq.codec.shared_send.PlainAnswer` (no command made for it),
        ``None`` when answered later (SYNC_FLUSH) -- or ``False`` when it is not the
        plain case: nothing was done, and the caller runs the registered processor on
        the standard child."""
        response = self._fast(conn, cmd, fields, plain=True)
        return False if response is _GENERIC else response

    def _plain_topic(self, topic: str) -> bool:
        """Whether sends to ``topic`` may take the fast path as far as its name goes."""
        if validate_topic(topic) is not None or topic.startswith((RETRY_PREFIX, LMQ_PREFIX)):
            return False
        if len(self._plain_topics) > 65536:
            self._plain_topics.clear()
        self._plain_topics.add(topic)
        return True

    def _writable(self, topic: str, qid: int) -> bool:
        """The fast paths' checks of the topic before the body: it exists, its name
        needs no special handling, topic and broker are writable, the queue exists."""
        tc = self._topics.get(topic)
        return (tc is not None and (topic in self._plain_topics or self._plain_topic(topic))
                and bool(tc.perm & PERM_WRITE)
                and bool(self.ctx.config.broker_permission & PERM_WRITE)
                and (qid < tc.read_queue_nums or qid < tc.write_queue_nums))

    @overload
    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: Literal[False] = False) -> RemotingCommand | None: ...
    @overload
    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: Literal[True]) -> RemotingCommand | PlainAnswer | None: ...

    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: bool = False) -> RemotingCommand | PlainAnswer | None:
        """A plain single send, or :data:`_GENERIC` when it is not one (see the module
        docstring); ``plain``: a success answered at once is a
        :class:`~tidemq.codec.shared_send.PlainAnswer`. Nothing is changed before the
        append, so falling back is safe."""
        topic, qid, sys_flag, born_timestamp, flag, text, reconsume = fields
        body = cmd.body
        if (sys_flag & SYSFLAG_INNER_BATCH or not self._writable(topic, qid)
                or self.store.is_batch_topic(topic) or len(body) > self._max_body):
            return _GENERIC
        if text:
            if ("INNER_" in text or "DELAY\x01" in text or "TIMER_" in text
                    or property_text_error(text) is not None):
                return _GENERIC
            try:
                raw = text.encode("utf-8")
            except UnicodeEncodeError:
                return _GENERIC
            props = parse_property_text(text)
            if "CLUSTER" not in props:
                raw += self._cluster_prop
            if len(raw) > MAX_PROPERTIES_BYTES:
                return _GENERIC
            keys: tuple[str, ...] = ()
            if self._index:
                uniq = props.get("UNIQ_KEY")
                ks = props.get("KEYS")
                keys = (uniq,) if uniq else ()
                if ks:
                    keys += tuple(k for k in ks.split(" ") if k)
            wait = props.get("WAIT", "true").lower() != "false"
            msg = _new_input((body, raw, flag, tags_code(props.get("TAGS")), keys))
        else:
            wait = True
            msg = _new_input((body, self._cluster_prop, flag, 0, ()))
        try:
            result = self.store.put(
                topic, qid, msg, sys_flag=sys_flag, born_timestamp=born_timestamp,
                born_host=self._born_host(conn.remote_address), reconsume_times=reconsume,
                wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(topic, 1, result.sizes[0])
        if wait and self._sync and self._durability().wait(
                result.phys_offsets[0] + result.sizes[0], (conn, cmd, qid, result, None)):
            return None
        if plain:
            return PlainAnswer(self._msg_id(result), qid, result.queue_offset, self._region,
                               self._trace)
        return self._response(cmd, qid, result, _SUCCESS)

    def _fast_batch(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
                    ) -> RemotingCommand | None:
        """A SEND_BATCH_MESSAGE without the header schema object, or :data:`_GENERIC`.

        Taken when every check the generic path makes before it reads the body passes
        (topic name, existing topic, permissions, queue id, INNER_* only on a BatchCQ
        topic, no retry topic, no DELAY/TIMER_ property); the body is then handled by the
        generic path's own code, so its errors are the generic path's."""
        topic, qid, sys_flag, born_timestamp, _flag, text, reconsume = fields
        if (not self._writable(topic, qid)
                or (text and ("DELAY\x01" in text or "TIMER_" in text))):
            return _GENERIC
        batch_cq = self.store.is_batch_topic(topic)
        if not batch_cq and (sys_flag & SYSFLAG_INNER_BATCH
                             or (text and "INNER_NUM\x01" in text)):
            return _GENERIC
        born = self._born_host(conn.remote_address)
        try:
            inner = (self._inner_batch(topic, qid, text, sys_flag, born_timestamp, cmd.body,
                                       born) if batch_cq else None)
            if inner is not None:
                return self._finish(conn, cmd, qid, inner[0], inner[1], inner[2])
            msgs, wait = self._batch(cmd.body)
            result = self.store.put_batch(
                topic, qid, msgs, sys_flag=sys_flag, born_timestamp=born_timestamp,
                born_host=born, reconsume_times=reconsume, wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(topic, result.count, sum(result.sizes))
        return self._finish(conn, cmd, qid, result, wait)

    def _process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """The generic path: every feature and every error."""
        h = self._header(cmd)
        if self.store.is_lmq(h.topic):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"{h.topic} is a light message queue: send to its parent "
                                 "topic with INNER_MULTI_DISPATCH naming it")
        qid = self._queue(h)
        born = self._born_host(conn.remote_address)
        batch_cq = self.store.is_batch_topic(h.topic)
        if h.sys_flag & SYSFLAG_INNER_BATCH and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_BATCH flag on {h.topic}, which is not a BatchCQ topic")
        if h.properties and "INNER_NUM\x01" in h.properties and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM on {h.topic}, which is not a BatchCQ topic")
        is_batch = h.batch or cmd.code == RequestCode.SEND_BATCH_MESSAGE
        # remoting.md §2.7 steps 5-6: a retry may go to the DLQ, a delay to its parking queue.
        h, qid, reply_qid = route_send(self.ctx, h, qid, cmd.version, is_batch)
        try:
            inner = (self._inner_batch(h.topic, qid, h.properties, h.sys_flag,
                                       h.born_timestamp, cmd.body, born)
                     if is_batch and batch_cq else None)
            if inner is not None:
                props = cmd.ext_fields.get("i") or cmd.ext_fields.get("properties") or ""
                uniq = decode_properties(props.encode()).get("UNIQ_KEY")
                return self._finish(conn, cmd, qid, inner[0], inner[1], uniq)
            if is_batch:
                msgs, wait = self._batch(cmd.body)
                result = self.store.put_batch(
                    h.topic, qid, msgs, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=False)
            elif h.properties and "INNER_MULTI_DISPATCH\x01" in h.properties:
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                lmqs = self._lmq_targets(h)
                result = self.store.put_multi_dispatch(
                    h.topic, qid, msg, lmqs, sys_flag=h.sys_flag,
                    born_timestamp=h.born_timestamp, born_host=born,
                    reconsume_times=h.reconsume_times or 0, wait_flush=False)
            else:
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                result = self.store.put(
                    h.topic, qid, msg, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(h.topic, result.count, sum(result.sizes))
        return self._finish(conn, cmd, reply_qid, result, wait)

    def _durability(self) -> GroupCommitWaiters:
        waiters = self._waiters
        if waiters is None:
            flusher = self.store.flusher
            assert flusher is not None  # a started store
            waiters = self._waiters = GroupCommitWaiters(flusher, self._durable)
        return waiters

    def _durable(self, item: _Pending, durable: bool) -> None:
        conn, cmd, qid, result, uniq = item
        conn.send_response(self._response(cmd, qid, result,
                                          _SUCCESS if durable else _TIMEOUT, uniq))

    def _finish(self, conn: Connection, cmd: RemotingCommand, qid: int, result: PutResult,
                wait: bool, uniq: str | None = None) -> RemotingCommand | None:
        """The reply (``None``: answered at the group commit); ``uniq``: its batchUniqId."""
        if wait and self._sync and self._durability().wait(
                result.phys_offsets[-1] + result.sizes[-1], (conn, cmd, qid, result, uniq)):
            return None
        return self._response(cmd, qid, result, _SUCCESS, uniq)

    def _msg_id(self, result: PutResult) -> str:
        """The offset message id(s) of what ``result`` stored, joined by commas."""
        host = self.store.store_host
        if host is not self._id_host:  # the offset id of physical offset p is prefix + %016X
            self._id_prefix = encode_offset_msg_id(host, 0)[:-16]
            self._id_host = host
        prefix = self._id_prefix
        phys = result.phys_offsets
        return f"{prefix}{phys[0]:016X}" if len(phys) == 1 else _offset_ids(prefix, phys)

    def _response(self, cmd: RemotingCommand, qid: int, result: PutResult,
                  code: int, batch_uniq: str | None = None) -> RemotingCommand:
        ext = {
            "msgId": self._msg_id(result),
            "queueId": str(qid),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self._region,
            "TRACE_ON": self._trace,
        }
        if batch_uniq:
            ext["batchUniqId"] = batch_uniq
        return RemotingCommand(
            code=code, opaque=cmd.opaque, flag=FLAG_RESPONSE,
            remark=None if code == _SUCCESS else "flush disk timeout", ext_fields=ext,
            serialize_type=cmd.serialize_type)
