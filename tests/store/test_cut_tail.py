"""A running replica cuts its commit log where it diverged from its new master, and
copies on from there: the result is the master's log and queues, also after a restart;
a cut that fails half-way is made by the next start."""

from __future__ import annotations

import functools
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import StoreReadOnly
from tidemq.formats.properties import encode_properties
from tidemq.store import kept_cuts, truncation
from tidemq.store.append import MessageInput
from tidemq.store.checkpoint import Checkpoint
from tidemq.store.epoch_file import EpochEntry
from tidemq.store.log_scan import End, walk
from tidemq.store.message_store import MessageStore

from .conftest import FakeClock, OpenStore, small_config
from .test_replica_log import LMQ, SEGMENT, fill, snapshot


@functools.cache
def master() -> tuple[bytes, tuple[int, ...], dict[str, object]]:
    """The master's log, where each appended run of it starts, and its queues."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(small_config(Path(tmp), mapped_file_size_commit_log=SEGMENT,
                                          **LMQ), clock=FakeClock(1_700_000_000_000))
        store.start()
        try:
            runs: list[tuple[int, bytes]] = []
            store.add_append_hook(lambda start, view: runs.append((start, bytes(view))))
            fill(store)
            return (b"".join(r for _, r in runs), tuple(s for s, _ in runs),
                    snapshot(store))
        finally:
            store.shutdown()


def tail_records(store: MessageStore, point: int) -> list[tuple[int, bytes]]:
    """Each whole record of the log from ``point``: its offset and its bytes."""
    out = []
    for step in walk(store.commitlog.segments, point):
        if isinstance(step, End):
            break
        assert isinstance(step, tuple), step
        offset, rec = step
        seg = store.commitlog.segment_for(offset)
        assert seg is not None
        out.append((offset, bytes(seg.mm[offset - seg.base : offset - seg.base
                                         + rec.total_size])))
    return out


def kept_records(store: MessageStore) -> list[tuple[int, bytes]]:
    """Each record of every kept cut of the store: where the log held it, its bytes."""
    out = []
    for cut in kept_cuts.kept_cuts(store.layout.truncated_dir):
        data = cut.path.read_bytes()
        pos = 0
        for rec in kept_cuts.read_kept(cut.path):
            out.append((rec.physical_offset, data[pos : pos + rec.total_size]))
            pos += rec.total_size
    return out


def diverge(replica: MessageStore, wire: bytes, point: int, ghosts: int) -> None:
    """The replica holds the master's log up to ``point``, then a tail of its own (an old
    master that wrote after the others stopped copying), in epoch 2 from ``point``."""
    replica.set_batch_topic("Bcq")
    replica.epochs.replace([EpochEntry(1, 0)])
    if point:
        replica.append_replicated(0, wire[:point])
    replica.replica = False
    replica.epochs.append(2, point)
    for i in range(ghosts):  # across segment rolls, into queues, LMQs and the index
        props = encode_properties({"KEYS": "k30", "UNIQ_KEY": f"G{i}"})
        replica.put("T", i % 3, MessageInput(b"ghost%d" % i * 40, props, keys=("k30",)))
        replica.put_multi_dispatch("T", 2, MessageInput(
            b"lmq-ghost", b"INNER_MULTI_DISPATCH\x01%LMQ%x\x02"), ["%LMQ%x"])
    replica.replica = True
    assert replica.wait_dispatched()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(at=st.integers(0, 10**6), ghosts=st.integers(1, 120))
def test_a_cut_running_replica_copies_on_to_the_masters_log(at: int, ghosts: int) -> None:
    wire, starts, expected = master()
    point = starts[at % len(starts)]
    with tempfile.TemporaryDirectory() as tmp:
        config = small_config(Path(tmp), mapped_file_size_commit_log=SEGMENT, **LMQ)
        clock = FakeClock(1_700_000_000_000)
        replica = MessageStore(config, clock=clock)
        replica.start()
        try:
            diverge(replica, wire, point, ghosts)
            end = replica.commitlog.max_offset
            tail = tail_records(replica, point)
            assert replica.cut_tail(point) == end - point
            # the cut records are kept, each whole and unchanged, in one file
            assert [(c.path.name, c.epoch, c.from_offset)
                    for c in kept_cuts.kept_cuts(replica.layout.truncated_dir)] == [
                        (f"2-{point}.log", 2, point)]
            assert kept_records(replica) == tail
            assert len(tail) == 2 * ghosts
            assert replica.commitlog.max_offset == point
            # epochs that began at or after the cut go, as a cut at start drops them
            assert replica.epochs.entries == ([EpochEntry(1, 0)] if point else [])
            assert truncation.pending(replica.layout) is None
            assert replica.append_replicated(point, wire[point:]) == len(wire)
            assert snapshot(replica) == expected
        finally:
            replica.shutdown()
        again = MessageStore(config, clock=clock)
        again.start()
        try:
            again.set_batch_topic("Bcq")
            assert again.recovery_report is not None
            assert again.recovery_report.bytes_dropped == 0
            assert snapshot(again) == expected
        finally:
            again.shutdown()


def test_only_a_replica_is_cut_while_running(open_store: OpenStore) -> None:
    store = open_store()
    store.put("T", 0, MessageInput(b"x"))
    with pytest.raises(ValueError, match="replica"):
        store.cut_tail(0)
    store.replica = True
    assert store.cut_tail(store.commitlog.max_offset) == 0  # nothing beyond: nothing cut


def test_a_cut_that_fails_half_way_is_made_at_the_next_start(
        open_store: OpenStore, store_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wire, starts, expected = master()
    point = starts[len(starts) // 2]
    clock = FakeClock(1_700_000_000_000)
    replica = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    diverge(replica, wire, point, 30)
    with monkeypatch.context() as m:  # the disk fails as the commit log is cut
        def fail(offset: int) -> None:
            raise OSError(5, "Input/output error")
        m.setattr(replica.commitlog, "truncate", fail)
        with pytest.raises(OSError):
            replica.cut_tail(point)
    assert truncation.pending(replica.layout) == point
    replica.shutdown()
    again = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    again.set_batch_topic("Bcq")
    assert again.commitlog.max_offset == point
    assert truncation.pending(again.layout) is None
    # kept once, before the failed cut; not again by the start that made it
    assert len(kept_records(again)) == 60
    again.append_replicated(point, wire[point:])
    assert snapshot(again) == expected


class Waited:
    """A lock that says, on ``waiting``, when a thread has to wait for it."""

    def __init__(self, lock: threading.Lock, waiting: threading.Event) -> None:
        self.lock = lock
        self.waiting = waiting

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.waiting.set()
            self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_a_checkpoint_taken_before_the_cut_does_not_land_after_it(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The housekeeper writes a checkpoint of the log before the cut; the cut begins while
    it writes. On disk the cut's checkpoint must have the last word, not the older one
    (nor may the two writers race for the checkpoint's temporary file)."""
    wire, starts, _ = master()
    point = starts[len(starts) // 2]
    replica = open_store(clock=FakeClock(1_700_000_000_000),
                         mapped_file_size_commit_log=SEGMENT,
                         flush_interval_consume_queue=10, **LMQ)
    diverge(replica, wire, point, 30)
    writing, release, written = threading.Event(), threading.Event(), threading.Event()
    progress = threading.Event()
    write = Checkpoint.write

    def housekeeper_held(checkpoint: Checkpoint, path: Path) -> None:
        if threading.current_thread().name == "tidemq-housekeep" and not writing.is_set():
            writing.set()
            release.wait(60)  # the cut begins meanwhile
            write(checkpoint, path)
            written.set()
        else:
            write(checkpoint, path)

    monkeypatch.setattr(Checkpoint, "write", housekeeper_held)
    lock = getattr(replica, "_checkpointing", threading.Lock())
    monkeypatch.setattr(replica, "_checkpointing", Waited(lock, progress), raising=False)
    monkeypatch.setattr(replica, "_checkpointed", None)  # the next round writes
    assert writing.wait(60)
    cuts: list[int | BaseException] = []

    def cut() -> None:
        try:
            cuts.append(replica.cut_tail(point))
        except BaseException as exc:
            cuts.append(exc)
        progress.set()

    cutter = threading.Thread(target=cut)
    cutter.start()
    assert progress.wait(60)  # the cut is done, or waits for the housekeeper's checkpoint
    release.set()
    assert written.wait(60)
    cutter.join(60)
    assert cuts and isinstance(cuts[0], int), cuts
    on_disk = Checkpoint.read(replica.layout.checkpoint_file)
    assert on_disk.dispatched_phy_offset <= point
    assert on_disk.flushed_phy_offset <= point
    assert truncation.pending(replica.layout) is None


def test_a_shutdown_while_a_cut_is_kept_waits_for_the_kept_file(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker stopped while an old master's tail is kept in a thread (its controller
    link cancelled, the thread still copying): the store's shutdown waits for the kept
    file, which is whole, and does not close the log under it; the cut, requested on
    disk, is made by the next start and does not keep the tail again."""
    wire, starts, _ = master()
    point = starts[len(starts) // 2]
    clock = FakeClock(1_700_000_000_000)
    replica = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    diverge(replica, wire, point, 30)
    tail = tail_records(replica, point)
    keeping, release = threading.Event(), threading.Event()
    keep = kept_cuts.keep

    def slow_keep(*args: Any, **kwargs: Any) -> kept_cuts.CutKept:
        keeping.set()
        assert release.wait(60)
        return keep(*args, **kwargs)

    monkeypatch.setattr(kept_cuts, "keep", slow_keep)
    cut = replica.begin_cut(point)
    assert cut is not None
    kept: list[object] = []

    def keep_in_thread() -> None:
        try:
            kept.append(replica.keep_cut(cut))
        except BaseException as exc:
            kept.append(exc)

    keeper = threading.Thread(target=keep_in_thread)
    keeper.start()
    assert keeping.wait(60)
    waiting = threading.Event()

    class Said(logging.Handler):  # the shutdown says it waits: the event the test needs
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("shutdown waits for the tail"):
                waiting.set()

    said = Said()
    logging.getLogger("tidemq.store.message_store").addHandler(said)
    stopper = threading.Thread(target=replica.shutdown)
    stopper.start()
    stopped_first = not waiting.wait(5) and not stopper.is_alive()
    release.set()
    keeper.join(60)
    stopper.join(60)
    logging.getLogger("tidemq.store.message_store").removeHandler(said)
    assert not stopped_first, "the store shut down while its cut's tail was being kept"
    assert isinstance(kept[0], truncation.KeptNote), kept
    assert truncation.pending(replica.layout) == point
    with pytest.raises(StoreReadOnly, match="not started"):
        replica.finish_cut(cut)

    monkeypatch.setattr(kept_cuts, "keep", keep)
    again = open_store(clock=clock, mapped_file_size_commit_log=SEGMENT, **LMQ)
    assert again.commitlog.max_offset == point
    assert truncation.pending(again.layout) is None
    assert kept_records(again) == tail  # kept once, whole
