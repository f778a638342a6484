"""The store time of every record a master appends, found by any offset inside it.

A replica reports the offset its log ends at, and that may fall inside a record: a
master's frames are cut at ``haTransferBatchSize`` bytes, not at record ends. The age of
the oldest record a replica lacks is the store time of the record holding that offset,
which cannot be read at the offset itself. The store's append hook hands over every run of
bytes written, in log order, and the records of one run share one store time (they are
written under one hold of the append lock, which takes one store time). So
:class:`AppendTimes` keeps, per run of records, where it ends and its first record's store
time, and answers for any offset the store time of the run holding it, by bisection.

A run that holds no record (a BLANK marker, a rolled segment's unused tail) is not kept:
an offset in it is answered with the next run's time, that of the oldest record after it.
At most ``limit`` runs are kept (a few MiB), the oldest dropped first, so a replica that
connects behind the master is answered too once it is within the last ``limit`` appends;
an offset before the runs kept has no answer here.
"""

from __future__ import annotations

import array
import bisect
import struct

from tidemq.formats.record import (
    MAGIC_V1,
    MAGIC_V2,
    OFF_MAGIC,
    OFF_STORE_TIMESTAMP,
    OFF_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    store_timestamp_offset,
)

__all__ = ["AppendTimes"]

#: TOTALSIZE, MAGICCODE, SYSFLAG and the STORETIMESTAMP of an IPv4 born host, read at once.
_HEAD = struct.Struct(f">ii{OFF_SYSFLAG - OFF_MAGIC - 4}xi"
                      f"{OFF_STORE_TIMESTAMP - OFF_SYSFLAG - 4}xq")
_I64 = struct.Struct(">q")
_MAGICS = frozenset((MAGIC_V1, MAGIC_V2))
_Runs = tuple[array.array, array.array, array.array]  # type: ignore[type-arg]


def _no_runs() -> _Runs:
    return array.array("q"), array.array("q"), array.array("q")


class AppendTimes:
    """Store times of the runs of records appended, by the offset each run ends at.

    :meth:`note` runs under the store's append lock, :meth:`time_at` on any thread,
    without a lock of their own: the runs are three arrays (starts, times, ends) read
    together as one tuple; a note appends to them (the end last, so an end found has its
    start and time), and drops runs by putting new arrays in their place."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self._runs = _no_runs()

    def __len__(self) -> int:
        return len(self._runs[2])

    def note(self, start: int, view: memoryview) -> None:
        """The append hook: ``view``, the run of bytes written at ``start``."""
        if len(view) < _HEAD.size:  # shorter than any record: a BLANK marker at most
            return
        size, magic, sys_flag, stored = _HEAD.unpack_from(view, 0)
        if magic not in _MAGICS:
            return  # a BLANK marker or a segment's unused tail: no record
        if sys_flag & SYSFLAG_BORNHOST_V6:
            at = store_timestamp_offset(sys_flag)
            if size < at + 8 or len(view) < at + 8:
                return
            (stored,) = _I64.unpack_from(view, at)
        elif size < _HEAD.size:
            return
        runs = starts, times, ends = self._runs
        if ends and (start < ends[-1] or len(ends) >= self.limit):
            if start < ends[-1]:  # the log was cut back: what follows is new
                runs = _no_runs()
            else:
                drop = max(1, self.limit // 2)
                runs = starts[drop:], times[drop:], ends[drop:]
            starts, times, ends = self._runs = runs
        starts.append(start)
        times.append(stored)
        ends.append(start + len(view))

    def time_at(self, offset: int) -> int | None:
        """The store time of the record holding ``offset`` (or of the first record after
        it, when no record holds it); ``None`` when no run kept tells."""
        starts, times, ends = self._runs
        i = bisect.bisect_right(ends, offset)
        if i >= len(ends) or (i == 0 and offset < starts[0]):
            return None
        stored: int = times[i]
        return stored
