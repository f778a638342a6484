"""The checkpoint file and atomic replacement of small metadata files."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from tests.store.conftest import OpenStore, msg

from tidemq.store.checkpoint import CHECKPOINT_SIZE, Checkpoint, atomic_write


def test_layout_and_round_trip(tmp_path: Path) -> None:
    cp = Checkpoint(physic_msg_timestamp=1, logics_msg_timestamp=2, index_msg_timestamp=3,
                    flushed_phy_offset=4096, dispatched_phy_offset=4000)
    data = cp.encode()
    assert len(data) == CHECKPOINT_SIZE == 4096
    assert data[:40] == b"".join([
        struct.pack(">q", 1),     # physicMsgTimestamp
        struct.pack(">q", 2),     # logicsMsgTimestamp
        struct.pack(">q", 3),     # indexMsgTimestamp
        struct.pack(">q", 4096),  # flushedPhyOffset
        struct.pack(">q", 4000),  # dispatchedPhyOffset
    ])
    assert data[40:] == bytes(CHECKPOINT_SIZE - 40)
    path = tmp_path / "checkpoint"
    cp.write(path)
    assert Checkpoint.read(path) == cp
    assert not path.with_name("checkpoint.tmp").exists()


def test_missing_or_short_file_reads_as_empty(tmp_path: Path) -> None:
    assert Checkpoint.read(tmp_path / "absent") == Checkpoint()
    (tmp_path / "short").write_bytes(b"\x01" * 39)
    assert Checkpoint.read(tmp_path / "short") == Checkpoint()


def test_min_timestamp() -> None:
    assert Checkpoint(physic_msg_timestamp=10_000, logics_msg_timestamp=8000).min_timestamp == 5000
    assert Checkpoint(physic_msg_timestamp=1000, logics_msg_timestamp=2000).min_timestamp == 0


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, b"old content that is longer")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.json"]


def test_a_crash_before_the_rename_keeps_the_old_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint"
    old = Checkpoint(flushed_phy_offset=100, dispatched_phy_offset=100)
    old.write(path)

    def crash(src: object, dst: object) -> None:
        raise OSError(5, "simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        Checkpoint(flushed_phy_offset=999, dispatched_phy_offset=999).write(path)
    monkeypatch.undo()
    assert Checkpoint.read(path) == old  # the half-written new version is only in .tmp
    # A leftover .tmp from that crash does not disturb the next write.
    assert path.with_name("checkpoint.tmp").exists()
    new = Checkpoint(flushed_phy_offset=5, dispatched_phy_offset=5)
    new.write(path)
    assert Checkpoint.read(path) == new


def test_a_failed_fsync_keeps_the_old_file(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(flushed_phy_offset=1).write(path)

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError):
        Checkpoint(flushed_phy_offset=2).write(path)
    monkeypatch.undo()
    assert Checkpoint.read(path).flushed_phy_offset == 1


def test_an_idle_store_does_not_rewrite_its_checkpoint(open_store: OpenStore) -> None:
    """The housekeeper writes (and fsyncs) the checkpoint only when it changed: an idle
    broker does no disk work every second."""
    store = open_store()
    store.put("T", 0, msg(b"first"))
    assert store.wait_dispatched(10.0)
    path = store.layout.checkpoint_file
    store._write_checkpoint()
    written = path.stat().st_ino  # atomic_write replaces the file: a new inode each time
    store._write_checkpoint()
    assert path.stat().st_ino == written
    store.put("T", 0, msg(b"second"))
    assert store.wait_dispatched(10.0)
    store._write_checkpoint()
    assert path.stat().st_ino != written
    assert Checkpoint.read(path).flushed_phy_offset == store.commitlog.max_offset
