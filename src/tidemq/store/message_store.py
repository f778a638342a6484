"""MessageStore: the store's façade -- put, get, offsets, hooks, start and shutdown.

Synchronous code with no asyncio. Background threads: the flusher (``store.flush``), the
dispatcher (``store.dispatch``) and a housekeeper that flushes consume queues, writes the
checkpoint and runs retention. Callers above the store learn about new data through
``on_dispatched`` hooks and about durability through the ``durable`` future of a put.
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import mmap
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from tidemq.errors import CorruptRecord, MessageTooLarge, StoreReadOnly
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import (
    MAGIC_V1,
    MAX_V1_TOPIC_BYTES,
    MIN_RECORD_SIZE,
    HostAddr,
    Record,
    decode_record,
    encode_record,
    fixed_v4_with_hosts,
    record_size,
)
from tidemq.formats.record import crc32 as _crc32
from tidemq.formats.record.batch import encode_batch, encode_uniform_batch, patch_batch
from tidemq.store.append import MessageInput, UniformBatch
from tidemq.store.checkpoint import Checkpoint, StoreLock
from tidemq.store.commitlog import CommitLog
from tidemq.store.concurrent_dispatch import ConcurrentDispatcher
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import DispatchBatch, Dispatcher, DispatchHook, Row
from tidemq.store.flush import FlushGroup, FlushService, FlushStatus
from tidemq.store.index import KeyIndex
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_store import LMQ_PREFIX, LmqStore
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.reader import GetResult, InnerTags, QueueReader
from tidemq.store.recovery import RecoveryReport, recover
from tidemq.store.retention import DiskUsage, RetentionPolicy, RetentionReport, RetentionService
from tidemq.store.threads import NamedThread

__all__ = ["MessageInput", "MessageStore", "PutResult", "PutStatus"]

log = logging.getLogger(__name__)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
INNER_BATCH_FLAGS = 0x40 | 0x80  # NEED_UNWRAP | INNER_BATCH


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"


class PutResult(NamedTuple):
    """What a put stored. A tuple: the hot path builds one with ``tuple.__new__``."""

    status: PutStatus
    queue_offset: int
    phys_offsets: Sequence[int]
    sizes: Sequence[int]
    store_timestamp: int
    #: SYNC_FLUSH with ``wait_flush``: the group commit that makes the put durable.
    flush_group: FlushGroup | None = None
    #: Monotonic time after which waiting for ``flush_group`` gives FLUSH_DISK_TIMEOUT.
    flush_deadline: float = 0.0

    @property
    def count(self) -> int:  # type: ignore[override]  # shadows tuple.count on purpose
        """Records stored (1 for a single message or an inner batch)."""
        return len(self.phys_offsets)

    @property
    def durable(self) -> concurrent.futures.Future[FlushStatus] | None:
        """SYNC_FLUSH: a future completed with the flush status (the same object on each
        access); ``None`` under ASYNC_FLUSH or without ``wait_flush``."""
        group = self.flush_group
        return None if group is None else group.future(self.flush_deadline)

    def wait_durable(self, timeout: float | None = None) -> PutStatus:
        """Block until SYNC_FLUSH confirms (or times out); ``PUT_OK`` under ASYNC_FLUSH."""
        group = self.flush_group
        if group is None:
            return self.status
        flushed = group.wait(self.flush_deadline, timeout)
        return PutStatus.PUT_OK if flushed is FlushStatus.FLUSHED else (
            PutStatus.FLUSH_DISK_TIMEOUT)


_new_result = tuple.__new__
_PUT_OK = PutStatus.PUT_OK
_monotonic = time.monotonic
_time_ns = time.time_ns
_FIXED_V4 = fixed_v4_with_hosts("8s")  # each host as its 8 packed bytes
#: Whole-record layouts kept per topic, one per (body length, properties length) seen first;
#: a topic's puts of other shapes are packed and joined.
LAYOUTS_PER_TOPIC = 64
#: The 2-byte PROPERTIESLENGTH of the usual lengths (longer ones are packed per put).
_PROPS_LEN = [_I16.pack(n) for n in range(4096)]


def _record_layout(tail: bytes, blen: int, plen: int) -> Callable[..., None]:
    """``pack_into`` of a whole IPv4 V1 record of ``tail``'s topic with a ``blen``-byte
    body and ``plen`` bytes of properties: the fixed fields, BODY, TOPICLENGTH + TOPIC,
    PROPERTIESLENGTH and PROPERTIES written into the map by one C call."""
    return struct.Struct(f"{_FIXED_V4.format}{blen}s{len(tail)}sh{plen}s").pack_into


def _pack_joined(mm: mmap.mmap, pos: int, *fields: object) -> None:
    """What a record layout writes, for properties given as a memoryview (``s`` takes no
    memoryview): the fixed fields packed, then the variable parts joined behind them."""
    size = fields[0]
    assert isinstance(size, int)
    mm[pos : pos + size] = b"".join((  # type: ignore[arg-type]
        _FIXED_V4.pack(*fields[:15]), fields[15], fields[16], _I16.pack(fields[17]),
        fields[18]))


class MessageStore:
    """One store root directory, owned by one process."""

    def __init__(self, config: StoreConfig, *, store_host: HostAddr | None = None,
                 clock: Callable[[], int] = wall_clock_ms,
                 disk_usage: DiskUsage | None = None) -> None:
        self.config = config
        self.layout = StoreLayout(config.store_path_root_dir)
        self._running = False
        #: Bodies up to this size take :meth:`put`'s fast path (-1: none, not running).
        self._put_limit = -1
        self.store_host = store_host or HostAddr(b"\x7f\x00\x00\x01", 10911)
        self.clock = clock
        self.commitlog = CommitLog(self.layout, config.mapped_file_size_commit_log,
                                   preallocate=config.preallocate_segments)
        self.queues = ConsumeQueueSet(self.layout, config.mapped_file_size_consume_queue,
                                      config.mapper_file_size_batch_consume_queue)
        self._lmq_next: dict[str, int] = {}
        self.index: KeyIndex | None = None
        if config.message_index_enable:
            self.index = KeyIndex(self.layout, max_hash_slot_num=config.max_hash_slot_num,
                                  max_index_num=config.max_index_num)
        self.retention = RetentionService(self.commitlog, self.queues, self.index,
                                          RetentionPolicy.from_config(config))
        if disk_usage is not None:
            self.retention.disk_usage = disk_usage
        self._lock = StoreLock(self.layout.lock_file)
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._last_ts = 0
        self._hooks: list[DispatchHook] = []
        self._housekeeper: threading.Thread | None = None
        self._stop_event = threading.Event()
        self.dispatcher: Dispatcher | None = None
        self.flusher: FlushService | None = None
        self.reader = QueueReader(self.commitlog, self.queues)
        self.recovery_report: RecoveryReport | None = None
        self.put_messages = 0
        #: Per topic: fixed record size, TOPICLENGTH + TOPIC, layouts by body and props
        #: length, and the ``(topic, queue_id)`` key of each queue by queue id.
        self._topic_shapes: dict[str, tuple[int, bytes, dict[int, Callable[..., None]],
                                            dict[int, tuple[str, int]]]] = {}
        self._sync_flush = config.sync_flush
        self._flush_timeout = config.sync_flush_timeout / 1000
        self._wall_clock = clock is wall_clock_ms
        self._index_keys = self.index is not None
        # Bound in start(): the dispatcher the hot path hands rows to, and its queue.
        self._live: Dispatcher
        self._pending_append: Callable[[Row], None]
        self._join_flush: Callable[[int], FlushGroup]

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RecoveryReport:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            clean = not self.layout.abort_file.exists()
            self.commitlog.load()
            self.queues.load()
            if self.config.enable_lmq and self.config.enable_multi_dispatch:
                self.queues.lmq = LmqStore(self.layout.lmq_dir)
            checkpoint = Checkpoint.read(self.layout.checkpoint_file)
            if self.index is not None:
                self.index.load()
                if not clean:  # only what the last checkpoint flushed is trusted
                    self.index.truncate(checkpoint.dispatched_phy_offset)
            report = recover(self.commitlog, self.queues, self.index, checkpoint, clean=clean,
                             check_crc=self.config.check_crc_on_recover)
            if self.index is not None:
                self.index.truncate(report.end_offset)
            self.retention.correct_min_offsets()
        except BaseException:
            self._lock.release()
            raise
        (log.warning if report.bytes_dropped else log.info)("%s", report)
        self.recovery_report = report
        for cq in self.queues.all():
            self._next_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        self._last_ts = max(checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                            report.max_store_timestamp)
        self.layout.abort_file.touch()
        self.flusher = FlushService(self.commitlog, self.config, self._on_flushed)
        self.dispatcher = self._new_dispatcher()
        for hook in self._hooks:
            self.dispatcher.add_hook(hook)
        self._live = self.dispatcher
        self._pending_append = self.dispatcher.pending.append
        self._join_flush = self.flusher.join
        self.flusher.start()
        self.dispatcher.start()
        self.commitlog.start_warmer()
        self._stop_event.clear()
        self._housekeeper = NamedThread(target=self._housekeep, name="tidemq-housekeep",
                                        daemon=True)
        self._housekeeper.start()
        self._running = True
        self._put_limit = self._fast_put_limit()
        return report

    @property
    def store_host(self) -> HostAddr:
        """The address written into every record as STOREHOST (the broker sets it once it
        knows its listening port, possibly after :meth:`start`)."""
        return self._store_host

    @store_host.setter
    def store_host(self, host: HostAddr) -> None:
        self._store_host = host
        self._store_host_bytes = host.ip + _I32.pack(host.port)
        if self._running:
            self._put_limit = self._fast_put_limit()

    def _fast_put_limit(self) -> int:
        """:meth:`put`'s fast path writes the V1 (IPv4) layout only."""
        return self.config.max_message_size if len(self._store_host.ip) == 4 else -1

    def _new_dispatcher(self) -> Dispatcher:
        config = self.config
        args = (self.queues, self.index, self._confirm_offset, self.commitlog.max_offset,
                config.dispatch_lag_warn_ms, self.clock, config.dispatch_linger_ms)
        if not config.enable_build_consume_queue_concurrently:
            return Dispatcher(*args)
        return ConcurrentDispatcher(*args, workers=config.dispatch_workers,
                                    ring_size=config.dispatch_ring_size,
                                    round_records=config.dispatch_round_records)

    def shutdown(self) -> None:
        """Flush, dispatch everything, write the checkpoint, remove the abort marker."""
        if not self._running:
            return
        self._running = False
        self._put_limit = -1
        self._stop_event.set()
        if self._housekeeper is not None:
            self._housekeeper.join()
        assert self.flusher is not None and self.dispatcher is not None
        self.commitlog.stop_warmer()
        self.flusher.stop()
        self.dispatcher.drain()
        self.dispatcher.stop()
        clean = self.dispatcher.error is None and self.commitlog.werr is None
        try:
            self._write_checkpoint()
        except (OSError, StoreReadOnly) as exc:  # a failed queue flush raises StoreReadOnly
            log.error("final checkpoint failed: %s", exc)
            clean = False
        if clean:
            self.layout.abort_file.unlink(missing_ok=True)
        self.queues.close()
        if self.index is not None:
            self.index.close()
        self.commitlog.close()
        self._lock.release()

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def status(self) -> str:
        if self.commitlog.werr is not None:
            return "WRITE_ERROR"
        if self.commitlog.disk_full is not None:
            return "DISK_FULL"
        if self.dispatcher is not None and self.dispatcher.error is not None:
            return "DISPATCH_ERROR"
        return "RUNNING" if self._running else "STOPPED"

    def add_dispatch_hook(self, hook: DispatchHook) -> None:
        """``hook(topic, queue_id, new_max_offset)``, from the dispatcher thread."""
        self._hooks.append(hook)
        if self.dispatcher is not None:
            self.dispatcher.add_hook(hook)

    # ------------------------------------------------------------------ writing

    def _confirm_offset(self) -> int:
        if self.config.sync_flush and self.flusher is not None:
            return self.flusher.flushed_offset
        return self.commitlog.max_offset

    def _on_flushed(self, _offset: int) -> None:
        if self.config.sync_flush and self.dispatcher is not None:
            self.dispatcher.wake()

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._next_offsets.get((topic, queue_id), 0)

    def put(
        self, topic: str, queue_id: int, msg: MessageInput, *, sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, reconsume_times: int = 0,
        wait_flush: bool = True,
    ) -> PutResult:
        """Append one message. The hot path: written flat, one copy into the map."""
        body, props, flag, tags, keys = msg
        shape = self._topic_shapes.get(topic)
        blen = len(body)
        plen = len(props)
        if born_host is None:
            bhost = self._store_host_bytes
        elif len(born_host.ip) == 4:
            bhost = born_host.ip + _I32.pack(born_host.port)
        else:
            bhost = b""
        if shape is None or blen > self._put_limit or not bhost or plen > 0x7FFF:
            # Unknown topic, V2 or IPv6 layout, not running, too large: the general path.
            if shape is None and len(topic.encode()) <= MAX_V1_TOPIC_BYTES:
                tb = topic.encode()
                self._topic_shapes[topic] = (MIN_RECORD_SIZE + len(tb), bytes([len(tb)]) + tb,
                                             {}, {})
            return self.put_batch(topic, queue_id, (msg,), sys_flag=sys_flag,
                                  born_timestamp=born_timestamp, born_host=born_host,
                                  reconsume_times=reconsume_times, wait_flush=wait_flush)
        fixed, tail, layouts, queue_keys = shape
        pack = layouts.get(blen << 15 | plen) if type(body) is bytes else None  # "s" wants bytes
        if pack is None and len(layouts) < LAYOUTS_PER_TOPIC and type(body) is bytes:
            pack = layouts[blen << 15 | plen] = _record_layout(tail, blen, plen)
        size = fixed + blen + plen
        crc = _crc32(body) & 0x7FFFFFFF
        key = queue_keys.get(queue_id)
        if key is None:  # one key object per queue: a row in flight is one object, not two
            key = queue_keys[queue_id] = (topic, queue_id)
        cl = self.commitlog
        lock = cl.lock
        lock.acquire()  # not `with`: its __exit__ call is a measurable cost on this path
        try:
            now = _time_ns() // 1_000_000 if self._wall_clock else self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            qo = self._next_offsets.get(key, 0)
            segs = cl.segments
            if segs and cl.werr is None and cl.disk_full is None:
                seg = segs[-1]
                pos = seg.wrote
                if size + 8 > seg.size - pos:  # BLANK_SIZE: the segment is full
                    seg, pos = cl.reserve(size)
            else:
                seg, pos = cl.reserve(size)
            phys = seg.base + pos
            if pack is None:  # many shapes, or not bytes: the fixed fields packed, then joined
                seg.mm[pos : pos + size] = b"".join((
                    _FIXED_V4.pack(size, MAGIC_V1, crc, queue_id, flag, qo, phys,
                                   sys_flag & ~0x30, born_timestamp or ts, bhost, ts,
                                   self._store_host_bytes, reconsume_times, 0, blen),
                    body, tail, _PROPS_LEN[plen] if plen < 4096 else _I16.pack(plen), props))
            else:
                try:  # one C call writes the record straight into the map
                    pack(seg.mm, pos, size, MAGIC_V1, crc, queue_id, flag, qo, phys,
                         sys_flag & ~0x30, born_timestamp or ts, bhost, ts,
                         self._store_host_bytes, reconsume_times, 0, blen, body, tail, plen,
                         props)
                except BaseException:
                    seg.mm[pos : pos + size] = bytes(size)  # pack_into may have written a part
                    if type(props) is bytes:
                        raise  # a field out of range: nothing stored, as before the write
                    _pack_joined(seg.mm, pos, size, MAGIC_V1, crc, queue_id, flag, qo, phys,
                                 sys_flag & ~0x30, born_timestamp or ts, bhost, ts,
                                 self._store_host_bytes, reconsume_times, 0, blen, body, tail,
                                 plen, props)  # memoryview properties: joined instead
            end = phys + size
            seg.wrote = pos + size
            self._next_offsets[key] = qo + 1
            self._pending_append((end, ts, key, qo, phys, size, tags,
                                  keys if self._index_keys else None))
            if self._live.idle:
                self._live.poke()
            self.put_messages += 1
        finally:
            lock.release()
        if wait_flush and self._sync_flush:
            return _new_result(PutResult, (_PUT_OK, qo, (phys,), (size,), ts,
                                           self._join_flush(end),
                                           _monotonic() + self._flush_timeout))
        return _new_result(PutResult, (_PUT_OK, qo, (phys,), (size,), ts, None, 0.0))

    def _result(self, qo: int, phys: Sequence[int], sizes: Sequence[int], ts: int, end: int,
                wait_flush: bool) -> PutResult:
        if wait_flush and self._sync_flush:
            return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, self._join_flush(end),
                                           _monotonic() + self._flush_timeout))
        return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, None, 0.0))

    def put_batch(
        self, topic: str, queue_id: int, msgs: Sequence[MessageInput], *, sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, reconsume_times: int = 0,
        wait_flush: bool = True,
    ) -> PutResult:
        """Append ``msgs`` to ``(topic, queue_id)`` with consecutive queue offsets.

        A :class:`~tidemq.store.append.UniformBatch` is encoded column-wise and its keys
        reach the index as columns; the bytes stored are the same."""
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")
        if not msgs:
            raise ValueError("put_batch needs at least one message")
        limit = self.config.max_message_size
        store_host = self._store_host
        enc = None
        uniform = msgs if type(msgs) is UniformBatch else None
        if uniform is not None:
            if uniform.body_length > limit:
                raise MessageTooLarge(uniform.body_length, limit)
            enc = encode_uniform_batch(topic, queue_id, uniform, sys_flag=sys_flag,
                                       born_timestamp=born_timestamp or self.clock(),
                                       born_host=born_host or store_host,
                                       store_host=store_host, reconsume_times=reconsume_times)
        keys: Sequence[tuple[str, ...]] | None
        tags: Sequence[int]
        if uniform is not None and enc is not None:
            n = uniform.n
            tags = [uniform.tags_code] * n
            keys = uniform.keys
        else:
            bodies, props, flags, tags, keys = zip(*msgs, strict=True)  # as columns
            body_lengths = set(map(len, bodies))
            biggest = max(body_lengths)
            if biggest > limit:
                raise MessageTooLarge(biggest, limit)
            enc = encode_batch(topic, queue_id, bodies, props, flags, sys_flag=sys_flag,
                               born_timestamp=born_timestamp or self.clock(),
                               born_host=born_host or store_host, store_host=store_host,
                               reconsume_times=reconsume_times, body_lengths=body_lengths)
            n = len(bodies)
        key = (topic, queue_id)
        cl = self.commitlog
        with cl.lock:
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            qo = self._next_offsets.get(key, 0)
            seg, pos = cl.reserve(len(enc.buf))
            phys_base = seg.base + pos
            patch_batch(enc, qo, phys_base, ts)
            cl.write(seg, pos, enc.buf)
            self._next_offsets[key] = qo + n
            end = phys_base + len(enc.buf)
            starts = enc.starts
            if type(starts) is range:
                phys: Sequence[int] = range(phys_base, end, starts.step)
            else:
                phys = [phys_base + s for s in starts]
            self._live.submit(DispatchBatch(topic, queue_id, qo, phys, enc.sizes, tags, ts, end,
                                            keys if self._index_keys else None))
            self.put_messages += n
        return self._result(qo, phys, enc.sizes, ts, end, wait_flush)

    @property
    def lmq(self) -> LmqStore | None:
        """The light-message-queue store, when ``enableLmq`` and ``enableMultiDispatch``."""
        return self.queues.lmq

    def is_lmq(self, topic: str) -> bool:
        return self.queues.lmq is not None and topic.startswith(LMQ_PREFIX)

    def put_multi_dispatch(
        self, topic: str, queue_id: int, msg: MessageInput, lmqs: Sequence[str], *,
        sys_flag: int = 0, born_timestamp: int = 0, born_host: HostAddr | None = None,
        reconsume_times: int = 0, wait_flush: bool = True,
    ) -> PutResult:
        """Append one message that is also indexed into every LMQ of ``lmqs`` (RIP-28).

        The LMQ offsets are assigned under the append lock -- the one lock every parent
        queue shares -- and written into ``INNER_MULTI_QUEUE_OFFSET`` (upstream lost
        messages when this used the per-queue lock, store.md §4.2). They advance only
        after the record is in the segment. ``msg.properties`` must already carry
        ``INNER_MULTI_DISPATCH`` naming exactly ``lmqs``; names are validated upstream.
        """
        lmq = self.queues.lmq
        if lmq is None:
            raise ValueError("LMQ is disabled (enableLmq and enableMultiDispatch)")
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")
        if len(msg.body) > self.config.max_message_size:
            raise MessageTooLarge(len(msg.body), self.config.max_message_size)
        tbytes = topic.encode()
        bhost = born_host or self.store_host
        key = (topic, queue_id)
        cl = self.commitlog
        flags = (0x10 if len(bhost.ip) == 16 else 0) | (0x20 if len(self.store_host.ip) == 16
                                                         else 0)
        assert self.dispatcher is not None
        with cl.lock:
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            qo = self._next_offsets.get(key, 0)
            nexts = self._lmq_next
            offsets = []
            for name in lmqs:
                nxt = nexts.get(name)
                if nxt is None:
                    nxt = lmq.max_offset(name)
                offsets.append(nxt)
            props = msg.properties + (
                "INNER_MULTI_QUEUE_OFFSET\x01" + ",".join(map(str, offsets)) + "\x02").encode()
            size = record_size(len(msg.body), len(tbytes), len(props), flags)
            seg, pos = cl.reserve(size)
            phys = seg.base + pos
            rec = encode_record(topic=tbytes, queue_id=queue_id, body=msg.body, properties=props,
                                flag=msg.flag, sys_flag=sys_flag,
                                born_timestamp=born_timestamp or ts, born_host=bhost,
                                store_host=self.store_host, store_timestamp=ts,
                                queue_offset=qo, physical_offset=phys,
                                reconsume_times=reconsume_times)
            cl.write(seg, pos, rec)
            self._next_offsets[key] = qo + 1
            for name, nxt in zip(lmqs, offsets, strict=True):
                nexts[name] = nxt + 1
            end = phys + size
            self.dispatcher.submit(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (msg.tags_code,), ts, end,
                (msg.keys,) if self.index is not None else None, None,
                ((tuple(lmqs), tuple(offsets)),)))
            self.put_messages += 1
        return self._result(qo, (phys,), (size,), ts, end, wait_flush)

    def delete_lmq(self, name: str) -> bool:
        """Drop an LMQ with its entries and every group's committed offset for it.

        Under the append lock, so the tombstone floor (the commit-log end now) separates
        the old queue's records from the new one's exactly: entries of older records are
        never dispatched again, not even by a recovery that re-dispatches from before
        the deletion. A re-created LMQ starts at offset 0.
        """
        lmq = self.queues.lmq
        if lmq is None:
            return False
        with self.commitlog.lock:
            assigned = self._lmq_next.pop(name, 0) > 0  # offsets handed out, maybe not
            return lmq.delete_queue(name, self.commitlog.max_offset) or assigned  # visible

    def set_batch_topic(self, topic: str, batch: bool = True) -> None:
        """Declare ``topic``'s queues BatchConsumeQueues (``queue.type=BatchCQ``)."""
        if batch:
            self.queues.batch_topics.add(topic)
        else:
            self.queues.batch_topics.discard(topic)

    def is_batch_topic(self, topic: str) -> bool:
        return topic in self.queues.batch_topics

    def put_inner_batch(
        self, topic: str, queue_id: int, body: bytes | bytearray | memoryview, properties: bytes,
        inner_num: int, *, tags_code: int = 0, keys: tuple[str, ...] = (), sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, wait_flush: bool = True,
    ) -> PutResult:
        """Append one record holding ``inner_num`` messages (RIP-26 inner batch).

        The record gets NEED_UNWRAP|INNER_BATCH, ``INNER_NUM`` and ``INNER_BASE``; its
        QUEUEOFFSET is the base offset and the queue advances by ``inner_num``. The body
        (possibly compressed) is stored untouched; validating it is the caller's job.
        """
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")
        if len(body) > self.config.max_message_size:
            raise MessageTooLarge(len(body), self.config.max_message_size)
        if not 1 <= inner_num <= 0x7FFF:
            raise ValueError(f"INNER_NUM must be in 1..32767, got {inner_num}")
        if topic not in self.queues.batch_topics:
            raise ValueError(f"topic {topic} is not a BatchCQ topic")
        sys_flag = (sys_flag | INNER_BATCH_FLAGS) & ~0x30
        head = properties + f"INNER_NUM\x01{inner_num}\x02".encode()
        tbytes = topic.encode()
        bhost = born_host or self.store_host
        key = (topic, queue_id)
        cl = self.commitlog
        assert self.dispatcher is not None
        with cl.lock:
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            qo = self._next_offsets.get(key, 0)
            props = head + f"INNER_BASE\x01{qo}\x02".encode()
            size = record_size(len(body), len(tbytes), len(props),
                               (0x10 if len(bhost.ip) == 16 else 0)
                               | (0x20 if len(self.store_host.ip) == 16 else 0))
            seg, pos = cl.reserve(size)
            phys = seg.base + pos
            rec = encode_record(topic=tbytes, queue_id=queue_id, body=body, properties=props,
                                sys_flag=sys_flag, born_timestamp=born_timestamp or ts,
                                born_host=bhost, store_host=self.store_host,
                                store_timestamp=ts, queue_offset=qo, physical_offset=phys)
            cl.write(seg, pos, rec)
            self._next_offsets[key] = qo + inner_num
            end = phys + size
            self.dispatcher.submit(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (tags_code,), ts, end,
                (keys,) if self.index is not None else None, (inner_num,)))
            self.put_messages += inner_num
        return self._result(qo, (phys,), (size,), ts, end, wait_flush)

    # ------------------------------------------------------------------ reading

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
            max_bytes: int = 4 * 1024 * 1024,
            tag_codes: frozenset[int] | None = None,
            inner_tags: InnerTags | None = None) -> GetResult:
        """Records from ``offset``: zero-copy views grouped into contiguous runs.
        ``inner_tags``: see :meth:`QueueReader.get`."""
        return self.reader.get(topic, queue_id, offset, max_count, max_bytes, tag_codes,
                               inner_tags)

    def min_offset(self, topic: str, queue_id: int) -> int:
        if self.queues.lmq is not None and topic.startswith(LMQ_PREFIX):
            return self.queues.lmq.min_offset(topic)
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Next offset that will become visible (dispatched entries only)."""
        if self.queues.lmq is not None and topic.startswith(LMQ_PREFIX):
            return self.queues.lmq.max_offset(topic)
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reader.offset_by_time(topic, queue_id, timestamp)

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        return self.reader.store_time_at(topic, queue_id, self.min_offset(topic, queue_id))

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.store_time_at(topic, queue_id, offset)

    def read_record(self, phys_offset: int) -> memoryview | None:
        return self.reader.read_record(phys_offset)

    def delete_topic(self, topic: str) -> None:
        """Drop the consume queues of ``topic`` (its records age out with their segments);
        a topic created again under the name starts over, of whatever queue type."""
        for t, queue_id in self.queues.queue_keys():
            if t == topic:
                self.queues.remove(t, queue_id)
                self._next_offsets.pop((t, queue_id), None)
        self.queues.batch_topics.discard(topic)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, queue_id in self.queues.queue_keys():
            out.setdefault(topic, []).append(queue_id)
        return out

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until every confirmed record is visible (tests and offline tools)."""
        return self.dispatcher.drain(timeout) if self.dispatcher is not None else True

    def dispatch_lag(self) -> tuple[int, float]:
        """Dispatch lag: confirmed bytes not visible yet, and ms since the oldest record
        not visible yet was stored. Logs a warning (rate-limited) when the ms pass
        ``dispatchLagWarnMs``; the housekeeper calls this every
        ``flushIntervalConsumeQueue`` ms, so a stuck dispatcher is reported too."""
        if self.dispatcher is None:
            return 0, 0.0
        behind, lag_ms = self.dispatcher.lag(self._confirm_offset())
        self.dispatcher.warn_if_lagging(lag_ms)
        return behind, lag_ms

    # ------------------------------------------------------------------ housekeeping

    def _write_checkpoint(self) -> None:
        assert self.dispatcher is not None and self.flusher is not None
        dispatched = self.dispatcher.dispatched_offset
        logics_ts = self.dispatcher.last_store_timestamp
        self.queues.flush()
        if self.queues.lmq is not None:
            self.queues.lmq.checkpoint(dispatched)
        index_ts = self.index.flush() if self.index is not None else logics_ts
        flushed = self.commitlog.flush() if not self.commitlog.werr else self.flusher.flushed_offset
        Checkpoint(
            physic_msg_timestamp=self._last_ts if flushed >= self.commitlog.max_offset else 0,
            logics_msg_timestamp=logics_ts,
            index_msg_timestamp=index_ts,
            flushed_phy_offset=flushed,
            dispatched_phy_offset=min(dispatched, flushed),
        ).write(self.layout.checkpoint_file)

    def _housekeep(self) -> None:
        interval = self.config.flush_interval_consume_queue / 1000
        retention_every = self.config.clean_resource_interval / 1000
        last_retention = time.monotonic()
        while not self._stop_event.wait(min(interval, retention_every)):
            self.dispatch_lag()  # warns when dispatch falls behind
            try:
                self._write_checkpoint()
            except (OSError, StoreReadOnly) as exc:
                log.error("checkpoint failed: %s", exc)
            if time.monotonic() - last_retention >= retention_every:
                last_retention = time.monotonic()
                try:
                    report = self.run_retention()
                except Exception:
                    log.exception("retention pass failed")
                    continue
                if report.deleted_segments:
                    log.info("%s", report)

    def run_retention(self, now_ms: int | None = None, *, manual: bool = False,
                      remove_expired_queues: bool = False) -> RetentionReport:
        """One retention pass (specs/store.md §6.5-6.6); the housekeeper runs one every
        ``cleanResourceInterval`` ms. ``manual`` is the admin trigger; with
        ``remove_expired_queues`` (admin ``cleanExpiredCQ``) queues whose records are all
        gone are destroyed and restart at offset 0.
        """
        report = self.retention.run(self.clock() if now_ms is None else now_ms, manual=manual)
        if remove_expired_queues and self.dispatcher is not None:
            with self.commitlog.lock:  # no new appends while queues disappear
                if self.dispatcher.drain() and not self.dispatcher.pending_batches:
                    report.queues_removed = self.retention.remove_expired_queues()
                    for key in report.queues_removed:
                        self._next_offsets.pop(key, None)
        return report

    def query_by_key(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                     end: int = 2**63 - 1) -> list[memoryview]:
        """Records of ``topic`` whose UNIQ_KEY or KEYS hold ``key``, stored in ``[begin, end]``.

        The index yields candidates, newest first; each is read and its real key, topic and
        store time compared (hash collisions, one-second index resolution). When candidates
        fail, more are asked for, up to eight times ``max_num``.
        """
        if self.index is None or not key or max_num <= 0:
            return []
        want = max_num
        while True:
            candidates = self.index.query(topic, key, want, begin, end)
            out = []
            for phys in candidates:
                view = self.read_record(phys)
                if view is not None and _has_key(view, phys, topic, key, begin, end):
                    out.append(view)
            if len(out) >= max_num or len(candidates) < want or want >= 8 * max_num:
                return out[:max_num]
            want *= 2


def _has_key(view: memoryview, phys: int, topic: str, key: str, begin: int, end: int) -> bool:
    """Whether the record at ``phys`` is of ``topic``, stored in ``[begin, end]``, with ``key``."""
    try:
        rec = decode_record(view, expected_physical_offset=phys)
        if (not isinstance(rec, Record) or rec.topic != topic or not rec.properties
                or not begin <= rec.store_timestamp <= end):
            return False
        props = decode_properties(rec.properties)
    except CorruptRecord:
        return False
    return props.get("UNIQ_KEY") == key or key in props.get("KEYS", "").split(" ")
