"""How a logical queue's mapping may change, and how the brokers' copies of it converge.

Rule 1 -- what may follow what, per segment (nothing else is a legal change):

=========  ============  ================================================================
state      may become    by
=========  ============  ================================================================
PENDING    NORMAL        commit: its logical start is the sealed end of the segment before
NORMAL     READONLY      seal, by the segment's own broker, at its exact physical end; or
                         forced cut, by the admin tool while that broker is unreachable,
                         at the highest end the other brokers know it reached
READONLY   EXPIRED       retention removed its data
EXPIRED    --            (a reused physical queue is a new segment)
=========  ============  ================================================================

A state never goes back, a decided ``logical_start`` or ``physical_end`` never changes, and
a logical queue's segment list only grows at its tail. Two copies of one mapping therefore
always combine into the copy that knows every fact either knows (:func:`merge`): the
brokers and the admin tool combine whatever copies they see, in any order, and all end on
the same mapping. The one exception to "a decided end never changes" is a race between
a seal and a forced cut of the same segment (the broker sealed, then died before the
admin tool heard it): the forced end wins, because the next segment already starts there;
and a start that a copy derived from the losing seal (the old leader committed the next
segment by itself at its own end) follows the cut's end too.
A broker appends to a logical queue only while the NORMAL segment of its
combined copy is its own.

A migration of logical queue ``q`` to broker ``T`` is recognised from the mapping alone
(:func:`migration_state`); every step is idempotent, so a crashed admin, a crashed broker
or a lost push is repaired by running the step again:

==========  =====================================================  ======  ==========
state       the mapping shows                                      step    next
==========  =====================================================  ======  ==========
IDLE        q's NORMAL segment is elsewhere, nothing pending       plan    PLANNED
PLANNED     a PENDING segment on T after a NORMAL one              seal    SEALED
PLANNED     ... and the NORMAL segment's broker is unreachable     cut     SEALED
SEALED      a PENDING segment on T after a READONLY one            commit  COMMITTED
COMMITTED   q's NORMAL segment is on T, nothing pending            --      --
==========  =====================================================  ======  ==========

*plan* adds the PENDING segment (the admin tool); *seal* is done by the broker of the
NORMAL segment, the only one that knows its exact end; *cut* (:func:`forced_cut`, only
when the operator asks for it) seals that segment without its broker, at an end taken
from what the other brokers know; *commit* is decided by the sealed end
alone, so any broker may make it (:func:`complete`) -- a sealed queue never stays
unwritable for want of the admin tool.
"""

from __future__ import annotations

import dataclasses
import enum
import json

from tidemq.formats.logical_mapping import Segment, SegmentState, TopicMapping

__all__ = ["FOLLOWS", "MappingConflict", "MigrationState", "complete", "forced_cut", "merge",
           "migration_state", "plan_commit"]

#: Rule 1: the states a segment in a given state may become next.
FOLLOWS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.PENDING: frozenset({SegmentState.NORMAL}),
    SegmentState.NORMAL: frozenset({SegmentState.READONLY}),
    SegmentState.READONLY: frozenset({SegmentState.EXPIRED}),
    SegmentState.EXPIRED: frozenset(),
}

_RANK = {SegmentState.PENDING: 0, SegmentState.NORMAL: 1, SegmentState.READONLY: 2,
         SegmentState.EXPIRED: 3}


class MigrationState(enum.StrEnum):
    IDLE = "IDLE"
    PLANNED = "PLANNED"
    SEALED = "SEALED"
    COMMITTED = "COMMITTED"


class MappingConflict(ValueError):
    """Two copies of a mapping disagree on a fact that never changes."""

    def __init__(self, topic: str, lq: int, reason: str) -> None:
        super().__init__(f"{topic}/{lq}: {reason}")
        self.topic = topic
        self.lq = lq
        self.reason = reason


def _key(seg: Segment) -> tuple[str, int, int]:
    return seg.broker, seg.queue_id, seg.physical_start


def _decided(a: int, b: int, what: str, topic: str, lq: int) -> int:
    if a >= 0 and b >= 0 and a != b:
        raise MappingConflict(topic, lq, f"{what} is {a} in one copy and {b} in the other")
    return max(a, b)


def _merge_segment(a: Segment, b: Segment, topic: str, lq: int,
                   after_cut: int = -1) -> Segment:
    """One segment as both copies know it. ``after_cut``: the logical end of the merged
    segment before it when that end follows a forced cut (-1: it does not), which a
    decided logical start takes over (see :func:`_merge_queue`)."""
    state = a.state if _RANK[a.state] >= _RANK[b.state] else b.state
    if a.forced != b.forced and a.physical_end >= 0 and b.physical_end >= 0:
        end = a.physical_end if a.forced else b.physical_end  # the cut outranks a late seal
    else:
        end = _decided(a.physical_end, b.physical_end, "the physical end", topic, lq)
    if after_cut >= 0 and max(a.logical_start, b.logical_start) >= 0:
        start = after_cut
    else:
        start = _decided(a.logical_start, b.logical_start, "the logical start", topic, lq)
    return dataclasses.replace(a, state=state, forced=a.forced or b.forced, physical_end=end,
                               logical_start=start)


def _merge_queue(a: tuple[Segment, ...], b: tuple[Segment, ...], topic: str, lq: int,
                 fork: tuple[Segment, ...] | None = None) -> tuple[Segment, ...]:
    """``a`` and ``b`` segment by segment. Lists that fork raise, unless ``fork`` (one of
    the two) is given: the common part is merged and the rest taken from ``fork``.

    A segment's logical start is decided by the commit as the logical end of the sealed
    segment before it. When a forced cut outranks a seal of that segment, a start one
    copy derived from the seal's end gives way to the cut's end -- and so does every start
    derived from it further down the list -- so that a copy holding the old leader's own
    commit converges on the cut instead of contradicting it."""
    common = 0
    while common < min(len(a), len(b)) and _key(a[common]) == _key(b[common]):
        common += 1
    if common < min(len(a), len(b)):
        if fork is None:
            raise MappingConflict(topic, lq, "the segment lists fork: "
                                  f"{[_key(s) for s in a]} vs {[_key(s) for s in b]}")
        tail = fork[common:]
    else:
        tail = (a if len(a) > len(b) else b)[common:]
    pairs = [*zip(a[:common], b[:common], strict=True), *((s, s) for s in tail)]
    out: list[Segment] = []
    follows_cut = False  # the segment before derives its start from a forced cut
    for x, y in pairs:
        before = out[-1] if out else None
        if before is not None and (before.forced or follows_cut) and before.logical_end >= 0:
            seg = _merge_segment(x, y, topic, lq, after_cut=before.logical_end)
            follows_cut = seg.logical_start >= 0
        else:
            seg = _merge_segment(x, y, topic, lq)
            follows_cut = False
        out.append(seg)
    return tuple(out)


def _rank(m: TopicMapping) -> tuple[int, int, str]:
    return m.created, m.epoch, json.dumps(m.to_json(), sort_keys=True)


def merge(a: TopicMapping, b: TopicMapping, *, strict: bool = True) -> TopicMapping:
    """The copy that knows every fact ``a`` or ``b`` knows; its epoch is the higher one.

    Copies of different incarnations of the topic (deleted and created again) do not
    mix: the newer incarnation wins whole. Two copies that disagree on a fixed fact (only
    two admin tools racing each other produce that) raise :class:`MappingConflict` when
    ``strict``; otherwise the segments both lists share are merged (a seal is never
    lost) and the rest of that logical queue is taken from the copy ranked higher by
    (epoch, content), the same choice wherever it is made."""
    if a.topic != b.topic:
        raise ValueError(f"mappings of {a.topic!r} and {b.topic!r} do not merge")
    if a.created != b.created:
        return a if a.created > b.created else b
    high = a if _rank(a) >= _rank(b) else b
    queues: dict[int, tuple[Segment, ...]] = {}
    for lq in sorted(set(a.queues) | set(b.queues)):
        sa, sb = a.queues.get(lq, ()), b.queues.get(lq, ())
        try:
            queues[lq] = _merge_queue(sa, sb, a.topic, lq)
        except MappingConflict:
            if strict:
                raise
            queues[lq] = _merge_queue(sa, sb, a.topic, lq, fork=high.queues.get(lq, ()))
    return TopicMapping(a.topic, max(a.epoch, b.epoch), queues, a.created)


def plan_commit(mapping: TopicMapping, lq: int, epoch: int) -> TopicMapping:
    """After the seal: the pending segment becomes NORMAL, contiguous with the sealed
    one before it. ``mapping`` itself unless ``lq`` is SEALED."""
    segs = mapping.queues[lq]
    pending = mapping.pending(lq)
    if pending is None or mapping.leader(lq) is not None:
        return mapping
    sealed = [s for s in segs[:segs.index(pending)] if s.logical_end >= 0]
    start = sealed[-1].logical_end if sealed else 0
    committed = dataclasses.replace(pending, logical_start=start, state=SegmentState.NORMAL)
    return mapping.replace(lq, tuple(committed if s == pending else s for s in segs), epoch)


def forced_cut(mapping: TopicMapping, lq: int, end: int, epoch: int) -> TopicMapping:
    """``lq``'s NORMAL segment sealed without its broker: READONLY at physical ``end`` (at
    least its start), marked ``forced``. ``mapping`` itself when ``lq`` has no NORMAL
    segment."""
    segs = mapping.queues[lq]
    idx = next((i for i in range(len(segs) - 1, -1, -1)
                if segs[i].state is SegmentState.NORMAL), None)
    if idx is None:
        return mapping
    seg = segs[idx]
    cut = dataclasses.replace(seg, physical_end=max(end, seg.physical_start),
                              state=SegmentState.READONLY, forced=True)
    return mapping.replace(lq, (*segs[:idx], cut, *segs[idx + 1:]), epoch)


def complete(mapping: TopicMapping) -> TopicMapping:
    """Every SEALED migration committed (epoch + 1); ``mapping`` itself if there is none."""
    out = mapping
    for lq in sorted(mapping.queues):
        out = plan_commit(out, lq, mapping.epoch + 1)
    return out


def migration_state(mapping: TopicMapping, lq: int, target: str) -> MigrationState:
    """Where a migration of ``lq`` to ``target`` stands (see the table above)."""
    pending = mapping.pending(lq)
    if pending is not None and pending.broker == target:
        before = mapping.queues[lq][:mapping.queues[lq].index(pending)]
        if any(s.state is SegmentState.NORMAL for s in before):
            return MigrationState.PLANNED
        return MigrationState.SEALED
    leader = mapping.leader(lq)
    if pending is None and leader is not None and leader.broker == target:
        return MigrationState.COMMITTED
    return MigrationState.IDLE
