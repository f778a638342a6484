"""MessageStore: the store's façade -- put, get, offsets, hooks, start and shutdown.

Synchronous code with no asyncio. Background threads: the flusher (``store.flush``), the
dispatcher (``store.dispatch``) and a housekeeper that flushes consume queues, writes the
checkpoint and runs retention. Callers above the store learn about new data through
``on_dispatched`` hooks and about durability through the ``durable`` future of a put.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence

from tidemq.errors import MessageTooLarge, StoreReadOnly
from tidemq.formats.record import HostAddr
from tidemq.store.append import MessageInput, encode_batch, patch_batch
from tidemq.store.checkpoint import Checkpoint, StoreLock
from tidemq.store.commitlog import CommitLog
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import DispatchBatch, Dispatcher, DispatchHook, IndexSink
from tidemq.store.flush import FlushService, FlushStatus
from tidemq.store.layout import StoreLayout
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.reader import GetResult, QueueReader
from tidemq.store.recovery import RecoveryReport, recover

__all__ = ["MessageInput", "MessageStore", "PutResult", "PutStatus"]

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"


@dataclasses.dataclass(slots=True)
class PutResult:
    status: PutStatus
    queue_offset: int
    phys_offsets: list[int]
    sizes: list[int]
    store_timestamp: int
    durable: concurrent.futures.Future[FlushStatus] | None = None

    @property
    def count(self) -> int:
        return len(self.phys_offsets)

    def wait_durable(self, timeout: float | None = None) -> PutStatus:
        """Block until SYNC_FLUSH confirms (or times out); ``PUT_OK`` under ASYNC_FLUSH."""
        if self.durable is None:
            return self.status
        flushed = self.durable.result(timeout)
        return PutStatus.PUT_OK if flushed is FlushStatus.FLUSHED else (
            PutStatus.FLUSH_DISK_TIMEOUT)


class MessageStore:
    """One store root directory, owned by one process."""

    def __init__(self, config: StoreConfig, *, store_host: HostAddr | None = None,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.config = config
        self.layout = StoreLayout(config.store_path_root_dir)
        self.store_host = store_host or HostAddr(b"\x7f\x00\x00\x01", 10911)
        self.clock = clock
        self.commitlog = CommitLog(self.layout, config.mapped_file_size_commit_log,
                                   preallocate=config.preallocate_segments)
        self.queues = ConsumeQueueSet(self.layout, config.mapped_file_size_consume_queue)
        self.index: IndexSink | None = None
        self._lock = StoreLock(self.layout.lock_file)
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._last_ts = 0
        self._running = False
        self._hooks: list[DispatchHook] = []
        self._housekeeper: threading.Thread | None = None
        self._stop_event = threading.Event()
        self.dispatcher: Dispatcher | None = None
        self.flusher: FlushService | None = None
        self.reader = QueueReader(self.commitlog, self.queues)
        self.recovery_report: RecoveryReport | None = None
        self.puts = 0
        self.put_messages = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RecoveryReport:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            clean = not self.layout.abort_file.exists()
            self.commitlog.load()
            self.queues.load()
            checkpoint = Checkpoint.read(self.layout.checkpoint_file)
            report = recover(self.commitlog, self.queues, self.index, checkpoint, clean=clean,
                             check_crc=self.config.check_crc_on_recover)
        except BaseException:
            self._lock.release()
            raise
        (log.warning if report.bytes_dropped else log.info)("%s", report)
        self.recovery_report = report
        for cq in self.queues.all():
            self._next_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        self._last_ts = max(checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp)
        self.layout.abort_file.touch()
        self.flusher = FlushService(self.commitlog, self.config, self._on_flushed)
        self.dispatcher = Dispatcher(self.queues, self.index, self._confirm_offset,
                                     self.commitlog.max_offset, self.config.dispatch_lag_warn_ms)
        for hook in self._hooks:
            self.dispatcher.add_hook(hook)
        self.flusher.start()
        self.dispatcher.start()
        self._stop_event.clear()
        self._housekeeper = threading.Thread(target=self._housekeep, name="tidemq-housekeep",
                                             daemon=True)
        self._housekeeper.start()
        self._running = True
        return report

    def shutdown(self) -> None:
        """Flush, dispatch everything, write the checkpoint, remove the abort marker."""
        if not self._running:
            return
        self._running = False
        self._stop_event.set()
        if self._housekeeper is not None:
            self._housekeeper.join()
        assert self.flusher is not None and self.dispatcher is not None
        self.flusher.stop()
        self.dispatcher.drain()
        self.dispatcher.stop()
        clean = self.dispatcher.error is None and self.commitlog.werr is None
        try:
            self._write_checkpoint()
        except OSError as exc:
            log.error("final checkpoint failed: %s", exc)
            clean = False
        if clean:
            self.layout.abort_file.unlink(missing_ok=True)
        self.queues.close()
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

    def put(self, topic: str, queue_id: int, msg: MessageInput, **kw: object) -> PutResult:
        return self.put_batch(topic, queue_id, (msg,), **kw)  # type: ignore[arg-type]

    def put_batch(
        self, topic: str, queue_id: int, msgs: Sequence[MessageInput], *, sys_flag: int = 0,
        born_timestamp: int = 0, born_host: HostAddr | None = None, reconsume_times: int = 0,
        wait_flush: bool = True,
    ) -> PutResult:
        """Append ``msgs`` to ``(topic, queue_id)`` with consecutive queue offsets."""
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")
        if not msgs:
            raise ValueError("put_batch needs at least one message")
        limit = self.config.max_message_size
        for m in msgs:
            if len(m.body) > limit:
                raise MessageTooLarge(len(m.body), limit)
        enc = encode_batch(topic, queue_id, msgs, sys_flag=sys_flag,
                           born_timestamp=born_timestamp or self.clock(),
                           born_host=born_host or self.store_host, store_host=self.store_host,
                           reconsume_times=reconsume_times)
        key = (topic, queue_id)
        cl = self.commitlog
        assert self.dispatcher is not None
        with cl.lock:
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            qo = self._next_offsets.get(key, 0)
            seg, pos = cl.reserve(len(enc.buf))
            phys_base = seg.base + pos
            patch_batch(enc, qo, phys_base, ts)
            cl.write(seg, pos, enc.buf)
            self._next_offsets[key] = qo + len(msgs)
            phys = [phys_base + s for s in enc.starts]
            end = phys_base + len(enc.buf)
            self.dispatcher.submit(DispatchBatch(
                topic, queue_id, qo, phys, enc.sizes, [m.tags_code for m in msgs], ts, end,
                [m.keys for m in msgs] if self.index is not None else None,
                time.monotonic_ns(),
            ))
            self.puts += 1
            self.put_messages += len(msgs)
        durable = None
        if self.config.sync_flush and wait_flush:
            assert self.flusher is not None
            durable = self.flusher.request(end)
        return PutResult(PutStatus.PUT_OK, qo, phys, enc.sizes, ts, durable)

    # ------------------------------------------------------------------ reading

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
            max_bytes: int = 4 * 1024 * 1024,
            tag_codes: frozenset[int] | None = None) -> GetResult:
        """Records from ``offset``: zero-copy views grouped into contiguous runs."""
        return self.reader.get(topic, queue_id, offset, max_count, max_bytes, tag_codes)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Next offset that will become visible (dispatched entries only)."""
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

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, queue_id in self.queues.queue_keys():
            out.setdefault(topic, []).append(queue_id)
        return out

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until every confirmed record is visible (tests and offline tools)."""
        return self.dispatcher.drain(timeout) if self.dispatcher is not None else True

    def dispatch_lag(self) -> tuple[int, float]:
        if self.dispatcher is None:
            return 0, 0.0
        return self.dispatcher.lag(self._confirm_offset())

    # ------------------------------------------------------------------ housekeeping

    def _write_checkpoint(self) -> None:
        assert self.dispatcher is not None and self.flusher is not None
        dispatched = self.dispatcher.dispatched_offset
        logics_ts = self.dispatcher.last_store_timestamp
        self.queues.flush()
        flushed = self.commitlog.flush() if not self.commitlog.werr else self.flusher.flushed_offset
        Checkpoint(
            physic_msg_timestamp=self._last_ts if flushed >= self.commitlog.max_offset else 0,
            logics_msg_timestamp=logics_ts,
            index_msg_timestamp=logics_ts,
            flushed_phy_offset=flushed,
            dispatched_phy_offset=min(dispatched, flushed),
        ).write(self.layout.checkpoint_file)

    def _housekeep(self) -> None:
        interval = self.config.flush_interval_consume_queue / 1000
        while not self._stop_event.wait(interval):
            try:
                self._write_checkpoint()
            except (OSError, StoreReadOnly) as exc:
                log.error("checkpoint failed: %s", exc)
