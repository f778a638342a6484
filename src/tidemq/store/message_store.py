"""MessageStore: the store's façade -- put, get, offsets, hooks, start and shutdown.

The puts are the append point's (:class:`~tidemq.store.appender.Appender`, the one code
that writes records into the commit log); the store exposes them as its own methods
(``put``, ``put_batch``, ``put_multi_dispatch``, ``put_batch_multi_dispatch``,
``put_inner_batch``: the appender's bound methods, so a put costs no extra call) and owns
everything around them.

Synchronous code with no asyncio. Background threads: the flusher (``store.flush``), the
dispatcher (``store.dispatch``) and a housekeeper that flushes consume queues, writes the
checkpoint and runs retention. Callers above the store learn about new data through
``on_dispatched`` hooks and about durability through the ``durable`` future of a put.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from tidemq.errors import CorruptRecord, StoreReadOnly
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import HostAddr, Record, decode_record
from tidemq.store import kept_cuts, truncation
from tidemq.store.append import MessageInput
from tidemq.store.appender import Appender, AppendHook, wall_clock_ms
from tidemq.store.checkpoint import Checkpoint, Origin, StoreLock
from tidemq.store.commitlog import CommitLog
from tidemq.store.concurrent_dispatch import ConcurrentDispatcher
from tidemq.store.config import StoreConfig
from tidemq.store.dispatch import Dispatcher, DispatchHook, RoundHook
from tidemq.store.epoch_file import EpochFile
from tidemq.store.flush import FlushService
from tidemq.store.index import KeyIndex
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_store import LMQ_PREFIX, LmqStore
from tidemq.store.put_result import PutResult, PutStatus
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.reader import GetResult, InnerTags, QueueReader
from tidemq.store.recovery import RecoveryReport, recover
from tidemq.store.recovery_plan import dispatched_from
from tidemq.store.replica_log import CopyRunning, ReplicaLog
from tidemq.store.requeue import lmq_entries_above, pending_queues, requeue_above_marks
from tidemq.store.retention import DiskUsage, RetentionPolicy, RetentionReport, RetentionService
from tidemq.store.threads import NamedThread

__all__ = ["MessageInput", "MessageStore", "PutResult", "PutStatus", "wall_clock_ms"]

log = logging.getLogger(__name__)

class MessageStore:
    """One store root directory, owned by one process."""

    def __init__(self, config: StoreConfig, *, store_host: HostAddr | None = None,
                 clock: Callable[[], int] = wall_clock_ms,
                 disk_usage: DiskUsage | None = None) -> None:
        self.config = config
        self.layout = StoreLayout(config.store_path_root_dir)
        self._running = False
        self.clock = clock
        self.commitlog = CommitLog(self.layout, config.mapped_file_size_commit_log,
                                   preallocate=config.preallocate_segments,
                                   warm_ahead=config.commit_log_warm_ahead)
        self.queues = ConsumeQueueSet(self.layout, config.mapped_file_size_consume_queue,
                                      config.mapper_file_size_batch_consume_queue)
        self.index: KeyIndex | None = None
        if config.message_index_enable:
            self.index = KeyIndex(self.layout, max_hash_slot_num=config.max_hash_slot_num,
                                  max_index_num=config.max_index_num)
        self.retention = RetentionService(self.commitlog, self.queues, self.index,
                                          RetentionPolicy.from_config(config))
        if disk_usage is not None:
            self.retention.disk_usage = disk_usage
        self._lock = StoreLock(self.layout.lock_file)
        self._hooks: list[DispatchHook] = []
        self._round_hooks: list[RoundHook] = []
        self._dispatch_soon: Callable[[Callable[[], None]], bool] | None = None
        self._housekeeper: threading.Thread | None = None
        self._stop_event = threading.Event()
        #: Held while a checkpoint is taken and written, and through a cut.
        self._checkpointing = threading.Lock()
        #: The checkpoint last written by the housekeeper (``None``: none yet).
        self._checkpointed: Checkpoint | None = None
        #: RocketMQ's ``masterFlushedOffset``, carried over from the checkpoint read at
        #: start (TideMQ never learns one; 0 is RocketMQ's "not known").
        self._master_flushed_offset = 0
        self.dispatcher: Dispatcher | None = None
        self.flusher: FlushService | None = None
        self.reader = QueueReader(self.commitlog, self.queues)
        self.recovery_report: RecoveryReport | None = None
        self.appender = Appender(self.commitlog, self.queues, config, clock,
                                 store_host or HostAddr(b"\x7f\x00\x00\x01", 10911),
                                 index_keys=self.index is not None)
        # The puts are the appender's, bound once: the façade adds no call to them.
        self.put = self.appender.put
        self.put_many = self.appender.put_many
        self.put_batch = self.appender.put_batch
        self.put_multi_dispatch = self.appender.put_multi_dispatch
        self.put_batch_multi_dispatch = self.appender.put_batch_multi_dispatch
        self.put_inner_batch = self.appender.put_inner_batch
        self._replica_log: ReplicaLog | None = None
        #: Copies from a master that may append now (:meth:`copy_started`).
        self._copies = 0
        #: A cut decided and not made yet (:meth:`begin_cut`): nothing appends meanwhile.
        self._cutting: truncation.RunningCut | None = None
        #: Held while a cut's tail is kept (:meth:`keep_cut`, in a thread): a shutdown
        #: waits for it rather than close the log under it.
        self._keeping = threading.Lock()
        #: Controller mode: which epoch began where (loaded at start).
        self.epochs = EpochFile(self.layout.epoch_file)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RecoveryReport:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            clean = not self.layout.abort_file.exists()
            self.commitlog.load(clean=clean)
            self.queues.load()
            if self.config.enable_lmq and self.config.enable_multi_dispatch:
                self.queues.lmq = LmqStore(self.layout.lmq_dir, self.config.lmq_cached_queues,
                                          self.config.lmq_known_queues)
                self.queues.lmq.pinned = self.appender.lmq_next.generations
                self.queues.lmq.warm_in_background()  # serves meanwhile: see warm()
            checkpoint = Checkpoint.load(self.layout)
            self._note_checkpoint(checkpoint)
            cut_at = truncation.pending(self.layout)
            self.epochs.load()
            kept = self._keep_cut(cut_at) if cut_at is not None else None  # before any cut
            queues_end = self.queues.max_phys_end()
            if self.index is not None:
                self.index.load()
                if not clean or cut_at is not None:  # trust only what the checkpoint flushed
                    self.index.truncate(dispatched_from(checkpoint, queues_end, False,
                                                        self.commitlog.segments))
            # after a clean stop the log reaches what both the checkpoint and the
            # queues say was written; each alone could itself be the damaged file
            written = (min(dispatched_from(checkpoint, queues_end, True), queues_end)
                       if clean and cut_at is None else None)
            report = recover(self.commitlog, self.queues, self.index, checkpoint, clean=clean,
                             check_crc=self.config.check_crc_on_recover, cut_at=cut_at,
                             written=written)
            if self.index is not None:
                self.index.truncate(report.end_offset)
            if kept is not None and report.cut_at is not None:
                report.kept = kept_cuts.where(self.layout.truncated_dir, *kept)
            if cut_at is not None:
                self.epochs.truncate(report.end_offset)
                for seg in self.commitlog.segments[-1:]:
                    seg.sync()  # the zeroed tail is on disk before the request goes
                truncation.clear(self.layout)
            self.retention.correct_min_offsets()
            self.queues.deleted.forget_before(self.commitlog.min_offset)
        except BaseException:
            self._lock.release()
            raise
        (log.warning if report.bytes_dropped else log.info)("%s", report)
        self.recovery_report = report
        self.reader.damaged.reset(report.start_offset,
                                  [(d.offset, d.reason) for d in report.damaged])
        appender = self.appender
        for cq in self.queues.all():
            appender.next_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        appender.last_ts = max(checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                               report.max_store_timestamp)
        self.layout.abort_file.touch()
        self.flusher = FlushService(self.commitlog, self.config, self._on_flushed)
        self.dispatcher = self._new_dispatcher()
        for hook in self._hooks:
            self.dispatcher.add_hook(hook)
        self.dispatcher.soon = self._dispatch_soon
        for round_hook in self._round_hooks:
            self.dispatcher.add_round_hook(round_hook)
        self.flusher.start()
        self.dispatcher.start()
        if self.config.commit_log_warm_ahead:
            self.commitlog.start_warmer()
        self._stop_event.clear()
        self._housekeeper = NamedThread(target=self._housekeep, name="tidemq-housekeep",
                                        daemon=True)
        self._housekeeper.start()
        self._running = True
        appender.attach(self.dispatcher, self.flusher)
        return report

    @property
    def store_host(self) -> HostAddr:
        """The address written into every record as STOREHOST (the broker sets it once it
        knows its listening port, possibly after :meth:`start`)."""
        return self.appender.store_host

    @store_host.setter
    def store_host(self, host: HostAddr) -> None:
        self.appender.store_host = host

    @property
    def put_messages(self) -> int:
        """Messages stored since start (an inner batch counts its messages)."""
        return self.appender.put_messages

    def add_append_hook(self, hook: AppendHook) -> None:
        """``hook(start_offset, view)`` for every run of bytes appended to the commit log
        (:meth:`Appender.add_append_hook <tidemq.store.appender.Appender.add_append_hook>`)."""
        self.appender.add_append_hook(hook)

    def append_replicated(self, offset: int, data: bytes | memoryview, *,
                          dispatch: bool = True) -> int:
        """A replica's write: its master's commit-log bytes from ``offset`` (this log's
        end), dispatched as they complete records (:mod:`tidemq.store.replica_log`) --
        now, or with ``dispatch=False`` at the next :meth:`dispatch_replicated`; returns
        the new end of the log."""
        self._must_run()
        self._no_cut("append a master's bytes")
        replica = self._replica_log
        if replica is None:
            replica = self._replica_log = ReplicaLog(
                self.appender, check_crc=self.config.check_crc_on_recover)
        end = replica.append(offset, data, dispatch=dispatch)
        if self.config.sync_flush and self.flusher is not None:
            self.flusher.request(end)  # the dispatcher confirms flushed bytes only
        return end

    def dispatch_replicated(self) -> None:
        """Dispatch what :meth:`append_replicated` wrote without dispatching."""
        if self._replica_log is not None:
            self._replica_log.dispatch()

    @property
    def replica(self) -> bool:
        """Whether the store copies a master: puts are refused (``StoreReadOnly`` with
        status ``SLAVE``) and :meth:`append_replicated` writes."""
        return self.appender.replica

    @replica.setter
    def replica(self, on: bool) -> None:
        if not on and self.appender.replica:
            self._no_cut("take puts")
            self.settle_replica_log()
        with self.commitlog.lock:  # no put is half-way when the switch happens
            # marks taken from a master ahead of this log: what is put from here on
            # belongs to the topics created again, whose queues start at 0
            if not on and self.appender.replica and (
                    clamped := set(self.queues.deleted.clamp(self.commitlog.max_offset))):
                next_offsets = self.appender.next_offsets
                for key in [key for key in next_offsets if key[0] in clamped]:
                    del next_offsets[key]
            self.appender.replica = on

    def copy_started(self) -> None:
        """A copy from a master (an HA client) may append to this log from now until
        :meth:`copy_stopped`, which it calls once it has ended: meanwhile the log is
        neither settled nor cut (:class:`~tidemq.store.replica_log.CopyRunning`)."""
        self._no_cut("start a copy from a master")
        self._copies += 1

    def copy_stopped(self) -> None:
        """A copy :meth:`copy_started` announced has ended: it appends nothing more."""
        self._copies -= 1

    def _must_run(self) -> None:
        if not self._running:
            raise StoreReadOnly("NOT_RUNNING", cause="the store is not started")

    def _no_copy(self, action: str) -> None:
        if self._copies:
            raise CopyRunning(action, self._copies)

    def _no_cut(self, action: str) -> None:
        if self._cutting is not None:
            raise truncation.CutUnderWay(action, self._cutting)

    def settle_replica_log(self) -> None:
        """A replica about to put as a master: every whole record it received is
        dispatched (those of a frame still arriving were not), and a record whose bytes
        stopped arriving is cut, so that puts continue the master's queues right after
        the last whole record. Called when the replica role is left, once its copy from
        the master has stopped (else :class:`~tidemq.store.replica_log.CopyRunning`); a
        caller that records where the new master's log begins (its epoch) calls it
        first."""
        self._no_copy("settle the replica's log")
        replica, self._replica_log = self._replica_log, None
        if replica is None or not self._running:
            return
        replica.dispatch()
        torn = replica.torn_tail()
        if torn is not None:
            dropped = self._cut(torn)
            log.warning("cut the %d bytes of an unfinished record at %d (its frame stopped "
                        "arriving) before putting as a master", dropped, torn)

    def cut_tail(self, offset: int) -> int:
        """Cut a running replica's commit log at ``offset`` (a record boundary), as
        recovery makes a requested cut at start: the commit log zeroed from there and
        later segments deleted, consume queues, LMQ entries, index and epoch file cut.
        Returns the bytes dropped. :meth:`begin_cut`, :meth:`keep_cut` and
        :meth:`finish_cut` in one call; a caller on an event loop calls them itself, the
        keeping in a thread.

        Only a replica's log (no put can run) that copies nobody (the caller stopped its
        HA client, else :class:`~tidemq.store.replica_log.CopyRunning`) is cut while it
        runs. The cut is requested first (:mod:`tidemq.store.truncation`), so a process
        killed half-way makes it at its next start; the request goes once the cut and a
        checkpoint are on disk."""
        dropped = self._cut(offset)
        if dropped:
            log.warning("commit log cut at %d while running: %d bytes dropped", offset,
                        dropped)
        return dropped

    def _cut(self, offset: int) -> int:
        """:meth:`cut_tail` without its log line."""
        cut = self.begin_cut(offset)
        if cut is None:
            return 0
        self.keep_cut(cut)
        return self.finish_cut(cut)

    def begin_cut(self, offset: int) -> truncation.RunningCut | None:
        """Decide a cut of this running replica's log at ``offset``, touching no file:
        ``None`` when the log ends there or before. From here until :meth:`finish_cut`
        (or :meth:`keep_cut` fails) nothing appends: a copy, a put or a second cut is
        refused (:class:`~tidemq.store.truncation.CutUnderWay`)."""
        self._must_run()
        if not self.appender.replica:
            raise ValueError("only a replica's commit log is cut while the store runs")
        self._no_copy("cut the commit log")
        self._no_cut("cut the commit log again")
        end = self.commitlog.max_offset
        if offset >= end:
            return None
        cut = self._cutting = truncation.RunningCut(offset, end)
        return cut

    def keep_cut(self, cut: truncation.RunningCut) -> truncation.KeptNote:
        """The file work of a decided cut, safe in a thread while requests are served
        (the log does not change meanwhile): the cut requested on disk, its records kept
        (:mod:`tidemq.store.kept_cuts`), what was written before it dispatched. On an
        error the cut is given up (its request stays: the next start makes it). A
        :meth:`shutdown` that comes meanwhile waits for the kept file; the cut is then
        made by the next start."""
        with self._keeping:
            try:
                self._must_run()
                truncation.request(self.layout, cut.offset)
                kept = self._keep_cut(cut.offset)
                assert self.dispatcher is not None
                self.dispatcher.drain()
            except BaseException:
                self._cutting = None
                raise
        return kept

    def finish_cut(self, cut: truncation.RunningCut) -> int:
        """Make a cut :meth:`keep_cut` kept: the log, queues, LMQ entries, index and
        epochs cut at its offset, a checkpoint written, the request removed. Returns the
        bytes dropped."""
        self._must_run()
        if self._cutting != cut:
            raise ValueError(f"no cut at {cut.offset} is under way")
        dispatcher, flusher = self.dispatcher, self.flusher
        assert dispatcher is not None and flusher is not None
        offset = cut.offset
        try:
            if self.commitlog.max_offset != cut.end:  # a bug: nothing may append
                raise RuntimeError(f"the commit log ends at {self.commitlog.max_offset}, "
                                   f"not {cut.end}, as its cut at {offset} is made")
            # one checkpoint writer at a time: none the housekeeper took before the cut
            # may land after it (nor race it for the checkpoint's temporary file)
            with self._checkpointing:
                if not dispatcher.drain():
                    raise StoreReadOnly("DISPATCH_ERROR", cause="the dispatcher did not "
                                        "catch up before the cut; the next start makes it")
                dispatcher.pause()
                try:
                    with self.commitlog.lock:
                        self._cut_locked(offset)
                    truncation.clear(self.layout)
                finally:
                    dispatcher.resume()
        finally:
            self._cutting = None
        return cut.end - offset

    def _cut_locked(self, offset: int) -> None:
        """Everything the log holds from ``offset`` on goes (under the commit log's lock,
        the dispatcher paused), and a checkpoint of the cut log is written."""
        dispatcher, flusher = self.dispatcher, self.flusher
        assert dispatcher is not None and flusher is not None
        for cq in self.queues.all():
            cq.truncate_phys(offset)
        if self.queues.lmq is not None:
            self.queues.lmq.truncate_phys(offset)
        if self.index is not None:
            self.index.truncate(offset)
        self.commitlog.truncate(offset)
        self.epochs.truncate(offset)
        dispatcher.dispatched_offset = offset
        dispatcher.forget_arrivals()
        flusher.flushed_offset = min(flusher.flushed_offset, offset)
        appender = self.appender
        appender.next_offsets = {(cq.topic, cq.queue_id): cq.max_offset
                                 for cq in self.queues.all()}
        appender.lmq_next.clear()  # read again from the LMQ store when needed
        self._replica_log = None  # the next copy starts at the new end
        self._checkpoint_held()

    def _keep_cut(self, offset: int) -> truncation.KeptNote:
        """Copy the records of the tail a pending cut at ``offset`` drops into
        ``truncated/`` and note it in the request, unless a run killed after that step
        already did (the log may be cut in part since); returns the note."""
        noted = truncation.kept(self.layout)
        if noted is not None:
            return noted
        limit = self.config.kept_cut_max_bytes
        kept = kept_cuts.keep(self.commitlog.segments, self.layout.truncated_dir, offset,
                              kept_cuts.epoch_at(self.epochs.entries, offset), limit,
                              self.config.check_crc_on_recover)
        name = kept.path.name if kept.path else None
        truncation.note_kept(self.layout, offset, name, kept.records)
        kept_cuts.report(offset, kept, limit)
        return truncation.KeptNote(name, kept.records)

    @property
    def replica_log(self) -> ReplicaLog | None:
        """The replica side of the log, once bytes were replicated into it."""
        return self._replica_log

    def read_log(self, offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` of the commit log from ``offset``, within one segment and
        up to what is written (empty at the end; ``None`` if ``offset`` is not stored).
        A master reads what it sends its replicas here."""
        seg = self.commitlog.segment_for(offset)
        if seg is None:
            return memoryview(b"") if offset == self.commitlog.max_offset else None
        pos = offset - seg.base
        return seg.view[pos : min(seg.wrote, pos + max_bytes)]

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.appender.next_offsets.get((topic, queue_id), 0)

    def _new_dispatcher(self) -> Dispatcher:
        config = self.config
        # Under SYNC_FLUSH a round is confirmed only once flushed: never at its append.
        on_append = 0 if config.sync_flush else config.dispatch_on_append_records
        args = (self.queues, self.index, self._confirm_offset, self.commitlog.max_offset,
                config.dispatch_lag_warn_ms, self.clock, config.dispatch_linger_ms, on_append)
        if not config.enable_build_consume_queue_concurrently:
            return Dispatcher(*args)
        return ConcurrentDispatcher(*args, workers=config.dispatch_workers,
                                    ring_size=config.dispatch_ring_size,
                                    round_records=config.dispatch_round_records)

    def shutdown(self) -> None:
        """Flush, dispatch everything, write the checkpoint, remove the abort marker;
        once a cut's tail being kept in a thread is (:meth:`keep_cut`)."""
        if not self._running or not self._stop_running():
            return
        self.appender.detach()
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

    def _stop_running(self) -> bool:
        """Mark the store stopped once no cut's tail is being kept; ``False`` when a
        shutdown in another thread came first."""
        if not self._keeping.acquire(blocking=False):
            cutting = self._cutting
            log.warning("shutdown waits for the tail of the commit log cut at %s to be "
                        "kept", cutting.offset if cutting is not None else "?")
            self._keeping.acquire()
        try:
            running, self._running = self._running, False
            return running
        finally:
            self._keeping.release()

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

    def add_dispatch_round_hook(self, hook: RoundHook) -> None:
        """``hook(touched)`` once a dispatch round, from the dispatcher thread: every
        ``(topic, queue_id)`` the round moved mapped to its new max offset (cheaper than
        :meth:`add_dispatch_hook` for a hook interested in a few queues)."""
        self._round_hooks.append(hook)
        if self.dispatcher is not None:
            self.dispatcher.add_round_hook(hook)

    def dispatch_soon(self, soon: Callable[[Callable[[], None]], bool] | None) -> None:
        """Let a put made on an event loop leave its small dispatch round
        (``dispatchOnAppendRecords``) to the end of the loop's pass: ``soon(fn)`` schedules
        ``fn`` there (``call_soon``) and returns ``True``, or returns ``False`` on any other
        thread. The put's answer goes out first, and the puts of one pass share a round."""
        self._dispatch_soon = soon
        if self.dispatcher is not None:
            self.dispatcher.soon = soon

    # ------------------------------------------------------------------ writing

    def _confirm_offset(self) -> int:
        if self.config.sync_flush and self.flusher is not None:
            return self.flusher.flushed_offset
        return self.commitlog.max_offset

    def _on_flushed(self, _offset: int) -> None:
        if self.config.sync_flush and self.dispatcher is not None:
            self.dispatcher.wake()

    @property
    def lmq(self) -> LmqStore | None:
        """The light-message-queue store, when ``enableLmq`` and ``enableMultiDispatch``."""
        return self.queues.lmq

    def is_lmq(self, topic: str) -> bool:
        return self.queues.lmq is not None and topic.startswith(LMQ_PREFIX)

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
            assigned = (self.appender.lmq_next.pop(name) or 0) > 0  # handed out, maybe not
            return lmq.delete_queue(name, self.commitlog.max_offset) or assigned  # visible

    def adopt_lmq_tombstones(self, tombstones: Iterable[tuple[str, int]]) -> list[str]:
        """Delete LMQs as the master did, each at the commit-log offset of its floor (a
        replica copying its master's tombstones), but for those of which this store
        holds that deletion or a later one; returns the LMQs deleted.

        Records below a floor lose their entries in its LMQ (those dispatched here) or
        never get any (those still to come); records at or above it -- the LMQ created
        again on the master -- keep theirs, at the master's offsets: read again from the
        log (:func:`~tidemq.store.requeue.lmq_entries_above`; only for a queue that
        dispatch gave an entry above its floor, so an LMQ deleted and not created again
        costs no read) with no dispatch round running meanwhile, and written with the
        deletion."""
        lmq = self.queues.lmq
        if lmq is None:
            return []
        fresh = {name: floor for name, floor in tombstones if lmq.floor(name) < floor}
        if not fresh:
            return []
        dispatcher = self.dispatcher
        if dispatcher is None:  # not started: nothing is dispatched above a floor
            with self.commitlog.lock:
                for name, floor in fresh.items():
                    self.appender.lmq_next.pop(name)
                    lmq.delete_queue(name, floor)
            return sorted(fresh)
        with self._checkpointing, dispatcher.held() as settled:
            if not settled:
                raise StoreReadOnly("DISPATCH_ERROR", cause="the dispatcher did not catch "
                                    "up before an LMQ deletion; the next copy makes it")
            # the log is read only for queues dispatch gave an entry above the floor
            found = {name: floor for name, floor in fresh.items()
                     if lmq.holds_from(name, floor)}
            kept = lmq_entries_above(self.commitlog, found, dispatcher.dispatched_offset
                                     ) if found else {}
            lmq.flush()  # the entries written before, as the deletions that follow are
            with self.commitlog.lock:
                for name, floor in fresh.items():
                    self.appender.lmq_next.pop(name)
                    lmq.delete_queue(name, floor, kept.get(name, ()))
        return sorted(fresh)

    def set_batch_topic(self, topic: str, batch: bool = True) -> None:
        """Declare ``topic``'s queues BatchConsumeQueues (``queue.type=BatchCQ``)."""
        if batch:
            self.queues.batch_topics.add(topic)
        else:
            self.queues.batch_topics.discard(topic)

    def is_batch_topic(self, topic: str) -> bool:
        return topic in self.queues.batch_topics

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

    def physical_offset(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Where the message at ``offset`` of the queue lies in the commit log (``None``
        when the queue has no such entry, or is an LMQ)."""
        if topic.startswith(LMQ_PREFIX):
            return None
        cq = self.queues.get(topic, queue_id)
        entry = cq.entry(offset) if cq is not None else None
        return None if entry is None else entry[0]

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reader.offset_by_time(topic, queue_id, timestamp)

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        return self.reader.store_time_at(topic, queue_id, self.min_offset(topic, queue_id))

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.store_time_at(topic, queue_id, offset)

    def read_record(self, phys_offset: int) -> memoryview | None:
        return self.reader.read_record(phys_offset)

    def refuse_topic(self, topic: str, why: str) -> None:
        """Refuse every put into ``topic`` from now on
        (:class:`~tidemq.errors.TopicRefused`, with ``why``) until :meth:`admit_topic`:
        the start of a deletion, before :meth:`begin_delete_topic` marks it. A put under
        way when this is called is in the log when it returns."""
        self.appender.refuse(topic, why)

    def admit_topic(self, topic: str) -> None:
        """Take puts into ``topic`` again (its deletion ended, done or undone)."""
        self.appender.admit(topic)

    @property
    def refused_topics(self) -> Mapping[str, str]:
        """The topics :meth:`refuse_topic` refuses now, with why (a live view)."""
        return self.appender.refused

    def begin_delete_topic(self, topic: str) -> None:
        """The first step of deleting ``topic``, written before it returns: from here on
        the deletion is finished at the next start if not before
        (:meth:`pending_topic_deletions`), and its records up to the log's end now are
        never dispatched again (:mod:`tidemq.store.deleted_topics`)."""
        self.queues.deleted.begin([topic], self.commitlog.max_offset)

    def delete_topic(self, topic: str) -> None:
        """Drop the consume queues of ``topic`` (its records age out with their segments)
        and finish its deletion, begun here unless :meth:`begin_delete_topic` began it; a
        topic created again under the name starts over, of whatever queue type."""
        self.delete_topics([topic])

    def delete_topics(self, topics: Collection[str], *, requeue: bool = False) -> None:
        """:meth:`delete_topic` of each of ``topics``, the record of deleted topics written
        twice in all (begun, finished) rather than twice a topic. With ``requeue`` (a
        start finishing deletions a stop cut off, which on a replica may be its master's
        marks taken half-way) the records of the topics above their marks keep their queue
        entries, as :meth:`adopt_topic_deletions` leaves them."""
        pending = set(self.queues.deleted.pending())
        if fresh := [t for t in topics if t not in pending]:
            self.queues.deleted.begin(fresh, self.commitlog.max_offset)
        gone = set(topics)
        if requeue and self.dispatcher is not None:
            before = self.queues.deleted.before
            self._requeue({t: before[t] for t in gone if t in before})
            self.queues.batch_topics.difference_update(gone)
            self.queues.deleted.finish(gone)
            return
        # a round taken before the mark may still be writing these queues: removed under
        # it, a queue's file would be made again by the round and then by the topic's
        # next put, and dispatch would stop on the second
        dispatcher = self.dispatcher
        quiet = (dispatcher.between_rounds() if dispatcher is not None
                 else contextlib.nullcontext(True))
        with quiet as settled:
            if not settled:
                raise StoreReadOnly("DISPATCH_ERROR", cause="a dispatch round did not end "
                                    "before a topic deletion; the next start finishes it")
            for t, queue_id in self.queues.queue_keys():
                if t in gone:
                    self.queues.remove(t, queue_id)
            with self.commitlog.lock:  # every queue's, dispatched or not: a put starts at 0
                next_offsets = self.appender.next_offsets
                for key in [key for key in next_offsets if key[0] in gone]:
                    del next_offsets[key]
            self.queues.batch_topics.difference_update(gone)
        self.queues.deleted.finish(gone)

    def adopt_topic_deletions(self, marks: Mapping[str, int]) -> list[str]:
        """Delete topics as a master did, each at the commit-log offset its deletion began
        at there (a replica copying its master's marks), unless this store holds that
        mark already; returns the topics whose mark changed.

        The marks are written first, pending: a stop half-way leaves the next start to
        finish them (:meth:`delete_topics`). Records of a topic below its mark then lose
        their queue entries (those dispatched here) or never get any (those still to
        come); records above it -- the topic created again on the master -- keep theirs,
        in queues that start over where the master's did."""
        deleted, start = self.queues.deleted, self.commitlog.min_offset
        pending = set(deleted.pending())  # a cut that failed is made again
        # a mark at or below the log's start hides nothing here (retention dropped ours)
        fresh = {t: before for t, before in marks.items()
                 if before > start and (deleted.before.get(t) != before or t in pending)}
        if not fresh:
            return []
        deleted.adopt(fresh)
        self._requeue(fresh)
        deleted.finish(fresh)
        return sorted(fresh)

    def _requeue(self, marks: Mapping[str, int]) -> None:
        """Remove the queues of ``marks``' topics and write again the entries of their
        records above the marks (:mod:`tidemq.store.requeue`), with no dispatch round
        running meanwhile (a replica's copy appends on: the log it reads does not
        change); a put continues each queue from there."""
        dispatcher = self.dispatcher
        assert dispatcher is not None
        gone = set(marks)
        with self._checkpointing, dispatcher.held() as settled:
            if not settled:
                raise StoreReadOnly("DISPATCH_ERROR", cause="the dispatcher did not catch "
                                    "up before a topic deletion; the next start makes it")
            for key in [key for key in self.queues.queue_keys() if key[0] in gone]:
                self.queues.remove(*key)
            found = requeue_above_marks(self.commitlog, self.queues, marks,
                                        dispatcher.dispatched_offset)
            with self.commitlog.lock:  # a replica's next offsets follow its master's
                found |= pending_queues(list(dispatcher.pending), marks)
                next_offsets = self.appender.next_offsets
                for key in [key for key in next_offsets
                            if key[0] in gone and key not in found]:
                    del next_offsets[key]

    def topic_deletion_marks(self) -> dict[str, int]:
        """Per deleted topic whose records the log may still hold, the offset its deletion
        began at (what a replica takes with :meth:`adopt_topic_deletions`)."""
        return dict(self.queues.deleted.before)

    def pending_topic_deletions(self) -> list[str]:
        """The topics whose deletion began (:meth:`begin_delete_topic`) and did not finish
        (:meth:`delete_topic`): a process that stopped in between."""
        return self.queues.deleted.pending()

    def adopted_topic_deletions(self) -> list[str]:
        """Those of :meth:`pending_topic_deletions` that are a master's marks
        (:meth:`adopt_topic_deletions`)."""
        return self.queues.deleted.adopted()

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
        return self.dispatcher.check_lag(self._confirm_offset())

    # ------------------------------------------------------------------ housekeeping

    def _note_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Keep what the checkpoint read at start carries over, and say how it reads."""
        self._master_flushed_offset = checkpoint.master_flushed_offset
        if checkpoint.origin is Origin.EARLIER_TIDEMQ:
            log.info("checkpoint: %s; the next one is written in the current layout",
                     checkpoint.note)
        elif checkpoint.origin in (Origin.ROCKETMQ, Origin.DAMAGED):
            log.warning("checkpoint %s: %s; the recovery scan starts without TideMQ's "
                        "offsets", checkpoint.origin, checkpoint.note)

    def _write_checkpoint(self) -> None:
        """Flush what the checkpoint vouches for and write it; one writer at a time (the
        housekeeper, a cut, the shutdown)."""
        with self._checkpointing:
            self._checkpoint_held()

    def _checkpoint_held(self) -> None:
        assert self.dispatcher is not None and self.flusher is not None
        dispatched = self.dispatcher.dispatched_offset
        logics_ts = self.dispatcher.last_store_timestamp
        self.queues.flush()
        if self.queues.lmq is not None:
            self.queues.lmq.checkpoint(dispatched)
        index_ts = self.index.flush() if self.index is not None else logics_ts
        flusher = self.flusher
        flushed = flusher.flush_now() if not self.commitlog.werr else flusher.flushed_offset
        last_ts = self.appender.last_ts
        checkpoint = Checkpoint(
            physic_msg_timestamp=last_ts if flushed >= self.commitlog.max_offset else 0,
            logics_msg_timestamp=logics_ts,
            index_msg_timestamp=index_ts,
            master_flushed_offset=self._master_flushed_offset,
            confirm_phy_offset=flushed,
            flushed_phy_offset=flushed,
            dispatched_phy_offset=min(dispatched, flushed),
        )
        if checkpoint != self._checkpointed:  # an idle store writes (and fsyncs) nothing
            checkpoint.write(self.layout.checkpoint_file)
            self._checkpointed = checkpoint

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
        """One retention pass (docs/reference/store.md §6.5-6.6); the housekeeper runs one every
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
                        self.appender.next_offsets.pop(key, None)
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
