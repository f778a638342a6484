"""A clean restart keeps every offset, record and timestamp."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.store.message_store import MessageStore

from .conftest import SEGMENT, FakeClock, OpenStore, msg, read_queue

QUEUES = [("T", 0), ("T", 1), ("Other", 3)]


def snapshot(store: MessageStore) -> dict[tuple[str, int], object]:
    state: dict[tuple[str, int], object] = {}
    for topic, qid in QUEUES:
        recs = read_queue(store, topic, qid)
        state[(topic, qid)] = (
            store.min_offset(topic, qid), store.max_offset(topic, qid),
            store.next_queue_offset(topic, qid),
            [(r.queue_offset, r.physical_offset, r.store_timestamp, bytes(r.body), r.properties)
             for r in recs],
        )
    return state


def test_clean_restart_keeps_every_offset(open_store: OpenStore) -> None:
    clock = FakeClock(7000)
    store = open_store(clock=clock)
    n = 0
    for round_ in range(12):
        for topic, qid in QUEUES:
            clock.now += 1
            if round_ % 3 == 0:
                store.put_batch(topic, qid, [msg(b"b%d" % (n + i) * 20, tags="A")
                                             for i in range(4)])
                n += 4
            else:
                store.put(topic, qid, msg(b"s%d" % n * 30, KEYS=f"k{n}"))
                n += 1
    before = snapshot(store)
    max_phys = store.commitlog.max_offset
    assert max_phys > 3 * SEGMENT  # several segments
    store.shutdown()

    clock.now = 1  # and the clock went back meanwhile
    reopened = open_store(clock=clock)
    report = reopened.recovery_report
    assert report is not None and report.clean and report.bytes_dropped == 0
    assert report.end_offset == max_phys
    assert snapshot(reopened) == before
    assert reopened.commitlog.max_offset == max_phys
    # Appends continue where they stopped: queue offsets, physical offsets, timestamps.
    res = reopened.put("T", 1, msg(b"next"))
    assert res.queue_offset == before[("T", 1)][1]  # type: ignore[index]
    assert res.phys_offsets[0] in (max_phys, (max_phys // SEGMENT + 1) * SEGMENT)
    assert res.store_timestamp == 7000 + 36
    new = reopened.put("New", 0, msg(b"fresh"))
    assert new.queue_offset == 0


@pytest.mark.parametrize("batch", [False, True], ids=["cq", "batch-cq"])
@pytest.mark.parametrize("damage", ["emptied", "zeroed"])
def test_a_first_queue_file_that_lost_its_entries_is_rebuilt_after_a_clean_stop(
        open_store: OpenStore, store_root: Path, batch: bool, damage: str) -> None:
    """A clean stop, then a disk that empties or zeroes the only file of one queue while
    another queue was written after it: the start rebuilds the queue from the commit
    log (recovery alone would not look before the other queue's end), never serving it
    as a queue that has nothing."""
    clock = FakeClock(7000)
    store = open_store(clock=clock)
    if batch:
        store.set_batch_topic("T")
    for i in range(6):
        clock.now += 1
        store.put("T", 0, msg(b"t%d" % i, tags="A"))
    for i in range(3):
        store.put("Other", 3, msg(b"o%d" % i))
    before = snapshot(store)
    store.shutdown()
    [path] = (store_root / ("batchconsumequeue" if batch else "consumequeue") / "T" / "0"
              ).iterdir()
    path.write_bytes(b"" if damage == "emptied" else bytes(path.stat().st_size))
    reopened = open_store(clock=clock)
    if batch:
        reopened.set_batch_topic("T")
    assert snapshot(reopened) == before
