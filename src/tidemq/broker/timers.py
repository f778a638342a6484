"""Timer messages (TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC): an in-memory
min-heap over the timer topic's queue, rebuilt from that queue on start.

The timer topic's queue (``rmq_sys_wheel_timer``, queue 0) holds the messages in arrival
order; each carries its absolute due time in ``TIMER_OUT_MS``. The heap orders the ones not
yet delivered by ``(due, queue offset)``. Nothing but the commit log is the source of
truth; the heap is derived, and three numbers make the rebuild exact:

====================  =====================================================================
``enqueue_offset``    E: every entry below E has been read into the heap (or delivered)
``frontier_ms``       F: every entry below E whose due time is <= F has been delivered
``scan_offset``       S: no undelivered entry lies below S (where a rebuild starts reading)
====================  =====================================================================

A delivery pass pops *every* entry due at ``now`` and delivers it; only once all of them
are stored does F become ``now`` (:meth:`TimerHeap.drained`). So after a pass, no entry
below E with ``due <= now`` is left in the heap, which is what F claims. A rebuild reads
from S and keeps an entry when ``offset >= E`` or ``due > F``
(:meth:`TimerHeap.offer`). If a crash comes after a delivery but before the checkpoint
that covers it is written, the older checkpoint re-admits that entry: delivery is
at-least-once, and exactly-once across a clean restart.

An entry popped but not delivered now -- its topic's deletion is under way -- is
held (:meth:`TimerHeap.hold`): out of the heap, so the passes go on without it, yet still
pending, so neither S nor F passes it, until :meth:`TimerHeap.release_held` puts it back.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import NamedTuple

__all__ = ["TimerCheckpoint", "TimerEntry", "TimerHeap"]


class TimerEntry(NamedTuple):
    due_ms: int
    offset: int  # queue offset in the timer topic
    phys: int  # commit-log offset of the record


@dataclasses.dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    enqueue_offset: int = 0
    frontier_ms: int = 0
    scan_offset: int = 0

    def to_json(self) -> dict[str, int]:
        return {"enqueueOffset": self.enqueue_offset, "frontierMs": self.frontier_ms,
                "scanOffset": self.scan_offset}

    @classmethod
    def from_json(cls, raw: object) -> TimerCheckpoint:
        if not isinstance(raw, dict):
            return cls()
        values = [raw.get(k, 0) for k in ("enqueueOffset", "frontierMs", "scanOffset")]
        if not all(isinstance(v, int) and v >= 0 for v in values):
            return cls()
        return cls(*values)


class TimerHeap:
    def __init__(self, checkpoint: TimerCheckpoint = TimerCheckpoint()) -> None:
        self._heap: list[TimerEntry] = []
        self._offsets: list[int] = []  # min-heap of pending offsets, lazily pruned
        self._pending: set[int] = set()
        self._held: list[TimerEntry] = []
        self.enqueue_offset = checkpoint.enqueue_offset
        self.frontier_ms = checkpoint.frontier_ms
        #: Where reading the timer queue continues (S on start, then E).
        self.read_offset = checkpoint.scan_offset

    def __len__(self) -> int:
        return len(self._heap)

    def offer(self, entry: TimerEntry) -> bool:
        """Take an entry read from the queue; ``False`` if a checkpoint says it was
        already delivered (a rebuild re-reading below E)."""
        self.read_offset = max(self.read_offset, entry.offset + 1)
        if entry.offset < self.enqueue_offset and entry.due_ms <= self.frontier_ms:
            return False
        self._push(entry)
        self.enqueue_offset = max(self.enqueue_offset, entry.offset + 1)
        return True

    def skip_to(self, offset: int) -> None:
        """Entries below ``offset`` are gone from the queue (retention): stop reading them."""
        self.read_offset = max(self.read_offset, offset)
        self.enqueue_offset = max(self.enqueue_offset, offset)

    def _push(self, entry: TimerEntry) -> None:
        heapq.heappush(self._heap, entry)
        heapq.heappush(self._offsets, entry.offset)
        self._pending.add(entry.offset)

    def next_due(self) -> int | None:
        return self._heap[0].due_ms if self._heap else None

    def pop_due(self, now_ms: int) -> list[TimerEntry]:
        """Every entry due at ``now_ms``, earliest first. Deliver them all, then call
        :meth:`drained`; put back what could not be delivered with :meth:`restore`."""
        out = []
        heap = self._heap
        while heap and heap[0].due_ms <= now_ms:
            entry = heapq.heappop(heap)
            self._pending.discard(entry.offset)
            out.append(entry)
        return out

    def restore(self, entries: list[TimerEntry]) -> None:
        for entry in entries:
            self._push(entry)

    def hold(self, entry: TimerEntry) -> None:
        """A popped entry that waits (its topic is being deleted): out of the heap, still
        pending, until :meth:`release_held`."""
        self._held.append(entry)
        heapq.heappush(self._offsets, entry.offset)
        self._pending.add(entry.offset)

    def release_held(self) -> None:
        """Put the held entries back in the heap (their wait is over)."""
        held, self._held = self._held, []
        for entry in held:
            heapq.heappush(self._heap, entry)

    @property
    def held(self) -> int:
        return len(self._held)

    def drained(self, now_ms: int) -> None:
        """Everything due at ``now_ms`` has been delivered, but the held entries: the
        frontier stops below the earliest of them."""
        held = self._held
        self.frontier_ms = (now_ms if not held
                            else min(now_ms, min(e.due_ms for e in held) - 1))

    def checkpoint(self) -> TimerCheckpoint:
        offsets = self._offsets
        while offsets and offsets[0] not in self._pending:
            heapq.heappop(offsets)
        scan = offsets[0] if offsets else self.read_offset
        return TimerCheckpoint(self.enqueue_offset, self.frontier_ms, min(scan, self.read_offset))
