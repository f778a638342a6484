"""SYNC_FLUSH: durable futures, dispatch of flushed data only, timeouts on a stalled disk."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

import pytest

from tidemq.store.flush import FlushStatus
from tidemq.store.message_store import PutStatus
from tidemq.types import FlushDiskType, GetStatus

from .conftest import OpenStore, msg

SYNC = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "flush_interval_consume_queue": 60_000}


class StalledDisk:
    """Fault injection: ``fdatasync`` blocks until released."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.release = threading.Event()
        self.entered = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.release.wait(30)
        self.real(fd)


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], StalledDisk]]:
    disks: list[StalledDisk] = []

    def stall() -> StalledDisk:
        disk = StalledDisk(os.fdatasync)
        monkeypatch.setattr(os, "fdatasync", disk)
        disks.append(disk)
        return disk

    yield stall
    for disk in disks:
        disk.release.set()


def test_durable_future_completes(open_store: OpenStore) -> None:
    store = open_store(**SYNC)
    single = store.put("T", 0, msg(b"a"))
    batch = store.put_batch("T", 0, [msg(b"b"), msg(b"c")])
    assert single.durable is not None and batch.durable is not None
    assert single.durable.result(10) is FlushStatus.FLUSHED
    assert batch.wait_durable(10) is PutStatus.PUT_OK
    assert store.commitlog.flushed_offset >= batch.phys_offsets[-1] + batch.sizes[-1]
    assert store.put("T", 0, msg(b"d"), wait_flush=False).durable is None


def test_async_flush_has_no_durable_future(open_store: OpenStore) -> None:
    store = open_store()
    res = store.put("T", 0, msg(b"a"))
    assert res.durable is None and res.wait_durable() is PutStatus.PUT_OK
    assert store.wait_dispatched()
    assert store.get("T", 0, 0).found  # visible before any flush


def test_stalled_flush_times_out_and_hides_unflushed_data(
        open_store: OpenStore, stalled: Callable[[], StalledDisk]) -> None:
    store = open_store(sync_flush_timeout=300, **SYNC)
    first = store.put("T", 0, msg(b"flushed"))
    assert first.wait_durable(10) is PutStatus.PUT_OK
    assert store.wait_dispatched()
    visible = threading.Event()
    store.add_dispatch_hook(lambda t, q, new_max: visible.set() if new_max == 2 else None)

    disk = stalled()
    second = store.put("T", 0, msg(b"stuck"))
    assert second.durable is not None
    assert second.durable.result(10) is FlushStatus.FLUSH_DISK_TIMEOUT
    assert second.wait_durable(0) is PutStatus.FLUSH_DISK_TIMEOUT
    assert disk.entered.is_set()
    # Under SYNC_FLUSH nothing unflushed is dispatched: the second message is not visible.
    assert store.max_offset("T", 0) == 1
    assert store.get("T", 0, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get("T", 0, 0).found

    disk.release.set()
    assert visible.wait(10)
    assert store.get("T", 0, 1).found
    third = store.put("T", 0, msg(b"after"))
    assert third.wait_durable(10) is PutStatus.PUT_OK


def test_async_flush_counts_and_announces_the_checkpoints_flush(open_store: OpenStore) -> None:
    """Under light ASYNC_FLUSH load the checkpoint, not the flusher's interval, makes the
    commit log durable; that flush is counted (the broker's flush metrics) and announced
    to flush listeners like the flusher's own."""
    store = open_store(flush_interval_consume_queue=20,
                       flush_commit_log_thorough_interval=600_000)
    assert store.flusher is not None
    announced: list[int] = []
    flushed = threading.Event()
    store.flusher.add_flush_listener(lambda offset: (announced.append(offset), flushed.set()))
    res = store.put("T", 0, msg(b"a"))
    end = res.phys_offsets[0] + res.sizes[0]
    assert flushed.wait(10)  # a checkpoint comes every 20 ms; nothing was dirty before
    assert announced == [end] and store.flusher.flushed_offset == end
    assert store.flusher.flush_count >= 1 and store.flusher.last_flush_ms > 0
    assert store.commitlog.flushed_offset >= end
