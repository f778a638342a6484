"""The read path: consume-queue lookups turned into zero-copy views of stored records.

Entries are read in bulk as a numpy array; records that lie back to back in the commit
log (the common case for a queue written by one producer or in batches) are returned as
one memoryview per run, so a pull of a thousand messages is a handful of views and no
copies. Status and next-offset rules follow upstream's GetMessageStatus.

Reads of up to :data:`SMALL_READ` messages without a tag filter (what a consumer of many
queues asks per queue, or any pull of a queue holding no more past its offset: a consumer
that keeps up) skip numpy, whose per-call overhead dominates a few entries: the
entries are unpacked with one ``struct`` call per chunk and their runs of back-to-back
records found by comparing spans with running sums of sizes -- the same answer as the
vectorised path, a few microseconds instead of some forty.

Damaged records are never served (:mod:`tidemq.store.damaged`): runs that may hold one
-- records from before the store started, or known damaged ones -- take the vectorised
path, which checks each record and leaves the damaged ones out; the next offset still
moves past them. Hole entries (a record lost with its header) are skipped like expired
ones.
"""

from __future__ import annotations

import dataclasses
import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

import numpy as np
import numpy.typing as npt

from tidemq.formats.record import OFF_SYSFLAG, store_timestamp_offset
from tidemq.store.batch_consume_queue import HOLE_SIZE, BatchConsumeQueue
from tidemq.store.commitlog import CommitLog
from tidemq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from tidemq.store.damaged import DamagedRecords, sound_records
from tidemq.store.lmq_store import LMQ_PREFIX, LmqStore
from tidemq.store.queues import ConsumeQueueSet
from tidemq.types import GetStatus

__all__ = ["GetResult", "InnerTags", "QueueReader"]

Array = npt.NDArray[np.int64] | npt.NDArray[np.bool_]
Int64s = npt.NDArray[np.int64]
#: ``(phys, record) -> tag codes`` of the messages of the inner batch stored at ``phys``,
#: ``None`` when they cannot be told (the batch is then kept).
InnerTags = Callable[[int, memoryview], frozenset[int] | None]
_INNER_BATCH = 0x80
#: A tag-filtered read of a BatchCQ looks inside at most this many record bytes of inner
#: batches whose outer tags code does not match, beyond ``max_bytes``.
INNER_SCAN_BYTES = 4 * 1024 * 1024

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_CQ_ENTRY = struct.Struct(">qiq")  # one consume-queue entry: phys, size, tags code
#: Reads of up to this many messages without a tag filter go entry by entry (cheaper
#: than numpy's per-call overhead for a few entries); larger ones are vectorised. A read
#: is small when it asks for few or when the queue holds few past its offset (a consumer
#: that keeps up asks for a large batch and finds the few messages stored since).
SMALL_READ = 64
_RUNS: dict[int, struct.Struct] = {}  # n consume-queue entries in one unpack


@dataclasses.dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = dataclasses.field(default_factory=list)
    message_count: int = 0
    total_bytes: int = 0

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND


class QueueReader:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueSet,
                 damaged: DamagedRecords | None = None) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.damaged = damaged if damaged is not None else DamagedRecords()

    def get(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
            tag_codes: frozenset[int] | None = None,
            inner_tags: InnerTags | None = None) -> GetResult:
        """``tag_codes`` filters by the entries' tags codes; on a BatchCQ, ``inner_tags``
        also keeps an inner batch any of whose messages has one of them."""
        lmq = self.queues.lmq
        if lmq is not None and topic.startswith(LMQ_PREFIX):
            return self._get_lmq(lmq, topic, offset, max_count, max_bytes, tag_codes)
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0 if offset else offset, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        if isinstance(cq, BatchConsumeQueue):
            return self._get_batches(cq, result, offset, max_count, max_bytes, tag_codes,
                                     inner_tags)
        cl_min = self.commitlog.min_offset
        checked_upto = self.damaged.checked_upto((topic, queue_id), offset)
        checked = checked_upto > offset
        if checked:  # records an earlier read checked: this read goes up to there only
            hi = min(hi, checked_upto)
        if min(max_count, hi - offset) <= SMALL_READ and tag_codes is None:
            if (checked and not self.damaged.known) or not self._may_be_damaged(cq, offset):
                return self._get_small(cq, result, offset, hi, max_count, max_bytes, cl_min)
            if not checked and not self.damaged.known:
                sound = self._get_runs(cq, GetResult(result.status, offset, lo, result.max_offset),
                                       offset, hi, max_count, max_bytes, sound_records)
                if sound is not None:
                    self.damaged.mark_checked((topic, queue_id), offset,
                                              sound.next_begin_offset)
                    return sound
        pos = offset
        # Scan up to a bounded number of entries so a selective tag filter still progresses.
        budget = max(max_count * 16, 512)
        while pos < hi and result.message_count < max_count and budget > 0:
            entries = cq.entries(pos, min(budget, hi - pos))
            if not len(entries):
                break
            budget -= len(entries)
            phys = entries["phys"].astype(np.int64)
            size = entries["size"].astype(np.int64)
            keep = (phys >= cl_min) & (size != BLANK_UNIT_SIZE)
            if tag_codes is not None:
                keep &= np.isin(entries["tags"].astype(np.int64), list(tag_codes))
            consumed = self._collect(result, phys, size, keep, max_count, max_bytes,
                                     checked)
            pos += consumed
            if consumed < len(entries):
                break
        result.next_begin_offset = pos
        if not checked and self._may_be_damaged(cq, offset):
            self.damaged.mark_checked((topic, queue_id), offset, pos)
        if result.message_count:
            result.status = GetStatus.FOUND
        return result

    def _may_be_damaged(self, cq: ConsumeQueue, offset: int) -> bool:
        """Whether a read from ``offset`` may meet a record to check: a damaged record is
        known, or the entry at ``offset`` (physical offsets grow along a queue) points
        before the records validated since the start."""
        damaged = self.damaged
        if damaged.known:
            return True
        if not damaged.unchecked_below:
            return False
        got = cq.entry_bytes(offset, 1)
        if got is None:
            return False
        view, at, _ = got
        phys: int = _I64.unpack_from(view, at)[0]
        return phys < damaged.unchecked_below

    def _get_small(self, cq: ConsumeQueue, result: GetResult, offset: int, hi: int,
                   max_count: int, max_bytes: int, cl_min: int) -> GetResult:
        """:meth:`get` of a few entries without a tag filter, entry by entry with
        ``struct`` instead of a dozen numpy calls; the same result as the numpy path
        (the same limits, the same first-message rule, one view per contiguous run)."""
        fast = self._get_runs(cq, result, offset, hi, max_count, max_bytes)
        if fast is not None:
            return fast
        pos = offset
        count = taken = total = 0  # count: messages in result.buffers; taken: + the run
        run_begin = run_end = -1
        run_n = 0
        read = self.commitlog.read
        buffers = result.buffers
        unpack = _CQ_ENTRY.unpack_from
        budget = max(max_count * 16, 512)  # entries scanned, as the numpy path
        while pos < hi and taken < max_count and budget > 0:
            got = cq.entry_bytes(pos, min(budget, hi - pos))
            if got is None:
                break
            view, at, n = got
            budget -= n
            after_taken = -1  # index in this chunk after its last taken entry
            for i in range(n):
                phys, size, _tags = unpack(view, at)
                at += 20
                if phys < cl_min or size == BLANK_UNIT_SIZE:
                    continue  # expired or a hole: skipped
                if taken >= max_count or (taken and total + size > max_bytes):
                    pos += after_taken if after_taken >= 0 else i
                    n = -1
                    break
                total += size
                taken += 1
                after_taken = i + 1
                if phys == run_end:
                    run_end += size
                    run_n += 1
                    continue
                if run_n:
                    count += self._add_run(read, buffers, run_begin, run_end, run_n)
                run_begin, run_end, run_n = phys, phys + size, 1
            if n < 0:
                break
            pos += n
        if run_n:
            count += self._add_run(read, buffers, run_begin, run_end, run_n)
        result.message_count = count
        result.total_bytes = sum(len(b) for b in buffers)
        result.next_begin_offset = pos
        if count:
            result.status = GetStatus.FOUND
        return result

    def _get_runs(self, cq: ConsumeQueue, result: GetResult, offset: int, hi: int,
                  max_count: int, max_bytes: int,
                  check: Callable[[Callable[[int, int], memoryview | None], Sequence[int],
                                   Sequence[int]], bool] | None = None
                  ) -> GetResult | None:
        """:meth:`_get_small` when no entry is expired (phys grows along a queue, so the
        first entry tells): each chunk's entries unpacked in one call and taken as runs of
        back-to-back records, found by comparing spans with running sums of sizes.
        ``None`` when the first entry is expired (the general loop skips those), or when
        ``check`` (``(read, phys, sizes)`` of the records taken) does not find them all
        sound or one cannot be read (the caller then looks record by record)."""
        cl_min = self.commitlog.min_offset
        read = self.commitlog.read
        buffers = result.buffers
        pos, taken, total = offset, 0, 0
        checked_phys: list[int] = []
        checked_sizes: list[int] = []
        while pos < hi and taken < max_count:
            got = cq.entry_bytes(pos, min(hi - pos, max_count - taken))
            if got is None:
                break
            view, at, n = got
            fmt = _RUNS.get(n)
            if fmt is None:
                fmt = _RUNS[n] = struct.Struct(">" + "qiq" * n)
            values = fmt.unpack_from(view, at)
            if not taken and values[0] < cl_min:
                return None  # expired entries to skip: the general loop
            phys, sizes = values[0::3], values[1::3]
            if BLANK_UNIT_SIZE in sizes:  # a hole entry to skip: the general loop
                if not taken:
                    return None
                n = sizes.index(BLANK_UNIT_SIZE)
                if not n:
                    break
                phys, sizes = phys[:n], sizes[:n]
            cum = list(accumulate(sizes))
            k = bisect_right(cum, max_bytes - total)
            if k == 0 and not taken:
                k = 1  # the first message is always admitted
            i = 0
            while i < k:
                base = cum[i - 1] if i else 0
                first = phys[i]
                j = k  # the longest back-to-back run from i: spans equal sums of sizes
                if phys[j - 1] + sizes[j - 1] - first != cum[j - 1] - base:
                    lo, up = i + 1, k - 1  # run ends in [lo, up]
                    while lo < up:
                        mid = (lo + up + 1) // 2
                        if phys[mid - 1] + sizes[mid - 1] - first == cum[mid - 1] - base:
                            lo = mid
                        else:
                            up = mid - 1
                    j = lo
                view_ = read(first, cum[j - 1] - base)
                if check is not None and view_ is None:
                    return None
                if view_ is not None:
                    buffers.append(view_)
                    result.message_count += j - i
                    result.total_bytes += len(view_)
                i = j
            if check is not None:
                checked_phys.extend(phys[:k])
                checked_sizes.extend(sizes[:k])
            taken += k
            pos += k
            if k < n:
                break
            total += cum[k - 1]
        if check is not None and not check(read, checked_phys, checked_sizes):
            return None
        result.next_begin_offset = pos
        if result.message_count:
            result.status = GetStatus.FOUND
        return result

    @staticmethod
    def _add_run(read: Callable[[int, int], memoryview | None], buffers: list[memoryview],
                 begin: int, end: int, n: int) -> int:
        view = read(begin, end - begin)
        if view is None:
            return 0
        buffers.append(view)
        return n

    def _get_lmq(self, lmq: LmqStore, name: str, offset: int, max_count: int, max_bytes: int,
                 tag_codes: frozenset[int] | None) -> GetResult:
        """An LMQ read: the same statuses as a consume queue, entries from RocksDB."""
        lo, hi = lmq.min_offset(name), lmq.max_offset(name)
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        entries = lmq.entries(name, offset, min(max_count, hi - offset))
        if not entries:
            return result
        arr = np.array(entries, dtype=np.int64)
        keep = arr[:, 0] >= self.commitlog.min_offset
        if tag_codes is not None:
            keep &= np.isin(arr[:, 2], list(tag_codes))
        consumed = self._collect(result, arr[:, 0], arr[:, 1], keep, max_count, max_bytes)
        result.next_begin_offset = offset + consumed
        if result.message_count:
            result.status = GetStatus.FOUND
        return result

    def _get_batches(self, cq: BatchConsumeQueue, result: GetResult, offset: int,
                     max_count: int, max_bytes: int, tag_codes: frozenset[int] | None,
                     inner_tags: InnerTags | None = None) -> GetResult:
        """Whole batches from the one containing ``offset``: each entry counts as its batch
        size toward ``max_count`` and the first entry is always admitted (store.md §3.6)."""
        entries = cq.entries(offset, max(max_count, 64))
        if not len(entries):
            return result
        phys = entries["phys"].astype(np.int64)
        size = entries["size"].astype(np.int64)
        keep = (phys >= self.commitlog.min_offset) & (size != HOLE_SIZE)  # holes: skipped
        if tag_codes is not None:
            match = np.isin(entries["tags"].astype(np.int64), list(tag_codes))
            if inner_tags is not None and not match[keep].all():
                n = self._match_inner(phys, size, entries["batch"].astype(np.int64), keep,
                                      match, tag_codes, inner_tags, max_count, max_bytes)
                entries, phys, size, keep, match = (
                    entries[:n], phys[:n], size[:n], keep[:n], match[:n])
            keep &= match
        base = entries["base"].astype(np.int64)
        batch = entries["batch"].astype(np.int64)
        kept = np.flatnonzero(keep)
        msgs = np.cumsum(batch[kept])
        nbytes = np.cumsum(size[kept])
        fit = int(min(np.searchsorted(msgs, max_count, side="right"),
                      np.searchsorted(nbytes, max_bytes, side="right")))
        take = kept[: max(fit, 1 if len(kept) else 0)]
        if len(take):
            sound = self._sound(phys[take], size[take])
            # damaged batches are left out; the next offset still moves past them
            served = take if sound is None else take[sound]
            self._runs(result, phys[served], size[served])
            result.message_count = int(batch[served].sum())
            last = int(take[-1])
        else:
            last = len(entries) - 1
        if len(take) == len(kept):
            last = len(entries) - 1
        result.next_begin_offset = int(base[last] + batch[last])
        if result.message_count:
            result.status = GetStatus.FOUND
        return result

    def _match_inner(self, phys: Array, size: Array, batch: Array, alive: Array,
                     match: Array, tag_codes: frozenset[int], inner_tags: InnerTags,
                     max_count: int, max_bytes: int) -> int:
        """Mark in ``match`` the live inner batches whose outer tags code differs but one
        of whose messages has a code of ``tag_codes``, in order, until the kept entries
        fill ``max_count`` or ``max_bytes`` or the looked-at bytes pass their budget.
        Returns how many entries were decided (the rest are read again next time)."""
        msgs = nbytes = looked = 0
        n = len(phys)
        for i in range(n):
            if not alive[i]:
                continue
            if not match[i]:
                if looked > max_bytes + INNER_SCAN_BYTES and i:
                    return i
                at, length = int(phys[i]), int(size[i])
                rec = self.commitlog.read(at, length)
                if rec is None or len(rec) < 40:
                    continue
                (sys_flag,) = _I32.unpack_from(rec, 36)
                if not sys_flag & _INNER_BATCH:
                    continue
                looked += length
                codes = inner_tags(at, rec)
                if codes is not None and codes.isdisjoint(tag_codes):
                    continue
                match[i] = True
            msgs += int(batch[i])
            nbytes += int(size[i])
            if msgs >= max_count or nbytes >= max_bytes:
                return i + 1
        return n

    def _collect(self, result: GetResult, phys: Int64s, size: Int64s, keep: Array,
                 max_count: int, max_bytes: int, checked: bool = False) -> int:
        """Append views of kept records within the limits; returns entries consumed."""
        kept = np.flatnonzero(keep)
        idx = kept[: max_count - result.message_count]
        if len(idx):
            cum = np.cumsum(size[idx]) + result.total_bytes
            fit = int(np.searchsorted(cum, max_bytes, side="right"))
            if fit == 0 and result.message_count == 0:
                fit = 1  # the first message is always admitted
            idx = idx[:fit]
        if len(idx):
            self._views(result, phys[idx], size[idx], checked)
        if len(idx) == len(kept):
            return len(keep)
        return int(idx[-1]) + 1 if len(idx) else int(kept[0])

    def _sound(self, phys: Int64s, size: Int64s, checked: bool = False) -> list[bool] | None:
        """Which of these records a read may serve (``None``: all of them); ``checked``:
        an earlier read checked them."""
        if not len(phys) or not self.damaged.needs_check(
                int(phys[0]), int(phys[-1] + size[-1]), checked):
            return None
        return self.damaged.keep(self.commitlog.read, phys, size)

    def _views(self, result: GetResult, phys: Int64s, size: Int64s,
               checked: bool = False) -> None:
        sound = self._sound(phys, size, checked)
        if sound is not None:  # damaged records left out
            phys, size = phys[sound], size[sound]
        self._runs(result, phys, size)

    def _runs(self, result: GetResult, phys: Array, size: Array) -> None:
        """One view per run of back-to-back records."""
        n = len(phys)
        if not n:
            return
        breaks = np.flatnonzero(phys[1:] != phys[:-1] + size[:-1]) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [n]))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            begin = int(phys[s])
            length = int(phys[e - 1] + size[e - 1]) - begin
            view = self.commitlog.read(begin, length)
            if view is None:
                continue
            result.buffers.append(view)
            result.message_count += e - s
            result.total_bytes += length

    # ------------------------------------------------------------------ single lookups

    def read_record(self, phys_offset: int) -> memoryview | None:
        head = self.commitlog.read(phys_offset, 8)
        if head is None:
            return None
        (size,) = _I32.unpack_from(head, 0)
        if size <= 8:
            return None
        view = self.commitlog.read(phys_offset, size)
        if view is not None and self.damaged.needs_check(phys_offset, phys_offset + size) and (
                self.damaged.damaged(view, phys_offset, size)):
            return None
        return view

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        if self.queues.lmq is not None and topic.startswith(LMQ_PREFIX):
            return self.queues.lmq.store_time_at(topic, offset)
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return -1
        if isinstance(cq, BatchConsumeQueue):
            return cq.store_time_at(offset)
        entry = cq.entry(offset)
        if entry is None:
            return -1
        rec = self.commitlog.read(entry[0], entry[1])
        if rec is None:
            return -1
        (sys_flag,) = _I32.unpack_from(rec, OFF_SYSFLAG)
        (ts,) = _I64.unpack_from(rec, store_timestamp_offset(sys_flag))
        return int(ts)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First offset whose store time is >= ``timestamp`` (max offset if none)."""
        if self.queues.lmq is not None and topic.startswith(LMQ_PREFIX):
            return self.queues.lmq.offset_by_time(topic, timestamp)
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        if isinstance(cq, BatchConsumeQueue):
            return cq.offset_by_time(timestamp)
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self.store_time_at(topic, queue_id, mid)
            if ts < 0 or ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo
