"""Repair a stopped store: damaged bytes set aside, derived data rebuilt from the log.

The commit log is the truth and the consume queues (classic and batch), the key index and
the LMQ entries are derived from it, so a repair never changes a record. It

1. takes the store lock (the broker must be stopped);
2. copies every damaged stretch of the commit log (as :func:`tidemq.store.log_scan.walk`
   finds them) into ``quarantine/<physical offset>`` under the store root, for later
   inspection -- the log keeps them, and readers keep skipping them;
3. deletes every consume-queue file (keeping the directories, so a batch consume queue
   stays one), every key-index file and the LMQ store's derived keys (its consumer
   offsets and tombstones stay), and runs recovery, which rebuilds all of them from the
   start of the log: entries that were missing, pointed at the wrong record or were cut
   short come back, a damaged record keeps its queue offset, and one that lost its header
   leaves a hole entry so its queue goes on.

An LMQ store RocksDB cannot open is first repaired by RocksDB (``RepairDB``), which keeps
what its readable files hold: consumer offsets and tombstones in damaged files are lost.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from rocksdict import Options, Rdict

from tidemq.store.checkpoint import Checkpoint, StoreLock
from tidemq.store.commitlog import CommitLog
from tidemq.store.index import KeyIndex
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_check import open_failure
from tidemq.store.lmq_store import LmqStore
from tidemq.store.log_scan import Damage, scan
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.recovery import RecoveryReport, recover

__all__ = ["QUARANTINE_DIR", "RepairReport", "repair"]

QUARANTINE_DIR = "quarantine"


@dataclasses.dataclass(slots=True)
class RepairReport:
    quarantined: list[str] = dataclasses.field(default_factory=list)  # files written
    queue_files_removed: int = 0
    index_files_removed: int = 0
    lmq_entries_dropped: int = 0  # before the rebuild wrote them again
    #: why RocksDB could not open the LMQ store before its RepairDB ("" if it could)
    lmq_repaired: str = ""
    recovery: RecoveryReport | None = None


def repair(root: str | os.PathLike[str], *, segment_size: int, cq_file_size: int,
           bcq_file_size: int, check_crc: bool = True,
           index_geometry: tuple[int, int] | None = None) -> RepairReport:
    """Repair the stopped store at ``root`` (see the module doc). Raises
    :class:`~tidemq.errors.StoreReadOnly` when a broker holds the store.
    ``index_geometry``: ``(maxHashSlotNum, maxIndexNum)`` of the index files rebuilt;
    ``None`` leaves the key index alone."""
    layout = StoreLayout(root)
    lock = StoreLock(layout.lock_file)
    lock.acquire()
    out = RepairReport()
    commitlog = CommitLog(layout, segment_size, preallocate=False)
    queues = ConsumeQueueSet(layout, cq_file_size, bcq_file_size)
    index: KeyIndex | None = None
    try:
        commitlog.load()
        damaged = scan(commitlog.segments, commitlog.min_offset, check_crc).damaged
        out.quarantined = [str(_quarantine(layout, commitlog, d)) for d in damaged]
        for batch in (False, True):
            for _, _, qdir in layout.queues(batch=batch):
                for _, path in layout.segments_in(qdir):
                    path.unlink()
                    out.queue_files_removed += 1
        queues.load()
        if index_geometry is not None:
            for _, path in layout.segments_in(layout.index_dir):
                path.unlink()
                out.index_files_removed += 1
            index = KeyIndex(layout, max_hash_slot_num=index_geometry[0],
                             max_index_num=index_geometry[1])
            index.load()
        if layout.lmq_dir.is_dir():
            out.lmq_repaired = open_failure(layout.lmq_dir)
            if out.lmq_repaired:
                Rdict.repair(str(layout.lmq_dir), Options(raw_mode=True))
            queues.lmq = LmqStore(layout.lmq_dir)
            out.lmq_entries_dropped = queues.lmq.drop_derived()
        out.recovery = recover(commitlog, queues, index, Checkpoint.load(layout),
                               clean=not layout.abort_file.exists(), check_crc=check_crc)
        queues.flush()
        if index is not None:
            index.flush()
        if queues.lmq is not None:
            queues.lmq.checkpoint(commitlog.max_offset)
    finally:
        if index is not None:
            index.close()
        queues.close()  # the LMQ store too
        commitlog.close()
        lock.release()
    return out


def _quarantine(layout: StoreLayout, commitlog: CommitLog, damage: Damage) -> Path:
    """A copy of the damaged bytes (up to the end of their segment)."""
    folder = layout.root / QUARANTINE_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"{damage.offset:020d}"
    seg = commitlog.segment_for(damage.offset)
    if seg is not None:
        pos = damage.offset - seg.base
        data = bytes(seg.view[pos : min(pos + damage.length, seg.size)])
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path
