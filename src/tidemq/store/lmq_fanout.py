"""A dispatch round's LMQ fan-out built column-wise, one run per queue (RIP-28).

Every record that names light message queues adds one entry per queue to the LMQ store
(:mod:`tidemq.store.lmq_store` has the layout). One RocksDB key per entry costs, per
entry, a Python loop step (look the queue up, group, build the key), a
``WriteBatch.put`` (holding the GIL) and a memtable insert in
``Rdict.write``; a record of the dispatch benchmark names ten queues. The concurrent
dispatcher instead writes each queue's entries of a round as one *run* -- one key, the
entries' values concatenated:

1. the names and offsets of every fan-out record, a sequence of each per record, in log
   order (:func:`~tidemq.store.dispatch.fanout_columns`); each record's value (phys,
   size, tags, store time) as one row of a structured array;
2. records below the store's checkpoint (re-dispatch after a crash: their runs exist)
   dropped, and, once a queue was deleted, each record's entries below their queue's
   tombstone floor (:func:`build_fanout`);
3. the queues ranked as their UTF-8 bytes sort (code-point order is UTF-8 byte order),
   so rank order is key order;
4. the entries ordered by queue, log order within a queue (which is offset order), and
   each entry's value copied from its record's row;
5. a run starts wherever the queue changes (or, defensively, its offsets skip): the puts
   are one per queue, not one per entry.

Steps 3 to 5 are the compiled ``lmq_fanout_runs`` (``tidemq.formats._crecords``): one
pass over the entries that groups them by queue in a dict, a sort of the queues and a
counting sort of the entries, with no Python object made per entry. Its twin,
:func:`py_fanout_runs`, does them with numpy, five passes over the entries at C speed
that each make a Python-level step per entry (chaining, the dict, the rank look-up, the
offsets), and is the fallback where the module is not built.

With 1,000 queues and ten per record (the load of ``tidemq bench dispatch``), a round of
2,048 records is 1,000 keys instead of 20,480, and both building the batch and writing it
cost less than half as much a record. The result is what
:meth:`~tidemq.store.lmq_store.LmqStore.write_prepared` applies.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import cast

import numpy as np
from rocksdict import WriteBatch

from tidemq.formats.record.native import compiled
from tidemq.store.lmq_store import ENTRY_DTYPE, entry_prefix

__all__ = ["NATIVE_FANOUT_RUNS", "Fanout", "FanoutRecords", "Runs", "build_fanout",
           "fanout_runs", "py_fanout_runs"]

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


#: ``(keys, runs, queues, firsts, lasts, entries)``: each run's ``E`` key and its values
#: joined, in key order; each queue with its first and last offset; the entries in all.
Runs = tuple[list[bytes], list[bytes], list[str], list[int], list[int], int]


def py_fanout_runs(names: Sequence[Sequence[str]], offsets: Sequence[Sequence[int]],
                   values: bytes) -> Runs:
    """The entries of records fanned out to ``names[i]`` at ``offsets[i]``, each
    record's entry value a slice of ``values`` (all of one width, in record order), as
    one run per queue and stretch of consecutive offsets, in key order (steps 2, 4 and 5
    of the module docstring); the compiled ``lmq_fanout_runs`` is its twin."""
    n = len(names)
    if len(offsets) != n:
        raise ValueError(f"{n} records' LMQ names but {len(offsets)} records' offsets")
    if n and len(values) % n:
        raise ValueError(f"{len(values)} bytes of values for {n} records")
    counts = np.fromiter(map(len, names), np.int64, n)
    paired = np.fromiter(map(len, offsets), np.int64, n)
    if not np.array_equal(counts, paired):
        bad = int(np.flatnonzero(counts != paired)[0])
        raise ValueError(f"{counts[bad]} LMQ names but {paired[bad]} offsets")
    total = int(counts.sum())
    if not total:
        return [], [], [], [], [], 0
    width = len(values) // n
    flat_names: list[str] = list(chain.from_iterable(names))
    distinct = sorted(dict.fromkeys(flat_names))  # code-point order: UTF-8 byte order
    rank = dict(zip(distinct, range(len(distinct)), strict=True))
    ranks = np.fromiter(map(rank.__getitem__, flat_names), np.int64, total)
    flat_offsets = np.fromiter(chain.from_iterable(offsets), np.int64, total)
    record_of = np.repeat(np.arange(n, dtype=np.int64), counts)
    # Entries by queue, log order within a queue: one sort of rank * 2**32 + position
    # (unique keys, so any sort is the stable one) instead of an argsort and gathers.
    key = ranks << 32
    key |= np.arange(total, dtype=np.int64)
    key.sort()
    order = key & 0xFFFFFFFF
    ranks, flat_offsets, record_of = key >> 32, flat_offsets[order], record_of[order]
    rows = np.frombuffer(values, dtype=np.dtype((np.void, width)), count=n)
    data = rows.take(record_of).tobytes()  # every entry, in key order
    new_queue = np.concatenate(([True], ranks[1:] != ranks[:-1]))
    starts = np.flatnonzero(new_queue | np.concatenate(
        ([True], flat_offsets[1:] != flat_offsets[:-1] + 1)))
    bounds = (np.append(starts, total) * width).tolist()
    prefixes = list(map(entry_prefix, map(str.encode, distinct)))
    keys = list(map(bytes.__add__, map(prefixes.__getitem__, ranks[starts].tolist()),
                    map(_Q.pack, flat_offsets[starts].tolist())))
    runs = list(map(data.__getitem__, map(slice, bounds[:-1], bounds[1:])))
    firsts = np.flatnonzero(new_queue)
    lasts = np.append(firsts[1:], total) - 1
    return (keys, runs, list(map(distinct.__getitem__, ranks[firsts].tolist())),
            flat_offsets[firsts].tolist(), flat_offsets[lasts].tolist(), total)


_compiled = compiled("lmq_fanout_runs")
#: Whether :func:`fanout_runs` is the compiled one.
NATIVE_FANOUT_RUNS = _compiled is not None
#: :func:`py_fanout_runs`, compiled where it can be.
fanout_runs = cast("Callable[[Sequence[Sequence[str]], Sequence[Sequence[int]], bytes], Runs]",
                   _compiled if _compiled is not None else py_fanout_runs)


def build_fanout(records: FanoutRecords, floors: Mapping[str, int],
                 written: int = 0) -> Fanout | None:
    """The write batch of ``records``' entries, one run per queue (and per stretch of
    consecutive offsets) in key order. Left out: records below ``written`` (the LMQ
    store's checkpoint: re-dispatch after a crash, their runs exist), and entries of
    records below their queue's floor (``floors``: the queues ever deleted, step 3 of the
    module docstring). ``None`` when nothing is left."""
    names, offsets, phys = records.names, records.offsets, records.phys
    if written and phys and phys[0] < written:
        cut = bisect.bisect_left(phys, written)  # records are in log order
        records = FanoutRecords(names[cut:], offsets[cut:], phys[cut:], records.sizes[cut:],
                                records.tags[cut:], records.stamps[cut:])
        names, offsets, phys = records.names, records.offsets, records.phys
    if floors:
        names, offsets = _above_floors(names, offsets, phys, floors)
    if not names:
        return None
    values = np.empty(len(names), dtype=ENTRY_DTYPE)
    values["phys"] = phys
    values["size"] = records.sizes
    values["tags"] = records.tags
    values["store_ts"] = records.stamps
    keys, runs, present, firsts, lasts, total = fanout_runs(names, offsets, values.tobytes())
    if not total:
        return None
    wb = WriteBatch(raw_mode=True)
    deque(map(wb.put, keys, runs), maxlen=0)
    return Fanout(wb, dict(zip(present, firsts, strict=True)),
                  dict(zip(present, lasts, strict=True)), total)


def _above_floors(names: list[Sequence[str]], offsets: list[Sequence[int]], phys: list[int],
                  floors: Mapping[str, int]) -> tuple[list[Sequence[str]], list[Sequence[int]]]:
    """Each record's names and offsets without the queues whose floor lies above the
    record (entries of a deleted generation); records naming no such queue as they are."""
    out_names: list[Sequence[str]] = []
    out_offsets: list[Sequence[int]] = []
    keys = floors.keys()
    for record_names, record_offsets, at in zip(names, offsets, phys, strict=True):
        if keys.isdisjoint(record_names):
            out_names.append(record_names)
            out_offsets.append(record_offsets)
            continue
        kept = [i for i, name in enumerate(record_names) if at >= floors.get(name, 0)]
        out_names.append([record_names[i] for i in kept])
        out_offsets.append([record_offsets[i] for i in kept])
    return out_names, out_offsets
