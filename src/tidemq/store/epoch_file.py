"""The epoch file (``epochFileCheckpoint``): which controller epoch began at which
commit-log offset, as upstream's ``EpochFileCache`` writes it.

Layout (UTF-8 text, lines ending in ``\\n``):

=========  ===================================================================
line       content
=========  ===================================================================
1          the number of entries, decimal
2          CRC-32 of the entry lines (every byte of lines 3..), ``& 0x7FFFFFFF``
3 ..       one entry a line: ``<epoch>-<startOffset>``, epochs rising
=========  ===================================================================

An entry's end is the next entry's start; the newest entry's end is the log's end.
Written whole with :func:`~tidemq.store.checkpoint.atomic_write`, so a crash leaves the
old file or the new one. A file that does not parse or whose CRC does not match raises
:class:`EpochFileError` naming what is wrong: the epochs decide what a returning master
cuts from its log, so they are never guessed.

Two brokers' logs agree up to their *consistent point* (:func:`consistent_point`): the
end of the newest epoch both hold with the same start, the smaller of the two ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Sequence
from pathlib import Path

from tidemq.errors import TideMQError
from tidemq.store.checkpoint import atomic_write

__all__ = ["EpochEntry", "EpochFile", "EpochFileError", "consistent_point", "decode", "encode"]


class EpochFileError(TideMQError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"epoch file {path}: {reason}")
        self.path = path
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


def encode(entries: Sequence[EpochEntry]) -> bytes:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode()
    return f"{len(entries)}\n{zlib.crc32(lines) & 0x7FFFFFFF}\n".encode() + lines


def decode(data: bytes, where: str = "<bytes>") -> list[EpochEntry]:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise EpochFileError(where, "not UTF-8 text") from None
    count_line, _, rest = text.partition("\n")
    crc_line, _, body = rest.partition("\n")
    if not count_line.isdigit() or not crc_line.isdigit():
        raise EpochFileError(where, "the first two lines must be the count and the CRC")
    if zlib.crc32(body.encode()) & 0x7FFFFFFF != int(crc_line):
        raise EpochFileError(where, "the CRC of the entries does not match")
    entries: list[EpochEntry] = []
    for line in body.splitlines():
        epoch, sep, start = line.partition("-")
        if not sep or not epoch.isdigit() or not start.isdigit():
            raise EpochFileError(where, f"entry {line!r} is not <epoch>-<startOffset>")
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != int(count_line):
        raise EpochFileError(where, f"{count_line} entries announced, {len(entries)} found")
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise EpochFileError(where, f"entry {after} does not follow {before}")
    return entries


def consistent_point(mine: Sequence[EpochEntry], my_end: int,
                     theirs: Sequence[EpochEntry], their_end: int) -> int | None:
    """Where two logs stop agreeing (``None``: no epoch in common)."""
    def ends(entries: Sequence[EpochEntry], end: int) -> dict[int, tuple[int, int]]:
        nexts = [e.start_offset for e in entries[1:]] + [end] if entries else []
        return {e.epoch: (e.start_offset, n) for e, n in zip(entries, nexts, strict=True)}

    my_ends, their_ends = ends(mine, my_end), ends(theirs, their_end)
    for epoch in sorted(my_ends, reverse=True):
        other = their_ends.get(epoch)
        if other is not None and other[0] == my_ends[epoch][0]:
            return min(my_ends[epoch][1], other[1])
    return None


class EpochFile:
    """The epoch file of one store; entries kept in memory, written whole on change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        self.entries = decode(self.path.read_bytes(), str(self.path)) if self.path.exists() else []
        return self.entries

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset``; ``False`` (nothing written)
        when it is already the newest entry. An epoch or offset going back raises."""
        last = self.last
        if last is not None and last.epoch == epoch and last.start_offset == start_offset:
            return False
        if last is not None and (epoch <= last.epoch or start_offset < last.start_offset):
            raise EpochFileError(str(self.path), f"epoch {epoch} at {start_offset} does not "
                                 f"follow {last.epoch} at {last.start_offset}")
        self.entries.append(EpochEntry(epoch, start_offset))
        atomic_write(self.path, encode(self.entries))
        return True

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Take another broker's epochs as this log's (a replica adopts its master's)."""
        new = list(entries)
        if new != self.entries:
            self.entries = new
            atomic_write(self.path, encode(new))

    def truncate(self, end: int) -> None:
        """Forget the epochs that began at or after ``end`` (the log was cut there)."""
        kept = [e for e in self.entries if e.start_offset < end]
        if kept != self.entries:
            self.entries = kept
            atomic_write(self.path, encode(kept))
