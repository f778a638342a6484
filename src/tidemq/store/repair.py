"""Repair a stopped store: damaged bytes set aside, consume queues rebuilt from the log.

The commit log is the truth and the consume queues (classic and batch) are derived from
it, so a repair never changes a record. It

1. takes the store lock (the broker must be stopped);
2. copies every damaged stretch of the commit log (as :func:`tidemq.store.log_scan.walk`
   finds them) into ``quarantine/<physical offset>`` under the store root, for later
   inspection -- the log keeps them, and readers keep skipping them;
3. deletes every consume-queue file (keeping the directories, so a batch consume queue
   stays one) and runs recovery, which rebuilds every queue from the start of the log:
   entries that were missing, pointed at the wrong record or were cut short come back,
   a damaged record keeps its queue offset, and one that lost its header leaves a hole
   entry so its queue goes on.

The key index and the LMQ store are left as they are.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tidemq.store.checkpoint import Checkpoint, StoreLock
from tidemq.store.commitlog import CommitLog
from tidemq.store.layout import StoreLayout
from tidemq.store.log_scan import Damage, scan
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.recovery import RecoveryReport, recover

__all__ = ["QUARANTINE_DIR", "RepairReport", "repair"]

QUARANTINE_DIR = "quarantine"


@dataclasses.dataclass(slots=True)
class RepairReport:
    quarantined: list[str] = dataclasses.field(default_factory=list)  # files written
    queue_files_removed: int = 0
    recovery: RecoveryReport | None = None


def repair(root: str | os.PathLike[str], *, segment_size: int, cq_file_size: int,
           bcq_file_size: int, check_crc: bool = True) -> RepairReport:
    """Repair the stopped store at ``root`` (see the module doc). Raises
    :class:`~tidemq.errors.StoreReadOnly` when a broker holds the store."""
    layout = StoreLayout(root)
    lock = StoreLock(layout.lock_file)
    lock.acquire()
    out = RepairReport()
    commitlog = CommitLog(layout, segment_size, preallocate=False)
    queues = ConsumeQueueSet(layout, cq_file_size, bcq_file_size)
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
        out.recovery = recover(commitlog, queues, None, Checkpoint.read(layout.checkpoint_file),
                               clean=not layout.abort_file.exists(), check_crc=check_crc)
        queues.flush()
    finally:
        queues.close()
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
