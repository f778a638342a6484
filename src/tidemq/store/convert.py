"""Offline conversion of a topic's classic consume queues into batch consume queues
(RIP-26 phase 2): ``tidemq store convert-cq DIR --topic T``.

The commit log is the source of truth and both queue kinds are derived from it, so the
batch consume queue is *rebuilt from the records*, exactly as the dispatcher would have
built it had the topic been BatchCQ from the start: one 46-byte entry per record (an
inner batch covers ``INNER_NUM`` offsets from ``INNER_BASE``; any other record one
offset, its QUEUEOFFSET), with the record's tags code and store time. Queue offsets do
not change, so consumer offsets stay valid.

Steps, each safe to interrupt (a rerun starts over):

1. refuse when a process holds the store lock, when the last shutdown was not clean (the
   abort marker is there: start and stop the broker once so recovery runs), or when the
   topic has no classic queues;
2. walk the valid log, collecting the topic's records per queue;
3. check each queue's rebuilt range against its classic range (a mismatch stops the
   conversion unless forced);
4. write the batch consume queues under ``convert/<topic>`` and flush them;
5. move them into ``batchconsumequeue/<topic>`` (one rename);
6. declare the topic ``queue.type=BatchCQ`` in ``config/topics.json`` (atomically);
7. remove the classic queue files -- the commit point: until then a rerun redoes all.

A dry run does steps 1-3 and reports what 4-7 would do; it writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tidemq.errors import QueueGap, StoreError, StoreReadOnly
from tidemq.formats.record import Record
from tidemq.store.batch_consume_queue import BCQ_UNIT, BatchConsumeQueue
from tidemq.store.checkpoint import StoreLock, atomic_write, fsync_dir
from tidemq.store.consume_queue import CQ_DTYPE, CQ_UNIT
from tidemq.store.layout import StoreLayout
from tidemq.store.log_scan import Damage
from tidemq.store.readonly import close_all, lock_held, map_readonly, open_log, walk_log
from tidemq.store.recovery import dispatch_batch_for

__all__ = ["ConversionError", "ConversionReport", "QueueConversion", "convert_topic"]

#: ``progress(phase, done, total)``: phases "scan" (log bytes) and "write" (entries).
ProgressFn = Callable[[str, int, int], None]

QUEUE_TYPE = "queue.type"
BATCH_CQ = "BatchCQ"
_BLANK_SIZE = 0x7FFFFFFF
#: Entries appended to a queue per call while writing.
_CHUNK = 1 << 16


class ConversionError(StoreError):
    """The topic cannot be converted as asked; ``topic`` says which. ``mismatch`` is set
    when the log does not rebuild the classic queues' ranges (the rest refuse at once)."""

    def __init__(self, message: str, *, topic: str = "", mismatch: bool = False) -> None:
        super().__init__(message)
        self.topic = topic
        self.mismatch = mismatch


@dataclasses.dataclass(slots=True)
class _Columns:
    """One queue's rebuilt entries, column by column, in log order."""

    phys: list[int] = dataclasses.field(default_factory=list)
    size: list[int] = dataclasses.field(default_factory=list)
    tags: list[int] = dataclasses.field(default_factory=list)
    store_ts: list[int] = dataclasses.field(default_factory=list)
    base: list[int] = dataclasses.field(default_factory=list)
    batch: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class QueueConversion:
    queue_id: int
    #: The classic queue's [min, max) offsets, from its files.
    classic_min: int
    classic_max: int
    #: The rebuilt batch consume queue's [min, max) offsets and entry count.
    min_offset: int = 0
    max_offset: int = 0
    entries: int = 0
    classic_bytes: int = 0

    @property
    def messages(self) -> int:
        return self.max_offset - self.min_offset

    @property
    def matches(self) -> bool:
        """Whether the rebuilt queue ends where the classic one does."""
        return self.max_offset == self.classic_max and (
            self.entries > 0 or self.classic_max == self.classic_min)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "messages": self.messages, "matches": self.matches}


@dataclasses.dataclass(slots=True)
class ConversionReport:
    root: str
    topic: str
    dry_run: bool
    bcq_file_size: int
    records_scanned: int = 0
    log_bytes: int = 0
    log_end: int = 0
    queues: list[QueueConversion] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: What was (or, in a dry run, would be) done.
    bcq_files: int = 0
    bcq_bytes: int = 0
    classic_files: int = 0
    classic_bytes: int = 0
    topic_config_updated: bool = False
    converted: bool = False
    seconds: float = 0.0

    @property
    def entries(self) -> int:
        return sum(q.entries for q in self.queues)

    @property
    def messages(self) -> int:
        return sum(q.messages for q in self.queues)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["queues"] = [q.to_dict() for q in self.queues]
        out["entries"] = self.entries
        out["messages"] = self.messages
        return out


# ---------------------------------------------------------------------- reading


def _classic_range(layout: StoreLayout, topic: str, queue_id: int) -> tuple[int, int, int, int]:
    """(min offset, max offset, files, bytes) of a classic queue, read-only."""
    found = layout.segments_in(layout.queue_dir(topic, queue_id))
    maps = [map_readonly(p, b) for b, p in found]
    try:
        lo = hi = maps[0].base // CQ_UNIT if maps else 0
        for m in maps:
            ent = np.frombuffer(m.view, dtype=CQ_DTYPE)
            valid = (ent["phys"] >= 0) & (ent["size"] > 0)
            bad = np.flatnonzero(~valid)
            count = int(bad[0]) if len(bad) else len(ent)
            real = np.flatnonzero(ent["size"][:count] != _BLANK_SIZE)
            if hi == lo and len(real):
                lo = m.base // CQ_UNIT + int(real[0])
            if count:
                hi = m.base // CQ_UNIT + count
            if count < len(ent):
                break
        return lo, max(hi, lo), len(maps), sum(m.size for m in maps)
    finally:
        close_all(maps)


def _scan(layout: StoreLayout, topic: str, check_crc: bool, report: ConversionReport,
          progress: ProgressFn | None) -> dict[int, _Columns]:
    """The topic's records, per queue, from the valid log."""
    columns: dict[int, _Columns] = {}
    with open_log(layout, None) as log:
        if not log.maps:
            return columns
        start, end = log.maps[0].base, log.maps[-1].end
        report.log_end = start
        step = max((end - start) // 200, 1 << 20)
        next_report = start
        for offset, item in walk_log(log, start, check_crc):
            if isinstance(item, str):
                if item not in ("end of data", "end of log"):
                    report.warnings.append(f"the valid log ends at {offset}: {item}")
                report.log_end = offset
                break
            if isinstance(item, Damage):
                report.warnings.append(f"damaged record at {offset} ({item.length} bytes): "
                                       f"{item.reason}; skipped")
                continue
            report.records_scanned += 1
            report.log_end = offset + item.total_size
            if item.topic == topic:
                _collect(columns, item, offset)
            if progress is not None and offset >= next_report:
                progress("scan", offset - start, end - start)
                next_report = offset + step
        report.log_bytes = report.log_end - start
        if progress is not None:
            progress("scan", end - start, end - start)
    return columns


def _collect(columns: dict[int, _Columns], rec: Record, offset: int) -> None:
    batch = dispatch_batch_for(rec, offset)
    if batch is None:  # prepared or rolled-back transaction: never indexed
        return
    col = columns.get(rec.queue_id)
    if col is None:
        col = columns[rec.queue_id] = _Columns()
    col.phys.append(offset)
    col.size.append(rec.total_size)
    col.tags.append(batch.tags[0])
    col.store_ts.append(rec.store_timestamp)
    col.base.append(batch.queue_offset)
    col.batch.append(batch.batch_sizes[0] if batch.batch_sizes else 1)


# ---------------------------------------------------------------------- writing


def _write_queues(staging: StoreLayout, topic: str, columns: dict[int, _Columns],
                  file_size: int, progress: ProgressFn | None) -> None:
    total = sum(len(c.phys) for c in columns.values())
    done = 0
    for queue_id, col in sorted(columns.items()):
        bcq = BatchConsumeQueue(staging, topic, queue_id, file_size)
        try:
            for i in range(0, len(col.phys), _CHUNK):
                j = i + _CHUNK
                bcq.append(col.base[i], col.phys[i:j], col.size[i:j], col.tags[i:j],
                           store_ts=col.store_ts[i:j], batch_sizes=col.batch[i:j])
                done += len(col.phys[i:j])
                if progress is not None:
                    progress("write", done, total)
            for mf in bcq.files:
                mf.flush()
        except QueueGap as exc:
            raise ConversionError(f"the records of {topic}/{queue_id} leave a gap: {exc}",
                                  topic=topic) from exc
        finally:
            bcq.close()
        if bcq.dir.is_dir():
            fsync_dir(bcq.dir)


def _declare_batch_cq(layout: StoreLayout, topic: str, queue_ids: list[int]) -> bool:
    """Set ``queue.type=BatchCQ`` on ``topic`` in ``config/topics.json`` (the broker's
    TopicConfigSerializeWrapper), adding the topic when the file lacks it; ``False`` when
    there is no such file (a bare store)."""
    path = layout.config_file("topics.json")
    if not path.exists():
        return False
    data = json.loads(path.read_bytes())
    table = data.setdefault("topicConfigTable", {})
    config = table.get(topic)
    if config is None:
        n = max(queue_ids, default=0) + 1
        config = table[topic] = {"topicName": topic, "readQueueNums": n, "writeQueueNums": n,
                                 "perm": 6, "topicFilterType": "SINGLE_TAG",
                                 "topicSysFlag": 0, "order": False, "attributes": {}}
    attrs = config.get("attributes") or {}
    attrs[QUEUE_TYPE] = BATCH_CQ
    config["attributes"] = attrs
    version = data.setdefault("dataVersion", {})
    version["counter"] = int(version.get("counter", 0)) + 1
    version["timestamp"] = int(time.time() * 1000)
    atomic_write(path, json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    return True


def _replace_dir(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` (replacing it) with one rename, durably."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        shutil.rmtree(target)
    os.rename(source, target)
    fsync_dir(target.parent)


# ---------------------------------------------------------------------- the conversion


def convert_topic(
    root: str | os.PathLike[str],
    topic: str,
    *,
    dry_run: bool = False,
    bcq_file_size: int = 13_800_000,
    check_crc: bool = True,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> ConversionReport:
    """Rebuild ``topic``'s consume queues under ``root`` as batch consume queues; see the
    module docstring. ``force`` converts even when a rebuilt queue does not end where the
    classic one did. Raises :class:`ConversionError`."""
    started = time.monotonic()
    layout = StoreLayout(root)
    if bcq_file_size <= 0 or bcq_file_size % BCQ_UNIT:
        raise ConversionError(f"the batch consume queue file size must be a positive "
                              f"multiple of {BCQ_UNIT}, not {bcq_file_size}", topic=topic)
    report = ConversionReport(str(layout.root), topic, dry_run, bcq_file_size)
    lock = StoreLock(layout.lock_file)
    if dry_run:
        if lock_held(layout):
            raise ConversionError(f"{layout.lock_file} is held: stop the broker first",
                                  topic=topic)
    else:
        try:
            lock.acquire()
        except StoreReadOnly as exc:
            raise ConversionError(f"{exc.cause}: stop the broker first", topic=topic) from exc
    try:
        _convert(layout, topic, report, check_crc, force, progress)
    finally:
        lock.release()
    report.seconds = time.monotonic() - started
    return report


def _convert(layout: StoreLayout, topic: str, report: ConversionReport, check_crc: bool,
             force: bool, progress: ProgressFn | None) -> None:
    if layout.abort_file.exists():
        raise ConversionError("the store was not shut down cleanly (the abort marker is "
                              "there): start and stop the broker once so recovery runs",
                              topic=topic)
    classic = [qid for t, qid, _ in layout.queues() if t == topic]
    batch_dir = layout.topic_queues_dir(topic, batch=True)
    if not classic:
        if batch_dir.is_dir():
            raise ConversionError(f"{topic} already has batch consume queues and no classic "
                                  f"ones: nothing to convert", topic=topic)
        raise ConversionError(f"{topic} has no consume queues under {layout.root}",
                              topic=topic)
    if batch_dir.is_dir():
        report.warnings.append(f"{batch_dir} exists (an interrupted conversion?); it is "
                               f"rebuilt")
    for qid in classic:
        lo, hi, files, nbytes = _classic_range(layout, topic, qid)
        report.queues.append(QueueConversion(qid, lo, hi, classic_bytes=nbytes))
        report.classic_files += files
        report.classic_bytes += nbytes
    columns = _scan(layout, topic, check_crc, report, progress)
    by_id = {q.queue_id: q for q in report.queues}
    for qid, col in columns.items():
        q = by_id.get(qid)
        if q is None:
            q = by_id[qid] = QueueConversion(qid, 0, 0)
            report.queues.append(q)
            report.warnings.append(f"queue {qid} has records but no classic queue files")
        q.entries = len(col.phys)
        q.min_offset = col.base[0]
        q.max_offset = col.base[-1] + col.batch[-1]
    report.queues.sort(key=lambda q: q.queue_id)
    per_file = report.bcq_file_size // BCQ_UNIT
    report.bcq_files = sum(-(-q.entries // per_file) for q in report.queues)
    report.bcq_bytes = report.bcq_files * report.bcq_file_size
    mismatched = [q for q in report.queues if not q.matches]
    for q in mismatched:
        report.warnings.append(
            f"queue {q.queue_id}: the classic queue holds offsets [{q.classic_min}, "
            f"{q.classic_max}) but the log rebuilds [{q.min_offset}, {q.max_offset})")
    if report.dry_run:
        return
    if mismatched and not force:
        raise ConversionError(f"{len(mismatched)} queue(s) of {topic} do not rebuild to "
                              f"their classic range (see the dry run); use force to convert "
                              f"anyway", topic=topic, mismatch=True)
    staging_root = layout.conversion_dir(topic)
    if staging_root.exists():
        shutil.rmtree(staging_root)
    staging = StoreLayout(staging_root)
    _write_queues(staging, topic, columns, report.bcq_file_size, progress)
    built = staging.topic_queues_dir(topic, batch=True)
    built.mkdir(parents=True, exist_ok=True)
    _replace_dir(built, batch_dir)
    shutil.rmtree(staging_root, ignore_errors=True)
    with contextlib.suppress(OSError):
        staging_root.parent.rmdir()  # convert/ goes when no other conversion uses it
    report.topic_config_updated = _declare_batch_cq(layout, topic, [q.queue_id
                                                                   for q in report.queues])
    if not report.topic_config_updated:
        report.warnings.append("no config/topics.json: declare the topic with "
                               "+queue.type=BatchCQ when the broker creates it")
    classic_dir = layout.topic_queues_dir(topic)
    shutil.rmtree(classic_dir)
    fsync_dir(classic_dir.parent)
    report.converted = True
