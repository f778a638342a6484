"""The commit log's tail check at recovery: every non-zero byte after the end is found
and zeroed, wherever it lies, without reading the holes of a pre-allocated segment."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pytest

from tidemq.store import log_scan
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore

SEGMENT = 8 << 20  # several tail-check chunks


def config(root: Path, segment: int = SEGMENT) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=segment,
                       message_index_enable=False)


def filled(root: Path, count: int = 20, segment: int = SEGMENT) -> int:
    """A cleanly shut down store of ``count`` messages; returns the log's end."""
    with MessageStore(config(root, segment)) as store:
        for i in range(count):
            store.put("Tail", 0, MessageInput(b"m%03d" % i))
        return store.commitlog.max_offset


def segment(root: Path) -> Path:
    return root / "commitlog" / f"{0:020d}"


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def read(path: Path, pos: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(size)


@pytest.mark.parametrize("where", [
    lambda end: end + 100,                       # just behind the end, after a hole
    lambda end: (3 << 20) - 2,                   # across a chunk boundary
    lambda end: SEGMENT - 1,                     # the segment's very last byte
])
def test_garbage_anywhere_after_the_end_is_found_and_zeroed(tmp_path: Path, where) -> None:
    root = tmp_path / "store"
    end = filled(root)
    pos = where(end)
    garbage = b"\x5a\x01"[: SEGMENT - pos]
    patch(segment(root), pos, garbage)
    (root / "abort").touch()  # a crash: the torn tail is reported
    with MessageStore(config(root)) as store:
        report = store.recovery_report
        assert report is not None
        assert report.end_offset == end
        assert report.bytes_dropped == pos + len(garbage) - end
        assert [m for m in store.get("Tail", 0, 0, 64).buffers]  # the records survive
    assert read(segment(root), pos, len(garbage)) == bytes(len(garbage))
    with MessageStore(config(root)) as store:  # and stay zero
        assert store.recovery_report is not None
        assert store.recovery_report.bytes_dropped == 0
        assert store.commitlog.max_offset >= end


def test_appends_after_a_zeroed_tail_land_at_the_end(tmp_path: Path) -> None:
    root = tmp_path / "store"
    end = filled(root, 5)
    patch(segment(root), SEGMENT - 10, b"junk")
    (root / "abort").touch()
    with MessageStore(config(root)) as store:
        assert store.commitlog.max_offset == end
        res = store.put("Tail", 0, MessageInput(b"after"))
        assert list(res.phys_offsets) == [end]
    with MessageStore(config(root)) as store:
        assert store.max_offset("Tail", 0) == 6


def test_last_nonzero_without_hole_queries(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.truncate(5 << 20)
    patch(path, (2 << 20) + 7, b"\x01")
    real_lseek = os.lseek

    def no_seek_data(fd: int, pos: int, how: int) -> int:
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported")
        return real_lseek(fd, pos, how)

    fd = os.open(path, os.O_RDONLY)
    try:
        assert log_scan.last_nonzero_in_file(path, 0, 5 << 20) == (2 << 20) + 8
        monkeypatch.setattr(os, "lseek", no_seek_data)
        assert log_scan._data_extents(fd, 100, 5 << 20) == [(100, 5 << 20)]
        assert log_scan.last_nonzero_in_file(path, 0, 5 << 20) == (2 << 20) + 8
        assert log_scan.last_nonzero_in_file(path, (2 << 20) + 8, 5 << 20) == (2 << 20) + 8
        assert log_scan.last_nonzero_in_file(path, 3, 4) == 3
    finally:
        os.close(fd)


def read_ahead(path: Path) -> int:
    """The read-ahead window of the block device holding ``path``, bytes (8 MiB when the
    system does not say)."""
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (block.resolve() / "queue", block.resolve().parent / "queue"):  # a partition's
        with contextlib.suppress(OSError, ValueError):
            return int((queue / "read_ahead_kb").read_text()) * 1024
    return 8 << 20


def test_holes_of_a_fresh_segment_are_not_read(tmp_path: Path) -> None:
    """The point of the hole queries: a restart reads a bounded part of the last
    segment, not all of it (on a file system that reports holes). The writer's warmer
    pre-faults 32 MiB ahead, and the page cache may read ahead of that (zero pages of
    the unwritten extent, reported as data) by a window that grows with sequential
    reads and with how much time the warmer had: the segment is many times both, and
    the test asks for a quarter of it at most."""
    root = tmp_path / "store"
    big = 512 << 20
    end = filled(root, segment=big)
    fd = os.open(segment(root), os.O_RDONLY)
    try:
        extents = log_scan._data_extents(fd, end, big)
    finally:
        os.close(fd)
    if extents == [(end, big)]:
        pytest.skip("this file system reports no holes")
    bound = big // 4
    assert config(root, big).commit_log_warm_ahead + 2 * read_ahead(root) < bound // 2
    assert sum(hi - lo for lo, hi in extents) <= bound
