"""Offline inspection of a store directory: verify it and dump what it holds.

Nothing here starts the store, takes its lock or writes a byte: every file is mapped
read-only, so a directory can be checked while a copy of it is being restored, or next to
a stopped broker. A running broker (the lock is held) or a crashed one (the ``abort``
marker is present) only produces a warning: the answer then describes the files as they
are at that moment.

:func:`verify` checks

* the commit log, the source of truth: segment sizes and alignment, no gaps, and every
  record's length, magic, body CRC and PHYSICALOFFSET; a damaged record whose length is
  plausible is skipped so the records after it are still checked;
* every consume-queue entry: it points at a record that exists, with the right size,
  topic, queue id and queue offset (LMQ entries point at their parent's records and are
  only checked for existence and size);
* the key index (:mod:`tidemq.store.index_check`) and the LMQ store's entries
  (:mod:`tidemq.store.lmq_check`) against what dispatch writes for each record;
* the checkpoint: its offsets lie on record boundaries within the valid log, and its
  timestamps are not newer than the data;
* a recovery dry run: where a start would begin scanning, where the valid log ends, and
  what it would drop (torn-tail bytes, whole segments, valid records behind a damaged one,
  consume-queue entries). It follows :mod:`tidemq.store.recovery` step by step.

Memory does not grow with the store: the columns collected per record, the key-index
entries and the LMQ entries the log implies are spilled to a temporary directory as they
are collected (:mod:`tidemq.store.spool`, :class:`~tidemq.store.lmq_check.ExpectedLmq`)
and compared a chunk at a time; the consume queues (:mod:`tidemq.store.queue_check`) and
the index files are read a chunk of entries at a time too.

:func:`dump_records`, :func:`dump_queue` and :func:`dump_checkpoint` return plain
dataclasses (``to_dict()`` gives JSON-ready values) for the ``tidemq store`` commands.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tidemq.errors import CorruptRecord, MetadataUnreadable, StoreError
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, Blank, Record, decode_record
from tidemq.store import spool
from tidemq.store.batch_consume_queue import BCQ_DTYPE, BCQ_UNIT, HOLE_SIZE
from tidemq.store.batch_consume_queue import valid_bytes as bcq_valid_bytes
from tidemq.store.checkpoint import CHECKPOINT_SIZE, Checkpoint, Origin
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import BLANK_UNIT_SIZE, CQ_DTYPE, CQ_UNIT
from tidemq.store.consume_queue import valid_bytes as cq_valid_bytes
from tidemq.store.deleted_topics import FILE_NAME as DELETED_FILE
from tidemq.store.deleted_topics import DeletedTopics
from tidemq.store.entry_chunks import valid_prefix
from tidemq.store.index_check import check_index, geometry
from tidemq.store.index_keys import index_hashes
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_check import ExpectedLmq, check_lmq
from tidemq.store.log_scan import ZERO8, Damage, End, last_nonzero_in_file, walk
from tidemq.store.queue_check import QueueTotals, check_batch_queue, check_consume_queue
from tidemq.store.queue_extent import creation_cut_short, measure
from tidemq.store.readonly import (
    ReadOnlyFile,
    ReadOnlyLog,
    close_all,
    lock_held,
    map_readonly,
    open_log,
    walk_log,
)
from tidemq.store.recovery import dispatch_batch_for
from tidemq.store.recovery_plan import (
    StartFacts,
    choose_scan,
    clean_stop_refusal,
    dispatched_from,
    ends_a_record,
    plan,
)
from tidemq.store.repair import QUARANTINE_DIR
from tidemq.store.spool import SpilledColumns

__all__ = [
    "CheckpointDump",
    "DamageInfo",
    "InspectError",
    "Problem",
    "ProgressFn",
    "QueueEntryInfo",
    "RecordDump",
    "RecordInfo",
    "RecoveryPreview",
    "VerifyReport",
    "dump_checkpoint",
    "dump_queue",
    "dump_records",
    "verify",
]

#: ``progress(phase, done, total)``: phase ``"commitlog"`` counts bytes, ``"queues"`` queues.
ProgressFn = Callable[[str, int, int], None]

_HEAD = struct.Struct(">ii")
LMQ_PREFIX = "%LMQ%"
MAX_EXAMPLES = 5  # problems reported per queue before they are only counted
PROGRESS_EVERY = 4096  # records between progress calls
_DEFAULTS = StoreConfig()
DEFAULT_CQ_FILE_SIZE = _DEFAULTS.mapped_file_size_consume_queue
DEFAULT_BCQ_FILE_SIZE = _DEFAULTS.mapper_file_size_batch_consume_queue


class InspectError(StoreError):
    """The directory cannot be inspected as asked (``path`` and ``offset`` say where)."""

    def __init__(self, message: str, *, path: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


# ---------------------------------------------------------------------- results


def _as_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


@dataclasses.dataclass(slots=True)
class Problem:
    kind: str  # "commitlog", "queue", "batch queue", "index", "lmq", "checkpoint"
    where: str  # a file name or "topic/queueId"
    offset: int  # physical offset, queue offset or -1
    detail: str


@dataclasses.dataclass(slots=True)
class DamageInfo:
    offset: int  # physical offset where the damaged bytes start
    length: int  # bytes up to the next trustworthy record
    reason: str


@dataclasses.dataclass(slots=True)
class RecoveryPreview:
    """What starting the store on this directory would do."""

    clean: bool  # no abort marker: the last shutdown was clean
    start_offset: int
    end_offset: int  # end of the valid log after recovery
    reason: str  # why the valid log ends there ("end of data" is normal)
    bytes_truncated: int = 0
    segments_deleted: int = 0
    records_lost: int = 0  # well-formed records beyond the end
    queue_entries_dropped: int = 0
    start_fails: str = ""  # non-empty: the store would refuse to start
    damaged_skipped: int = 0  # damaged records the scan skips (and keeps)
    #: queues dropped whole on load and rebuilt from the start of the commit log
    queues_rebuilt: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class VerifyReport:
    root: str
    segment_size: int = 0
    segments: int = 0
    min_offset: int = 0
    records: int = 0
    record_bytes: int = 0
    first_store_timestamp: int = 0
    last_store_timestamp: int = 0
    queues: int = 0
    cq_file_size: int = 0  # as given or inferred from the files
    bcq_file_size: int = 0
    queue_entries: int = 0
    expired_entries: int = 0
    hole_entries: int = 0  # entries of records lost to damage, which readers skip
    index_entries: int = 0  # key-index entries read
    lmq_entries: int = 0  # LMQ entries read
    checkpoint: Checkpoint | None = None
    recovery: RecoveryPreview | None = None
    problems: list[Problem] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: damaged commit-log records (readers and dispatch skip them; nothing after them is
    #: lost)
    damaged: list[DamageInfo] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _as_dict(self)
        out["ok"] = self.ok
        return out


@dataclasses.dataclass(slots=True)
class RecordInfo:
    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    flag: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    body_size: int
    properties: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _as_dict(self)
        return out


@dataclasses.dataclass(slots=True)
class RecordDump:
    records: list[RecordInfo]
    next_offset: int  # where the next record starts (or where the valid log ends)
    end_reason: str  # non-empty when the dump stopped at the end of the valid log
    damaged: list[DamageInfo] = dataclasses.field(default_factory=list)  # stepped over

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _as_dict(self)
        return out


@dataclasses.dataclass(slots=True)
class QueueEntryInfo:
    offset: int
    phys: int
    size: int
    tags_code: int
    status: str  # ok, expired, blank, missing, size mismatch, wrong queue ...

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _as_dict(self)
        return out


@dataclasses.dataclass(slots=True)
class CheckpointDump:
    path: str
    exists: bool
    size: int
    checkpoint: Checkpoint
    abort_marker: bool
    in_use: bool

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _as_dict(self)
        return out


# ---------------------------------------------------------------------- verify


def _queue_key(topic: Any, queue_id: Any) -> Any:
    """Topic number and queue id in one int64 (arrays or ints)."""
    return (np.asarray(topic, dtype=np.int64) << 32) | (
        np.asarray(queue_id, dtype=np.int64) & 0xFFFFFFFF)


def _lookup(keys: np.ndarray[Any, Any], key: np.ndarray[Any, Any]
            ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(found, index)`` of each of ``key`` in the sorted ``keys``."""
    if not len(keys):
        return np.zeros(len(key), dtype=bool), np.zeros(len(key), dtype=np.int64)
    k = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
    return keys[k] == key, k


def _queue_name(names: dict[int, str], key: int) -> str:
    queue_id = key & 0xFFFFFFFF
    return f"{names[key >> 32]}/{queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id}"



class _Records:
    """Columns of every well-formed record found, and of damaged ones whose header
    decodes (their queue entries are right), in log order; the key-index entries and
    LMQ entries dispatch writes for them. All spilled to ``directory`` as they grow
    (:mod:`tidemq.store.spool`, a temporary RocksDB for the LMQ entries), so memory holds
    a chunk of each, whatever the size of the store."""

    def __init__(self, directory: Path) -> None:
        (directory / "records").mkdir()
        (directory / "keys").mkdir()
        self.rows = SpilledColumns(directory / "records", {
            "phys": "q", "size": "i", "queue_id": "i", "queue_offset": "q", "topic": "i"})
        c = self.rows.cols
        self._phys, self._size, self._queue_id = c["phys"], c["size"], c["queue_id"]
        self._queue_offset, self._topic = c["queue_offset"], c["topic"]
        self.topics: dict[str, int] = {}
        #: The index entries dispatch writes, ``(hash of "topic#key", record)`` in log
        #: order; the keys of the chunk not spilled yet are hashed when it is.
        self.keys = SpilledColumns(directory / "keys", {"hash": "q", "phys": "q"})
        self._key_text: list[str] = []
        self._key_phys = self.keys.cols["phys"]
        self.lmq = ExpectedLmq(directory / "lmq")  # (LMQ, offset) -> record

    def add(self, offset: int, rec: Record) -> None:
        self._phys.append(offset)
        self._size.append(rec.total_size)
        self._queue_id.append(rec.queue_id)
        self._queue_offset.append(rec.queue_offset)
        self._topic.append(self.topics.setdefault(rec.topic, len(self.topics)))
        if self.rows.full():
            self.rows.spill()

    def derive(self, offset: int, rec: Record) -> None:
        """What dispatch writes for the record beside its queue entry: index keys, LMQ
        entries (:func:`~tidemq.store.recovery.dispatch_batch_for`)."""
        batch = dispatch_batch_for(rec, offset)
        if batch is None:
            return
        for key in batch.keys[0] if batch.keys else ():
            if key:
                self._key_text.append(f"{batch.topic}#{key}")
                self._key_phys.append(offset)
        if len(self._key_text) >= self.keys.chunk:
            self._spill_keys()
        target = batch.lmq[0] if batch.lmq else None
        if target is not None:
            for name, lmq_offset in zip(target[0], target[1], strict=True):
                self.lmq.add(name, lmq_offset, offset, rec.total_size)

    def _spill_keys(self) -> None:
        self.keys.cols["hash"].extend(index_hashes(self._key_text).tolist())
        self._key_text.clear()
        self.keys.spill()

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        return self.rows.arrays()

    def key_arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """``hash`` and ``phys`` of every index entry dispatch writes, in log order."""
        self._spill_keys()
        return self.keys.arrays()

    def close(self) -> None:
        self.rows.close()
        self.keys.close()
        self.lmq.close()


@dataclasses.dataclass(slots=True)
class _QueueFacts:
    in_doubt: list[str] = dataclasses.field(default_factory=list)  # "topic/id: why"
    last_entries: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    short: list[int] = dataclasses.field(default_factory=list)  # ends of queues cut short


def _nonzero_after(m: ReadOnlyFile, offset: int) -> int:
    """Non-zero bytes of segment ``m`` from ``offset`` (or its start) up to its last one."""
    if m.end <= offset or not m.size:
        return 0
    first = max(offset - m.base, 0)
    return last_nonzero_in_file(m.path, first, m.size) - first


def _last_real_entry(found: list[tuple[int, Path]], wrote: tuple[int, ...], unit: int,
                     dtype: np.dtype[Any], batch: bool) -> tuple[int, int] | None:
    """``(phys, size)`` of the entry a loaded queue ends with, as its ``last_entry``."""
    for (_, path), n in zip(reversed(found[: len(wrote)]), reversed(wrote), strict=True):
        if not n:
            continue
        with path.open("rb") as f:
            f.seek(n - unit)
            e = np.frombuffer(f.read(unit), dtype=dtype)[0]
        if batch or int(e["size"]) != BLANK_UNIT_SIZE:
            return int(e["phys"]), int(e["size"])
    return None


def _entry_file(offset: int, file_size: int) -> str:
    byte = offset * CQ_UNIT
    return f"{byte - byte % file_size:020d}" if file_size else "?"


class _Verifier:
    def __init__(self, root: Path, log: ReadOnlyLog, report: VerifyReport, check_crc: bool,
                 cq_file_size: int | None, progress: ProgressFn | None,
                 work_dir: Path) -> None:
        self.layout = StoreLayout(root)
        self.log = log
        self.report = report
        self.check_crc = check_crc
        self.cq_file_size = cq_file_size
        self.progress = progress
        sizes = [p.stat().st_size for _, _, qdir in self.layout.queues(batch=True)
                 for _, p in self.layout.segments_in(qdir)]
        sizes = [n for n in sizes if n and n % BCQ_UNIT == 0]
        self.bcq_file_size = max(set(sizes), key=sizes.count) if sizes else DEFAULT_BCQ_FILE_SIZE
        self.records = _Records(work_dir)
        self.totals = QueueTotals()  # the report's queue counts, summed by the queue checks
        self.damaged: list[Damage] = []
        self.start_fails = ""
        self._queue_ends: dict[tuple[str, int], int] = {}  # consume queue -> its end
        #: batch consume queue -> (record of its last entry, queue offset after it)
        self._batch_lasts: dict[tuple[str, int], tuple[int, int]] = {}

    def problem(self, kind: str, where: str, offset: int, detail: str) -> None:
        self.report.problems.append(Problem(kind, where, offset, detail))

    # -------------------------------------------------------------- commit log

    def scan_log(self) -> None:
        rep, log = self.report, self.log
        size = log.segment_size
        rep.segment_size, rep.segments = size, len(log.maps)
        rep.min_offset = log.maps[0].base if log.maps else 0
        # Trailing segments that hold nothing (prepared ahead of the writer) are not data.
        last_data = len(log.maps) - 1
        while last_data > 0 and log.maps[last_data].view[:8] in (ZERO8, b""):
            last_data -= 1
        for i, seg in enumerate(log.maps):
            if seg.size != size:
                detail = f"{seg.size} bytes, expected {size}"
                if not (i >= last_data and seg.size == 0):
                    self.start_fails = f"segment {seg.path.name} has {detail}"
                self.problem("commitlog", seg.path.name, seg.base, detail)
            if size and seg.base % size:
                self.problem("commitlog", seg.path.name, seg.base, "base is not aligned")
            if i and seg.base != log.maps[i - 1].end:
                self.problem("commitlog", seg.path.name, seg.base,
                             f"gap: previous segment ends at {log.maps[i - 1].end}")
        total = sum(m.size for m in log.maps)
        for step in walk(log.maps, rep.min_offset, self.check_crc):
            if type(step) is tuple:
                offset, rec = step
                self._record(offset, rec)
                if self.progress is not None and rep.records % PROGRESS_EVERY == 0:
                    self.progress("commitlog", offset - rep.min_offset, total)
            elif isinstance(step, Damage):
                self.damaged.append(step)
                if step.record is not None and step.record.total_size == step.length:
                    self.records.add(step.offset, step.record)  # its queue entry is right
                detail = (f"{step.reason} ({step.length} bytes skipped; the records after "
                          "them are kept)")
                if self._quarantined(step):
                    rep.warnings.append(f"damaged record at {step.offset}: {detail}; a copy "
                                        f"is in {QUARANTINE_DIR}/")
                else:
                    self.problem("commitlog", self._segment_name(step.offset), step.offset,
                                 detail)
            elif isinstance(step, End):
                self._end(step)
        if self.progress is not None:
            self.progress("commitlog", total, total)

    def _quarantined(self, damage: Damage) -> bool:
        """Whether ``verify --repair`` set these damaged bytes aside already."""
        path = self.layout.root / QUARANTINE_DIR / f"{damage.offset:020d}"
        seg = self.log.segment_for(damage.offset)
        if seg is None or not path.is_file():
            return False
        pos = damage.offset - seg.base
        return path.read_bytes() == bytes(seg.view[pos : min(pos + damage.length, seg.size)])

    def _segment_name(self, offset: int) -> str:
        seg = self.log.segment_for(offset)
        return seg.path.name if seg is not None else ""

    def _record(self, offset: int, rec: Record) -> None:
        rep = self.report
        if not rep.records:
            rep.first_store_timestamp = rec.store_timestamp
        elif rec.store_timestamp < rep.last_store_timestamp:
            self.problem("commitlog", "", offset,
                         f"store time {rec.store_timestamp} goes back from "
                         f"{rep.last_store_timestamp}")
        rep.last_store_timestamp = rec.store_timestamp
        rep.records += 1
        rep.record_bytes += rec.total_size
        self.records.add(offset, rec)
        self.records.derive(offset, rec)

    def _end(self, end: End) -> None:
        """The walk ended at ``end``: every non-zero byte after it is torn tail."""
        garbage = sum(_nonzero_after(m, end.offset) for m in self.log.maps)
        if garbage:
            self.problem("commitlog", self._segment_name(end.offset), end.offset,
                         f"{garbage} bytes of torn tail after the last valid record "
                         f"({end.reason or 'end of the last segment'})")

    # -------------------------------------------------------------- recovery dry run

    def preview(self, checkpoint: Checkpoint, clean: bool) -> RecoveryPreview:
        """What a start would do: the plan of :mod:`tidemq.store.recovery_plan` on the
        facts a start would load (the queues' extents are assessed as on load)."""
        log = self.log
        maps = [m for m in log.maps if m.size]
        queues = self.queue_facts()
        queues_end = max((p + s for p, s in queues.last_entries), default=0)
        cut = self.layout.truncation_file.exists()  # a start then trusts the cut's end
        facts = StartFacts(
            log_start=log.maps[0].base if log.maps else 0,
            log_end=maps[-1].end if maps else 0,
            checkpoint_dispatched=dispatched_from(checkpoint, queues_end, clean and not cut,
                                                  log.maps),
            queues_end=queues_end,
            queues_in_doubt=bool(queues.in_doubt),
            queues_short=min(queues.short, default=None),
        )
        if self.layout.lmq_dir.exists():
            self.report.warnings.append(
                "the preview does not take the LMQ store's dispatch checkpoint into account: "
                "a start may scan from earlier than previewed")
        found = choose_scan(
            log.maps, facts,
            lambda offset: ends_a_record(offset, queues.last_entries, log.read,
                                         self.check_crc),
            self.check_crc)
        tails = {m.base: _nonzero_after(m, found.end) for m in log.maps if m.end > found.end}
        the_plan = plan(found, [(m.base, m.end) for m in log.maps], tails)
        prev = RecoveryPreview(clean, the_plan.start, the_plan.end, the_plan.reason)
        prev.bytes_truncated = the_plan.tail_bytes if not clean or the_plan.reason else 0
        prev.segments_deleted = len(the_plan.segments_deleted)
        prev.damaged_skipped = len(the_plan.damaged)
        prev.queues_rebuilt = queues.in_doubt
        phys = self.records.arrays()["phys"]  # in log order
        prev.records_lost = len(phys) - int(np.searchsorted(phys, the_plan.end))
        written = (min(facts.checkpoint_dispatched, facts.queues_end)
                   if clean and not cut else None)
        prev.start_fails = self.start_fails or clean_stop_refusal(
            the_plan.end, written, self.log.segment_size)
        return prev

    def queue_facts(self) -> _QueueFacts:
        """Each queue's extent as a start's load finds it (:mod:`tidemq.store.queue_extent`),
        read-only."""
        out = _QueueFacts()
        for batch in (False, True):
            for topic, queue_id, qdir in self.layout.queues(batch=batch):
                found = self.layout.segments_in(qdir)
                unit, dtype = (BCQ_UNIT, BCQ_DTYPE) if batch else (CQ_UNIT, CQ_DTYPE)
                file_size = self.bcq_file_size if batch else self.cq_size()
                cut = creation_cut_short(found, file_size)
                if cut:
                    found = found[:-1]
                valid = bcq_valid_bytes if batch else cq_valid_bytes
                extent = measure(
                    found, file_size, dtype, valid, keep_one_empty=not batch, cut_short=cut,
                    valid_in_file=lambda path, dtype=dtype, valid=valid: valid_prefix(  # type: ignore[misc]
                        path, dtype, valid))
                if extent.doubt:
                    out.in_doubt.append(f"{topic}/{queue_id}: {extent.doubt}")
                    continue
                last = _last_real_entry(found, extent.wrote, unit, dtype, batch)
                if last is not None:
                    out.last_entries.append(last)
                if extent.short:
                    end = 0 if last is None else last[0] + (
                        0 if batch and last[1] == HOLE_SIZE else last[1])
                    out.short.append(end)
        return out

    def cq_size(self) -> int:
        """The consume-queue file size: as given, else the most common size among the
        queue files whose size is a whole number of entries, else the default."""
        if self.cq_file_size is None:
            sizes = [p.stat().st_size for _, _, qdir in self.layout.queues()
                     for _, p in self.layout.segments_in(qdir)]
            sizes = [n for n in sizes if n and n % CQ_UNIT == 0]
            self.cq_file_size = (max(set(sizes), key=sizes.count) if sizes
                                 else DEFAULT_CQ_FILE_SIZE)
        return self.cq_file_size

    # -------------------------------------------------------------- consume queues

    def _table_topics(self) -> set[str] | None:
        """The topics of the broker's topic table (``config/topics.json``); ``None`` for
        a store without a readable one, whose every queue is then expected."""
        try:
            data = json.loads(self.layout.config_file("topics.json").read_bytes())
        except (OSError, ValueError):
            return None
        table = data.get("topicConfigTable") if isinstance(data, dict) else None
        return set(table) if isinstance(table, dict) else None

    def _deleted_before(self) -> dict[str, int]:
        """The store's record of deleted topics (:mod:`tidemq.store.deleted_topics`): per
        topic, the log offset below which its records belong to the deleted topic. One
        that does not read is a problem, and then counts as empty."""
        table = DeletedTopics(self.layout.config_file(DELETED_FILE))
        try:
            table.load()
        except MetadataUnreadable as exc:
            self.problem("config", exc.path, -1, exc.reason)
        return table.before

    def check_queues(self, end: int) -> int:
        queues = self.layout.queues()
        cols = self.records.arrays()
        topic_ids = self.records.topics
        cl_min = self.report.min_offset
        dropped = 0
        for n, (topic, queue_id, qdir) in enumerate(queues, 1):
            dropped += self._check_queue(topic, queue_id, qdir, cols, topic_ids, cl_min, end)
            if self.progress is not None:
                self.progress("queues", n, len(queues))
        batch_queues = self.layout.queues(batch=True)
        for topic, queue_id, qdir in batch_queues:
            dropped += self._check_batch_queue(topic, queue_id, qdir, cols, topic_ids,
                                               cl_min, end)
        self.report.queues = len(queues) + len(batch_queues)
        self.report.queue_entries = self.totals.entries
        self.report.expired_entries = self.totals.expired
        self.report.hole_entries = self.totals.holes
        self._check_unqueued(cols, topic_ids, end)
        return dropped

    def _check_batch_queue(self, topic: str, queue_id: int, qdir: Path,
                           cols: dict[str, np.ndarray[Any, Any]], topic_ids: dict[str, int],
                           cl_min: int, end: int) -> int:
        """A batch consume queue (:func:`~tidemq.store.queue_check.check_batch_queue`);
        records of the queue after its last entry: see :meth:`_check_unqueued`."""
        where = f"{topic}/{queue_id}"
        result = check_batch_queue(topic, queue_id, self.layout.segments_in(qdir),
                                   self.bcq_file_size, cols, topic_ids, cl_min, end,
                                   self.totals)
        self._batch_lasts[(topic, queue_id)] = (result.last_phys, result.next_offset)
        issues = result.findings
        for offset, detail in issues[:MAX_EXAMPLES]:
            self.problem("batch queue", where, offset, detail)
        if len(issues) > MAX_EXAMPLES:
            self.problem("batch queue", where, -1, f"... and {len(issues) - MAX_EXAMPLES} more")
        return result.dropped

    def _check_queue(self, topic: str, queue_id: int, qdir: Path,
                     cols: dict[str, np.ndarray[Any, Any]], topic_ids: dict[str, int],
                     cl_min: int, end: int) -> int:
        """A consume queue (:func:`~tidemq.store.queue_check.check_consume_queue`)."""
        where = f"{topic}/{queue_id}"
        found = self.layout.segments_in(qdir)
        if not found:
            return 0
        file_size = self.cq_size()
        result = check_consume_queue(topic, queue_id, found, file_size, cols, topic_ids,
                                     cl_min, end, self.totals)
        self._queue_ends[(topic, queue_id)] = result.end  # see _check_unqueued
        issues = result.findings
        for offset, detail in issues[:MAX_EXAMPLES]:
            self.problem("queue", where, offset,
                         f"{detail} (file {_entry_file(offset, file_size)})")
        if len(issues) > MAX_EXAMPLES:
            self.problem("queue", where, -1, f"... and {len(issues) - MAX_EXAMPLES} more")
        return result.dropped

    def _check_unqueued(self, cols: dict[str, np.ndarray[Any, Any]],
                        topic_ids: dict[str, int], end: int) -> None:
        """Records of the valid log that no queue entry names: past the end of their
        consume queue, after the last entry of their batch consume queue, or of a queue
        that has no directory at all. One pass over the records, a chunk at a time; what
        it keeps is a few numbers per queue."""
        names = {v: k for k, v in topic_ids.items()}
        ends = {int(_queue_key(topic_ids[t], q)): e for (t, q), e in self._queue_ends.items()
                if t in topic_ids}
        lasts = {int(_queue_key(topic_ids[t], q)): v for (t, q), v in self._batch_lasts.items()
                 if t in topic_ids}
        have = {int(_queue_key(topic_ids[t], q)) for t, q, _ in [
            *self.layout.queues(), *self.layout.queues(batch=True)] if t in topic_ids}
        keys = np.array(sorted(ends), dtype=np.int64)
        limit = np.array([ends[k] for k in keys.tolist()] or [0], dtype=np.int64)
        bkeys = np.array(sorted(lasts), dtype=np.int64)
        blast = np.array([lasts[k][0] for k in bkeys.tolist()] or [0], dtype=np.int64)
        past: dict[int, list[int]] = {}  # queue -> count, lowest, highest queue offset
        after: dict[int, int] = {}  # batch queue -> records after its last entry
        queueless: dict[int, int] = {}
        deleted = {topic_ids[t]: before for t, before in self._deleted_before().items()
                   if t in topic_ids}
        count = int(np.searchsorted(cols["phys"], end))  # the records of the valid log
        for at in range(0, count, spool.CHUNK):
            stop = min(at + spool.CHUNK, count)
            topic, phys = cols["topic"][at:stop], cols["phys"][at:stop]
            key = _queue_key(topic, cols["queue_id"][at:stop])
            qo = cols["queue_offset"][at:stop]
            if deleted:  # a deleted topic's records get no entry
                live = np.ones(len(key), dtype=bool)
                for topic_id, before in deleted.items():
                    live &= (topic != topic_id) | (phys >= before)
                key, qo, phys = key[live], qo[live], phys[live]
            hit, k = _lookup(keys, key)
            late = hit & (qo >= limit[k])
            for q in np.unique(key[late]).tolist():
                offsets = qo[late & (key == q)]
                got = past.setdefault(q, [0, int(offsets.min()), int(offsets.max())])
                got[0] += len(offsets)
                got[1], got[2] = min(got[1], int(offsets.min())), max(got[2], int(offsets.max()))
            bhit, bk = _lookup(bkeys, key)
            blate = bhit & (phys > blast[bk])
            for q, c in zip(*np.unique(key[blate], return_counts=True), strict=True):
                after[int(q)] = after.get(int(q), 0) + int(c)
            for q, c in zip(*np.unique(key, return_counts=True), strict=True):
                if int(q) not in have:
                    queueless[int(q)] = queueless.get(int(q), 0) + int(c)
        file_size = self.cq_size()
        for q, (c, lo, hi) in sorted(past.items()):
            where, queue_end = _queue_name(names, q), ends[q]
            self.problem("queue", where, queue_end,
                         f"{c} records of the commit log (queue offsets {lo}..{hi}) have no "
                         f"entry: the queue ends at {queue_end} (file "
                         f"{_entry_file(queue_end, file_size)})")
        for q, c in sorted(after.items()):
            self.problem("batch queue", _queue_name(names, q), lasts[q][1],
                         f"{c} records of the commit log after the last entry have no entry")
        tabled = self._table_topics()
        for q, c in sorted(queueless.items()):
            if tabled is not None and names[q >> 32] not in tabled:
                continue  # a deleted topic: its records stay until retention drops them
            self.problem("queue", _queue_name(names, q), -1,
                         f"{c} records in the commit log but no consume queue: a start "
                         "does not rebuild it unless its queues are in doubt (run "
                         "verify --repair)")

    # -------------------------------------------------------------- checkpoint

    def check_derived(self, cp: Checkpoint, end: int, slot_num: int | None,
                      max_index_num: int | None) -> None:
        """The key index and the LMQ store against the records of the valid log."""
        cols = self.records.arrays()
        damaged = np.array(sorted(d.offset for d in self.damaged), dtype=np.int64)
        log_min = self.log.maps[0].base if self.log.maps else 0
        shape = geometry(self.layout, slot_num, max_index_num,
                         (_DEFAULTS.max_hash_slot_num, _DEFAULTS.max_index_num))
        if isinstance(shape, str):
            self.report.warnings.append(shape)
        elif self.layout.index_dir.is_dir():
            keys = self.records.key_arrays()
            n, findings = check_index(
                self.layout, keys["hash"], keys["phys"], record_phys=cols["phys"],
                damaged_phys=damaged, log_min=log_min, valid_end=end,
                covered_end=min(cp.dispatched_phy_offset, end), slot_num=shape[0],
                max_index_num=shape[1], work_dir=self.records.keys.directory)
            self.report.index_entries = n
            for where, offset, detail in findings:
                self.problem("index", where, offset, detail)
        if self.layout.lmq_dir.is_dir():
            n, findings = check_lmq(self.layout.lmq_dir, self.records.lmq,
                                    record_phys=cols["phys"], record_size=cols["size"],
                                    damaged_phys=set(damaged.tolist()), log_min=log_min,
                                    valid_end=end)
            self.report.lmq_entries = n
            for where, offset, detail in findings:
                self.problem("lmq", where, offset, detail)

    def check_checkpoint(self, cp: Checkpoint, end: int) -> None:
        path = self.layout.checkpoint_file
        rep = self.report
        if not path.exists():
            rep.warnings.append("no checkpoint file: recovery scans the whole commit log")
            return
        if path.stat().st_size != CHECKPOINT_SIZE:
            self.problem("checkpoint", path.name, -1,
                         f"{path.stat().st_size} bytes, expected {CHECKPOINT_SIZE}")
        if cp.origin is Origin.DAMAGED:
            self.problem("checkpoint", path.name, -1,
                         f"{cp.note}: recovery scans the whole commit log")
        elif cp.origin is Origin.ROCKETMQ:
            rep.warnings.append(f"checkpoint: {cp.note}; recovery starts at the end of the "
                                "consume queues after a clean stop, else at the start of "
                                "the log")
        elif cp.origin is Origin.EARLIER_TIDEMQ:
            rep.warnings.append(f"checkpoint: {cp.note}; a start rewrites it in the current "
                                "layout")
        if cp.flushed_phy_offset > end:
            self.problem("checkpoint", path.name, cp.flushed_phy_offset,
                         f"flushed offset {cp.flushed_phy_offset} is past the end of the valid "
                         f"log {end}: acknowledged data is missing or damaged")
        if cp.dispatched_phy_offset > cp.flushed_phy_offset:
            self.problem("checkpoint", path.name, cp.dispatched_phy_offset,
                         "dispatched offset is past the flushed offset")
        d = cp.dispatched_phy_offset
        phys = self.records.arrays()["phys"]
        k = int(np.searchsorted(phys, d))
        boundary = (k < len(phys) and phys[k] == d) or d in (end, 0) or any(
            d in (m.base, m.end) for m in self.log.maps)
        if not boundary and d >= rep.min_offset:
            rep.warnings.append(f"checkpoint dispatched offset {d} is not a record boundary; "
                                "recovery will scan from the start of the log")
        newest = rep.last_store_timestamp
        for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
            ts = getattr(cp, name)
            if rep.records and ts > newest:
                rep.warnings.append(f"checkpoint {name} {ts} is newer than the last record "
                                    f"({newest})")


def verify(root: str | os.PathLike[str], *, check_crc: bool = True,
           segment_size: int | None = None, cq_file_size: int | None = None,
           progress: ProgressFn | None = None, max_hash_slot_num: int | None = None,
           max_index_num: int | None = None,
           work_dir: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Check a store directory without starting it; see the module docstring. The index
    files are checked for the size ``max_hash_slot_num`` and ``max_index_num`` give them
    (default: as :func:`~tidemq.store.index_check.geometry` infers). What verify collects
    per record, key and LMQ entry goes to a temporary directory under ``work_dir``
    (default: the system's), deleted when it returns."""
    layout = StoreLayout(root)
    if not layout.root.is_dir():
        raise InspectError(f"{layout.root} is not a directory", path=str(layout.root))
    report = VerifyReport(str(layout.root))
    clean = not layout.abort_file.exists()
    if lock_held(layout):
        report.warnings.append("a broker holds the store lock: the files may change while "
                               "they are read")
    elif not clean:
        report.warnings.append("abort marker present: the last run did not shut down cleanly")
    checkpoint = Checkpoint.load(layout)
    report.checkpoint = checkpoint
    with open_log(layout, segment_size) as log, tempfile.TemporaryDirectory(
            prefix="tidemq-verify-", dir=work_dir) as tmp:
        v = _Verifier(layout.root, log, report, check_crc, cq_file_size, progress, Path(tmp))
        v.scan_log()
        preview = v.preview(checkpoint, clean)
        preview.queue_entries_dropped = v.check_queues(preview.end_offset)
        v.check_derived(checkpoint, preview.end_offset, max_hash_slot_num, max_index_num)
        v.check_checkpoint(checkpoint, preview.end_offset)
        report.recovery = preview
        report.damaged = [DamageInfo(d.offset, d.length, d.reason) for d in v.damaged]
        report.cq_file_size, report.bcq_file_size = v.cq_size(), v.bcq_file_size
        if preview.records_lost:
            report.problems.append(Problem(
                "commitlog", "", preview.end_offset,
                f"a start would truncate the log at {preview.end_offset} ({preview.reason}) "
                f"and drop {preview.records_lost} well-formed records after it"))
        for queue in preview.queues_rebuilt:
            report.problems.append(Problem("queue", queue.split(":")[0], -1,
                                           f"in doubt ({queue.split(': ', 1)[1]}): a start "
                                           "rebuilds it from the start of the commit log"))
        v.records.close()
    return report


# ---------------------------------------------------------------------- dumps


def _record_info(offset: int, rec: Record) -> RecordInfo:
    try:
        props = decode_properties(rec.properties)
    except CorruptRecord:
        props = {"<undecodable>": rec.properties.hex()}
    return RecordInfo(offset, rec.total_size, rec.topic, rec.queue_id, rec.queue_offset,
                      rec.sys_flag, rec.flag, rec.born_timestamp, rec.store_timestamp,
                      str(rec.born_host), str(rec.store_host), rec.reconsume_times,
                      len(rec.body), props)


def dump_records(root: str | os.PathLike[str], start: int | None = None, count: int = 20, *,
                 check_crc: bool = True, segment_size: int | None = None) -> RecordDump:
    """Up to ``count`` records from physical offset ``start`` (default: the first); damaged
    records on the way are listed in ``damaged`` and stepped over as recovery does."""
    layout = StoreLayout(root)
    with open_log(layout, segment_size) as log:
        offset = log.maps[0].base if start is None and log.maps else (start or 0)
        out: list[RecordInfo] = []
        damaged: list[DamageInfo] = []
        if count <= 0:
            return RecordDump(out, offset, "")
        for at, item in walk_log(log, offset, check_crc):
            if isinstance(item, Damage):
                if start is not None and at == offset and not out:
                    raise InspectError(f"no valid record at offset {offset}: {item.reason} "
                                       f"(the next one starts at {item.end})",
                                       path=str(layout.commitlog_dir), offset=offset)
                damaged.append(DamageInfo(item.offset, item.length, item.reason))
                continue
            if isinstance(item, str):
                if not out and not damaged and at == offset and item not in (
                        "end of data", "end of log"):
                    raise InspectError(f"no valid record at offset {offset}: {item}",
                                       path=str(layout.commitlog_dir), offset=offset)
                return RecordDump(out, at, item, damaged)
            out.append(_record_info(at, item))
            if len(out) >= count:
                return RecordDump(out, at + item.total_size, "", damaged)
        return RecordDump(out, log.maps[-1].end if log.maps else 0, "end of log", damaged)


def dump_queue(root: str | os.PathLike[str], topic: str, queue_id: int,
               start: int | None = None, count: int = 20, *,
               segment_size: int | None = None) -> list[QueueEntryInfo]:
    """Up to ``count`` entries of a consume queue from queue offset ``start`` (default: the
    first real entry), each with the state of the record it points at."""
    layout = StoreLayout(root)
    found = layout.segments_in(layout.queue_dir(topic, queue_id))
    if not found:
        raise InspectError(f"no consume queue {topic}/{queue_id}",
                           path=str(layout.queue_dir(topic, queue_id)))
    maps = [map_readonly(p, b) for b, p in found]
    try:
        with open_log(layout, segment_size) as log:
            ent = np.concatenate([np.frombuffer(m.view, dtype=CQ_DTYPE) for m in maps
                                  if m.size % CQ_UNIT == 0 and m.size])
            first = maps[0].base // CQ_UNIT
            sizes = ent["size"].astype(np.int64)
            phys_all = ent["phys"].astype(np.int64)
            valid = np.flatnonzero((phys_all < 0) | (sizes <= 0))
            n = int(valid[0]) if len(valid) else len(ent)
            if start is None:
                real = np.flatnonzero(sizes[:n] != BLANK_UNIT_SIZE)
                start = first + (int(real[0]) if len(real) else n)
            cl_min = log.maps[0].base if log.maps else 0
            out = []
            for i in range(max(start - first, 0), min(n, start - first + count)):
                phys, size = int(phys_all[i]), int(sizes[i])
                out.append(QueueEntryInfo(first + i, phys, size, int(ent["tags"][i]),
                                          _entry_status(log, topic, queue_id, first + i, phys,
                                                        size, cl_min)))
            return out
    finally:
        close_all(maps)


def _entry_status(log: ReadOnlyLog, topic: str, queue_id: int, offset: int, phys: int, size: int,
                  cl_min: int) -> str:
    if size == BLANK_UNIT_SIZE:
        return "blank"
    if phys < cl_min:
        return "expired"
    head = log.read(phys, 8)
    if head is None:
        return "missing"
    total, magic = _HEAD.unpack_from(head)
    if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE:
        return "no record starts here"
    view = log.read(phys, total)
    if view is None:
        return "missing"
    try:
        rec = decode_record(view, expected_physical_offset=phys)
    except CorruptRecord as exc:
        return f"corrupt: {exc.reason}"
    if isinstance(rec, Blank):
        return "points at a segment end"
    if rec.total_size != size:
        return f"size mismatch: record has {rec.total_size} bytes"
    if topic.startswith(LMQ_PREFIX):
        return "ok"
    if rec.topic != topic or rec.queue_id != queue_id:
        return f"belongs to {rec.topic}/{rec.queue_id}"
    if rec.queue_offset != offset:
        return f"record queue offset {rec.queue_offset}"
    return "ok"


def dump_checkpoint(root: str | os.PathLike[str]) -> CheckpointDump:
    layout = StoreLayout(root)
    path = layout.checkpoint_file
    exists = path.exists()
    return CheckpointDump(str(path), exists, path.stat().st_size if exists else 0,
                          Checkpoint.load(layout), layout.abort_file.exists(), lock_held(layout))
