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
import threading

from tidemq.formats.record import MAGIC_V1, MAGIC_V2, OFF_SYSFLAG, store_timestamp_offset

__all__ = ["AppendTimes"]

_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAGICS = (MAGIC_V1, MAGIC_V2)


class AppendTimes:
    """Store times of the runs of records appended, by the offset each run ends at."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self._starts = array.array("q")
        self._ends = array.array("q")
        self._times = array.array("q")
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ends)

    def note(self, start: int, view: memoryview) -> None:
        """The append hook: ``view``, the run of bytes written at ``start``."""
        if len(view) < OFF_SYSFLAG + 4:
            return
        size, magic = _HEAD.unpack_from(view, 0)
        if magic not in _MAGICS:
            return  # a BLANK marker or a segment's unused tail: no record
        at = store_timestamp_offset(_I32.unpack_from(view, OFF_SYSFLAG)[0])
        if size < at + 8 or len(view) < at + 8:
            return
        (stored,) = _I64.unpack_from(view, at)
        with self._lock:
            ends = self._ends
            if ends and start < ends[-1]:  # the log was cut back: what follows is new
                del self._starts[:], ends[:], self._times[:]
            if len(ends) >= self.limit:
                drop = max(1, self.limit // 2)
                del self._starts[:drop], ends[:drop], self._times[:drop]
            self._starts.append(start)
            ends.append(start + len(view))
            self._times.append(stored)

    def time_at(self, offset: int) -> int | None:
        """The store time of the record holding ``offset`` (or of the first record after
        it, when no record holds it); ``None`` when no run kept tells."""
        with self._lock:
            i = bisect.bisect_right(self._ends, offset)
            if i == len(self._ends) or (i == 0 and offset < self._starts[0]):
                return None
            return self._times[i]
