"""Read-only access to a store directory, for offline tools. Nothing here writes a byte.

Files are mapped with ``ACCESS_READ``; :func:`walk_log` reads records with the walker
recovery uses (:mod:`tidemq.store.log_scan`): records, damaged stretches it skips, and a
string where the valid log ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from tidemq.formats.record import Record
from tidemq.store.layout import StoreLayout
from tidemq.store.log_scan import Damage, End, walk

__all__ = [
    "ReadOnlyFile",
    "ReadOnlyLog",
    "close_all",
    "lock_held",
    "map_readonly",
    "open_log",
    "walk_log",
]


@dataclasses.dataclass(slots=True)
class ReadOnlyFile:
    base: int
    path: Path
    size: int
    mm: mmap.mmap | None

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def view(self) -> memoryview:
        return memoryview(self.mm) if self.mm is not None else memoryview(b"")


def map_readonly(path: Path, base: int) -> ReadOnlyFile:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
    finally:
        os.close(fd)
    return ReadOnlyFile(base, path, size, mm)


def close_all(maps: list[ReadOnlyFile]) -> None:
    for m in maps:
        if m.mm is not None:
            with contextlib.suppress(BufferError):
                m.mm.close()


class ReadOnlyLog:
    """The commit-log segments, mapped read-only."""

    def __init__(self, layout: StoreLayout, segment_size: int | None) -> None:
        self.maps = [map_readonly(p, b) for b, p in layout.segments_in(layout.commitlog_dir)]
        sizes = [m.size for m in self.maps if m.size]
        self.segment_size = segment_size or (max(set(sizes), key=sizes.count) if sizes else 0)

    def segment_for(self, offset: int) -> ReadOnlyFile | None:
        for m in self.maps:
            if m.base <= offset < m.end:
                return m
        return None

    def read(self, offset: int, size: int) -> memoryview | None:
        m = self.segment_for(offset)
        if m is None or offset - m.base + size > m.size:
            return None
        pos = offset - m.base
        return m.view[pos : pos + size]

    def close(self) -> None:
        close_all(self.maps)


@contextlib.contextmanager
def open_log(layout: StoreLayout, segment_size: int | None) -> Iterator[ReadOnlyLog]:
    log = ReadOnlyLog(layout, segment_size)
    try:
        yield log
    finally:
        log.close()


def walk_log(log: ReadOnlyLog, start: int, check_crc: bool
             ) -> Iterator[tuple[int, Record | Damage | str]]:
    """Records from ``start`` as recovery reads them, with the damaged stretches it skips;
    a string is where and why the valid log ends."""
    for step in walk(log.maps, start, check_crc):
        if type(step) is tuple:
            yield step
        elif isinstance(step, Damage):
            yield step.offset, step
        elif isinstance(step, End):
            yield step.offset, step.reason or "end of log"


def lock_held(layout: StoreLayout) -> bool:
    """Whether another process holds the store lock (probed without waiting)."""
    try:
        fd = os.open(layout.lock_file, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
