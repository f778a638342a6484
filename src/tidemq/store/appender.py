"""The append point: the one code that writes records into the commit log.

Every put variant is here -- :meth:`Appender.put` (one message, the hot path),
:meth:`~Appender.put_many` (one message each to many queues, under one hold of the lock),
:meth:`~Appender.put_batch`, :meth:`~Appender.put_multi_dispatch`,
:meth:`~Appender.put_batch_multi_dispatch` and :meth:`~Appender.put_inner_batch` -- and
so are the roll to a new segment (with its BLANK marker) and the sticky write error. Each
put encodes outside the append lock (:mod:`tidemq.formats.record`), then, holding it,
picks the store time (never going backwards), the queue offset and the segment position,
writes the bytes, and hands the records to the dispatcher. The LMQ fan-outs encode under
the lock: their records carry the LMQ offsets assigned there.

Whether a topic takes messages is decided here too, once, under the same lock: a topic
:meth:`Appender.refuse`\\ d (its deletion is under way) gets
:class:`~tidemq.errors.TopicRefused` from every put, so no writer above the store needs a
check of its own, and none can store into the topic between a look and its put.

Bytes enter a segment in exactly two statements, both here: :meth:`Appender._write` (an
encoded buffer, or a master's bytes on a replica: :meth:`Appender.write_replicated`) and
the hot path's packer, which writes the record straight into the
map with one C call. Whoever needs every appended byte -- replication will -- registers
:meth:`Appender.add_append_hook`: ``hook(start_offset, view)`` is called under the append
lock, in log order, for every run of bytes written, BLANK markers and the unused tail of a
rolled segment included, so the runs are contiguous from the first one seen.

:class:`~tidemq.store.message_store.MessageStore` owns the lifecycle around it: it
:meth:`~Appender.attach`\\ es the dispatcher and the flusher on start and
:meth:`~Appender.detach`\\ es them on shutdown.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, chain, compress, count, repeat
from operator import add as _add
from operator import and_, is_
from typing import cast

from tidemq.errors import MessageTooLarge, PropertiesTooLarge, StoreReadOnly, TopicRefused
from tidemq.formats.record import (
    BLANK_SIZE,
    MAGIC_V1,
    MAX_PROPERTIES_BYTES,
    MAX_V1_TOPIC_BYTES,
    MIN_RECORD_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_STOREHOST_V6,
    HostAddr,
    encode_blank,
    encode_record,
    record_size,
)
from tidemq.formats.record import crc32 as _crc32
from tidemq.formats.record.batch import encode_batch, patch_batch, uniform_head
from tidemq.formats.record.encode import (
    FIXED_V4_PACKED_HOSTS,
    encode_v4_joined,
    v4_record_packer,
)
from tidemq.formats.record.loops import body_crc32, stamp_records, write_records
from tidemq.store.append import MessageInput, UniformBatch
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import DispatchBatch, Dispatcher, Row
from tidemq.store.flush import FlushGroup, FlushService
from tidemq.store.lmq_next import LmqNextOffsets
from tidemq.store.lmq_props import FanTarget, offset_props
from tidemq.store.lmq_store import LmqStore
from tidemq.store.lookups import get_many, set_many
from tidemq.store.mapped_file import MappedFile
from tidemq.store.put_result import PutResult, PutStatus
from tidemq.store.queues import ConsumeQueueSet

__all__ = ["AppendHook", "Appender", "wall_clock_ms"]

#: ``hook(start_offset, view)``: ``view`` holds the bytes written at ``start_offset``.
AppendHook = Callable[[int, memoryview], None]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
INNER_BATCH_FLAGS = 0x40 | 0x80  # NEED_UNWRAP | INNER_BATCH


_OFFSETS_KEY = "INNER_MULTI_QUEUE_OFFSET"
_OFFSETS_HEAD = b"INNER_MULTI_QUEUE_OFFSET\x01"
_OFFSETS_TEXT = "INNER_MULTI_QUEUE_OFFSET\x01%s\x02"


def _offsets_property(offsets: Sequence[int]) -> bytes:
    """``INNER_MULTI_QUEUE_OFFSET`` with a fan-out's LMQ offsets, in the order of its names."""
    return ("INNER_MULTI_QUEUE_OFFSET\x01" + ",".join(map(str, offsets)) + "\x02").encode()


def _assign_lmq_offsets(
    targets: Sequence[Sequence[str]], props: Sequence[bytes], nexts: dict[str, int],
    first_use: Callable[[Iterable[str]], dict[str, int]],
) -> tuple[list[bytes], list[FanTarget | None], dict[str, int]]:
    """A batch's LMQ offsets, in batch order: each message's stored properties (with
    ``INNER_MULTI_QUEUE_OFFSET``), its fan-out for the dispatcher (``None``: it names no
    LMQ) and the next offset of every LMQ named, to publish after the write. ``nexts``:
    the next offsets given so far; ``first_use(names)``: the next offsets of the LMQs
    not in ``nexts``, asked once for all of them. An LMQ named by several messages gets
    consecutive offsets, in batch order.

    Each name is looked up once in ``nexts`` (a large map: every lookup is a cache miss)
    and the offsets are spread over the entries with C-level maps: names the batch
    repeats -- a batch of 80 messages naming 10 of 100,000 LMQs each nearly always
    repeats one -- take theirs from a counter a name, with no Python step an entry;
    the properties and fan-outs are built by one call (:func:`offset_props`).
    Properties the offsets push over their limit raise
    :class:`PropertiesTooLarge`."""
    flat, offsets = _lmq_offsets(targets, nexts, first_use)
    stored, fan = offset_props(targets, props, offsets, _OFFSETS_HEAD)
    # over the limit: a message's own properties (not stamped), or stamped ones
    if max(map(len, stored), default=0) > MAX_PROPERTIES_BYTES:
        over = next((len(raw) for raw, f in zip(stored, fan, strict=True)
                     if f is not None and len(raw) > MAX_PROPERTIES_BYTES), None)
        if over is not None:
            raise PropertiesTooLarge(over, MAX_PROPERTIES_BYTES, added=_OFFSETS_KEY)
    # the last entry of a name holds its highest offset: dict() keeps the last value
    return stored, fan, dict(zip(flat, map(_add, offsets, repeat(1)), strict=True))


def _lmq_offsets(targets: Sequence[Sequence[str]], nexts: dict[str, int],
                 first_use: Callable[[Iterable[str]], dict[str, int]]
                 ) -> tuple[list[str], list[int]]:
    """The LMQ names of ``targets`` laid end to end, and the offset each entry takes if
    every target list is stored, in order (an LMQ named by several lists gets
    consecutive offsets): :func:`_assign_lmq_offsets`' lookups and spreading, without
    the properties. ``nexts`` and ``first_use`` as there."""
    flat = list(chain.from_iterable(targets))
    names = list(dict.fromkeys(flat))  # each name once
    known = get_many(nexts, names)
    if None in known:
        found = first_use(set(compress(names, map(is_, known, repeat(None)))))
        known = list(map(found.get, names, known))
    if len(names) == len(flat):  # no name twice: each entry its name's next offset
        return flat, cast("list[int]", known)  # every name is in nexts or in found
    # a counter a name, from its next offset: its entries take its offsets in order
    counters = dict(zip(names, map(count, cast("list[int]", known)), strict=True))
    return flat, list(map(next, map(counters.__getitem__, flat)))


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_new_result = tuple.__new__
_BYTES_ONLY = {bytes}
_NO_V6_HOSTS = ~SYSFLAG_HOSTS_V6  # the fast path writes IPv4 hosts
_PUT_OK = PutStatus.PUT_OK
_monotonic = time.monotonic
_time_ns = time.time_ns
#: Whole-record packers kept per topic, one per (body length, properties length) seen
#: first; a topic's puts of other shapes are packed and joined.
LAYOUTS_PER_TOPIC = 64


class Appender:
    """Appends to one commit log. Every method that writes takes ``commitlog.lock``."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueSet, config: StoreConfig,
                 clock: Callable[[], int], store_host: HostAddr, *, index_keys: bool) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.config = config
        self.clock = clock
        self._wall_clock = clock is wall_clock_ms
        self._index_keys = index_keys
        self._sync_flush = config.sync_flush
        self._flush_timeout = config.sync_flush_timeout / 1000
        #: Next queue offset per ``(topic, queue_id)``, and per LMQ while one is used.
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.lmq_next = LmqNextOffsets(config.lmq_cached_queues)
        #: The last store time given: the next is never smaller.
        self.last_ts = 0
        self.put_messages = 0
        #: Per topic: fixed record size, TOPICLENGTH + TOPIC, packers by body and props
        #: length, and the ``(topic, queue_id)`` key of each queue by queue id.
        self._topic_shapes: dict[str, tuple[int, bytes, dict[int, Callable[..., None]],
                                            dict[int, tuple[str, int]]]] = {}
        self._hooks: list[AppendHook] = []
        #: Topics no put stores into now, with why (:meth:`refuse`); changed and read
        #: under the lock.
        self.refused: dict[str, str] = {}
        self._running = False
        #: Set while the store is a replica: puts are refused, replicated bytes taken.
        self._replica = False
        #: Bodies up to this size take :meth:`put`'s fast path (-1: none, not running).
        self._put_limit = -1
        self.store_host = store_host
        # Bound by attach(): the dispatcher the hot path hands rows to, and the flusher.
        self._live: Dispatcher
        self._pending_append: Callable[[DispatchBatch | Row], None]
        self._join_flush: Callable[[int], FlushGroup]

    # ------------------------------------------------------------------ lifecycle

    def attach(self, dispatcher: Dispatcher, flusher: FlushService) -> None:
        """Start taking puts: records go to ``dispatcher``, SYNC_FLUSH waits on ``flusher``."""
        self._live = dispatcher
        self._pending_append = dispatcher.pending.append
        self._join_flush = flusher.join
        self._running = True
        self._put_limit = self._fast_put_limit()

    @property
    def replica(self) -> bool:
        """Whether puts are refused because the store copies a master."""
        return self._replica

    @replica.setter
    def replica(self, on: bool) -> None:
        self._replica = on
        self._put_limit = self._fast_put_limit()

    def detach(self) -> None:
        """Refuse puts from now on (shutdown)."""
        self._running = False
        self._put_limit = -1

    @property
    def store_host(self) -> HostAddr:
        """The address written into every record as STOREHOST."""
        return self._store_host

    @store_host.setter
    def store_host(self, host: HostAddr) -> None:
        self._store_host = host
        self._store_host_bytes = host.ip + _I32.pack(host.port)
        if self._running:
            self._put_limit = self._fast_put_limit()

    def _fast_put_limit(self) -> int:
        """:meth:`put`'s fast path writes the V1 (IPv4) layout only, and nothing on a
        replica or a store not running."""
        if not self._running or self._replica:
            return -1
        return self.config.max_message_size if len(self._store_host.ip) == 4 else -1

    def refuse(self, topic: str, why: str) -> None:
        """Refuse every put into ``topic`` (:class:`~tidemq.errors.TopicRefused`, with
        ``why``) until :meth:`admit`. Decided under the lock every put holds while it
        writes: a put into ``topic`` is in the log before this returns, or refused."""
        with self.commitlog.lock:
            self.refused[topic] = why

    def admit(self, topic: str) -> None:
        """Take puts into ``topic`` again."""
        with self.commitlog.lock:
            self.refused.pop(topic, None)

    def _refusal(self, topic: str) -> TopicRefused:
        return TopicRefused(topic, self.refused[topic])

    def add_append_hook(self, hook: AppendHook) -> None:
        """Call ``hook(start_offset, view)`` for every run of bytes written from now on
        (see the module docstring). It runs under the append lock: keep it short."""
        self._hooks.append(hook)

    def _appended(self, seg: MappedFile, pos: int, end: int) -> None:
        view = seg.view[pos:end]
        for hook in self._hooks:
            hook(seg.base + pos, view)

    # ------------------------------------------------------------------ segments

    def _reserve(self, length: int) -> tuple[MappedFile, int]:
        """A segment and position where ``length`` bytes fit, rolling if needed: the full
        segment is closed with the BLANK marker and ``length`` goes to offset 0 of the
        next one (a record never spans two segments)."""
        cl = self.commitlog
        if cl.werr is not None:
            raise StoreReadOnly("WRITE_ERROR", cause=cl.werr)
        if cl.disk_full is not None:
            raise StoreReadOnly("DISK_FULL", cause=cl.disk_full)
        if length + BLANK_SIZE > cl.segment_size:
            raise MessageTooLarge(length, cl.segment_size - BLANK_SIZE)
        if not cl.segments:
            return cl.new_segment(0), 0
        seg = cl.segments[-1]
        pos = seg.wrote
        remaining = seg.size - pos
        if length + BLANK_SIZE <= remaining:
            return seg, pos
        if remaining >= BLANK_SIZE:
            self._write(seg, pos, encode_blank(remaining))
        seg.wrote = seg.size
        if self._hooks and remaining:
            self._appended(seg, pos, seg.size)
        return cl.new_segment(seg.end), 0

    def _write(self, seg: MappedFile, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` into ``seg`` at ``pos``; a failure is sticky: the store turns
        read-only (WRITE_ERROR) until restarted."""
        try:
            seg.write_at(pos, data)
        except StoreReadOnly:
            raise
        except (OSError, ValueError) as exc:
            cl = self.commitlog
            cl.werr = f"write to {seg.path.name} failed: {exc}"
            raise StoreReadOnly("WRITE_ERROR", cause=cl.werr) from exc

    def _write_record(self, seg: MappedFile, pos: int, data: bytes | bytearray) -> None:
        self._write(seg, pos, data)
        if self._hooks:
            self._appended(seg, pos, pos + len(data))

    def _store_time(self) -> int:
        """A store time never before the last one given (the lock is held)."""
        now = self.clock()
        ts = now if now > self.last_ts else self.last_ts
        self.last_ts = ts
        return ts

    def _result(self, qo: int, phys: Sequence[int], sizes: Sequence[int], ts: int, end: int,
                wait_flush: bool) -> PutResult:
        if wait_flush and self._sync_flush:
            return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, self._join_flush(end),
                                           _monotonic() + self._flush_timeout))
        return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, None, 0.0))

    def _check_running(self) -> None:
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")
        if self._replica:
            raise StoreReadOnly("SLAVE", cause="this store is a replica: messages are put "
                                "to its master")

    # ------------------------------------------------------------------ replicas

    def write_replicated(self, offset: int, data: bytes | memoryview) -> None:
        """Write a master's commit-log bytes at ``offset``, the end of this log, rolling
        to a new segment exactly where the master's did (the lock is held; the records
        are dispatched by :class:`~tidemq.store.replica_log.ReplicaLog`)."""
        cl = self.commitlog
        if cl.werr is not None:
            raise StoreReadOnly("WRITE_ERROR", cause=cl.werr)
        view = memoryview(data)
        while view:
            segs = cl.segments
            if not segs:
                seg = cl.new_segment(offset - offset % cl.segment_size)
                seg.wrote = offset - seg.base
            elif segs[-1].full:
                seg = cl.new_segment(segs[-1].end)
            else:
                seg = segs[-1]
            pos = seg.wrote
            n = min(len(view), seg.size - pos)
            self._write(seg, pos, view[:n])
            if self._hooks:
                self._appended(seg, pos, pos + n)
            view = view[n:]
            offset += n

    def note_arrival(self, end: int) -> None:
        """Replicated bytes were written up to ``end`` (lock held): the dispatcher measures
        the lag of the records they complete from now (see
        :meth:`Dispatcher.note_arrival <tidemq.store.dispatch.Dispatcher.note_arrival>`)."""
        self._live.note_arrival(end)

    def note_replicated(self, batch: DispatchBatch, lmq_names: Sequence[str] = (),
                        lmq_offsets: Sequence[int] = ()) -> None:
        """A replicated record's dispatch: the queue offsets, LMQ offsets and store time
        it implies become the appender's, as if it had been put here (lock held)."""
        n = sum(batch.batch_sizes) if batch.batch_sizes is not None else len(batch.phys)
        self.next_offsets[(batch.topic, batch.queue_id)] = batch.queue_offset + n
        nexts = self.lmq_next
        for name, at in zip(lmq_names, lmq_offsets, strict=True):
            nexts.set(name, at + 1)
        lmq = self.queues.lmq
        if lmq_names and lmq is not None:
            nexts.age(lmq.dispatched, batch.end)
        self.last_ts = max(self.last_ts, batch.store_timestamp)
        self._live.submit(batch)

    # ------------------------------------------------------------------ puts

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
            if shape is None:
                self._v1_topic_field(topic)
            return self.put_batch(topic, queue_id, (msg,), sys_flag=sys_flag,
                                  born_timestamp=born_timestamp, born_host=born_host,
                                  reconsume_times=reconsume_times, wait_flush=wait_flush)
        fixed, tail, layouts, queue_keys = shape
        pack = layouts.get(blen << 15 | plen) if type(body) is bytes else None  # "s" wants bytes
        if pack is None and len(layouts) < LAYOUTS_PER_TOPIC and type(body) is bytes:
            pack = layouts[blen << 15 | plen] = v4_record_packer(len(tail), blen, plen)
        size = fixed + blen + plen
        crc = _crc32(body) & 0x7FFFFFFF
        sys_flag &= _NO_V6_HOSTS
        key = queue_keys.get(queue_id)
        if key is None:  # one key object per queue: a row in flight is one object, not two
            key = queue_keys[queue_id] = (topic, queue_id)
        cl = self.commitlog
        lock = cl.lock
        lock.acquire()  # not `with`: its __exit__ call costs a third more
        try:
            if topic in self.refused:
                raise self._refusal(topic)
            now = _time_ns() // 1_000_000 if self._wall_clock else self.clock()
            ts = now if now > self.last_ts else self.last_ts
            self.last_ts = ts
            qo = self.next_offsets.get(key, 0)
            segs = cl.segments
            if segs and cl.werr is None and cl.disk_full is None:
                seg = segs[-1]  # _reserve's answer when the record fits, without the call
                pos = seg.wrote
                if size + BLANK_SIZE > seg.size - pos:
                    seg, pos = self._reserve(size)
            else:
                seg, pos = self._reserve(size)
            phys = seg.base + pos
            if pack is None:  # many shapes, or not bytes: the fixed fields packed, then joined
                seg.mm[pos : pos + size] = encode_v4_joined(
                    size, crc, queue_id, flag, qo, phys, sys_flag, born_timestamp or ts, bhost,
                    ts, self._store_host_bytes, reconsume_times, body, tail, props)
            else:
                try:  # one C call writes the record straight into the map
                    pack(seg.mm, pos, size, MAGIC_V1, crc, queue_id, flag, qo, phys, sys_flag,
                         born_timestamp or ts, bhost, ts, self._store_host_bytes,
                         reconsume_times, 0, blen, body, tail, plen, props)
                except BaseException:
                    seg.mm[pos : pos + size] = bytes(size)  # pack_into may have written a part
                    if type(props) is bytes:
                        raise  # a field out of range: nothing stored, as before the write
                    seg.mm[pos : pos + size] = encode_v4_joined(  # memoryview properties
                        size, crc, queue_id, flag, qo, phys, sys_flag, born_timestamp or ts,
                        bhost, ts, self._store_host_bytes, reconsume_times, body, tail, props)
            end = phys + size
            seg.wrote = pos + size
            if self._hooks:
                self._appended(seg, pos, pos + size)
            self.next_offsets[key] = qo + 1
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

    def put_many(
        self, topic: str, puts: Sequence[tuple[int, MessageInput, int, int]], *,
        born_host: HostAddr | None = None, reconsume_times: int = 0, wait_flush: bool = True,
        targets: Sequence[Sequence[str]] | None = None,
    ) -> list[PutResult | Exception]:
        """Append one record per ``(queue_id, msg, sys_flag, born_timestamp)`` of ``puts``
        (any queues of ``topic``), in order: what as many :meth:`put` calls store, under
        one hold of the append lock, one store time and one wake-up of the dispatcher.
        Each put has its own outcome, a :class:`PutResult` or the exception :meth:`put`
        would raise for it (:class:`MessageTooLarge`, :class:`StoreReadOnly`...); a
        failed put leaves the others stored. Hooks see one run of bytes per segment.

        ``targets[i]``: the LMQs put ``i`` fans out to (RIP-28; empty: none). Such a put
        stores what :meth:`put_multi_dispatch` stores for it, and fails alone as it
        would (:class:`~tidemq.errors.PropertiesTooLarge`...). The LMQ offsets of all
        the puts are decided together under the lock, in put order: an LMQ named by
        several puts gets consecutive offsets, and a put that fails takes none."""
        bhost = (self._store_host_bytes if born_host is None
                 else born_host.ip + _I32.pack(born_host.port) if len(born_host.ip) == 4
                 else b"")
        limit = self._put_limit
        shape = self._topic_shapes.get(topic)
        if shape is None and limit >= 0 and bhost:
            self._v1_topic_field(topic)
            shape = self._topic_shapes.get(topic)
        lmq = self.queues.lmq
        if targets is not None:
            if len(targets) != len(puts):
                raise ValueError(f"{len(puts)} puts but {len(targets)} target lists")
            if not any(targets):
                targets = None
            elif lmq is None:  # put_multi_dispatch refuses each fan-out
                return self._put_each(topic, puts, born_host, reconsume_times, wait_flush,
                                      targets)
        if shape is None or limit < 0 or not bhost or not puts:
            return self._put_each(topic, puts, born_host, reconsume_times, wait_flush,
                                  targets)
        if not (wait_flush and self._sync_flush) and (targets is None or all(targets)):
            stored_run = self._put_run(topic, puts, shape, bhost, reconsume_times, targets)
            if stored_run is not None:
                return stored_run
        fixed, tail, layouts, queue_keys = shape
        index_keys = self._index_keys
        # Decided before the lock: each record's size, packer, body CRC and queue key (a
        # fan-out's size grows by its LMQ offsets, decided under the lock).
        plans = []
        for (queue_id, (given, props, flag, tags, keys), sys_flag, born), names in zip(
                puts, repeat(()) if targets is None else targets, strict=False):
            blen, plen = len(given), len(props)
            if blen > limit or plen > 0x7FFF:  # put's general path: one put at a time
                return self._put_each(topic, puts, born_host, reconsume_times, wait_flush,
                                      targets)
            # the packer's "s" fields take bytes: a small view is copied once
            body = bytes(given) if type(given) is not bytes and blen <= 4096 else given
            pack = (layouts.get(blen << 15 | plen) if type(body) is bytes and not names
                    else None)
            if (pack is None and len(layouts) < LAYOUTS_PER_TOPIC and type(body) is bytes
                    and not names):
                pack = layouts[blen << 15 | plen] = v4_record_packer(len(tail), blen, plen)
            key = queue_keys.get(queue_id)
            if key is None:
                key = queue_keys[queue_id] = (topic, queue_id)
            plans.append((key, queue_id, fixed + blen + plen, _crc32(body) & 0x7FFFFFFF,
                          pack, body, props, flag, sys_flag & _NO_V6_HOSTS, born, tags,
                          keys if index_keys else None, names))
        out: list[PutResult | Exception] = []
        add = out.append
        cl = self.commitlog
        store_host = self._store_host_bytes
        next_offsets = self.next_offsets
        pending = self._pending_append
        hooks = self._hooks
        sync = wait_flush and self._sync_flush
        stored = 0
        nexts = self.lmq_next
        flat: list[str] = []
        offsets: list[int] = []
        at = 0  # the first entry of the next fan-out's names in flat and offsets
        #: Per LMQ, the offsets given to failed puts: later puts naming it take them.
        dropped: dict[str, int] = {}
        lock = cl.lock
        lock.acquire()
        try:
            if topic in self.refused:  # each put refused, as put refuses it
                return [self._refusal(topic) for _ in plans]
            ts = self._store_time()
            if targets is not None:
                assert lmq is not None  # checked above
                flat, offsets = _lmq_offsets(
                    targets, nexts.young, lambda names: nexts.older(names, lmq.max_offsets))
            segs = cl.segments
            seg = segs[-1] if segs else None
            pos = run_pos = seg.wrote if seg is not None else 0
            room = seg.size - BLANK_SIZE if seg is not None else -1  # a record ends by it
            healthy = cl.werr is None and cl.disk_full is None
            run = seg  # the segment of the run of bytes not yet reported, from run_pos
            for key, queue_id, given_size, crc, pack, body, given_props, flag, sys_flag, born, \
                    tags, indexed, names in plans:
                size, props = given_size, given_props
                try:
                    if names:  # its LMQ offsets and properties (at moves on first)
                        first = at
                        at += len(names)
                        mine = offsets[first:at]
                        if dropped:
                            mine = offsets[first:at] = [
                                o - dropped.get(n, 0) for n, o in zip(names, mine, strict=True)]
                        props = props + b"%s%s\x02" % (
                            _OFFSETS_HEAD, ",".join(map(str, mine)).encode())
                        if len(props) > MAX_PROPERTIES_BYTES:
                            raise PropertiesTooLarge(len(props), MAX_PROPERTIES_BYTES,
                                                     added=_OFFSETS_KEY)
                        size = fixed + len(body) + len(props)
                    if pos + size > room or not healthy:  # a roll, a refusal, a first segment
                        if hooks and pos > run_pos:
                            self._appended(cast(MappedFile, run), run_pos, pos)
                        run_pos = pos
                        seg, pos = self._reserve(size)
                        run, run_pos, room = seg, pos, seg.size - BLANK_SIZE
                        healthy = cl.werr is None and cl.disk_full is None
                    assert seg is not None  # _reserve gave one
                    qo = next_offsets.get(key, 0)
                    phys = seg.base + pos
                    if pack is None:
                        seg.mm[pos : pos + size] = encode_v4_joined(
                            size, crc, queue_id, flag, qo, phys, sys_flag, born or ts, bhost,
                            ts, store_host, reconsume_times, body, tail, props)
                    else:
                        try:
                            pack(seg.mm, pos, size, MAGIC_V1, crc, queue_id, flag, qo, phys,
                                 sys_flag, born or ts, bhost, ts, store_host, reconsume_times,
                                 0, len(body), body, tail, len(props), props)
                        except BaseException:
                            seg.mm[pos : pos + size] = bytes(size)  # a part may be written
                            raise
                except Exception as exc:  # this put failed; the others go on
                    add(exc)
                    if names:  # its offsets go to the next puts naming its LMQs
                        for name in names:
                            dropped[name] = dropped.get(name, 0) + 1
                        offsets[first:at] = repeat(-1, len(names))
                    continue
                pos += size
                seg.wrote = pos
                next_offsets[key] = qo + 1
                if names:
                    pending(DispatchBatch(topic, queue_id, qo, (phys,), (size,), (tags,), ts,
                                          phys + size, None if indexed is None else (indexed,),
                                          None, ((tuple(names), tuple(mine)),)))
                else:
                    pending((pos + seg.base, ts, key, qo, phys, size, tags, indexed))
                stored += 1
                if sync:
                    add(_new_result(PutResult, (
                        _PUT_OK, qo, (phys,), (size,), ts, self._join_flush(phys + size),
                        _monotonic() + self._flush_timeout)))
                else:
                    add(_new_result(PutResult, (_PUT_OK, qo, (phys,), (size,), ts, None, 0.0)))
            if flat:
                if not dropped:  # the young map's stores overlapped, as its lookups were
                    set_many(nexts.young, flat, offsets, 1)
                else:
                    nexts.young.update((n, o + 1) for n, o in zip(flat, offsets, strict=True)
                                       if o >= 0)
                assert lmq is not None
                nexts.age(lmq.dispatched, 0 if seg is None else seg.base + pos)
            if hooks and pos > run_pos:
                self._appended(cast(MappedFile, run), run_pos, pos)
            if stored and self._live.idle:
                self._live.poke()
            self.put_messages += stored
        finally:
            lock.release()
        return out

    def _put_run(self, topic: str, puts: Sequence[tuple[int, MessageInput, int, int]],
                 shape: tuple[int, bytes, dict[int, Callable[..., None]],
                              dict[int, tuple[str, int]]],
                 bhost: bytes, reconsume_times: int,
                 targets: Sequence[Sequence[str]] | None = None
                 ) -> list[PutResult | Exception] | None:
        """:meth:`put_many`'s usual case -- no flush to wait for, every put a fan-out
        (``targets``) or none, every record fitting the current segment and its
        properties their limit -- with no Python step
        a put: the puts are read as columns, the records written by one
        :func:`~tidemq.formats.record.loops.write_records` call, the dispatcher's rows and
        the results made by C-level maps. The same bytes, rows and results as the loop
        of :meth:`put_many`; ``None``: not that case (or a field out of range), nothing
        done, and the loop decides each put."""
        queue_ids, msgs, sys_flags, borns = zip(*puts, strict=True)
        bodies, props, flags, tags, keys = zip(*msgs, strict=True)
        if set(map(type, props)) != _BYTES_ONLY:
            props = tuple(map(bytes, props))
        body_lengths = list(map(len, bodies))
        props_lengths = list(map(len, props))
        if max(body_lengths) > self._put_limit or max(props_lengths) > 0x7FFF:
            return None
        fixed, tail, _layouts, queue_keys = shape
        qkeys = list(map(queue_keys.get, queue_ids))
        if None in qkeys:  # one key object per queue, as put's
            for queue_id in set(compress(queue_ids, map(is_, qkeys, repeat(None)))):
                queue_keys[queue_id] = (topic, queue_id)
            qkeys = list(map(queue_keys.__getitem__, queue_ids))
        keys_of = cast("list[tuple[str, int]]", qkeys)
        sizes = list(map(_add, map(_add, body_lengths, props_lengths), repeat(fixed)))
        masked = list(map(and_, sys_flags, repeat(_NO_V6_HOSTS)))
        n = len(sizes)
        cl = self.commitlog
        next_offsets = self.next_offsets
        lock = cl.lock
        lock.acquire()
        try:
            segs = cl.segments
            if (not segs or cl.werr is not None or cl.disk_full is not None
                    or topic in self.refused):  # the loop's
                return None
            seg = segs[-1]
            pos = seg.wrote
            total = sum(sizes)
            if pos + total > seg.size - BLANK_SIZE:  # a roll: the loop's
                return None
            fan: list[tuple[tuple[str, ...], tuple[int, ...]]] | None = None
            if targets is not None:  # the LMQ offsets, and the properties that hold them
                lmq = cast(LmqStore, self.queues.lmq)  # put_many checked it
                nexts = self.lmq_next
                flat, offsets = _lmq_offsets(
                    targets, nexts.young, lambda names: nexts.older(names, lmq.max_offsets))
                bounds = list(accumulate(map(len, targets), initial=0))
                each = list(map(slice, bounds, bounds[1:]))
                texts = list(map(str, offsets))
                props = tuple(map(bytes.__add__, props, map(str.encode, map(
                    _OFFSETS_TEXT.__mod__, map(",".join, map(texts.__getitem__, each))))))
                props_lengths = list(map(len, props))
                if max(props_lengths) > MAX_PROPERTIES_BYTES:  # refused alone: the loop's
                    return None
                sizes = list(map(_add, map(_add, body_lengths, props_lengths), repeat(fixed)))
                total = sum(sizes)
                if pos + total > seg.size - BLANK_SIZE:
                    return None
                fan = list(zip(map(tuple, targets), map(tuple, map(offsets.__getitem__, each)),
                               strict=True))
            ts = self._store_time()
            # each queue's offsets from its next one, in put order
            queues = set(keys_of)
            counters = None
            if len(queues) == n:  # a queue a put, as a producer's send to every queue
                qos = list(map(next_offsets.get, keys_of, repeat(0)))
            else:
                counters = dict(zip(queues, map(count, map(next_offsets.get, queues,
                                                           repeat(0))), strict=True))
                qos = list(map(next, map(counters.__getitem__, keys_of)))
            starts = list(accumulate(sizes, initial=seg.base + pos))
            ends = starts[1:]
            del starts[-1]
            try:
                write_records(seg.mm, pos, tail, bhost, self._store_host_bytes,
                              reconsume_times, ts, queue_ids, flags, qos, starts, masked,
                              borns, bodies, props)
            except Exception:  # a field out of range: the loop gives each put its outcome
                return None
            seg.wrote = pos + total
            if counters is None:
                next_offsets.update(zip(keys_of, map(_add, qos, repeat(1)), strict=True))
            else:
                next_offsets.update(zip(counters, map(next, counters.values()), strict=True))
            if fan is None:
                self._live.pending.extend(zip(ends, repeat(ts), keys_of, qos, starts, sizes,
                                              tags, keys if self._index_keys else repeat(None)))
            else:
                self._live.pending.extend(map(
                    DispatchBatch, repeat(topic), queue_ids, qos, zip(starts), zip(sizes),
                    zip(tags), repeat(ts), ends, zip(keys) if self._index_keys else repeat(None),
                    repeat(None), zip(fan)))
                set_many(self.lmq_next.young, flat, offsets, 1)
                self.lmq_next.age(lmq.dispatched, seg.base + pos + total)
            if self._hooks:
                self._appended(seg, pos, pos + total)
            if self._live.idle:
                self._live.poke()
            self.put_messages += n
        finally:
            lock.release()
        return list(map(_new_result, repeat(PutResult), zip(
            repeat(_PUT_OK), qos, zip(starts), zip(sizes), repeat(ts), repeat(None),
            repeat(0.0))))

    def _put_each(self, topic: str, puts: Sequence[tuple[int, MessageInput, int, int]],
                  born_host: HostAddr | None, reconsume_times: int, wait_flush: bool,
                  targets: Sequence[Sequence[str]] | None = None
                  ) -> list[PutResult | Exception]:
        """:meth:`put_many` one :meth:`put` (or :meth:`put_multi_dispatch`) at a time
        (layouts its one hold does not write: IPv6 hosts, a V2 topic, a store not
        running, large messages)."""
        out: list[PutResult | Exception] = []
        for (queue_id, msg, sys_flag, born), names in zip(
                puts, repeat(()) if targets is None else targets, strict=False):
            try:
                if names:
                    out.append(self.put_multi_dispatch(
                        topic, queue_id, msg, names, sys_flag=sys_flag, born_timestamp=born,
                        born_host=born_host, reconsume_times=reconsume_times,
                        wait_flush=wait_flush))
                else:
                    out.append(self.put(topic, queue_id, msg, sys_flag=sys_flag,
                                        born_timestamp=born, born_host=born_host,
                                        reconsume_times=reconsume_times,
                                        wait_flush=wait_flush))
            except Exception as exc:
                out.append(exc)
        return out

    def put_batch(
        self, topic: str, queue_id: int, msgs: Sequence[MessageInput], *, sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, reconsume_times: int = 0,
        wait_flush: bool = True, prepared_tx_offset: int = 0,
    ) -> PutResult:
        """Append ``msgs`` to ``(topic, queue_id)`` with consecutive queue offsets.

        A :class:`~tidemq.store.append.UniformBatch` is encoded column-wise and its keys
        reach the index as columns; the bytes stored are the same.
        ``prepared_tx_offset``: the records' PREPAREDTRANSACTIONOFFSET (a committed
        transaction names its half message's commit-log offset there)."""
        limit = self._put_limit  # set: running, a master, an IPv4 store host
        if type(msgs) is UniformBatch and not prepared_tx_offset and limit >= 0:
            if msgs.body_length > limit:
                raise MessageTooLarge(msgs.body_length, limit)
            store_host = self._store_host
            head = uniform_head(topic, msgs, sys_flag=sys_flag,
                                born_host=born_host or store_host, store_host=store_host,
                                reconsume_times=reconsume_times)
            if head is not None:
                return self._put_uniform(topic, queue_id, msgs, head,
                                         born_timestamp or self.clock(), wait_flush)
        self._check_running()
        if not msgs:
            raise ValueError("put_batch needs at least one message")
        limit = self.config.max_message_size
        store_host = self._store_host
        bodies, props, flags, tags, keys = zip(*msgs, strict=True)  # as columns
        body_lengths = set(map(len, bodies))
        biggest = max(body_lengths)
        if biggest > limit:
            raise MessageTooLarge(biggest, limit)
        enc = encode_batch(topic, queue_id, bodies, props, flags, sys_flag=sys_flag,
                           born_timestamp=born_timestamp or self.clock(),
                           born_host=born_host or store_host, store_host=store_host,
                           reconsume_times=reconsume_times, body_lengths=body_lengths,
                           prepared_tx_offset=prepared_tx_offset)
        key = (topic, queue_id)
        with self.commitlog.lock:
            if topic in self.refused:
                raise self._refusal(topic)
            ts = self._store_time()
            qo = self.next_offsets.get(key, 0)
            seg, pos = self._reserve(len(enc.buf))
            phys_base = seg.base + pos
            patch_batch(enc, qo, phys_base, ts)
            self._write_record(seg, pos, enc.buf)
            end = phys_base + len(enc.buf)
            starts = enc.starts
            if type(starts) is range:
                phys: Sequence[int] = range(phys_base, end, starts.step)
            else:
                phys = [phys_base + s for s in starts]
            self._batch_stored(topic, queue_id, qo, phys, enc.sizes, tags, ts, end, keys)
        return self._result(qo, phys, enc.sizes, ts, end, wait_flush)

    def _batch_stored(self, topic: str, queue_id: int, qo: int, phys: Sequence[int],
                      sizes: Sequence[int], tags: Sequence[int], ts: int, end: int,
                      keys: Sequence[Sequence[str]] | None) -> None:
        """A batch's records are in the segment (the lock is held): its queue moves on
        and the dispatcher is handed the batch."""
        self.next_offsets[(topic, queue_id)] = qo + len(sizes)
        self._live.submit(DispatchBatch(topic, queue_id, qo, phys, sizes, tags, ts, end,
                                        keys if self._index_keys else None))
        self.put_messages += len(sizes)

    def _put_uniform(self, topic: str, queue_id: int, batch: UniformBatch, head: bytes,
                     born_timestamp: int, wait_flush: bool) -> PutResult:
        """:meth:`put_batch` of a uniform batch with a template record (``head``:
        :func:`~tidemq.formats.record.batch.uniform_head`): its records are written
        straight into the segment, inside the lock, by one
        :func:`~tidemq.formats.record.loops.stamp_records` call: the same bytes
        :func:`~tidemq.formats.record.batch.encode_batch` builds for its messages."""
        n, rec = batch.n, len(head)
        total = rec * n
        props_at = rec - batch.properties_length
        key = (topic, queue_id)
        cl = self.commitlog
        lock = cl.lock
        lock.acquire()  # as put: the store time, and _reserve's answer when it fits, inline
        try:
            if topic in self.refused:
                raise self._refusal(topic)
            now = _time_ns() // 1_000_000 if self._wall_clock else self.clock()
            ts = now if now > self.last_ts else self.last_ts
            self.last_ts = ts
            qo = self.next_offsets.get(key, 0)
            segs = cl.segments
            if segs and cl.werr is None and cl.disk_full is None:
                seg = segs[-1]
                pos = seg.wrote
                if total + BLANK_SIZE > seg.size - pos:
                    seg, pos = self._reserve(total)
            else:
                seg, pos = self._reserve(total)
            phys_base = seg.base + pos
            end_pos = pos + total
            try:
                seg.fill_at(pos, total, stamp_records, head, batch.data, n, batch.entry_size,
                            batch.body_length, props_at, queue_id, born_timestamp, qo,
                            phys_base, ts)
            except StoreReadOnly as exc:  # the map failed: the whole log stops taking writes
                cl.werr = exc.cause
                raise
            if self._hooks:
                self._appended(seg, pos, end_pos)
            end = phys_base + total
            phys = range(phys_base, end, rec)
            sizes = [rec] * n
            self.next_offsets[key] = qo + n  # as _batch_stored
            self._pending_append(DispatchBatch(topic, queue_id, qo, phys, sizes,
                                               [batch.tags_code] * n, ts, end,
                                               batch.keys if self._index_keys else None))
            if self._live.idle:
                self._live.poke()
            self.put_messages += n
        finally:
            lock.release()
        if wait_flush and self._sync_flush:
            return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, self._join_flush(end),
                                           _monotonic() + self._flush_timeout))
        return _new_result(PutResult, (_PUT_OK, qo, phys, sizes, ts, None, 0.0))

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
        Properties that the offsets push over their 2-byte limit raise
        :class:`~tidemq.errors.PropertiesTooLarge` before anything is written.

        IPv4 hosts, a V1 topic and a ``bytes`` body (the usual case) take a flat path,
        as :meth:`put`'s: the record packed and copied into the map by one call each,
        the fan-out's properties and dispatch targets made by one compiled call
        (:func:`~tidemq.store.lmq_props.offset_props`); the producer shares the GIL
        with the dispatcher, so each step it saves is the dispatcher's too.
        """
        lmq = self.queues.lmq
        if lmq is None:
            raise ValueError("LMQ is disabled (enableLmq and enableMultiDispatch)")
        body, given_props, flag, tags, keys = msg
        shape = self._topic_shapes.get(topic)
        blen = len(body)
        if born_host is None:
            bhost = self._store_host_bytes
        elif len(born_host.ip) == 4:
            bhost = born_host.ip + _I32.pack(born_host.port)
        else:
            bhost = b""
        if shape is None or blen > self._put_limit or not bhost or type(body) is not bytes:
            # Unknown topic, V2 or IPv6 layout, not running, too large: the general path.
            return self._put_multi_encoded(topic, queue_id, msg, lmqs, sys_flag,
                                           born_timestamp, born_host, reconsume_times,
                                           wait_flush)
        fixed, tail, layouts, _queue_keys = shape
        crc = _crc32(body) & 0x7FFFFFFF
        nexts = self.lmq_next
        cl = self.commitlog
        lock = cl.lock
        lock.acquire()  # not `with`, as put
        try:
            if topic in self.refused:
                raise self._refusal(topic)
            now = _time_ns() // 1_000_000 if self._wall_clock else self.clock()
            ts = now if now > self.last_ts else self.last_ts
            self.last_ts = ts
            key = (topic, queue_id)
            qo = self.next_offsets.get(key, 0)
            young = nexts.young
            known = get_many(young, lmqs)
            if None in known:
                found = nexts.older(list(compress(lmqs, map(is_, known, repeat(None)))),
                                    lmq.max_offsets)
                known = list(map(found.get, lmqs, known))
            (props,), (fan,) = offset_props((lmqs,), (given_props,), known, _OFFSETS_HEAD)
            plen = len(props)
            if plen > MAX_PROPERTIES_BYTES:
                raise PropertiesTooLarge(plen, MAX_PROPERTIES_BYTES, added=_OFFSETS_KEY)
            size = fixed + blen + plen
            segs = cl.segments
            if segs and cl.werr is None and cl.disk_full is None:
                seg = segs[-1]  # _reserve's answer when the record fits, without the call
                pos = seg.wrote
                if size + BLANK_SIZE > seg.size - pos:
                    seg, pos = self._reserve(size)
            else:
                seg, pos = self._reserve(size)
            phys = seg.base + pos
            pack = layouts.get(blen << 15 | plen)
            if pack is None and len(layouts) < LAYOUTS_PER_TOPIC:
                pack = layouts[blen << 15 | plen] = v4_record_packer(len(tail), blen, plen)
            if pack is None:  # many shapes: the fixed fields packed, then joined
                seg.mm[pos : pos + size] = encode_v4_joined(
                    size, crc, queue_id, flag, qo, phys, sys_flag & _NO_V6_HOSTS,
                    born_timestamp or ts, bhost, ts, self._store_host_bytes, reconsume_times,
                    body, tail, props)
            else:
                try:  # one C call writes the record straight into the map
                    pack(seg.mm, pos, size, MAGIC_V1, crc, queue_id, flag, qo, phys,
                         sys_flag & _NO_V6_HOSTS, born_timestamp or ts, bhost, ts,
                         self._store_host_bytes, reconsume_times, 0, blen, body, tail, plen,
                         props)
                except BaseException:
                    seg.mm[pos : pos + size] = bytes(size)  # pack_into may have written a part
                    raise
            end = phys + size
            seg.wrote = pos + size
            if self._hooks:
                self._appended(seg, pos, pos + size)
            self.next_offsets[key] = qo + 1
            set_many(young, lmqs, known, 1)
            nexts.age(lmq.dispatched, end)
            self._pending_append(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (tags,), ts, end,
                (keys,) if self._index_keys else None, None, (fan,)))
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

    def _put_multi_encoded(
        self, topic: str, queue_id: int, msg: MessageInput, lmqs: Sequence[str],
        sys_flag: int, born_timestamp: int, born_host: HostAddr | None,
        reconsume_times: int, wait_flush: bool,
    ) -> PutResult:
        """:meth:`put_multi_dispatch` of any layout, its record encoded field by field."""
        lmq = self.queues.lmq
        assert lmq is not None  # checked by the caller
        self._check_running()
        if len(msg.body) > self.config.max_message_size:
            raise MessageTooLarge(len(msg.body), self.config.max_message_size)
        self._v1_topic_field(topic)  # the topic's shape: its next put takes the flat path
        tbytes = topic.encode()
        bhost = born_host or self.store_host
        key = (topic, queue_id)
        flags = _host_bits(bhost, self.store_host)
        nexts = self.lmq_next
        with self.commitlog.lock:
            if topic in self.refused:
                raise self._refusal(topic)
            ts = self._store_time()
            qo = self.next_offsets.get(key, 0)
            young = nexts.young
            known = get_many(young, lmqs)
            if None in known:
                found = nexts.older(list(compress(lmqs, map(is_, known, repeat(None)))),
                                    lmq.max_offsets)
                known = list(map(found.get, lmqs, known))
            offsets = cast("list[int]", known)  # every name is in young or in found
            props = msg.properties + _offsets_property(offsets)
            if len(props) > MAX_PROPERTIES_BYTES:
                raise PropertiesTooLarge(len(props), MAX_PROPERTIES_BYTES, added=_OFFSETS_KEY)
            size = record_size(len(msg.body), len(tbytes), len(props), flags)
            seg, pos = self._reserve(size)
            phys = seg.base + pos
            rec = encode_record(topic=tbytes, queue_id=queue_id, body=msg.body,
                                properties=props, flag=msg.flag, sys_flag=sys_flag,
                                born_timestamp=born_timestamp or ts, born_host=bhost,
                                store_host=self.store_host, store_timestamp=ts,
                                queue_offset=qo, physical_offset=phys,
                                reconsume_times=reconsume_times)
            self._write_record(seg, pos, rec)
            self.next_offsets[key] = qo + 1
            set_many(young, lmqs, offsets, 1)
            end = phys + size
            nexts.age(lmq.dispatched, end)
            self._live.submit(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (msg.tags_code,), ts, end,
                (msg.keys,) if self._index_keys else None, None,
                ((tuple(lmqs), tuple(offsets)),)))
            self.put_messages += 1
        return self._result(qo, (phys,), (size,), ts, end, wait_flush)

    def put_batch_multi_dispatch(
        self, topic: str, queue_id: int, msgs: Sequence[MessageInput],
        targets: Sequence[Sequence[str]], *, sys_flag: int = 0, born_timestamp: int = 0,
        born_host: HostAddr | None = None, reconsume_times: int = 0, wait_flush: bool = True,
    ) -> PutResult:
        """:meth:`put_batch` whose message ``i`` is also indexed into every LMQ of
        ``targets[i]`` (none: an ordinary record of the batch), as
        :meth:`put_multi_dispatch` does for one message: the LMQ offsets are assigned
        under the append lock, in batch order (an LMQ named by several messages gets
        consecutive offsets), and written into each record's
        ``INNER_MULTI_QUEUE_OFFSET``. Each message's properties must already carry
        ``INNER_MULTI_DISPATCH`` naming exactly its targets. One message's properties
        pushed over their limit by its offsets refuse the whole batch, as there."""
        lmq = self.queues.lmq
        if lmq is None:
            raise ValueError("LMQ is disabled (enableLmq and enableMultiDispatch)")
        self._check_running()
        if not msgs or len(targets) != len(msgs):
            raise ValueError(f"{len(msgs)} messages but {len(targets)} target lists")
        bodies, props, flags, tags, keys = zip(*msgs, strict=True)
        body_lengths = set(map(len, bodies))
        limit = self.config.max_message_size
        if max(body_lengths) > limit:
            raise MessageTooLarge(max(body_lengths), limit)
        nexts = self.lmq_next
        store_host = self._store_host
        key = (topic, queue_id)
        n = len(bodies)
        with self.commitlog.lock:
            if topic in self.refused:
                raise self._refusal(topic)
            ts = self._store_time()
            qo = self.next_offsets.get(key, 0)
            stored, fan, assigned = _assign_lmq_offsets(
                targets, props, nexts.young, lambda names: nexts.older(names, lmq.max_offsets))
            enc = encode_batch(topic, queue_id, bodies, stored, flags, sys_flag=sys_flag,
                               born_timestamp=born_timestamp or ts,
                               born_host=born_host or store_host, store_host=store_host,
                               reconsume_times=reconsume_times, body_lengths=body_lengths)
            seg, pos = self._reserve(len(enc.buf))
            phys_base = seg.base + pos
            patch_batch(enc, qo, phys_base, ts)
            self._write_record(seg, pos, enc.buf)
            self.next_offsets[key] = qo + n
            set_many(nexts.young, list(assigned), list(assigned.values()))
            end = phys_base + len(enc.buf)
            nexts.age(lmq.dispatched, end)
            starts = enc.starts
            phys: Sequence[int] = (range(phys_base, end, starts.step) if type(starts) is range
                                   else [phys_base + s for s in starts])
            self._live.submit(DispatchBatch(topic, queue_id, qo, phys, enc.sizes, tags, ts, end,
                                            keys if self._index_keys else None, None, fan))
            self.put_messages += n
        return self._result(qo, phys, enc.sizes, ts, end, wait_flush)

    def put_inner_batch(
        self, topic: str, queue_id: int, body: bytes | bytearray | memoryview, properties: bytes,
        inner_num: int, *, tags_code: int = 0, keys: tuple[str, ...] = (), sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, wait_flush: bool = True,
    ) -> PutResult:
        """Append one record holding ``inner_num`` messages (RIP-26 inner batch).

        The record gets NEED_UNWRAP|INNER_BATCH, ``INNER_NUM`` and ``INNER_BASE``; its
        QUEUEOFFSET is the base offset and the queue advances by ``inner_num``. The body
        (possibly compressed) is stored untouched; validating it is the caller's job.
        With IPv4 hosts and a V1 topic (the usual case) the record is written straight
        into the segment, its body CRC taken before the lock; else it is encoded, then
        copied.
        """
        if not self._running or self._replica:
            self._check_running()
        blen = len(body)
        if blen > self.config.max_message_size:
            raise MessageTooLarge(blen, self.config.max_message_size)
        if not 1 <= inner_num <= 0x7FFF:
            raise ValueError(f"INNER_NUM must be in 1..32767, got {inner_num}")
        if topic not in self.queues.batch_topics:
            raise ValueError(f"topic {topic} is not a BatchCQ topic")
        sys_flag = (sys_flag | INNER_BATCH_FLAGS) & ~SYSFLAG_HOSTS_V6
        head = properties + b"INNER_NUM\x01%d\x02INNER_BASE\x01" % inner_num
        store_host = self._store_host
        shape = self._topic_shapes.get(topic)
        tail = shape[1] if shape is not None else self._v1_topic_field(topic)
        if (tail is None or len(store_host.ip) != 4
                or (born_host is not None and len(born_host.ip) != 4)):
            return self._put_inner_encoded(topic, queue_id, body, head, inner_num, tags_code,
                                           keys, sys_flag, born_timestamp,
                                           born_host or store_host, wait_flush)
        bhost = (self._store_host_bytes if born_host is None
                 else born_host.ip + _I32.pack(born_host.port))
        # The compiled fold when built: as fast on a large batch as isal's CRC, and it
        # keeps the GIL, which isal's and zlib's let go for large buffers -- the dispatch
        # thread then took it in the middle of each request, for a round per request.
        crc = body_crc32(body, 0) & 0x7FFFFFFF
        fixed = tail_at = FIXED_V4_PACKED_HOSTS.size
        tail_at += blen
        key = (topic, queue_id)
        cl = self.commitlog
        lock = cl.lock
        lock.acquire()
        try:  # as put: the store time, and _reserve's answer when the record fits, inline
            if topic in self.refused:
                raise self._refusal(topic)
            now = _time_ns() // 1_000_000 if self._wall_clock else self.clock()
            ts = now if now > self.last_ts else self.last_ts
            self.last_ts = ts
            qo = self.next_offsets.get(key, 0)
            props = head + b"%d\x02" % qo
            plen = len(props)
            if plen > MAX_PROPERTIES_BYTES:
                raise MessageTooLarge(plen, MAX_PROPERTIES_BYTES)
            size = tail_at + len(tail) + 2 + plen
            segs = cl.segments
            if segs and cl.werr is None and cl.disk_full is None:
                seg = segs[-1]
                pos = seg.wrote
                if size + BLANK_SIZE > seg.size - pos:
                    seg, pos = self._reserve(size)
            else:
                seg, pos = self._reserve(size)
            phys = seg.base + pos
            mm = seg.mm
            try:
                FIXED_V4_PACKED_HOSTS.pack_into(
                    mm, pos, size, MAGIC_V1, crc, queue_id, 0, qo, phys, sys_flag,
                    born_timestamp or ts, bhost, ts, self._store_host_bytes, 0, 0, blen)
                mm[pos + fixed : pos + tail_at] = body
                mm[pos + tail_at : pos + size] = tail + _I16.pack(plen) + props
            except (OSError, ValueError) as exc:  # the map failed: sticky, as in _write
                cl.werr = f"write to {seg.path.name} failed: {exc}"
                raise StoreReadOnly("WRITE_ERROR", cause=cl.werr) from exc
            except BaseException:
                mm[pos : pos + size] = bytes(size)  # a field out of range: a part written
                raise
            seg.wrote = pos + size
            if self._hooks:
                self._appended(seg, pos, pos + size)
            self.next_offsets[key] = qo + inner_num
            end = phys + size
            self._pending_append(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (tags_code,), ts, end,
                (keys,) if self._index_keys else None, (inner_num,)))
            if self._live.idle:
                self._live.poke()
            self.put_messages += inner_num
        finally:
            lock.release()
        if wait_flush and self._sync_flush:
            return _new_result(PutResult, (_PUT_OK, qo, (phys,), (size,), ts,
                                           self._join_flush(end),
                                           _monotonic() + self._flush_timeout))
        return _new_result(PutResult, (_PUT_OK, qo, (phys,), (size,), ts, None, 0.0))

    def _v1_topic_field(self, topic: str) -> bytes | None:
        """TOPICLENGTH and TOPIC of a V1 record to ``topic`` (``None``: V2, the topic is
        too long), kept with the topic's shape that :meth:`put` uses."""
        shape = self._topic_shapes.get(topic)
        if shape is None:
            tb = topic.encode()
            if len(tb) > MAX_V1_TOPIC_BYTES:
                return None
            shape = self._topic_shapes[topic] = (MIN_RECORD_SIZE + len(tb),
                                                 bytes([len(tb)]) + tb, {}, {})
        return shape[1]

    def _put_inner_encoded(self, topic: str, queue_id: int,
                           body: bytes | bytearray | memoryview, head: bytes, inner_num: int,
                           tags_code: int, keys: tuple[str, ...], sys_flag: int,
                           born_timestamp: int, bhost: HostAddr, wait_flush: bool) -> PutResult:
        """:meth:`put_inner_batch` for IPv6 hosts or a V2 topic: the record encoded, then
        copied into the segment. ``head``: the properties up to INNER_BASE's value."""
        tbytes = topic.encode()
        key = (topic, queue_id)
        with self.commitlog.lock:
            if topic in self.refused:
                raise self._refusal(topic)
            ts = self._store_time()
            qo = self.next_offsets.get(key, 0)
            props = head + b"%d\x02" % qo
            size = record_size(len(body), len(tbytes), len(props),
                               _host_bits(bhost, self.store_host))
            seg, pos = self._reserve(size)
            phys = seg.base + pos
            rec = encode_record(topic=tbytes, queue_id=queue_id, body=body, properties=props,
                                sys_flag=sys_flag, born_timestamp=born_timestamp or ts,
                                born_host=bhost, store_host=self.store_host,
                                store_timestamp=ts, queue_offset=qo, physical_offset=phys)
            self._write_record(seg, pos, rec)
            self.next_offsets[key] = qo + inner_num
            end = phys + size
            self._live.submit(DispatchBatch(
                topic, queue_id, qo, (phys,), (size,), (tags_code,), ts, end,
                (keys,) if self._index_keys else None, (inner_num,)))
            self.put_messages += inner_num
        return self._result(qo, (phys,), (size,), ts, end, wait_flush)


def _host_bits(born: HostAddr, store: HostAddr) -> int:
    """The SYSFLAG host bits of records with these hosts."""
    return ((SYSFLAG_BORNHOST_V6 if len(born.ip) == 16 else 0)
            | (SYSFLAG_STOREHOST_V6 if len(store.ip) == 16 else 0))
