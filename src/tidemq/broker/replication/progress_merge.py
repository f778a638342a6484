"""How a returning master merges the progress one of its replicas recorded while it was
down: consumer offsets, delay-level delivery offsets and the timer checkpoint. No I/O.

Each rule only moves progress forward, and never claims a delivery nobody made:

* **Consumer offsets** (``topic@group`` -> queue id -> next offset): per (group, topic,
  queue) the larger offset wins. A consumer that committed on the replica while the
  master was down keeps its position; an offset the master holds higher stays.
* **Delay levels** (level -> next queue offset of ``SCHEDULE_TOPIC_XXXX``): per level
  the larger offset wins. Every message below either offset was delivered, by the
  master before it died or by the replica acting for it.
* **Timer checkpoint**: the one with the later frontier wins *whole*. A checkpoint says
  "every timer entry below E due at or before F was delivered"; mixing the fields of two
  (the larger E of one with the later F of the other) would claim deliveries nobody
  made. The replica acting for the master started from a copy of the master's
  checkpoint and only moved its frontier on, so its later frontier covers what the
  master had delivered; entries the replica never read (the master's log went further)
  lie above its E and are delivered again: at least once, never lost.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.broker.timers import TimerCheckpoint

__all__ = ["newer_timer", "raised_levels", "raised_offsets"]

OffsetTable = Mapping[str, Mapping[int, int]]


def raised_offsets(mine: OffsetTable, theirs: OffsetTable) -> dict[tuple[str, int], int]:
    """The consumer offsets of ``theirs`` that ``mine`` lacks or holds lower, as
    ``{(topic@group, queue id): offset}``."""
    out: dict[tuple[str, int], int] = {}
    for key, queues in theirs.items():
        have = mine.get(key, {})
        for queue_id, offset in queues.items():
            if offset > have.get(queue_id, -1):
                out[key, queue_id] = offset
    return out


def raised_levels(mine: Mapping[int, int], theirs: Mapping[int, int]) -> dict[int, int]:
    """The delay levels whose offset ``theirs`` holds higher than ``mine``."""
    return {level: offset for level, offset in theirs.items()
            if offset > mine.get(level, 0)}


def newer_timer(mine: TimerCheckpoint, theirs: TimerCheckpoint) -> TimerCheckpoint | None:
    """``theirs`` when its frontier is later than ``mine``'s, else ``None`` (keep mine)."""
    return theirs if theirs.frontier_ms > mine.frontier_ms else None
