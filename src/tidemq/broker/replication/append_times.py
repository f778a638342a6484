"""The store time of every record a master appends, found by any offset inside it.

A replica reports the offset its log ends at, and that may fall inside a record: a
master's frames are cut at ``haTransferBatchSize`` bytes, not at record ends. The age of
the oldest record a replica lacks is the store time of the record holding that offset,
which cannot be read at the offset itself. The store's append hook hands over every run of
bytes written, in log order, and the records of one run share one store time (they are
written under one hold of the append lock, which takes one store time). So
:class:`AppendTimes` keeps where each run starts and ends, and answers for any offset the
store time of the run holding it, found by bisection and read from the run's first record
(``read``: the store time of the record starting at an offset, ``None`` where none
does). The hook runs on every append; the reading waits until a replica's lag is asked.

A run that holds no record (a BLANK marker, a rolled segment's unused tail) has no time
of its own: an offset in it is answered with the next run's time, that of the oldest
record after it. At most ``limit`` runs are kept (a few MiB), the oldest dropped first, so
a replica that connects behind the master is answered too once it is within the last
``limit`` appends; an offset before the runs kept has no answer here.
"""

from __future__ import annotations

import array
import bisect
from collections.abc import Callable

__all__ = ["AppendTimes"]

_Runs = tuple[array.array, array.array]  # type: ignore[type-arg]


def _no_runs() -> _Runs:
    return array.array("q"), array.array("q")


class AppendTimes:
    """The runs appended, by the offset each run ends at; a run's store time is read
    from its first record when asked.

    :meth:`note` runs under the store's append lock, :meth:`time_at` on any thread,
    without a lock of their own: the runs are two arrays (starts, ends) read together as
    one tuple; a note appends to them (the end last, so an end found has its start), and
    drops runs by putting new arrays in their place."""

    def __init__(self, read: Callable[[int], int | None], limit: int = 1 << 16) -> None:
        self.limit = limit
        self._read = read
        self._runs = _no_runs()

    def __len__(self) -> int:
        return len(self._runs[1])

    def note(self, start: int, view: memoryview) -> None:
        """The append hook: ``view``, the run of bytes written at ``start``."""
        starts, ends = self._runs
        if ends and (start < ends[-1] or len(ends) >= self.limit):
            if start < ends[-1]:  # the log was cut back: what follows is new
                self._runs = starts, ends = _no_runs()
            else:
                drop = max(1, self.limit // 2)
                self._runs = starts, ends = starts[drop:], ends[drop:]
        starts.append(start)
        ends.append(start + len(view))

    def time_at(self, offset: int) -> int | None:
        """The store time of the record holding ``offset`` (or of the first record after
        it, when no record holds it); ``None`` when no run kept tells."""
        starts, ends = self._runs
        i = bisect.bisect_right(ends, offset)
        if i == 0 and ends and offset < starts[0]:
            return None
        for j in range(i, min(i + 2, len(ends))):  # a run without a record: the next's
            stored = self._read(starts[j])
            if stored is not None:
                return stored
        return None
