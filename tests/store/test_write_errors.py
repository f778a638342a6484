"""Write errors make the store read-only and never corrupt what was stored before."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tidemq.errors import StoreReadOnly
from tidemq.formats.batch import encode_batch
from tidemq.formats.record import HostAddr
from tidemq.store.flush import FlushStatus
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageStore, PutStatus
from tidemq.types import FlushDiskType

from .conftest import SEGMENT, OpenStore, msg, read_queue

SYNC = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}


def failing(err: int) -> Callable[..., None]:
    def fail(*args: object) -> None:
        raise OSError(err, os.strerror(err))
    return fail


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll a condition that no event announces (a background thread's sticky error)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def bodies(store: MessageStore) -> list[bytes]:
    return [bytes(r.body) for r in read_queue(store, "T", 0)]


def test_fdatasync_eio_makes_the_store_read_only(open_store: OpenStore, store_root: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(**SYNC)
    for i in range(3):
        assert store.put("T", 0, msg(b"ok-%d" % i)).wait_durable(10) is PutStatus.PUT_OK
    monkeypatch.setattr(os, "fdatasync", failing(errno.EIO))
    lost = store.put("T", 0, msg(b"not durable"))
    assert lost.durable is not None
    assert lost.durable.result(10) is FlushStatus.WRITE_ERROR
    assert lost.wait_durable(0) is not PutStatus.PUT_OK
    assert store.status == "WRITE_ERROR"
    with pytest.raises(StoreReadOnly) as info:
        store.put("T", 0, msg(b"refused"))
    assert info.value.status == "WRITE_ERROR"
    assert "Input/output error" in info.value.cause
    with pytest.raises(StoreReadOnly):
        store.put_batch("T", 0, [msg(b"refused"), msg(b"too")])
    # Earlier, flushed data stays readable; the unflushed put never became visible.
    assert bodies(store) == [b"ok-0", b"ok-1", b"ok-2"]
    store.shutdown()  # with the disk still failing: no exception, lock released
    assert StoreLayout(store_root).abort_file.exists()  # not a clean shutdown
    monkeypatch.undo()
    reopened = open_store()
    assert bodies(reopened)[:3] == [b"ok-0", b"ok-1", b"ok-2"]
    assert reopened.status == "RUNNING"
    reopened.put("T", 0, msg(b"again"))


def test_async_flush_error_is_sticky(open_store: OpenStore,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(flush_interval_commit_log=5, flush_commit_log_least_pages=0)
    store.put("T", 0, msg(b"before"))
    assert wait_until(lambda: store.commitlog.flushed_offset == store.commitlog.max_offset)
    monkeypatch.setattr(os, "fdatasync", failing(errno.EIO))
    store.put("T", 0, msg(b"unflushed"))
    assert wait_until(lambda: store.status == "WRITE_ERROR")
    with pytest.raises(StoreReadOnly):
        store.put("T", 0, msg(b"refused"))
    assert bodies(store) == [b"before", b"unflushed"]  # ASYNC_FLUSH: written is visible
    store.shutdown()


def fill_segment_zero(store: MessageStore) -> list[bytes]:
    sent = [b"%04d" % i + b"x" * 400 for i in range(8)]  # 8 x 496 bytes of one segment
    for body in sent:
        store.put("T", 0, msg(body))
    assert store.commitlog.max_offset < SEGMENT
    return sent


def test_enospc_at_segment_creation(open_store: OpenStore, store_root: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    store.put("T", 0, msg(b"first"))
    monkeypatch.setattr(os, "posix_fallocate", failing(errno.ENOSPC))
    sent = [b"first", *fill_segment_zero(store)]
    with pytest.raises(StoreReadOnly) as info:
        store.put("T", 0, msg(b"y" * 600))  # needs a new segment
    assert info.value.status == "DISK_FULL"
    with pytest.raises(StoreReadOnly):
        store.put_batch("T", 0, [msg(b"y" * 600)])
    assert bodies(store) == sent
    store.shutdown()  # the warmer too: it may be preparing the next segment, in vain
    segments = sorted(p.name for p in StoreLayout(store_root).commitlog_dir.iterdir())
    assert segments == ["00000000000000000000"]  # no half-created segment left behind
    monkeypatch.undo()
    reopened = open_store()
    assert bodies(reopened) == sent
    assert reopened.put("T", 0, msg(b"z")).phys_offsets[0] == SEGMENT
    assert bodies(reopened) == [*sent, b"z"]


def test_a_next_segment_that_cannot_be_prepared_is_tried_once(
        open_store: OpenStore, store_root: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The warmer prepares the next segment ahead of the writer; on a full disk it tries
    once (one warning, no file left), and the roll reports the disk full when it needs
    the segment. It did try on every wake-up: a warning and a file created and deleted
    every few milliseconds while the disk stayed full."""
    store = open_store()
    store.commitlog.stop_warmer()  # its steps are taken here, one at a time
    store.put("T", 0, msg(b"first"))
    calls: list[str] = []
    fail = failing(errno.ENOSPC)

    def counted(*args: object) -> None:
        calls.append(threading.current_thread().name)
        fail(*args)

    monkeypatch.setattr(os, "posix_fallocate", counted)
    sent = [b"first", *fill_segment_zero(store)]
    with caplog.at_level(logging.WARNING, logger="tidemq.store.commitlog"):
        for _ in range(5):  # pre-faults the segment's rest, then tries the next one
            store.commitlog.warm_step()
    assert len(calls) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "cannot prepare segment 00000000000000004096 ahead of time: "
        "[Errno 28] No space left on device"]
    assert sorted(p.name for p in StoreLayout(store_root).commitlog_dir.iterdir()) == [
        "00000000000000000000"]
    with pytest.raises(StoreReadOnly) as info:
        store.put("T", 0, msg(b"y" * 600))  # the roll tries it itself
    assert info.value.status == "DISK_FULL" and len(calls) == 2
    assert bodies(store) == sent


def test_enospc_for_the_first_segment(open_store: OpenStore, store_root: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    monkeypatch.setattr(os, "posix_fallocate", failing(errno.ENOSPC))
    with pytest.raises(StoreReadOnly) as info:
        store.put("T", 0, msg(b"first"))
    assert info.value.status == "DISK_FULL"
    assert list(StoreLayout(store_root).commitlog_dir.iterdir()) == []
    store.shutdown()
    monkeypatch.undo()
    reopened = open_store()
    assert reopened.put("T", 0, msg(b"first")).queue_offset == 0
    assert bodies(reopened) == [b"first"]


class _FailingMap(bytearray):
    """Stands in for a segment's map: a copy into it fails as a failing disk's would."""

    def __setitem__(self, key: object, value: object) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.mark.parametrize("born", [None, HostAddr(bytes(range(16)), 9)], ids=["ipv4", "ipv6"])
def test_a_failed_inner_batch_write_makes_the_store_read_only(
        open_store: OpenStore, born: HostAddr | None) -> None:
    """Written straight into the segment or encoded first, an inner batch whose bytes do
    not reach the segment makes the store WRITE_ERROR, as any other failed write."""
    store = open_store()
    store.set_batch_topic("B")
    body = encode_batch([(b"m%d" % i, b"", 0) for i in range(4)])
    store.put_inner_batch("B", 0, body, b"", 4)
    seg = store.commitlog.segments[-1]
    real = seg.mm
    seg.mm = _FailingMap(len(real))  # type: ignore[assignment]
    try:
        with pytest.raises(StoreReadOnly) as info:
            store.put_inner_batch("B", 0, body, b"", 4, born_host=born)
    finally:
        seg.mm = real
    assert info.value.status == "WRITE_ERROR" and "Input/output error" in info.value.cause
    assert store.status == "WRITE_ERROR"
    with pytest.raises(StoreReadOnly):
        store.put_inner_batch("B", 0, body, b"", 4)
    store.shutdown()


def test_a_failed_uniform_batch_write_makes_the_store_read_only(open_store: OpenStore) -> None:
    """A producer's batch of one layout, written straight into the segment's map, that
    cannot be written there (the map's view gone) makes the store WRITE_ERROR, as any
    other failed write."""
    from tests.store.test_put_uniform import _uniform

    store = open_store()
    batch = _uniform(8, 4, 8, (), b"", 0, seed=1)
    store.put_batch("T", 0, batch)  # the segment the next one is written into
    seg = store.commitlog.segments[-1]
    real = seg.view
    gone = memoryview(bytearray(len(real)))
    gone.release()
    seg.view = gone
    try:
        with pytest.raises(StoreReadOnly) as info:
            store.put_batch("T", 0, batch)
    finally:
        seg.view = real
    assert info.value.status == "WRITE_ERROR" and "released" in info.value.cause
    assert store.status == "WRITE_ERROR"
    with pytest.raises(StoreReadOnly):
        store.put_batch("T", 0, batch)
    store.shutdown()


def test_a_uniform_batch_failing_half_written_leaves_zeros_and_a_writable_store(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure after part of the records were written into the map (not a failed
    write: a field refused) takes back what was written and leaves the store taking
    puts, the next one where the failed one would have gone."""
    from tests.store.test_put_uniform import _uniform

    from tidemq.store import appender

    store = open_store()
    batch = _uniform(8, 4, 8, (), b"", 0, seed=2)
    store.put_batch("T", 0, batch)
    seg = store.commitlog.segments[-1]
    at = seg.wrote

    def refuse(span: memoryview, *args: object) -> None:
        span[: len(span) // 2] = b"\xff" * (len(span) // 2)  # half written, then refused
        raise OverflowError("a field out of range")

    real = appender.stamp_records
    monkeypatch.setattr(appender, "stamp_records", refuse)
    with pytest.raises(OverflowError):
        store.put_batch("T", 0, batch)
    assert seg.wrote == at and not any(seg.mm[at : at + 1024])
    monkeypatch.setattr(appender, "stamp_records", real)
    result = store.put_batch("T", 0, batch)
    assert result.phys_offsets[0] == seg.base + at and result.queue_offset == 8
    assert store.status != "WRITE_ERROR"
    store.shutdown()
