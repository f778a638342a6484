"""One fixed-size, pre-allocated, memory-mapped file: a commit-log segment or a queue file.

The file is created at its full size with ``posix_fallocate``, so a full disk fails the
creation with a clean error instead of a SIGBUS later through the mapping. Appends are
memory copies into the mapping; :meth:`MappedFile.flush` makes everything written so far
durable with ``fdatasync`` (which releases the GIL). After a write error the file refuses
every later write with the same error (write failures stick).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemq.errors import StoreReadOnly

__all__ = ["MappedFile", "all_zero"]

log = logging.getLogger(__name__)

MADV_POPULATE_READ = 22  # Linux 5.14+
MADV_POPULATE_WRITE = 23

_madvise: Any = None
try:
    _madvise = ctypes.CDLL(None, use_errno=True).madvise
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _madvise = None

_populate_supported = _madvise is not None
_ZERO_CHUNK = 1 << 20


class MappedFile:
    """A file of exactly ``size`` bytes starting at logical offset ``base``."""

    __slots__ = ("_addr", "_anchor", "_fd", "base", "flushed", "mm", "path", "populated", "size",
                 "view", "werr", "wrote")

    def __init__(self, path: Path, base: int, size: int, *, create: bool,
                 preallocate: bool = True) -> None:
        self.path = path
        self.base = base
        self.size = size
        self.werr: str | None = None
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                try:
                    if preallocate:
                        os.posix_fallocate(fd, 0, size)
                    else:
                        os.ftruncate(fd, size)
                except OSError:
                    os.close(fd)
                    fd = -1
                    path.unlink(missing_ok=True)
                    raise
            else:
                actual = os.fstat(fd).st_size
                if actual != size:
                    raise ValueError(f"{path} has {actual} bytes, expected {size}")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        self._fd = fd
        self.view = memoryview(self.mm)
        self.wrote = 0
        self.flushed = 0
        self.populated = 0
        self._anchor: ctypes.c_char | None = None
        self._addr = 0

    @property
    def end(self) -> int:
        """Logical offset just past the file."""
        return self.base + self.size

    @property
    def remaining(self) -> int:
        return self.size - self.wrote

    @property
    def full(self) -> bool:
        return self.wrote >= self.size

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` at file position ``pos`` and move the write mark past it."""
        if self.werr is not None:
            raise StoreReadOnly("WRITE_ERROR", cause=self.werr)
        end = pos + len(data)
        self.mm[pos:end] = data
        self.wrote = max(self.wrote, end)

    def fill_at(self, pos: int, length: int, fill: Callable[..., object], *args: object
                ) -> None:
        """Let ``fill(span, *args)`` write the ``length`` bytes ``span`` in place at file
        position ``pos``, then move the write mark past them.

        A map that cannot be written (closed, its view released) is a write error: the
        file refuses this and every later write (WRITE_ERROR). A ``fill`` that raises
        leaves zeros where it wrote and the mark where it was; the file takes writes again.
        """
        if self.werr is not None:
            raise StoreReadOnly("WRITE_ERROR", cause=self.werr)
        end = pos + length
        try:
            span = self.view[pos:end]
        except ValueError as exc:
            self.werr = f"write to {self.path.name} failed: {exc}"
            raise StoreReadOnly("WRITE_ERROR", cause=self.werr) from exc
        try:
            fill(span, *args)
        except BaseException:
            span[:] = bytes(length)
            raise
        self.wrote = max(self.wrote, end)

    def flush(self) -> int:
        """fdatasync everything written; returns the flushed position."""
        target = self.wrote
        if target <= self.flushed or self._fd < 0:
            return self.flushed
        if self.werr is not None:
            raise StoreReadOnly("WRITE_ERROR", cause=self.werr)
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self.werr = f"fdatasync of {self.path.name} failed: {exc}"
            raise StoreReadOnly("WRITE_ERROR", cause=self.werr) from exc
        self.flushed = max(self.flushed, target)
        return self.flushed

    def populate(self, end: int, *, write: bool = True) -> bool:
        """Pre-fault pages up to ``end``, without the GIL.

        ``write``: map them writable and dirty (MADV_POPULATE_WRITE), for a writer about to
        fill them in the same thread. Otherwise (MADV_POPULATE_READ) the page-cache pages
        are allocated and zero-filled -- the costly part of a first write -- but stay
        clean and read-only, so a flush ahead of the writer does not write zeros to disk
        and the records written later are not written twice; the writer's first store
        into such a page takes a cheap write-protect fault instead of a page allocation.
        Returns ``False`` when the kernel does not support it (nothing is lost; appends
        just fault).
        """
        global _populate_supported
        if not _populate_supported or self._fd < 0:
            return False
        end = min(end, self.size)
        start = self.populated & ~4095
        if end <= start:
            return True
        if self._anchor is None:
            self._anchor = ctypes.c_char.from_buffer(self.mm)
            self._addr = ctypes.addressof(self._anchor)
        assert _madvise is not None
        advice = MADV_POPULATE_WRITE if write else MADV_POPULATE_READ
        if _madvise(self._addr + start, end - start, advice) != 0:
            err = ctypes.get_errno()
            log.info("MADV_POPULATE_* unavailable (errno %d); appends will page-fault", err)
            _populate_supported = False
            return False
        self.populated = end
        return True

    def sync(self) -> None:
        """fdatasync unconditionally (after zeroing a tail, for instance)."""
        os.fdatasync(self._fd)
        self.flushed = self.wrote

    def zero_from(self, pos: int) -> None:
        """Zero everything from ``pos`` on (torn-tail truncation) and reset the marks.

        Zeros go through the mapping, up to the last non-zero byte only (the rest of a
        pre-allocated file already reads zero). The file never changes size, so a crash
        in the middle leaves a loadable file whose tail the next recovery zeroes again,
        and no stale record can be resurrected later.
        """
        if pos < self.size:
            end = self._last_nonzero(pos)
            for start in range(pos, end, _ZERO_CHUNK):
                stop = min(start + _ZERO_CHUNK, end)
                self.mm[start:stop] = bytes(stop - start)
        self.wrote = pos
        self.flushed = min(self.flushed, pos)

    def _last_nonzero(self, pos: int) -> int:
        """The position just past the last non-zero byte at or after ``pos``."""
        last = pos
        for start in range(pos, self.size, _ZERO_CHUNK):
            stop = min(start + _ZERO_CHUNK, self.size)
            kept = len(self.mm[start:stop].rstrip(b"\x00"))
            if kept:
                last = start + kept
        return last

    def close(self) -> None:
        if self._fd < 0:
            return
        self._anchor = None
        self.view.release()
        # Readers may still hold views of this mapping; it then closes when they go.
        with contextlib.suppress(BufferError):
            self.mm.close()
        os.close(self._fd)
        self._fd = -1

    def destroy(self) -> None:
        """Delete the file. The mapping itself is left to the garbage collector: a reader
        that looked this file up a moment ago (a pull racing retention) still holds
        valid views, and the kernel frees the space once the last view is gone."""
        self.path.unlink(missing_ok=True)
        self._anchor = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote}, flushed={self.flushed})"


def all_zero(path: Path, chunk: int = 1 << 20) -> bool:
    """Whether every byte of ``path`` is zero: a file whose creation was cut short."""
    with open(path, "rb") as f:
        while block := f.read(chunk):
            if block.count(0) != len(block):
                return False
    return True
