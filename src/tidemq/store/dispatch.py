"""Dispatch: turn appended records into consume-queue and index entries, in log order.

The append path already knows everything an entry needs, so it hands the dispatcher a
:class:`DispatchBatch` per put call (docs/reference/store.md §10.17), or, for a single-record put
(the hottest path), a plain :data:`Row` tuple: building a tuple is a fraction of building
an object, and the dispatcher folds each run of rows into one batch per queue and store
millisecond (:func:`fold_rows`) before writing. The commit-log parse path is kept for
recovery only. The serial :class:`Dispatcher` thread drains every batch that is
confirmed (written under ASYNC_FLUSH, flushed under SYNC_FLUSH), groups entries per
queue, writes each queue's run in one bulk copy, indexes keys, advances the dispatched
position and only then fires ``on_dispatched`` hooks, so nothing is visible to pulls or
long-poll wake-ups before it is in its consume queue. A small round confirmed at its
append while the thread sleeps is applied the same way by the appending thread
(:meth:`Dispatcher.poke`): at a few puts a millisecond, waking the thread for each round
and the event loop again for its hooks costs more than the round.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import logging
import math
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress
from operator import is_not
from typing import Protocol, TypeVar, cast

import numpy as np

from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.index_keys import KeyColumns
from tidemq.store.lmq_store import FanOut, LmqStore
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.threads import NamedThread
from tidemq.store.wakeup import Wakeup

__all__ = ["DispatchBatch", "DispatchHook", "Dispatcher", "IndexSink", "RoundHook", "Row",
           "apply_batches", "fanout_columns", "fold_rows", "index_batches"]

#: Rounds this small wait ``linger`` before being taken.
LINGER_BELOW = 64
#: Seconds between two dispatch-lag warnings.
LAG_WARN_EVERY = 10.0
#: A thread without an event loop applies a round on append only if the put before that
#: found the dispatch thread asleep at least this many seconds earlier: puts that come
#: faster wake the dispatch thread, which then takes them in rounds of many.
ON_APPEND_GAP = 0.001

log = logging.getLogger(__name__)

#: ``hook(topic, queue_id, new_max_offset)`` called after entries became visible.
DispatchHook = Callable[[str, int, int], None]
#: ``hook(touched)``: once a round, every queue the round moved -> its new max offset.
RoundHook = Callable[[Mapping[tuple[str, int], int]], None]

#: One single-record put: ``(end, store_timestamp, (topic, queue_id), queue_offset, phys,
#: size, tags_code, index keys or None)``; ``end`` first, as ``DispatchBatch.end``.
Row = tuple[int, int, tuple[str, int], int, int, int, int, "Sequence[str] | None"]
#: A batch field's value (see _having, _per_record).
_V = TypeVar("_V")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_THIRD = operator.itemgetter(2)
_ROW_KEY = operator.itemgetter(2)
_ROW_PHYS = operator.itemgetter(4)
_ROW_SIZE = operator.itemgetter(5)
_ROW_TAGS = operator.itemgetter(6)
_ROW_KEYS = operator.itemgetter(7)
#: Row columns for splitting a queue's rows: end, time, offset, phys, size, tags, keys.
_ROW_COLUMNS = tuple(operator.itemgetter(i) for i in (0, 1, 3, 4, 5, 6, 7))
#: Runs an iterator to its end in C (a zero-length deque keeps nothing).
_consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend


@dataclasses.dataclass(slots=True)
class DispatchBatch:
    """Consecutive records of one queue appended by one put call."""

    topic: str
    queue_id: int
    queue_offset: int
    phys: Sequence[int]
    sizes: Sequence[int]
    tags: Sequence[int]
    store_timestamp: int
    end: int  # physical offset just past the last record
    #: per record: index keys (UNIQ_KEY, KEYS); a put_batch of a uniform batch gives them
    #: as :class:`~tidemq.store.index.KeyColumns`
    keys: Sequence[Sequence[str]] | None = None
    batch_sizes: Sequence[int] | None = None  # per record: offsets covered (inner batches)
    #: per record: the LMQs it fans out to and its offset in each (RIP-28), or None
    lmq: Sequence[tuple[Sequence[str], Sequence[int]] | None] | None = None


Pending = DispatchBatch | Row


def _end(item: Pending) -> int:
    return item[0] if type(item) is tuple else item.end  # type: ignore[union-attr]


def _stamp(item: Pending) -> int:
    return item[1] if type(item) is tuple else item.store_timestamp  # type: ignore[union-attr]


def fold_rows(rows: list[Row], across_queues: bool = True,
              timed: Callable[[str, int], bool] | None = None) -> list[DispatchBatch]:
    """A run of single-record puts (log order) as one batch per queue.

    A batch has one store timestamp. Where it is stored per record -- rows with index
    keys, and queues for which ``timed(topic, queue_id)`` says so (batch consume
    queues) -- a batch holds the records of one millisecond; elsewhere it only feeds the
    lag figures and the checkpoint, and a batch carries its last (newest) record's.
    Queue offsets in a batch are consecutive. Batches come out ordered by their end, so
    the last one ends where the run ends and each queue's batches stay in log order;
    their records interleave in the log, though. Without ``across_queues`` only
    neighbours in the log are folded and the batches' records stay in log order too.
    """
    if len(rows) == 1:  # a round of one put, as at one send at a time: the same batch,
        row = rows[0]  # without columns
        keyed = row[7]
        return [DispatchBatch(row[2][0], row[2][1], row[3], [row[4]], [row[5]], [row[6]],
                              row[1], row[0], None if keyed is None else [keyed])]
    if not across_queues:
        return _fold_neighbours(rows)
    keys = list(map(_ROW_KEY, rows))
    distinct = set(keys)
    groups: dict[tuple[str, int], list[Row]]
    if len(distinct) == len(rows):  # a row a queue (a shared send parent's round): each
        return [DispatchBatch(key[0], key[1], row[3], [row[4]], [row[5]], [row[6]], row[1],
                              row[0], None if row[7] is None else [row[7]])
                for key, row in zip(keys, rows, strict=True)]  # its own batch, in log order
    if len(distinct) == 1:
        groups = {keys[0]: rows}
    else:  # grouped in C: each row appended to its queue's list, no bytecode per row
        groups = {key: [] for key in distinct}
        _consume(map(list.append, map(groups.__getitem__, keys), rows))
    out: list[DispatchBatch] = []
    for (topic, queue_id), group in groups.items():
        first, last, n = group[0], group[-1], len(group)
        if n == 1:  # one row of this queue (a round of sends to many queues): no columns
            keyed = first[7]
            out.append(DispatchBatch(topic, queue_id, first[3], [first[4]], [first[5]],
                                     [first[6]], first[1], first[0],
                                     None if keyed is None else [keyed]))
            continue
        # Columns by itemgetter, not zip(*group): a backlog's group holds 100,000s of rows,
        # and zip would make (and the collector chase) one iterator per row.
        if last[3] - first[3] == n - 1 and (
                first[1] == last[1]  # one store millisecond (a put_many's rows): one batch
                or (first[7] is None and (timed is None or not timed(topic, queue_id)))):
            out.append(DispatchBatch(topic, queue_id, first[3], list(map(_ROW_PHYS, group)),
                                     list(map(_ROW_SIZE, group)), list(map(_ROW_TAGS, group)),
                                     last[1], last[0],
                                     None if first[7] is None else list(map(_ROW_KEYS, group))))
            continue
        if len(set(map(_SECOND, group))) == n:  # a millisecond a row (rounds of parents)
            out.extend(DispatchBatch(topic, queue_id, r[3], [r[4]], [r[5]], [r[6]], r[1], r[0],
                                     None if r[7] is None else [r[7]]) for r in group)
            continue
        ends, stamps, offsets, phys, sizes, tags, index_keys = (
            list(map(getter, group)) for getter in _ROW_COLUMNS)
        i = 0
        while i < n:  # one batch per store millisecond (stamps never decrease in a queue)
            ts = stamps[i]
            j = n if stamps[-1] == ts else bisect.bisect_right(stamps, ts, i)
            if offsets[j - 1] - offsets[i] != j - 1 - i:  # not consecutive: a queue reset
                j = i + 1
            out.append(DispatchBatch(topic, queue_id, offsets[i], phys[i:j], sizes[i:j],
                                     tags[i:j], ts, ends[j - 1],
                                     None if index_keys[0] is None else index_keys[i:j]))
            i = j
    if len(out) > 1:
        out.sort(key=_BATCH_END)
    return out


def _fold_neighbours(rows: list[Row]) -> list[DispatchBatch]:
    """Fold rows that follow each other in the log (same queue, time, next offset)."""
    out: list[DispatchBatch] = []
    i, n = 0, len(rows)
    while i < n:
        first = rows[i]
        j = i + 1
        while (j < n and rows[j][2] == first[2] and rows[j][1] == first[1]
               and rows[j][3] == first[3] + j - i):
            j += 1
        run = rows[i:j]
        topic, queue_id = first[2]
        out.append(DispatchBatch(topic, queue_id, first[3], list(map(_ROW_PHYS, run)),
                                 list(map(_ROW_SIZE, run)), list(map(_ROW_TAGS, run)),
                                 first[1], run[-1][0],
                                 None if first[7] is None else list(map(_ROW_KEYS, run))))
        i = j
    return out


_BATCH_END = operator.attrgetter("end")
_BATCH_QUEUE = operator.attrgetter("topic", "queue_id")
_BATCH_TOPIC = operator.attrgetter("topic")
_BATCH_PHYS = operator.attrgetter("phys")
_BATCH_SIZES = operator.attrgetter("sizes")
_BATCH_TAGS = operator.attrgetter("tags")
_BATCH_STAMP = operator.attrgetter("store_timestamp")
_BATCH_KEYS = operator.attrgetter("keys")
_BATCH_LMQ = operator.attrgetter("lmq")


class IndexSink(Protocol):
    """What the dispatcher needs from the key index (implemented by ``store.index``)."""

    def put_keys(self, topic: str, keys: Sequence[str], phys: int,
                 store_timestamp: int) -> None: ...


def apply_batches(queues: ConsumeQueueSet, index: IndexSink | None,
                  batches: list[DispatchBatch]) -> dict[tuple[str, int], int]:
    """Write ``batches`` (in log order) into their queues; returns new max offsets. The
    records of a deleted topic (:mod:`tidemq.store.deleted_topics`) get no queue entry:
    only their LMQ entries and keys are written."""
    deleted = queues.deleted.before
    queued = batches if not deleted else [
        b for b in batches if b.topic not in deleted or b.phys[0] >= deleted[b.topic]]
    grouped: dict[tuple[str, int], list[DispatchBatch]] | None = None
    keys: list[tuple[str, int]] = []
    if len(queued) == 1:  # a round of one put: every append wakes the thread
        b = queued[0]
        grouped = {(b.topic, b.queue_id): queued}
    else:
        keys = list(map(_BATCH_QUEUE, queued))
        if len(set(keys)) != len(keys):  # grouped in C, queues in order of appearance
            grouped = {key: [] for key in dict.fromkeys(keys)}
            _consume(map(list.append, map(grouped.__getitem__, keys), queued))
    touched: dict[tuple[str, int], int] = {}
    if grouped is None:  # a batch a queue: no grouping
        for key, b in zip(keys, queued, strict=True):
            cq = queues.get_or_create(*key)
            if isinstance(cq, BatchConsumeQueue):
                touched[key] = _append_batches(cq, [b])
            elif len(b.phys) == 1:
                touched[key] = cq.append_one(b.queue_offset, b.phys[0], b.sizes[0], b.tags[0])
            else:
                touched[key] = cq.append(b.queue_offset, b.phys, b.sizes, b.tags)
        grouped = {}
    for key, group in grouped.items():
        cq = queues.get_or_create(*key)
        if isinstance(cq, BatchConsumeQueue):
            touched[key] = _append_batches(cq, group)
            continue
        if len(group) == 1:
            g = group[0]
            touched[key] = (cq.append_one(g.queue_offset, g.phys[0], g.sizes[0], g.tags[0])
                            if len(g.phys) == 1
                            else cq.append(g.queue_offset, g.phys, g.sizes, g.tags))
            continue
        phys = list(map(_BATCH_PHYS, group))
        sizes, tag_codes = list(map(_BATCH_SIZES, group)), list(map(_BATCH_TAGS, group))
        size, tags = _one_value(sizes), _one_value(tag_codes)
        if size is not None and tags is not None and set(map(type, phys)) == {range}:
            # uniform batches: their entries made a batch a call, without numpy
            touched[key] = cq.append_runs(group[0].queue_offset, phys, size, tags)
            continue
        touched[key] = cq.append(group[0].queue_offset, _joined(phys),
                                 _joined(sizes, size), _joined(tag_codes, tags))
    if queues.lmq is not None:
        _apply_lmq(queues.lmq, batches, touched)
    if index is not None:
        index_batches(index, batches)
    return touched


def index_batches(index: IndexSink, batches: Sequence[DispatchBatch]) -> None:
    """The index step of a dispatch round (both dispatchers), in log order: the index
    skips a record below one it has, and folded rows are grouped per queue, so their
    batches interleave in the log."""
    if len(batches) == 1 and type(batches[0].keys) is not KeyColumns:
        b = batches[0]  # one put's records: in log order already
        if b.keys:
            topic, ts = b.topic, b.store_timestamp
            for keys, phys_off in zip(b.keys, b.phys, strict=True):
                if keys:
                    index.put_keys(topic, keys, phys_off, ts)
        return
    if KeyColumns in map(type, map(_BATCH_KEYS, batches)):  # one C-level pass
        _index_with_columns(index, batches)
        return
    keyed = _keyed_rows(batches)
    keyed.sort(key=_THIRD)
    put_rows = getattr(index, "put_key_rows", None)
    if put_rows is not None:  # queued together
        put_rows(keyed)
        return
    for topic, keys, phys_off, ts in keyed:
        index.put_keys(topic, keys, phys_off, ts)


def _keyed_rows(batches: Sequence[DispatchBatch]) -> list[tuple[str, Sequence[str], int, int]]:
    """``(topic, keys, phys, store_timestamp)`` of every record with index keys, batch by
    batch: built with C-level maps and chains, no Python step per record or batch."""
    batches, keys_of = _having(batches, _BATCH_KEYS)  # batches without keys left out
    counts = list(map(len, map(_BATCH_PHYS, batches)))
    keys = list(chain.from_iterable(keys_of))
    phys = list(chain.from_iterable(map(_BATCH_PHYS, batches)))
    if len(keys) != len(phys):
        raise ValueError(f"{len(keys)} key rows for {len(phys)} records")
    rows = zip(_per_record(map(_BATCH_TOPIC, batches), counts, len(phys)), keys, phys,
               _per_record(map(_BATCH_STAMP, batches), counts, len(phys)), strict=True)
    return list(compress(rows, keys))  # records whose keys are not empty


def _having(batches: Sequence[DispatchBatch], field: Callable[[DispatchBatch], _V | None]
            ) -> tuple[Sequence[DispatchBatch], list[_V]]:
    """The batches whose ``field`` is not empty (nor ``None``), and those values."""
    values = list(map(field, batches))
    if all(values):
        return batches, cast("list[_V]", values)
    return list(compress(batches, values)), cast("list[_V]", list(compress(values, values)))


def _per_record(values: Iterable[_V], counts: list[int], records: int) -> Iterable[_V]:
    """Each batch's value once for each of its ``counts`` records, in log order: the values
    themselves when every batch holds one record (no repeat() a batch)."""
    if records == len(counts):
        return values
    return chain.from_iterable(map(itertools.repeat, values, counts))


def _index_with_columns(index: IndexSink, batches: Sequence[DispatchBatch]) -> None:
    """:func:`index_batches` when some batches carry :class:`KeyColumns` (a uniform
    put_batch): those go to the index as one call each when it takes columns
    (``put_key_columns``), in log order with the other records."""
    put_columns = getattr(index, "put_key_columns", None)
    keyed: list[tuple[int, str, Sequence[str] | KeyColumns, int, Sequence[int]]] = []
    for b in batches:
        if not b.keys:
            continue
        if put_columns is not None and type(b.keys) is KeyColumns:
            keyed.append((b.phys[0], b.topic, b.keys, b.store_timestamp, b.phys))
            continue
        keyed.extend((phys_off, b.topic, keys, b.store_timestamp, ())
                     for keys, phys_off in zip(b.keys, b.phys, strict=True) if keys)
    keyed.sort(key=_FIRST)
    for phys_off, topic, keys, ts, phys in keyed:
        if type(keys) is KeyColumns:
            put_columns(topic, keys, phys, ts)  # type: ignore[misc]
        else:
            index.put_keys(topic, keys, phys_off, ts)  # type: ignore[arg-type]


def _one_value(parts: list[Sequence[int]]) -> int | None:
    """The one value every part repeats (the record size and tags code of uniform
    batches), or ``None``. A uniform batch's column repeats one int object, which
    ``count`` then compares by identity, not by value; another batch's equal value is
    another object, so each part is counted against its own first item."""
    first = parts[0][0] if parts[0] else None
    if first is None:
        return None
    if set(map(len, parts)) == {1}:  # a record a part (single puts): compared in C
        return first if list(map(_FIRST, parts)).count(first) == len(parts) else None
    for p in parts:  # each part counted against its own first item: identities, mostly
        if not (p and p[0] == first and p[-1] == first and p.count(p[0]) == len(p)):
            return None
    return first


def _joined(parts: list[Sequence[int]], one: int | None = None) -> Sequence[int]:
    """One queue's column from its batches: int64 when ranges (a put_batch's physical
    offsets) make numpy the cheap way, else one list -- of one int object when every
    batch repeats one value, ``one`` (:func:`_one_value`: the record size and tags code of
    uniform batches), which the queue's test for a repeated value then compares by
    identity, not by value."""
    if range in set(map(type, parts)):
        return np.concatenate([np.arange(p.start, p.stop, p.step, dtype=np.int64)
                               if type(p) is range else np.asarray(p, dtype=np.int64)
                               for p in parts])  # type: ignore[return-value]
    if one is not None:
        return [one] * sum(map(len, parts))
    return list(chain.from_iterable(parts))


def _append_batches(bcq: BatchConsumeQueue, group: list[DispatchBatch]) -> int:
    """Batches of one batch consume queue, in log order: one bulk append when their
    offsets follow each other (the append path's case), else one append each (which
    reports a gap)."""
    if len(group) == 1:
        one = group[0]
        covered = one.batch_sizes
        if covered is not None and len(covered) == 1:  # one inner batch: one entry
            return bcq.append_entry(one.queue_offset, one.phys[0], one.sizes[0], one.tags[0],
                                    one.store_timestamp, covered[0])
    phys: list[int] = []
    sizes: list[int] = []
    tags: list[int] = []
    stamps: list[int] = []
    counts: list[int] = []
    expected = group[0].queue_offset
    for g in group:
        own = list(g.batch_sizes) if g.batch_sizes is not None else [1] * len(g.phys)
        if g.queue_offset != expected:
            break
        expected += sum(own)
        phys += g.phys
        sizes += g.sizes
        tags += g.tags
        stamps += [g.store_timestamp] * len(g.phys)
        counts += own
    else:
        return bcq.append(group[0].queue_offset, phys, sizes, tags, store_ts=stamps,
                          batch_sizes=counts)
    for g in group:
        last = bcq.append(g.queue_offset, g.phys, g.sizes, g.tags, store_ts=g.store_timestamp,
                          batch_sizes=g.batch_sizes)
    return last


def fanout_columns(batches: Sequence[DispatchBatch]) -> tuple[
        list[Sequence[str]], list[Sequence[int]], list[int], list[int], list[int], list[int]]:
    """The fan-out records of a round's batches in log order, column by column: each
    record's LMQ names, its offsets in them, its phys, size, tags code and store time.
    Built with C-level maps and chains, no Python step per record or batch (a round of
    single puts holds a batch per record)."""
    batches, targets = _having(batches, _BATCH_LMQ)  # some of whose records fan out
    counts = list(map(len, map(_BATCH_PHYS, batches)))
    flat = list(chain.from_iterable(targets))  # a record's (names, offsets), or None
    phys = list(chain.from_iterable(map(_BATCH_PHYS, batches)))
    if len(flat) != len(phys):
        raise ValueError(f"{len(flat)} LMQ targets for {len(phys)} records")
    sizes = list(chain.from_iterable(map(_BATCH_SIZES, batches)))
    tags = list(chain.from_iterable(map(_BATCH_TAGS, batches)))
    stamps = list(_per_record(map(_BATCH_STAMP, batches), counts, len(phys)))
    if None in flat:  # records of a batch that do not fan out
        fans = list(map(is_not, flat, itertools.repeat(None)))
        flat = list(compress(flat, fans))
        phys, sizes, tags, stamps = (list(compress(column, fans))
                                     for column in (phys, sizes, tags, stamps))
    fanned = cast("list[tuple[Sequence[str], Sequence[int]]]", flat)
    names = list(map(_FIRST, fanned))
    offsets = list(map(_SECOND, fanned))
    if list(map(len, names)) != list(map(len, offsets)):
        bad = next(i for i, (n, o) in enumerate(zip(names, offsets, strict=True))
                   if len(n) != len(o))
        raise ValueError(f"{len(names[bad])} LMQ names but {len(offsets[bad])} offsets")
    return names, offsets, phys, sizes, tags, stamps


def _apply_lmq(lmq: LmqStore, batches: list[DispatchBatch],
               touched: dict[tuple[str, int], int]) -> None:
    """Fan records out to their light message queues (queue id 0), one write batch."""
    records: list[FanOut] = list(zip(*fanout_columns(batches), strict=True))
    if records:
        moved = lmq.write_fanout(records, batches[-1].end)
        touched.update(zip(zip(moved, itertools.repeat(0)), moved.values(), strict=True))


def _records(items: Iterable[Pending]) -> int:
    """Records in ``items``: a row holds one, a batch its ``phys``."""
    return sum([1 if type(item) is tuple else len(cast(DispatchBatch, item).phys)
                for item in items])


def _lone_fanout(item: Pending) -> bool:
    """Whether ``item`` is one record that fans out to LMQs (a put or a send of one
    message naming them). Its round costs a RocksDB write, its checkpoint and the LMQ
    store's steps a round whatever the round holds, more than the thread's wake-up it
    saves: applied on append, every such send pays them alone, where the thread folds
    the fan-outs appended meanwhile into one round."""
    if type(item) is tuple:
        return False
    targets = cast(DispatchBatch, item).lmq
    return targets is not None and len(targets) == 1 and targets[0] is not None


def _put_back_beyond(items: list[Pending], limit: int, pending: deque[Pending]) -> None:
    """Cut ``items`` (taken from the left of ``pending``) after the item that brings
    them to ``limit`` records, and return the rest to the left of ``pending``, in order.
    Records are counted in C: a row holds one, a batch its ``phys``."""
    kinds = list(map(type, items))
    rows = kinds.count(tuple)
    if rows == len(items):
        return  # one record each: no more than ``limit`` items were taken
    counts = (list(map(len, map(_BATCH_PHYS, items))) if not rows
              else [1 if kind is tuple else len(item.phys)  # type: ignore[union-attr]
                    for kind, item in zip(kinds, items, strict=True)])
    cut = bisect.bisect_left(list(itertools.accumulate(counts)), limit) + 1
    if cut < len(items):
        pending.extendleft(reversed(items[cut:]))
        del items[cut:]


def _fold(items: list[Pending], keyed_across_queues: bool,
          timed: Callable[[str, int], bool]) -> list[DispatchBatch]:
    """``items`` with every run of rows folded into batches (:func:`fold_rows`); rows with
    index keys across queues only if ``keyed_across_queues``."""
    kinds = list(map(type, items))
    rows_only = kinds.count(tuple) == len(items)
    if rows_only or tuple not in kinds:
        if not rows_only or not items:
            return items  # type: ignore[return-value]  # batches only
        rows = cast("list[Row]", items)
        return fold_rows(rows, keyed_across_queues or rows[0][7] is None, timed)
    out: list[DispatchBatch] = []
    rows = []
    for item in items:
        if type(item) is tuple:
            rows.append(item)
            continue
        if rows:
            out += fold_rows(rows, keyed_across_queues or rows[0][7] is None, timed)
            rows = []
        out.append(item)  # type: ignore[arg-type]
    if rows:
        out += fold_rows(rows, keyed_across_queues or rows[0][7] is None, timed)
    return out


class Dispatcher:
    """The serial dispatcher thread (the baseline; RIP-52-style concurrency is separate)."""

    def __init__(self, queues: ConsumeQueueSet, index: IndexSink | None,
                 confirm_offset: Callable[[], int], start_offset: int,
                 lag_warn_ms: int = 1000, clock: Callable[[], int] | None = None,
                 linger_ms: float = 0.0, on_append_records: int = 0) -> None:
        self.queues = queues
        self.index = index
        self._confirm = confirm_offset
        #: Batches and rows in log order; appenders push under the append lock.
        self.pending: deque[Pending] = deque()
        self._cond = threading.Condition()
        self._draining = 0  # threads in drain(), waiting on _cond (changed under its lock)
        self._hooks: list[DispatchHook] = []
        self._round_hooks: list[RoundHook] = []
        self._stop = False
        self._thread: threading.Thread | None = None
        self.dispatched_offset = start_offset
        self.last_store_timestamp = 0
        self.lag_warn_ms = lag_warn_ms
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._last_lag_warning: float | None = None  # time.monotonic() of it
        #: On a replica: ``(end, ms)``, the log's end after a run of its master's bytes
        #: and this clock's time when it was written, oldest first. A replicated record's
        #: lag counts from then: the time before it is replication delay, not dispatch's.
        self.arrivals: deque[tuple[int, int]] = deque()
        self._arrivals_lock = threading.Lock()
        self.error: BaseException | None = None
        self._busy = False
        self._round_start = 0  # store time of the first record of the round in hand
        self._paused = False
        #: Set while the thread is about to sleep: an appender that pushes to
        #: :attr:`pending` and sees it set calls :meth:`wake`.
        self.idle = False
        self.linger = linger_ms / 1000
        #: Records per round at most (0: everything confirmed is one round).
        self.round_records = 0
        self._wakeup = Wakeup()
        #: Held by whichever thread takes a round and applies it: the dispatch thread, or
        #: an appender applying a round on append (:meth:`poke`).
        self._round = threading.Lock()
        #: A round of at most this many records, confirmed when it is appended while the
        #: thread sleeps, is applied by the appending thread (0: never; see :meth:`poke`).
        self.on_append_records = on_append_records
        self.rounds_on_append = 0  # rounds applied by an appender
        #: :data:`ON_APPEND_GAP` of this dispatcher (tests set 0 to apply every round).
        self.on_append_gap = ON_APPEND_GAP
        self._poked_at = -math.inf  # time.monotonic() of the last poke off a loop
        #: ``soon(fn)``: run ``fn`` on the calling thread once its work in hand is done
        #: (an event loop's ``call_soon``), returning ``False`` where it cannot (another
        #: thread): a round on append then waits for the end of the loop's pass.
        self.soon: Callable[[Callable[[], None]], bool] | None = None
        self._soon_pending = False  # a round left to the loop (changed on its thread)
        self.dispatched_entries = 0
        #: :func:`apply_batches` hands the index its keys in log order whatever the batch
        #: order; a subclass that applies rounds itself gets keyed rows in log order.
        self._keyed_across_queues = type(self).run_once is Dispatcher.run_once

    # ------------------------------------------------------------------ API

    def add_hook(self, hook: DispatchHook) -> None:
        self._hooks.append(hook)

    def add_round_hook(self, hook: RoundHook) -> None:
        """Call ``hook(touched)`` once a round with every queue it moved: a round of
        fan-out records moves hundreds of LMQs, and a hook that looks at a few of them
        should not be called for each."""
        self._round_hooks.append(hook)

    def submit(self, batch: DispatchBatch) -> None:
        """Queue a batch; called under the append lock, so batches arrive in log order.

        Lock-free on the hot path: ``deque.append`` is atomic, and the dispatcher is only
        signalled when it announced that it is going to sleep.
        """
        self.pending.append(batch)
        if self.idle:
            self.poke()

    def poke(self) -> None:
        """Wake the thread that announced :attr:`idle`; appenders call it after pushing
        to :attr:`pending` when they see the flag, holding the append lock. Clearing the
        flag first makes the next appenders skip the event until the thread announces
        sleep again.

        A small confirmed round (:attr:`on_append_records`) is applied by the appending
        thread instead, and the dispatch thread sleeps on: waking it, and it waking the
        thread that waits for the round's hooks, costs more than the round. Where the
        appender runs an event loop (:attr:`soon`), the round runs once the work in hand
        is done: after the put's answer is written, and for every put of that pass at
        once. Elsewhere it runs right here, with the append lock held (a hook must not
        append), unless the put before found the thread asleep less than
        :attr:`on_append_gap` ago: a thread putting in a loop would otherwise pay a round
        of one record for every put, where the woken dispatch thread takes its puts many
        to a round."""
        if self.on_append_records:
            if self._soon_pending:
                return  # the loop's coming round takes this put too, or wakes the thread
            soon = self.soon
            if soon is not None and soon(self._apply_soon):
                self._soon_pending = True
                return
            now, last = time.monotonic(), self._poked_at
            self._poked_at = now
            if now - last >= self.on_append_gap and self._apply_on_append():
                return
        self._wake_thread()

    def _wake_thread(self) -> None:
        self.idle = False
        self._wakeup.set()

    def _apply_soon(self) -> None:
        """The round :meth:`poke` left to the loop: what is pending now, applied here if
        it qualifies, else by the woken thread (and so is anything put meanwhile by
        another thread that this round did not take)."""
        self._soon_pending = False
        self._apply_on_append()
        if self.pending:
            self._wake_thread()

    def _apply_on_append(self) -> bool:
        """Apply the head of :attr:`pending` as one round on this thread, if the round is
        small, confirmed, and nothing is in flight: the dispatch thread holds no round
        (:attr:`_round`) and :meth:`_quiet`. Other threads may append meanwhile (a round
        left to the loop runs without the append lock): the round is the items pending
        when it starts. Returns whether the round was taken."""
        if self.linger or self._paused or self._stop or self.error is not None:
            return False
        if not self._round.acquire(blocking=False):
            return False  # the thread is taking or applying a round: it takes this one too
        try:
            pending = self.pending
            n = len(pending)
            if not n or n > self.on_append_records or not self._quiet():
                return False
            # By index: appenders only add at the right, and only a round holder pops.
            items = list(map(pending.__getitem__, range(n)))
            if _end(items[-1]) > self._confirm():
                return False  # not flushed yet (SYNC_FLUSH): the thread waits for it
            if (n > 1 or type(items[0]) is not tuple) and _records(items) > \
                    self.on_append_records:
                return False
            if n == 1 and _lone_fanout(items[0]):
                return False
            self._busy = True  # before the batches leave pending, as _take
            self._round_start = _stamp(items[0])
            _consume(map(operator.call, itertools.repeat(pending.popleft, n)))
            batches = _fold(items, self._keyed_across_queues, self._timed)
            self.rounds_on_append += 1
            try:
                self.run_once(batches)
            except BaseException as exc:  # the put stands; the dispatcher stops, as _run
                self._failed(exc)
            return True
        finally:
            self._round.release()

    def _quiet(self) -> bool:
        """Whether a round may be applied on append: no earlier round is still on its way
        to visibility (the serial dispatcher's are, once :attr:`_round` is free)."""
        return True

    def wake(self) -> None:
        """The confirm offset moved (a flush finished): re-check pending batches."""
        self._wakeup.set()

    def pause(self) -> None:
        """Stop taking new batches (benchmarks and tests build a backlog this way)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wakeup.set()

    def start(self) -> None:
        self._thread = NamedThread(target=self._run, name="tidemq-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def drain(self, timeout: float = 10.0) -> bool:
        """Block until everything confirmed at the time of the call is dispatched."""
        target = self._confirm()
        deadline = time.monotonic() + timeout
        with self._cond:
            self._draining += 1  # under the condition's lock: a round's end notifies us
            try:
                # Pending first, then in flight: a batch leaves ``pending`` only after
                # :meth:`_take` marked the dispatcher busy, so it is always seen in one.
                while self.error is None and (
                    (self.pending and _end(self.pending[0]) <= target) or self._in_flight()
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._wakeup.set()
                    self._cond.wait(min(remaining, 0.05))
            finally:
                self._draining -= 1
        return self.error is None

    @contextlib.contextmanager
    def held(self, timeout: float = 10.0) -> Iterator[bool]:
        """No round is applied while this is held: the position dispatched stays where
        it is, and appends wait in :attr:`pending`. Everything confirmed when it is
        taken is dispatched first and every round taken is visible; yields whether that
        held within ``timeout`` seconds."""
        done = self.drain(timeout)
        with self.between_rounds(timeout) as quiet:
            yield done and self.error is None and quiet

    @contextlib.contextmanager
    def between_rounds(self, timeout: float = 10.0) -> Iterator[bool]:
        """No round is applied while this is held and none is half-way (the thread's, an
        appender's, or one still being committed): appends wait in :attr:`pending`.
        Unlike :meth:`held`, nothing pending is dispatched first; a paused dispatcher
        stays paused. Yields whether the round in flight, if any, ended within
        ``timeout`` seconds (a failed dispatcher applies none)."""
        paused = self._paused
        self.pause()
        try:
            with self._round:  # a round being taken is marked in flight once this is free
                pass
            deadline = time.monotonic() + timeout
            with self._cond:
                self._draining += 1  # under the condition's lock: a round's end notifies us
                try:
                    while self.error is None and self._in_flight():
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(min(remaining, 0.05))
                finally:
                    self._draining -= 1
            yield self.error is not None or not self._in_flight()
        finally:
            if not paused:
                self.resume()

    def _in_flight(self) -> bool:
        """Whether batches taken from the pending queue are not visible yet."""
        return self._busy

    @property
    def pending_batches(self) -> int:
        return len(self.pending)

    def note_arrival(self, end: int) -> None:
        """A replica wrote its master's bytes up to ``end`` (under the append lock, before
        it dispatches them): the records they complete lag from now on."""
        with self._arrivals_lock:
            self.arrivals.append((end, self._clock()))

    def forget_arrivals(self) -> None:
        """The replica's log was cut: the runs noted before are gone, and the offsets they
        covered arrive again."""
        with self._arrivals_lock:
            self.arrivals.clear()

    def _arrived(self, end: int) -> int | None:
        """When the replicated bytes of a record ending at ``end`` were written here (at
        the latest), forgetting the runs before it; ``None`` for a record put here."""
        with self._arrivals_lock:
            arrivals = self.arrivals
            while arrivals and arrivals[0][0] < end:
                arrivals.popleft()
            return arrivals[0][1] if arrivals else None

    def lag(self, written_offset: int) -> tuple[int, float]:
        """Dispatch lag: bytes behind the written end, and ms since the oldest record not
        visible yet was stored here (put, or written by a replica: see :meth:`note_arrival`)."""
        return self._lag(written_offset)[:2]

    def _lag(self, written_offset: int) -> tuple[int, float, bool]:
        """:meth:`lag`, and whether the ms count from a replica's write of the bytes."""
        behind = max(0, written_offset - self.dispatched_offset)
        oldest = self._oldest_undispatched()
        arrived = self._arrived(self.dispatched_offset + 1) if self.arrivals else None
        if not oldest:
            return behind, 0.0, False
        since = oldest if arrived is None else arrived
        return behind, float(max(0, self._clock() - since)), arrived is not None

    def check_lag(self, written_offset: int) -> tuple[int, float]:
        """:meth:`lag`, with :meth:`warn_if_lagging`'s warning when it is past
        ``dispatchLagWarnMs`` (the store's housekeeper calls this: a dispatcher that is
        stuck has no round to measure)."""
        behind, ms, replicated = self._lag(written_offset)
        self.warn_if_lagging(ms, replicated=replicated)
        return behind, ms

    def _oldest_undispatched(self) -> int:
        """Store timestamp of the oldest record not yet visible (0 if none): the round
        being written, else the oldest waiting batch."""
        if self._round_start:
            return self._round_start
        pending = self.pending
        return _stamp(pending[0]) if pending else 0

    # ------------------------------------------------------------------ thread

    def _ready(self) -> bool:
        pending = self.pending
        return bool(pending) and not self._paused and _end(pending[0]) <= self._confirm()

    def _take(self) -> list[DispatchBatch]:
        """The next round, with :attr:`_round` held (released by the caller once the round
        is applied); ``[]`` when stopping or failed, without it."""
        pending = self.pending
        while True:
            self._round.acquire()
            if self.error is not None:  # a round applied on append failed
                self._round.release()
                return []
            if self._ready():
                if self.linger and len(pending) < LINGER_BELOW and not self._stop:
                    # A round of one batch costs nearly as much as a round of hundreds
                    # (per-queue numpy writes, a GIL hand-off per wake-up): let puts
                    # accumulate briefly. Bounded by ``linger`` seconds of extra latency.
                    time.sleep(self.linger)
                self._busy = True
                self._round_start = _stamp(pending[0])  # before it leaves pending
                return _fold(self._pop_confirmed(pending, self._confirm()),
                             self._keyed_across_queues, self._timed)
            if self._stop:
                self._round.release()
                return []
            # Announce sleep, then re-check, so a submit in between is never lost: it
            # either wakes the thread or, once the round lock is free, applies its round.
            self.idle = True
            ready = self._ready()
            self._round.release()
            if not ready and not self._stop:
                self._wakeup.wait(0.05 if pending else 1.0)
            self._wakeup.clear()
            self.idle = False

    def _timed(self, topic: str, queue_id: int) -> bool:
        """Whether the queue stores a store timestamp per entry (a batch consume queue)."""
        return topic in self.queues.batch_topics or isinstance(
            self.queues.get(topic, queue_id), BatchConsumeQueue)

    def _pop_confirmed(self, pending: deque[Pending], confirm: int) -> list[Pending]:
        """Take the confirmed head of ``pending``, up to the first item that brings the
        round to :attr:`round_records` records: in bulk when those items are all
        confirmed (appenders only ever add at the right), else item by item."""
        limit = self.round_records
        n = len(pending)
        take = min(n, limit) if limit else n  # an item holds one record or more
        if take and _end(pending[take - 1]) <= confirm:
            out = list(map(operator.call, itertools.repeat(pending.popleft, take)))
            if take > 1 and limit:
                _put_back_beyond(out, limit, pending)
            return out
        out = []
        records = 0
        while pending and _end(pending[0]) <= confirm:
            item = pending.popleft()
            out.append(item)
            if limit:
                records += 1 if type(item) is tuple else len(item.phys)  # type: ignore[union-attr]
                if records >= limit:
                    break
        return out

    def _run(self) -> None:
        while self.error is None:  # a failed dispatcher takes nothing more
            batches = self._take()
            if not batches:
                return
            try:
                self.run_once(batches)
            except BaseException as exc:
                self._failed(exc)
                return
            finally:
                self._round.release()

    def _failed(self, exc: BaseException) -> None:
        """A round failed: the dispatcher stops, and whoever drains is told."""
        log.exception("dispatch failed; consume queues stop advancing")
        with self._cond:
            self.error = exc
            self._busy = False
            self._cond.notify_all()

    def run_once(self, batches: list[DispatchBatch]) -> None:
        touched = apply_batches(self.queues, self.index, batches)
        last = batches[-1]
        with self._cond:
            self.dispatched_offset = last.end
            self._busy = False
            self._round_start = 0
            if self._draining:  # notify_all walks its waiters in Python, even none
                self._cond.notify_all()
        self.last_store_timestamp = last.store_timestamp
        self.dispatched_entries += (len(last.phys) if len(batches) == 1
                                    else sum(map(len, map(_BATCH_PHYS, batches))))
        self._fire(touched, batches)

    def _fire(self, touched: dict[tuple[str, int], int], batches: list[DispatchBatch]) -> None:
        """Run the round hooks, then the hooks for every queue that moved, then check
        the lag."""
        for round_hook in self._round_hooks:
            try:
                round_hook(touched)
            except Exception:
                log.exception("dispatch hook failed")
        for (topic, queue_id), max_offset in touched.items() if self._hooks else ():
            for hook in self._hooks:
                try:
                    hook(topic, queue_id, max_offset)
                except Exception:
                    log.exception("dispatch hook failed")
        if self.lag_warn_ms:
            first = batches[0]
            arrived = self._arrived(first.end) if self.arrivals else None
            since = first.store_timestamp if arrived is None else arrived
            self.warn_if_lagging(self._clock() - since, replicated=arrived is not None)

    def warn_if_lagging(self, lag_ms: float, *, replicated: bool = False) -> bool:
        """Log a warning when ``lag_ms`` passes ``lag_warn_ms`` (``dispatchLagWarnMs``), at
        most once per :data:`LAG_WARN_EVERY` seconds; returns whether it logged.
        ``replicated``: the ms count from when a replica wrote its master's bytes, which
        the warning says (the replication delay before is not the dispatcher's)."""
        if not self.lag_warn_ms or lag_ms <= self.lag_warn_ms:
            return False
        now = time.monotonic()
        last = self._last_lag_warning
        if last is not None and now - last < LAG_WARN_EVERY:
            return False
        self._last_lag_warning = now
        since = ("since this replica wrote the bytes its master sent, replication delay apart"
                 if replicated else "since the records were stored")
        log.warning("dispatch lag %.0f ms exceeds dispatchLagWarnMs=%d (%s; %d batches "
                    "waiting)", lag_ms, self.lag_warn_ms, since, len(self.pending))
        return True
