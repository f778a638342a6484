"""A dispatch round's LMQ fan-out built column-wise, one run per queue (RIP-28).

Every record that names light message queues adds one entry per queue to the LMQ store
(:mod:`tidemq.store.lmq_store` has the layout). One RocksDB key per entry costs, per
entry, a Python loop step (look the queue up, group, build the key), a
``WriteBatch.put`` (holding the GIL) and a memtable insert in
``Rdict.write``; a record of the dispatch benchmark names ten queues. The concurrent
dispatcher instead writes each queue's entries of a round as one *run* -- one key, the
entries' values concatenated -- built with numpy:

1. names and offsets of every fan-out record, concatenated in log order (C-level
   ``chain``); each record's value (phys, size, tags, store time) as one row of a
   structured array;
2. each name mapped to its rank among the round's distinct names, sorted as their UTF-8
   bytes sort (code-point order is UTF-8 byte order), so rank order is key order;
3. entries of records below the store's checkpoint (re-dispatch after a crash: their
   runs exist) and below their queue's tombstone floor dropped with one mask;
4. one sort of rank and position: within a queue, log order is offset order, so the
   entries come out in key order, and one gather of the value rows gives every run's
   bytes;
5. a run starts wherever the queue changes (or, defensively, its offsets skip); keys
   and values come from slices, so the puts are one per queue, not one per entry.

With 1,000 queues and ten per record (the load of ``tidemq bench dispatch``), a round of
2,048 records is 1,000 keys instead of 20,480, and both building the batch and writing it
cost less than half as much a record. The result is what
:meth:`~tidemq.store.lmq_store.LmqStore.write_prepared` applies.
"""

from __future__ import annotations

import dataclasses
import struct
from collections import deque
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
from rocksdict import WriteBatch

from tidemq.store.lmq_store import ENTRY_DTYPE, entry_prefix

__all__ = ["Fanout", "FanoutRecords", "build_fanout"]

_ROW = np.dtype((np.void, ENTRY_DTYPE.itemsize))  # an entry as opaque bytes
_Q = struct.Struct(">q")


@dataclasses.dataclass(slots=True)
class FanoutRecords:
    """The fan-out records of a round, column by column, in log order."""

    names: list[Sequence[str]] = dataclasses.field(default_factory=list)
    offsets: list[Sequence[int]] = dataclasses.field(default_factory=list)
    phys: list[int] = dataclasses.field(default_factory=list)
    sizes: list[int] = dataclasses.field(default_factory=list)
    tags: list[int] = dataclasses.field(default_factory=list)
    stamps: list[int] = dataclasses.field(default_factory=list)

    def add(self, names: Sequence[str], offsets: Sequence[int], phys: int, size: int,
            tags: int, store_ts: int) -> None:
        if len(names) != len(offsets):
            raise ValueError(f"{len(names)} LMQ names but {len(offsets)} offsets")
        self.names.append(names)
        self.offsets.append(offsets)
        self.phys.append(phys)
        self.sizes.append(size)
        self.tags.append(tags)
        self.stamps.append(store_ts)


@dataclasses.dataclass(slots=True)
class Fanout:
    """A round's LMQ entries ready for :meth:`LmqStore.write_prepared`."""

    batch: WriteBatch
    first: dict[str, int]  # queue -> its first offset in the batch
    last: dict[str, int]  # queue -> its last offset in the batch
    entries: int


def build_fanout(records: FanoutRecords, floor_of: Callable[[str], int],
                 written: int = 0) -> Fanout | None:
    """The write batch of ``records``' entries, one run per queue (and per stretch of
    consecutive offsets) in key order. Left out: records below ``written`` (the LMQ
    store's checkpoint: re-dispatch after a crash, their runs exist), and entries of
    records below their queue's floor (``floor_of``; 0: never deleted). ``None`` when
    nothing is left."""
    counts = np.fromiter(map(len, records.names), np.int64, len(records.names))
    total = int(counts.sum())
    if not total:
        return None
    flat_names: list[str] = list(chain.from_iterable(records.names))
    distinct = sorted(dict.fromkeys(flat_names))
    rank = dict(zip(distinct, range(len(distinct)), strict=True))
    ranks = np.fromiter(map(rank.__getitem__, flat_names), np.int64, total)
    offsets = np.fromiter(chain.from_iterable(records.offsets), np.int64, total)
    record_of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    floors = np.fromiter(map(floor_of, distinct), np.int64, len(distinct))
    phys = np.asarray(records.phys, dtype=np.int64)
    if floors.any() or (written and int(phys[0]) < written):
        keep = phys[record_of] >= np.maximum(floors[ranks], written)
        ranks, offsets, record_of = ranks[keep], offsets[keep], record_of[keep]
        total = len(ranks)
        if not total:
            return None
    # Entries by queue, log order within a queue: one sort of rank * 2**32 + position
    # (unique keys, so any sort is the stable one) instead of an argsort and gathers.
    key = ranks << 32
    key |= np.arange(total, dtype=np.int64)
    key.sort()
    order = key & 0xFFFFFFFF
    ranks, offsets, record_of = key >> 32, offsets[order], record_of[order]
    values = np.empty(len(counts), dtype=ENTRY_DTYPE)
    values["phys"] = phys
    values["size"] = records.sizes
    values["tags"] = records.tags
    values["store_ts"] = records.stamps
    data = values.view(_ROW).take(record_of).tobytes()  # every entry, in key order
    new_queue = np.concatenate(([True], ranks[1:] != ranks[:-1]))
    starts = np.flatnonzero(new_queue | np.concatenate(([True], offsets[1:] != offsets[:-1] + 1)))
    bounds = (np.append(starts, total) * ENTRY_DTYPE.itemsize).tolist()
    prefixes = list(map(entry_prefix, map(str.encode, distinct)))
    keys = map(bytes.__add__, map(prefixes.__getitem__, ranks[starts].tolist()),
               map(_Q.pack, offsets[starts].tolist()))
    wb = WriteBatch(raw_mode=True)
    deque(map(wb.put, keys, map(data.__getitem__, map(slice, bounds[:-1], bounds[1:]))),
          maxlen=0)
    firsts = np.flatnonzero(new_queue)
    lasts = np.append(firsts[1:], total) - 1
    present = list(map(distinct.__getitem__, ranks[firsts].tolist()))
    return Fanout(wb, dict(zip(present, offsets[firsts].tolist(), strict=True)),
                  dict(zip(present, offsets[lasts].tolist(), strict=True)), total)
