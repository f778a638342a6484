"""The timer heap's checkpoint (broker/timers.py), as a property: rebuilding from the
latest checkpoint re-admits exactly the timer messages not yet delivered, and rebuilding
from any older one (a crash before the latest was written) loses none of them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.timers import TimerCheckpoint, TimerEntry, TimerHeap

#: A run: batches of arriving due times, each followed by a delivery pass after a clock step.
runs = st.lists(st.tuples(st.lists(st.integers(0, 300), max_size=6), st.integers(0, 60)),
                min_size=1, max_size=12)


def test_timer_heap_rebuild_keeps_only_undelivered_entries() -> None:
    heap = TimerHeap()
    for due, offset in ((500, 0), (100, 1), (300, 2), (900, 3)):
        assert heap.offer(TimerEntry(due, offset, offset * 100))
    assert [e.offset for e in heap.pop_due(300)] == [1, 2]
    heap.drained(300)
    cp = heap.checkpoint()
    assert cp == TimerCheckpoint(enqueue_offset=4, frontier_ms=300, scan_offset=0)
    # A rebuild re-reads from the scan offset: 1 and 2 (due <= 300) were delivered.
    again = TimerHeap(cp)
    kept = [again.offer(TimerEntry(due, off, 0)) for due, off in
            ((500, 0), (100, 1), (300, 2), (900, 3), (50, 4))]
    assert kept == [True, False, False, True, True]  # offset 4 was never read: kept
    assert [e.offset for e in again.pop_due(10_000)] == [4, 0, 3]
    again.drained(10_000)
    assert again.checkpoint() == TimerCheckpoint(5, 10_000, 5)
    assert TimerCheckpoint.from_json(cp.to_json()) == cp
    assert TimerCheckpoint.from_json({"enqueueOffset": "x"}) == TimerCheckpoint()


def rebuild(checkpoint: TimerCheckpoint, dues: list[int]) -> set[int]:
    """The offsets a fresh heap keeps when it re-reads the queue from the scan offset."""
    heap = TimerHeap(checkpoint)
    for offset in range(checkpoint.scan_offset, len(dues)):
        heap.offer(TimerEntry(dues[offset], offset, 0))
    return {e.offset for e in heap.pop_due(10**9)}


@settings(deadline=None, max_examples=200)
@given(run=runs)
def test_rebuild_is_exact_from_the_latest_checkpoint_and_lossless_from_older(
        run: list[tuple[list[int], int]]) -> None:
    heap = TimerHeap()
    dues: list[int] = []
    delivered: set[int] = set()
    checkpoints: list[tuple[TimerCheckpoint, int, set[int]]] = []
    now = 0
    for arriving, step in run:
        for due in arriving:
            heap.offer(TimerEntry(due, len(dues), 0))
            dues.append(due)
        now += step
        popped = heap.pop_due(now)
        assert all(e.due_ms <= now for e in popped)
        assert [e.due_ms for e in popped] == sorted(e.due_ms for e in popped)
        delivered |= {e.offset for e in popped}
        heap.drained(now)
        checkpoints.append((heap.checkpoint(), len(dues), set(delivered)))

    pending = set(range(len(dues))) - delivered
    latest, _, _ = checkpoints[-1]
    assert all(offset >= latest.scan_offset for offset in pending)
    assert rebuild(latest, dues) == pending
    for older, seen, done in checkpoints:
        # Messages that arrived after an older checkpoint are read again too.
        kept = rebuild(older, dues)
        assert pending <= kept
        assert kept <= pending | (delivered - done) | set(range(seen, len(dues)))


def test_a_held_entry_stays_pending_until_released() -> None:
    heap = TimerHeap()
    for due, offset in ((100, 0), (200, 1), (300, 2)):
        heap.offer(TimerEntry(due, offset, 0))
    first, _delivered = heap.pop_due(250)
    heap.hold(first)  # its topic is being deleted; the second is delivered
    heap.drained(250)
    assert (heap.held, heap.next_due()) == (1, 300)  # the passes go on without it
    assert heap.checkpoint() == TimerCheckpoint(enqueue_offset=3, frontier_ms=99,
                                                scan_offset=0)
    heap.release_held()
    assert heap.pop_due(250) == [first]
    heap.drained(250)
    assert heap.checkpoint() == TimerCheckpoint(3, 250, 2)


#: As ``runs``, with whether a deletion begins or ends before each pass.
held_runs = st.lists(st.tuples(st.lists(st.integers(0, 300), max_size=6), st.integers(0, 60),
                               st.booleans()), min_size=1, max_size=12)


@settings(deadline=None, max_examples=200)
@given(run=held_runs)
def test_a_rebuild_from_any_checkpoint_loses_no_held_entry(
        run: list[tuple[list[int], int, bool]]) -> None:
    """While a deletion lasts, the entries of its topic (odd offsets here) are held, not
    delivered; whatever checkpoint a rebuild starts from, none of them is lost."""
    heap = TimerHeap()
    dues: list[int] = []
    delivered: set[int] = set()
    checkpoints: list[TimerCheckpoint] = []
    now = 0
    deleting = False
    for arriving, step, toggles in run:
        for due in arriving:
            heap.offer(TimerEntry(due, len(dues), 0))
            dues.append(due)
        now += step
        if toggles:
            deleting = not deleting
            if not deleting:
                heap.release_held()
        for entry in heap.pop_due(now):
            if deleting and entry.offset % 2:
                heap.hold(entry)
            else:
                delivered.add(entry.offset)
        heap.drained(now)
        checkpoints.append(heap.checkpoint())
    pending = set(range(len(dues))) - delivered
    for checkpoint in checkpoints:
        assert pending <= rebuild(checkpoint, dues)
