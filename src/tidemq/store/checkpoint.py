"""Small metadata files: atomic replacement, the store checkpoint, abort and lock markers.

Checkpoint file layout: one 4 KiB page, big-endian. Bytes 0-39 are RocketMQ's
``StoreCheckpoint``, field for field; TideMQ's own offsets sit in a marked section at the
end of the page, which a RocketMQ broker neither reads nor writes (docs/reference/store.md
§6.3):

======  ====  ======================  ===============================================
offset  size  field                   meaning
======  ====  ======================  ===============================================
0       8     physicMsgTimestamp      store time of the last record known flushed
8       8     logicsMsgTimestamp      store time of the last record dispatched
16      8     indexMsgTimestamp       store time of the last record indexed and flushed
24      8     masterFlushedOffset     a replica's record of its master's log end when
                                      that master started; 0 when unknown
32      8     confirmPhyOffset        commit-log offset up to which records are confirmed:
                                      TideMQ writes its flushed offset
40      4024  (zero)                  unused
4064    4     magic                   ``TDMQ``: TideMQ's section follows
4068    4     sectionVersion          1
4072    8     flushedPhyOffset        TideMQ: commit-log offset known durable
4080    8     dispatchedPhyOffset     TideMQ: commit-log offset dispatched and flushed
4088    4     headCrc                 CRC-32 of bytes 0-39 as TideMQ wrote them
4092    4     sectionCrc              CRC-32 of bytes 4064-4091
======  ====  ======================  ===============================================

Who wrote a file (:class:`Origin`):

* TideMQ: the section's magic, version and ``sectionCrc`` hold, and so does ``headCrc``.
* RocketMQ: no section, or an intact section whose ``headCrc`` no longer matches bytes
  0-39 -- a RocketMQ broker ran the store after TideMQ and rewrote them (it keeps the rest
  of the page), so TideMQ's offsets are out of date. The offsets are unknown.
* An earlier TideMQ kept ``flushedPhyOffset`` at 24 and ``dispatchedPhyOffset`` at 32,
  zeros after them. A file of that shape is read that way when its bytes 24-39 keep that
  layout's rule (flushed >= dispatched >= 0) and no RocketMQ broker ever started on the
  store (one writes ``lock`` into the lock file; TideMQ leaves it empty).
* Damaged: shorter than bytes 0-39, or bytes in the section's place that are not an
  intact section of a known version. The offsets are unknown.

Unknown offsets read as 0; where a start then begins its scan is
:func:`tidemq.store.recovery_plan.dispatched_from`'s decision.

Written whole with :func:`atomic_write` (tmp file, fsync, rename, fsync of the directory),
so a crash leaves either the old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from tidemq.errors import StoreReadOnly
from tidemq.store.layout import StoreLayout

__all__ = ["CHECKPOINT_SIZE", "Checkpoint", "Origin", "StoreLock", "atomic_write", "fsync_dir",
           "rocketmq_started"]

_HEAD = struct.Struct(
    ">"
    "q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
    "q"  # masterFlushedOffset
    "q"  # confirmPhyOffset
)
_SECTION = struct.Struct(
    ">"
    "4s"  # magic
    "I"  # sectionVersion
    "q"  # flushedPhyOffset
    "q"  # dispatchedPhyOffset
    "I"  # headCrc
)
_SECTION_CRC = struct.Struct(">I")  # sectionCrc
CHECKPOINT_SIZE = 4096
_SECTION_AT = CHECKPOINT_SIZE - _SECTION.size - _SECTION_CRC.size
_MAGIC = b"TDMQ"
_VERSION = 1
#: What a RocketMQ broker writes at the start of its lock file.
_ROCKETMQ_LOCK = b"lock"


class Origin(enum.StrEnum):
    """Who wrote a checkpoint file, as far as its bytes tell (see the module doc)."""

    MISSING = "missing"
    TIDEMQ = "tidemq"
    EARLIER_TIDEMQ = "earlier tidemq"
    ROCKETMQ = "rocketmq"
    DAMAGED = "damaged"


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
    """The checkpoint's fields; ``origin`` and ``note`` say where a read one came from and
    are not compared."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    _: dataclasses.KW_ONLY
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    flushed_phy_offset: int = 0
    dispatched_phy_offset: int = 0
    origin: Origin = dataclasses.field(default=Origin.TIDEMQ, compare=False)
    note: str = dataclasses.field(default="", compare=False)

    def encode(self) -> bytes:
        head = _HEAD.pack(
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
            self.master_flushed_offset, self.confirm_phy_offset,
        )
        section = _SECTION.pack(_MAGIC, _VERSION, self.flushed_phy_offset,
                                self.dispatched_phy_offset, zlib.crc32(head))
        return b"".join((head, bytes(_SECTION_AT - len(head)), section,
                         _SECTION_CRC.pack(zlib.crc32(section))))

    @classmethod
    def decode(cls, data: bytes, *, rocketmq_started: bool = False) -> Checkpoint:
        """The checkpoint in ``data``; never raises. ``rocketmq_started``: a RocketMQ
        broker has run the store, so bytes 24-39 without a section are its own."""
        if len(data) < _HEAD.size:
            return cls(origin=Origin.DAMAGED,
                       note=f"{len(data)} bytes, fewer than RocketMQ's {_HEAD.size}")
        head = data[:_HEAD.size]
        p, lg, ix, at24, at32 = _HEAD.unpack(head)
        section = data[_SECTION_AT:CHECKPOINT_SIZE]
        if len(section) == _SECTION.size + _SECTION_CRC.size and section[:4] == _MAGIC:
            _, version, flushed, dispatched, head_crc = _SECTION.unpack_from(section)
            (crc,) = _SECTION_CRC.unpack_from(section, _SECTION.size)
            origin, note = Origin.TIDEMQ, ""
            if crc != zlib.crc32(section[:_SECTION.size]):
                origin, note = Origin.DAMAGED, "TideMQ's section fails its check"
            elif version != _VERSION:
                origin, note = Origin.DAMAGED, f"TideMQ's section has unknown version {version}"
            elif head_crc != zlib.crc32(head):
                origin, note = Origin.ROCKETMQ, (
                    "RocketMQ's fields were rewritten after TideMQ's offsets: a RocketMQ "
                    "broker ran the store since")
            if origin is not Origin.TIDEMQ:
                return cls(p, lg, ix, master_flushed_offset=at24, confirm_phy_offset=at32,
                           origin=origin, note=note)
            return cls(p, lg, ix, master_flushed_offset=at24, confirm_phy_offset=at32,
                       flushed_phy_offset=flushed, dispatched_phy_offset=dispatched)
        if any(section):
            return cls(p, lg, ix, master_flushed_offset=at24, confirm_phy_offset=at32,
                       origin=Origin.DAMAGED, note="TideMQ's section has no magic")
        if (not rocketmq_started and len(data) == CHECKPOINT_SIZE and at24 >= at32 >= 0
                and not any(data[_HEAD.size:])):
            return cls(p, lg, ix, flushed_phy_offset=at24, dispatched_phy_offset=at32,
                       origin=Origin.EARLIER_TIDEMQ,
                       note="offsets at bytes 24 and 32, as an earlier TideMQ wrote them")
        return cls(p, lg, ix, master_flushed_offset=at24, confirm_phy_offset=at32,
                   origin=Origin.ROCKETMQ, note="RocketMQ's fields only: no TideMQ offsets")

    @classmethod
    def read(cls, path: Path, *, rocketmq_started: bool = False) -> Checkpoint:
        try:
            return cls.decode(path.read_bytes(), rocketmq_started=rocketmq_started)
        except FileNotFoundError:
            return cls(origin=Origin.MISSING)

    @classmethod
    def load(cls, layout: StoreLayout) -> Checkpoint:
        """The store's checkpoint, told apart from an earlier TideMQ's by whether a
        RocketMQ broker has started on the store."""
        return cls.read(layout.checkpoint_file,
                        rocketmq_started=rocketmq_started(layout.lock_file))

    def write(self, path: Path) -> None:
        atomic_write(path, self.encode())

    @property
    def min_timestamp(self) -> int:
        """Where abnormal recovery may start: min of the two stamps less 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def crash_scan_stamp(self) -> int:
        """A store time by which a RocketMQ broker that wrote this file had flushed,
        dispatched and, where it wrote ``indexMsgTimestamp``, indexed every record:
        :attr:`min_timestamp`, bounded by the index stamp as RocketMQ bounds it with
        ``messageIndexSafe`` (TideMQ always does: a key index entry lost to a crash is a
        message hidden from a query). 0, unknown, when a stamp it needs is 0."""
        if not self.physic_msg_timestamp or not self.logics_msg_timestamp:
            return 0
        if self.index_msg_timestamp:
            return min(self.min_timestamp, self.index_msg_timestamp)
        return self.min_timestamp


def rocketmq_started(lock_file: Path) -> bool:
    """Whether a RocketMQ broker has started on the store: it writes ``lock`` into the
    lock file, which TideMQ creates empty and never writes."""
    try:
        with open(lock_file, "rb") as f:
            return f.read(len(_ROCKETMQ_LOCK)) == _ROCKETMQ_LOCK
    except FileNotFoundError:
        return False


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
