"""Queue entries again for the records of deleted topics that lie above their marks.

A replica learns a deletion from its master some time after its log holds the
deletion's offset: by then the records of the topic created again with the name (above
the master's mark) may be dispatched here into the old topic's queues -- at slots the
old messages hold, so some were skipped as present. Once those queues are removed, the
records of the new topic that this log holds get their entries again, from the log, in
queues that start where the master's did. No dispatch round runs meanwhile; puts (a
replica's copy) go on, as the log below the dispatched position does not change.

An LMQ (RIP-28) the master deleted and created again is the same case: its tombstone
reaches the replica after the new queue's records were dispatched there, over the old
queue's entries; the entries of the records at or above the floor are read again from
the log (:func:`lmq_entries_above`), at the offsets the master gave them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from tidemq.formats.record import Record
from tidemq.store.commitlog import CommitLog
from tidemq.store.dispatch import DispatchBatch, Pending, apply_batches
from tidemq.store.lmq_store import LMQ_PREFIX, LmqEntry
from tidemq.store.log_scan import End, walk
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.recovery import dispatch_batch_for

__all__ = ["lmq_entries_above", "pending_queues", "requeue_above_marks"]

_LMQ_MARK = LMQ_PREFIX.encode()

#: Records written to their queues at a time.
CHUNK = 4096


def _dispatched(commitlog: CommitLog, first: int, dispatched: int
                ) -> Iterator[tuple[int, Record]]:
    """The sound records of the log from ``first`` (or its start) that lie wholly below
    ``dispatched``, with their offsets: what dispatch gave entries to. A damaged record
    is passed over (recovery left it as it is, and dispatch gave it no entry); the
    dispatcher takes what lies past ``dispatched``."""
    for step in walk(commitlog.segments, max(first, commitlog.min_offset), check_crc=False):
        if isinstance(step, End):
            return
        if type(step) is not tuple:
            continue
        offset, rec = step
        if offset + rec.total_size > dispatched:
            return
        yield offset, rec


def requeue_above_marks(commitlog: CommitLog, queues: ConsumeQueueSet,
                        marks: Mapping[str, int], dispatched: int
                        ) -> set[tuple[str, int]]:
    """Write the queue entries of the records of ``marks``' topics at or above their
    mark and below ``dispatched`` (their LMQ entries and index keys are there already);
    returns their queues."""
    found: set[tuple[str, int]] = set()
    batches: list[DispatchBatch] = []
    for offset, rec in _dispatched(commitlog, min(marks.values()), dispatched):
        mark = marks.get(rec.topic)
        if mark is None or offset < mark:
            continue
        found.add((rec.topic, rec.queue_id))
        batch = dispatch_batch_for(rec, offset)
        if batch is not None:
            batch.lmq, batch.keys = None, None
            batches.append(batch)
            if len(batches) >= CHUNK:
                apply_batches(queues, None, batches)
                batches.clear()
    if batches:
        apply_batches(queues, None, batches)
    return found


def pending_queues(pending: Iterable[Pending], marks: Mapping[str, int]
                   ) -> set[tuple[str, int]]:
    """The queues of ``marks``' topics that records at or above their mark waiting for
    dispatch (``pending``: the dispatcher's rows and batches) go to."""
    found: set[tuple[str, int]] = set()
    for item in pending:
        if type(item) is tuple:
            key, phys = item[2], item[4]
        else:
            assert isinstance(item, DispatchBatch)
            key, phys = (item.topic, item.queue_id), item.phys[0]
        mark = marks.get(key[0])
        if mark is not None and phys >= mark:
            found.add(key)
    return found


def lmq_entries_above(commitlog: CommitLog, floors: Mapping[str, int], dispatched: int
                      ) -> dict[str, list[LmqEntry]]:
    """The entries in the LMQs of ``floors`` of the records at or above each one's floor
    and below ``dispatched``, in log order (so in offset order): what dispatch gave
    them, read again from the log."""
    found: dict[str, list[LmqEntry]] = {}
    for offset, rec in _dispatched(commitlog, min(floors.values()), dispatched):
        if _LMQ_MARK not in rec.properties:
            continue  # names no LMQ: its properties need not be decoded
        batch = dispatch_batch_for(rec, offset)
        if batch is None or not batch.lmq or batch.lmq[0] is None:
            continue  # a prepared or rolled back transaction's, or no target read
        names, offsets = batch.lmq[0]
        for name, at in zip(names, offsets, strict=True):
            floor = floors.get(name)
            if floor is not None and offset >= floor:
                found.setdefault(name, []).append(LmqEntry(
                    name, at, offset, rec.total_size, batch.tags[0], batch.store_timestamp))
    return found
