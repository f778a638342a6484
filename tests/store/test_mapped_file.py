"""Mapped files: pre-allocation, sticky write errors, tail zeroing that never shrinks a file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tidemq.errors import StoreReadOnly
from tidemq.store.mapped_file import MappedFile, all_zero

SIZE = 3 * 4096


def test_create_preallocates_and_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    mf = MappedFile(path, 100, SIZE, create=True)
    assert path.stat().st_size == SIZE and all_zero(path)
    assert (mf.base, mf.end, mf.remaining, mf.full) == (100, 100 + SIZE, SIZE, False)
    with pytest.raises(FileExistsError):
        MappedFile(path, 100, SIZE, create=True)
    mf.close()
    with pytest.raises(ValueError, match="expected"):
        MappedFile(path, 100, SIZE + 1, create=False)


def test_zero_from_keeps_the_size_and_clears_the_tail(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    mf = MappedFile(path, 0, SIZE, create=True)
    mf.write_at(0, b"\x01" * 5000)
    mf.write_at(9000, b"\x02" * 10)  # a stale record far behind the end
    mf.flush()

    def crash(*args: object) -> None:
        raise AssertionError("zeroing must not change the file size")

    monkeypatch.setattr(os, "ftruncate", crash)  # a crash between two ftruncates would
    mf.zero_from(1000)                           # leave a short, unloadable file
    mf.sync()
    monkeypatch.undo()
    assert (mf.wrote, mf.flushed) == (1000, 1000)
    data = path.read_bytes()
    assert len(data) == SIZE
    assert data[:1000] == b"\x01" * 1000 and data[1000:] == bytes(SIZE - 1000)
    mf.close()


def _failed_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MappedFile:
    """A file holding ``abc`` whose flush met an I/O error; the disk answers again."""
    mf = MappedFile(tmp_path / "f", 0, SIZE, create=True)
    mf.write_at(0, b"abc")

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(StoreReadOnly):
        mf.flush()
    monkeypatch.undo()
    return mf


def test_write_errors_stick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mf = _failed_flush(tmp_path, monkeypatch)
    with pytest.raises(StoreReadOnly):
        mf.write_at(3, b"d")  # the error sticks even though the disk answers again
    with pytest.raises(StoreReadOnly):
        mf.flush()
    mf.close()


def test_fill_at_writes_in_place_and_moves_the_mark(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / "f", 0, SIZE, create=True)
    mf.write_at(0, b"abc")

    def fill(span: memoryview) -> None:
        span[:] = b"defg"

    mf.fill_at(3, 4, fill)
    assert mf.wrote == 7 and bytes(mf.mm[:8]) == b"abcdefg\x00"
    mf.close()


def test_fill_at_errors_stick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mf = _failed_flush(tmp_path, monkeypatch)
    filled: list[memoryview] = []
    with pytest.raises(StoreReadOnly) as info:
        mf.fill_at(3, 1, filled.append)  # the error sticks even though the disk answers again
    assert info.value.status == "WRITE_ERROR" and not filled and mf.wrote == 3
    mf.close()


def test_fill_at_into_a_map_that_is_gone_sticks(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / "f", 0, SIZE, create=True)
    real = mf.view
    gone = memoryview(bytearray(SIZE))
    gone.release()
    mf.view = gone
    filled: list[memoryview] = []
    with pytest.raises(StoreReadOnly) as info:
        mf.fill_at(0, 3, filled.append)
    assert info.value.status == "WRITE_ERROR" and "released" in info.value.cause
    assert not filled and mf.wrote == 0
    mf.view = real  # the map answers again: the file still refuses
    with pytest.raises(StoreReadOnly):
        mf.fill_at(0, 3, filled.append)
    with pytest.raises(StoreReadOnly):
        mf.write_at(0, b"abc")
    assert not filled
    mf.close()


def test_a_failing_fill_leaves_zeros_and_a_writable_file(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / "f", 0, SIZE, create=True)
    mf.write_at(0, b"abc")

    def half(span: memoryview) -> None:
        span[:2] = b"xy"
        raise OverflowError("a field out of range")

    with pytest.raises(OverflowError):
        mf.fill_at(3, 4, half)
    assert mf.wrote == 3 and not any(mf.mm[3:7])

    def fill(span: memoryview) -> None:
        span[:] = b"defg"

    mf.fill_at(3, 4, fill)
    assert mf.wrote == 7 and bytes(mf.mm[:7]) == b"abcdefg"
    mf.close()


def test_failed_preallocation_leaves_no_file(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def enospc(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", enospc)
    with pytest.raises(OSError):
        MappedFile(tmp_path / "f", 0, SIZE, create=True)
    assert not (tmp_path / "f").exists()
