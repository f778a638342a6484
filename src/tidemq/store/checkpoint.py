"""Small metadata files: atomic replacement, the store checkpoint, abort and lock markers.

Checkpoint file layout (derived, but guides recovery; docs/reference/store.md §6.3):

======  ====  ======================  ==============================================
offset  size  field                   meaning
======  ====  ======================  ==============================================
0       8     physicMsgTimestamp      store time of the last record known flushed
8       8     logicsMsgTimestamp      store time of the last record dispatched
16      8     indexMsgTimestamp       store time of the last record indexed and flushed
24      8     flushedPhyOffset        TideMQ: commit-log offset known durable
32      8     dispatchedPhyOffset     TideMQ: commit-log offset dispatched and flushed
======  ====  ======================  ==============================================

Written whole with :func:`atomic_write` (tmp file, fsync, rename, fsync of the directory),
so a crash leaves either the old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import struct
from collections.abc import Sequence
from pathlib import Path

from tidemq.errors import StoreReadOnly

__all__ = ["Checkpoint", "StoreLock", "atomic_write", "fsync_dir"]

_LAYOUT = struct.Struct(
    ">"
    "q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
    "q"  # flushedPhyOffset
    "q"  # dispatchedPhyOffset
)
CHECKPOINT_SIZE = 4096


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | Sequence[bytes]) -> None:
    """Replace ``path`` with ``data`` (or its parts, written one after the other, never
    joined) so that a crash leaves the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in (data,) if isinstance(data, bytes) else data:
            view = memoryview(part)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclasses.dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    flushed_phy_offset: int = 0
    dispatched_phy_offset: int = 0

    def encode(self) -> bytes:
        head = _LAYOUT.pack(
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
            self.flushed_phy_offset, self.dispatched_phy_offset,
        )
        return head + bytes(CHECKPOINT_SIZE - len(head))

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        if len(data) < _LAYOUT.size:
            return cls()
        return cls(*_LAYOUT.unpack_from(data, 0))

    @classmethod
    def read(cls, path: Path) -> Checkpoint:
        try:
            return cls.decode(path.read_bytes())
        except FileNotFoundError:
            return cls()

    def write(self, path: Path) -> None:
        atomic_write(path, self.encode())

    @property
    def min_timestamp(self) -> int:
        """Where abnormal recovery may start: min of the two stamps less 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)


class StoreLock:
    """An exclusive ``flock`` on the store's lock file: one process per store root."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreReadOnly(
                "LOCKED", cause=f"{self.path} is held by another process"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
