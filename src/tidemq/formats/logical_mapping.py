"""Logical queues (RIP-21): a topic's N queues decoupled from brokers.

A logical queue (LQ) is an ordered list of segments. Each segment maps a contiguous range
of logical offsets onto one physical queue (PQ) ``(broker, queueId)``::

    logical = logical_start + (physical - physical_start)

======  ==============================================================================
state   meaning
======  ==============================================================================
NORMAL  the open segment: readable and writable; exactly one per LQ (the leader)
PENDING the migration target between "planned" and "committed": not yet readable, and
        writes are refused with a retriable "moved" until the old segment is sealed
READONLY sealed with an exact ``physical_end``: still served for reads
EXPIRED sealed and its data removed by retention: neither readable nor writable
======  ==============================================================================

A segment sealed by a *forced cut* (its broker was unreachable, so the admin tool sealed
it at the end the other brokers knew) says so with ``forced``; a forced end outranks an
end its own broker may have written at the same time
(:mod:`tidemq.formats.logical_migration`).

Rule 1: a broker appends to a logical queue only while it holds that LQ's NORMAL segment
in the mapping of the highest epoch it has seen; everything else answers "moved".

The mapping of a topic (:class:`TopicMapping`) carries an ``epoch`` compared as an integer;
and ``created``, the epoch the topic was created with (it tells a copy of a deleted and
re-created topic from the current one). Every broker taking part stores the whole
mapping, so any of them can translate for any LQ and forward to the segment's broker; how
copies change and converge is :mod:`tidemq.formats.logical_migration`. JSON shape:
``{"topic", "epoch", "created", "queues": {"0": [{"broker", "queueId", "logicalStart",
"physicalStart", "physicalEnd", "state", "forced"}]}}`` (``created`` absent = 0,
``forced`` absent = false; it is written only when true).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from tidemq.types import LOGICAL_BROKER

__all__ = ["LOGICAL_BROKER", "Segment", "SegmentState", "TopicMapping"]



class SegmentState(enum.StrEnum):
    NORMAL = "NORMAL"
    PENDING = "PENDING"
    READONLY = "READONLY"
    EXPIRED = "EXPIRED"


@dataclasses.dataclass(frozen=True)
class Segment:
    broker: str
    queue_id: int
    logical_start: int  # -1 while PENDING
    physical_start: int = 0
    physical_end: int = -1  # exclusive; -1 while open
    state: SegmentState = SegmentState.NORMAL
    forced: bool = False  # sealed by a forced cut, not by its own broker

    def to_logical(self, physical: int) -> int:
        return self.logical_start + (physical - self.physical_start)

    def to_physical(self, logical: int) -> int:
        return self.physical_start + (logical - self.logical_start)

    @property
    def logical_end(self) -> int:
        """Exclusive logical end of a sealed segment (-1 while open)."""
        if self.physical_end < 0:
            return -1
        return self.logical_start + (self.physical_end - self.physical_start)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "broker": self.broker, "queueId": self.queue_id,
            "logicalStart": self.logical_start, "physicalStart": self.physical_start,
            "physicalEnd": self.physical_end, "state": self.state.value}
        if self.forced:
            out["forced"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Segment:
        return cls(str(d["broker"]), int(d["queueId"]), int(d["logicalStart"]),
                   int(d.get("physicalStart", 0)), int(d.get("physicalEnd", -1)),
                   SegmentState(d.get("state", "NORMAL")), d.get("forced") is True)


@dataclasses.dataclass(frozen=True)
class TopicMapping:
    topic: str
    epoch: int
    queues: dict[int, tuple[Segment, ...]]
    created: int = 0

    @property
    def total(self) -> int:
        return len(self.queues)

    def leader(self, lq: int) -> Segment | None:
        """The NORMAL segment of ``lq`` (None during a migration's seal window)."""
        for seg in reversed(self.queues.get(lq, ())):
            if seg.state is SegmentState.NORMAL:
                return seg
        return None

    def pending(self, lq: int) -> Segment | None:
        for seg in reversed(self.queues.get(lq, ())):
            if seg.state is SegmentState.PENDING:
                return seg
        return None

    def segment_for(self, lq: int, logical: int) -> Segment | None:
        """The readable segment holding ``logical`` (or the oldest readable one if the
        offset is below every segment)."""
        readable = [s for s in self.queues.get(lq, ())
                    if s.state in (SegmentState.NORMAL, SegmentState.READONLY)
                    and s.logical_start >= 0]
        for seg in reversed(readable):
            if seg.logical_start <= logical:
                return seg
        return readable[0] if readable else None

    def next_segment(self, lq: int, seg: Segment) -> Segment | None:
        segs = self.queues.get(lq, ())
        for i, s in enumerate(segs):
            if s == seg and i + 1 < len(segs) and segs[i + 1].logical_start >= 0:
                return segs[i + 1]
        return None

    def brokers(self) -> set[str]:
        return {s.broker for segs in self.queues.values() for s in segs}

    def physical_queues(self, broker: str) -> set[int]:
        return {s.queue_id for segs in self.queues.values() for s in segs if s.broker == broker}

    def replace(self, lq: int, segments: tuple[Segment, ...], epoch: int) -> TopicMapping:
        queues = dict(self.queues)
        queues[lq] = segments
        return TopicMapping(self.topic, epoch, queues, self.created)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "epoch": self.epoch, "created": self.created,
                "queues": {str(k): [s.to_json() for s in v]
                           for k, v in sorted(self.queues.items())}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicMapping:
        return cls(str(d["topic"]), int(d["epoch"]),
                   {int(k): tuple(Segment.from_json(s) for s in v)
                    for k, v in d["queues"].items()}, int(d.get("created", 0)))

    def table(self) -> list[tuple[str, str, str, str]]:
        """Rows ``brokerName | MessageQueue | LogicalQueue(range) | QueueStatus`` (RIP-21)."""
        rows = []
        for lq, segs in sorted(self.queues.items()):
            for s in segs:
                end = s.logical_end
                rng = (f"{s.logical_start}-{end - 1 if end > 0 else ''}" if s.logical_start >= 0
                       else "pending")
                if end == s.logical_start and end >= 0:
                    rng = f"{s.logical_start}- (empty)"
                rows.append((s.broker, f"MessageQueue({self.topic}, {s.broker}, {s.queue_id})",
                             f"LogicalQueue({lq}, {rng})", s.state.value))
        return rows


