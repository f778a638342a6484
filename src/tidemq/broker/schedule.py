"""The delay service: delivers parked messages (:mod:`tidemq.broker.delay`) when due.

One thread, ``tidemq-schedule``, does all the work; it sleeps on a condition until the
earliest due time it knows of, or until the store's dispatch hook reports a parked message
it has not seen (a level whose queue was empty, or any new timer message). No polling.

* **Delay levels.** Queue ``level - 1`` of ``SCHEDULE_TOPIC_XXXX`` is read in order from
  the level's delivery offset. Every level has one fixed delay, so due times ascend along
  the queue: the head decides the next wake-up. A message is due at its STORETIMESTAMP
  plus the level's delay, read from the stored record, so it is never delivered early.
* **Timer messages.** :class:`~tidemq.broker.timers.TimerHeap` over the timer topic.

Delivery stores a copy in ``REAL_TOPIC``/``REAL_QID`` with a new store time, the same body,
flag, sysFlag, born time and host, reconsume count and properties, less ``DELAY`` (and the
timer request properties); ``REAL_TOPIC``/``REAL_QID``/``TIMER_OUT_MS`` stay, as upstream.

A message due while its topic's deletion is under way (:mod:`tidemq.broker.topic_deletion`)
waits until the deletion is answered, then is stored as any other: from offset 0 of the
topic's new queues, where the topic created again serves it. Stored meanwhile, it would
land above the deletion's mark in queues the deletion removes -- gone, though its parked
copy was acknowledged: the store refuses it (:class:`~tidemq.errors.TopicRefused`), and the
message is put aside, with every later one due for its topic, so they keep their order;
the pass goes on with the others. A delay level's recorded progress stays at its first
message put aside (a restart meanwhile delivers again what followed it), a timer
message put aside stays pending in the heap's checkpoint
(:meth:`~tidemq.broker.timers.TimerHeap.hold`). Upstream stores it whatever the topic's
state; so does TideMQ once the deletion is over, whether or not the topic is created again.

Durability (at-least-once, exactly-once across a clean restart). Progress lives in
``config/delayOffset.json`` (``{"offsetTable": {"<level>": next offset}}``, upstream's file)
and ``config/timerCheckpoint.json`` (:class:`~tidemq.broker.timers.TimerCheckpoint`), both
replaced atomically. A pass delivers, then records a snapshot of the progress together with
the commit-log end of the copies it stored; a snapshot is written only once the commit log
is flushed past that end (SYNC_FLUSH: within milliseconds; ASYNC_FLUSH: at the next flush),
so a written checkpoint never covers a copy a power loss could take back. A crash between
storing copies and writing the checkpoint that covers them delivers those messages again
after the restart. :meth:`ScheduleService.stop` stops the thread; after the store has shut
down (and flushed), :meth:`ScheduleService.persist` writes the final snapshot, so a clean
restart neither loses nor repeats anything.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from operator import itemgetter
from pathlib import Path

from tidemq.broker.delay import (
    DELAY,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_TOPIC,
    TIMER_PROPERTIES,
    TIMER_TOPIC,
    DelayPolicy,
)
from tidemq.broker.replication.progress_merge import newer_timer
from tidemq.broker.table_json import read_file
from tidemq.broker.timers import TimerCheckpoint, TimerEntry, TimerHeap
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    StoreReadOnly,
    TopicRefused,
)
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.threads import NamedThread
from tidemq.types import GetStatus

__all__ = ["ScheduleService"]

log = logging.getLogger(__name__)

READ_BATCH = 64
READ_BYTES = 4 * 1024 * 1024
MAX_SLEEP = 10.0  # bounds the effect of a wall-clock jump on a due time's wake-up
RETRY_SLEEP = 1.0  # after a store error
_LEVEL_DROPS = (DELAY, *TIMER_PROPERTIES)
_TOPIC = itemgetter(0)
_SKIPPING = (GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_TOO_SMALL,
             GetStatus.OFFSET_OVERFLOW_BADLY)

Snapshot = tuple[int, dict[int, int], TimerCheckpoint | None]  # (log end, levels, timer)


def _records(buffers: list[memoryview]) -> Iterator[Record]:
    """The records of a read; a corrupt one ends its run (logged: what follows is lost)."""
    for buf in buffers:
        pos = 0
        while pos < len(buf):
            try:
                rec = decode_record(buf, pos)
            except CorruptRecord as exc:
                log.error("parked messages skipped after a corrupt record: %s", exc)
                break
            if not isinstance(rec, Record):
                break
            yield rec
            pos += rec.total_size


class ScheduleService:
    def __init__(self, store: MessageStore, layout: StoreLayout, policy: DelayPolicy) -> None:
        self.store = store
        self.policy = policy
        self.clock = policy.clock
        self.offsets_path: Path = layout.config_file("delayOffset.json")
        self.timer_path: Path = layout.config_file("timerCheckpoint.json")
        self.offsets: dict[int, int] = {}
        self.timers = TimerHeap()
        self.delivered = 0
        self.passes = 0  # delivery passes run (each follows a wake-up or a due time)
        self._next_due: dict[int, int | None] = {}
        self._cond = threading.Condition()
        self._woken: set[int] = set()  # levels; 0 = the timer queue
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._end = 0  # commit-log end of the last copy stored
        self._pending: list[Snapshot] = []
        self._written: tuple[dict[int, int], TimerCheckpoint] | None = None
        self._timer_clean = True
        #: ``slaveActingMaster``: whether this replica acts for its master now, and where
        #: it hands a due message then (``(topic, queue id, record, properties)``; blocks
        #: until another master took it, raises when none did).
        self.acting: Callable[[], bool] = _never
        self.escape: Callable[[str, int, Record, str], None] | None = None
        self._held = False
        #: Deliveries put off because their topic was being deleted.
        self.deferred = 0
        #: Per delay level, the ``(queue offset, commit-log offset)`` of each message put
        #: aside while its topic is deleted, in level order.
        self._put_off: dict[int, list[tuple[int, int]]] = {}
        #: The topics with messages put aside: a later message due for one waits too.
        self._waiting: set[str] = set()
        self._ended = False  # a deletion ended: what was put aside is tried at once

    # ------------------------------------------------------------------ lifecycle

    def hold(self) -> None:
        """Deliver nothing until :meth:`release` (a returning master first takes back
        its replicas' progress)."""
        with self._cond:
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify()

    def load(self) -> None:
        self.offsets = read_file(self.offsets_path, _level_offsets) or {}
        checkpoint = read_file(self.timer_path, _timer_checkpoint) or TimerCheckpoint()
        self.timers = TimerHeap(checkpoint)
        self._written = (dict(self.offsets), checkpoint)

    def start(self) -> None:
        """Load progress and start delivering (the store must be running)."""
        self.load()
        levels = set(range(1, self.policy.max_level + 1))
        levels |= {q + 1 for q in self.store.topics().get(SCHEDULE_TOPIC, [])}
        self._next_due = dict.fromkeys(levels)
        self._woken = {0, *levels}
        self._stopping = False
        self.store.add_dispatch_round_hook(self.on_round)
        self._thread = NamedThread(target=self._run, name="tidemq-schedule", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._snapshot()  # a pass cut short by the stop moved offsets too

    def persist(self) -> None:
        """Write every snapshot whose copies are flushed (after the store's shutdown: all)."""
        flushed = self.store.commitlog.flushed_offset
        ready = [s for s in self._pending if s[0] <= flushed]
        if not ready:
            return
        self._pending = [s for s in self._pending if s[0] > flushed]
        _, levels, timer = ready[-1]
        written_levels, written_timer = self._written or ({}, TimerCheckpoint())
        timer = timer or written_timer
        if levels != written_levels:
            table = {str(k): v for k, v in sorted(levels.items())}
            atomic_write(self.offsets_path, json.dumps({"offsetTable": table}).encode())
        if timer != written_timer:
            atomic_write(self.timer_path, json.dumps(timer.to_json()).encode())
        self._written = (levels, timer)

    def adopt_offsets(self, offsets: dict[int, int]) -> None:
        """Take a master's delivery progress per level (on a replica, which delivers
        nothing itself; or a returning master taking back what a replica delivered for
        it, while held) and keep it on disk. A level's offset only moves forward: a
        master that came back with older progress than this replica recorded while
        acting for it does not take that progress back."""
        with self._cond:
            merged = dict(self.offsets)
            for level, offset in offsets.items():
                merged[level] = max(offset, merged.get(level, 0))
            if merged == self.offsets:
                return
            self.offsets = merged
            table = {str(k): v for k, v in sorted(merged.items())}
            atomic_write(self.offsets_path, json.dumps({"offsetTable": table}).encode())
            written = self._written
            self._written = (dict(merged), written[1] if written else TimerCheckpoint())

    def timer_progress(self) -> TimerCheckpoint:
        """The timer checkpoint last written to disk (what a replica copies: it covers
        only deliveries whose copies are flushed)."""
        written = self._written
        return written[1] if written is not None else TimerCheckpoint()

    def adopt_timer(self, checkpoint: TimerCheckpoint) -> None:
        """Take a master's timer progress (on a replica, which delivers nothing itself;
        or a returning master taking back a replica's, while held) and keep it on disk:
        elected master, it rebuilds its timer heap from there. Only a checkpoint with a
        later frontier is taken (:func:`~tidemq.broker.replication.progress_merge.newer_timer`)."""
        with self._cond:
            written = self._written
            if written is not None and newer_timer(written[1], checkpoint) is None:
                return
            self.timers = TimerHeap(checkpoint)
            atomic_write(self.timer_path, json.dumps(checkpoint.to_json()).encode())
            self._written = (dict(written[0]) if written else dict(self.offsets), checkpoint)
            self._woken.add(0)  # once master: read the timer queue from the checkpoint

    # ------------------------------------------------------------------ wake-ups

    def on_dispatched(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store dispatch hook (dispatcher thread): note parked messages not yet seen.

        A level whose head is already waiting only needs a look at its next pass (what
        arrives later is due later); the thread is woken for an idle level and for a timer
        message, which may be due before everything else. Noting the level even without
        waking closes the race with a pass that is just finding the level empty: the
        thread does not go to sleep while ``_woken`` holds anything.
        """
        if topic == SCHEDULE_TOPIC:
            level = queue_id + 1
            self._wake(level, notify=self._next_due.get(level) is None)
        elif topic == TIMER_TOPIC:
            self._wake(0)

    def on_round(self, touched: Mapping[tuple[str, int], int]) -> None:
        """:meth:`on_dispatched` for the queues of a dispatch round that are this
        service's; a round of LMQ fan-out moves hundreds of queues, none of them
        these, and is passed over with one C-level pass over the topics."""
        topics = set(map(_TOPIC, touched))
        if SCHEDULE_TOPIC in topics or TIMER_TOPIC in topics:
            for (topic, queue_id), max_offset in touched.items():
                self.on_dispatched(topic, queue_id, max_offset)

    def deletion_ended(self) -> None:
        """A topic's deletion is over: the messages put off for it are delivered now."""
        with self._cond:
            self._ended = True
            self._cond.notify()

    def _wake(self, key: int, notify: bool = True) -> None:
        with self._cond:
            self._woken.add(key)
            if notify:
                self._cond.notify()

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                woken, self._woken = self._woken, set()
                ended, self._ended = self._ended, False
                if self._held:
                    self._ended |= ended
                    self._woken |= woken
                    self._cond.wait_for(lambda: self._stopping or not self._held)
                    continue
                if self.store.replica and (self.escape is None or not self.acting()):
                    # a replica delivers nothing: its master does (unless it acts for it)
                    self._woken |= woken
                    self._ended |= ended
                    self._cond.wait_for(lambda: self._stopping, RETRY_SLEEP)
                    continue
            failed = True
            try:
                self._pass(woken, ended)
                failed = False
            except (StoreReadOnly, OSError) as exc:
                log.error("delayed delivery paused for %.0f s: %s", RETRY_SLEEP, exc)
            except Exception:
                log.exception("delayed delivery pass failed; retrying in %.0f s", RETRY_SLEEP)
            try:
                self.persist()
            except OSError as exc:
                log.error("writing delayed delivery progress failed: %s", exc)
            with self._cond:
                if failed:  # try the same levels again later; a stop cuts the wait
                    self._woken |= woken
                    self._ended |= ended
                    self._cond.wait_for(lambda: self._stopping, RETRY_SLEEP)
                elif not self._stopping and not self._woken and not self._ended:
                    self._cond.wait(self._sleep())

    def _sleep(self) -> float | None:
        """Seconds until the earliest known due time or flush check; ``None``: no timeout."""
        dues = [d for d in self._next_due.values() if d is not None]
        timer_due = self.timers.next_due()
        if timer_due is not None:
            dues.append(timer_due)
        sleep = None
        if dues:
            sleep = min(max(0.0, (min(dues) - self.clock()) / 1000), MAX_SLEEP)
        if self._pending:  # a snapshot waits for the commit-log flush
            config = self.store.config
            check = 0.005 if config.sync_flush else config.flush_interval_commit_log / 1000
            sleep = check if sleep is None else min(sleep, check)
        return sleep

    def _pass(self, woken: set[int], ended: bool = False) -> None:
        self.passes += 1
        now = self.clock()
        end_before = self._end
        if ended:  # a deletion ended: what waited for it is delivered first
            self._resume()
        for level, due in list(self._next_due.items()):
            if self._stopping:
                return
            if level in woken or (due is not None and due <= now):
                self._next_due[level] = self._level_pass(level, now)
        if 0 in woken:
            self._enqueue_timers()
        if self.timers.next_due() is not None or 0 in woken:
            self._timer_pass(now)
        if self._end != end_before or self._changed():
            self._snapshot()

    def _snapshot(self) -> None:
        self._pending.append((self._end, self.progress(),
                              self.timers.checkpoint() if self._timer_clean else None))

    def progress(self) -> dict[int, int]:
        """Each level's offset to record: none past a message put aside."""
        progress = dict(self.offsets)
        for level, put_off in self._put_off.items():
            progress[level] = min(progress.get(level, 0), put_off[0][0])
        return progress

    def _changed(self) -> bool:
        """Whether progress moved since the last snapshot (a frontier alone does not count:
        an older frontier is still true)."""
        if self._pending:
            _, levels, timer = self._pending[-1]
        else:
            levels, timer = self._written or ({}, TimerCheckpoint())
        if self.progress() != levels:
            return True
        if not self._timer_clean:
            return False
        now = self.timers.checkpoint()
        return timer is None or (now.enqueue_offset, now.scan_offset) != (
            timer.enqueue_offset, timer.scan_offset)

    # ------------------------------------------------------------------ delay levels

    def _level_pass(self, level: int, now: int) -> int | None:
        """Deliver the due messages of ``level``; the head's due time if one is left."""
        queue_id = level - 1
        delay = self.policy.delay_of(level)
        offset = self.offsets.get(level, 0)
        while not self._stopping:
            res = self.store.get(SCHEDULE_TOPIC, queue_id, offset, READ_BATCH, READ_BYTES)
            if res.status is GetStatus.FOUND:
                for rec in _records(res.buffers):
                    due = rec.store_timestamp + delay
                    if due > now:
                        return due
                    if not self._deliver(rec, _LEVEL_DROPS):
                        self._put_off.setdefault(level, []).append(
                            (rec.queue_offset, rec.physical_offset))
                    self.offsets[level] = offset = rec.queue_offset + 1
            elif res.status in _SKIPPING and res.next_begin_offset != offset:
                log.warning("delay level %d: offsets %d..%d are gone from %s, skipped", level,
                            offset, res.next_begin_offset, SCHEDULE_TOPIC)
            else:
                return None
            self.offsets[level] = offset = res.next_begin_offset
        return None

    # ------------------------------------------------------------------ timers

    def _enqueue_timers(self) -> None:
        heap = self.timers
        while not self._stopping:
            offset = heap.read_offset
            res = self.store.get(TIMER_TOPIC, 0, offset, READ_BATCH * 4, READ_BYTES)
            if res.status is GetStatus.FOUND:
                for rec in _records(res.buffers):
                    heap.offer(TimerEntry(_timer_due(rec), rec.queue_offset,
                                          rec.physical_offset))
            elif res.status in _SKIPPING and res.next_begin_offset != offset:
                log.warning("timer messages %d..%d are gone from %s, skipped", offset,
                            res.next_begin_offset, TIMER_TOPIC)
            else:
                return
            heap.skip_to(res.next_begin_offset)

    def _timer_pass(self, now: int) -> None:
        due = self.timers.pop_due(now)
        self._timer_clean = False
        for i, entry in enumerate(due):
            try:
                rec = self._read(entry.phys)
                if rec is None:
                    log.warning("timer message at commit-log offset %d is gone", entry.phys)
                elif not self._deliver(rec, TIMER_PROPERTIES):
                    self.timers.hold(entry)
            except BaseException:
                self.timers.restore(due[i:])
                raise
        self.timers.drained(now)
        self._timer_clean = True

    def _read(self, phys: int) -> Record | None:
        view = self.store.read_record(phys)
        if view is None:
            return None
        try:
            rec = decode_record(view, expected_physical_offset=phys)
        except CorruptRecord:
            return None
        return rec if isinstance(rec, Record) else None

    # ------------------------------------------------------------------ delivery

    def _resume(self) -> None:
        """A deletion ended: deliver the messages put aside, in their order (one whose
        topic is being deleted again waits again)."""
        self._waiting.clear()
        self.timers.release_held()  # due: the timer pass delivers them
        for level in sorted(self._put_off):
            entries = self._put_off[level]
            kept: list[tuple[int, int]] = []
            done = 0
            try:
                for queue_offset, phys in entries:
                    rec = self._read(phys)
                    if rec is None:
                        log.warning("delay level %d: parked message at commit-log offset %d "
                                    "is gone", level, phys)
                    elif not self._deliver(rec, _LEVEL_DROPS):
                        kept.append((queue_offset, phys))
                    done += 1
            finally:
                kept += entries[done:]  # the rest, after an error
                if kept:
                    self._put_off[level] = kept
                else:
                    del self._put_off[level]

    def _deliver(self, rec: Record, drops: tuple[str, ...]) -> bool:
        """Store ``rec``'s copy in its real topic; ``False``: put aside, its topic is being
        deleted (a message dropped as unfit counts as done)."""
        props = decode_properties(rec.properties)
        topic = props.get(REAL_TOPIC)
        queue = props.get(REAL_QID, "")
        if not topic or not queue.isdigit():
            log.warning("parked message at %d has no REAL_TOPIC/REAL_QID; dropped",
                        rec.physical_offset)
            return True
        for name in drops:
            props.pop(name, None)
        if self.store.replica:  # acting for its master: another master stores the copy
            assert self.escape is not None
            self.escape(topic, int(queue), rec, encode_properties(props).decode("utf-8"))
            self.delivered += 1
            return True
        if topic in self._waiting:  # after an earlier message of its topic
            self.deferred += 1
            return False
        keys = tuple(k for k in (props.get("UNIQ_KEY"), *props.get("KEYS", "").split(" ")) if k)
        msg = MessageInput(bytes(rec.body), encode_properties(props), rec.flag,
                           tags_code(props.get("TAGS")), keys)
        try:
            result = self.store.put(topic, int(queue), msg, sys_flag=rec.sys_flag,
                                    born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                                    reconsume_times=rec.reconsume_times, wait_flush=False)
        except MessageTooLarge as exc:
            log.warning("parked message at %d cannot be stored again (%s); dropped",
                        rec.physical_offset, exc)
            return True
        except TopicRefused as exc:  # its deletion is under way: delivered once it ends
            log.info("delayed delivery to %s waits: %s", topic, exc.why)
            self._waiting.add(topic)
            self.deferred += 1
            return False
        self._end = max(self._end, result.phys_offsets[-1] + result.sizes[-1])
        self.delivered += 1
        return True


def _never() -> bool:
    return False


def _timer_due(rec: Record) -> int:
    value = decode_properties(rec.properties).get("TIMER_OUT_MS", "")
    return int(value) if value.isdigit() else rec.store_timestamp


def _level_offsets(raw: bytes) -> dict[int, int]:
    """``delayOffset.json``: each delay level's next offset in its parking queue."""
    table = json.loads(raw)["offsetTable"]
    return {int(k): int(v) for k, v in table.items()}


def _timer_checkpoint(raw: bytes) -> TimerCheckpoint:
    """``timerCheckpoint.json``: how far the timer topic was scanned and delivered."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError(f"not a JSON object but {type(data).__name__}")
    return TimerCheckpoint.from_json(data)
