"""The LMQ store's entries checked against the commit log, read-only (``tidemq store
verify``).

The keys are :mod:`tidemq.store.lmq_store`'s. The database is opened read-only (a
running broker keeps writing; what is read is then a moment's view). Every ``E`` run must
hold whole entries, and each entry must name a record of the valid log, with that
record's size, whose ``INNER_MULTI_DISPATCH`` names this LMQ at this offset. Every LMQ
entry a record of the valid log fans out to must be there, up to the store's checkpoint
``C`` (dispatch writes the rest again at the next start), except for LMQs deleted after
the record (their tombstone floor lies above it). Findings are ``(where, offset,
detail)``: the LMQ name (or the store) and the queue offset (or -1).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
from rocksdict import AccessType, Options, Rdict, WriteBatch

from tidemq.store import spool
from tidemq.store.lmq_store import ENTRY_DTYPE, split_entry_key

__all__ = ["ExpectedLmq", "LmqFinding", "check_lmq", "open_failure"]

LmqFinding = tuple[str, int, str]

_Q = struct.Struct(">q")  # the C and D values
_VALUE = struct.Struct(">qi")  # an expected entry: phys, size
MAX_EXAMPLES = 5

Ints = npt.NDArray[np.int64] | npt.NDArray[np.int32]


def open_failure(path: Path) -> str:
    """Why the LMQ store at ``path`` cannot be opened read-only ("" when it can)."""
    try:
        Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only()).close()
    except Exception as exc:  # RocksDB reports every failure as a plain Exception
        return str(exc) or type(exc).__name__
    return ""


class ExpectedLmq:
    """The LMQ entries the commit log implies, ``(name, offset) -> (phys, size)``, in a
    temporary RocksDB at ``path``: a store's billions of fan-outs do not fit in memory,
    and RocksDB hands them back in the order of the LMQ store's ``E`` keys."""

    def __init__(self, path: Path, chunk: int | None = None) -> None:
        self._db = Rdict(str(path), Options(raw_mode=True))
        self._batch = WriteBatch(raw_mode=True)
        self._pending = 0
        self._chunk = chunk or spool.CHUNK

    def add(self, name: str, offset: int, phys: int, size: int) -> None:
        self._batch.put(name.encode() + b"\x00" + _Q.pack(offset), _VALUE.pack(phys, size))
        self._pending += 1
        if self._pending >= self._chunk:
            self._write()

    def _write(self) -> None:
        if self._pending:
            self._db.write(self._batch)
            self._batch = WriteBatch(raw_mode=True)
            self._pending = 0

    def items(self) -> Iterator[tuple[bytes, int, int]]:
        """``(name NUL offset, phys, size)`` in key order."""
        self._write()
        for k, v in self._db.items():
            phys, size = _VALUE.unpack(cast(bytes, v))
            yield cast(bytes, k), phys, size

    def close(self) -> None:
        self._db.close()


def check_lmq(path: Path, expected: ExpectedLmq, *, record_phys: Ints, record_size: Ints,
              damaged_phys: set[int], log_min: int, valid_end: int
              ) -> tuple[int, list[LmqFinding]]:
    """``(entries, findings)`` for the LMQ store at ``path``; ``record_*``: the records of
    the log (sorted); entries of the damaged ones, at ``damaged_phys``, are left alone
    (the damage is reported, and readers skip the record).

    The entries found and those ``expected`` are walked side by side in key order (LMQ
    by LMQ, offset by offset), so memory holds one run and one LMQ's findings at a time,
    however many entries the store has."""
    try:
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # RocksDB reports every failure as a plain Exception
        return 0, [("LMQ store", -1, f"cannot be opened ({exc}); --repair rebuilds its "
                    "entries, but consumer offsets and deletions kept in damaged files are "
                    "lost")]
    out = _Findings()
    entries = 0
    try:
        raw = db.get(b"C")
        checkpoint = _Q.unpack(raw)[0] if isinstance(raw, bytes) and len(raw) == 8 else 0
        floors = _Floors(_items(db, b"D"))
        want = expected.items()
        nxt = next(want, None)

        def missing_before(key: bytes) -> tuple[bytes, int, int] | None:
            """Step over the expected entries before ``key``: none of them was found."""
            item = nxt
            while item is not None and (not key or item[0] < key):
                k, phys, _size = item
                if log_min <= phys < min(checkpoint, valid_end):
                    name = k[:-9]
                    if phys >= floors.floor(name):
                        out.missing(name.decode("utf-8", "replace"), int(_Q.unpack(k[-8:])[0]))
                item = next(want, None)
            return item

        for key, value in _items(db, b"E"):
            if len(key) < 10 or key[-9] != 0:
                out.store(f"an entry key {key!r} is not name, NUL, offset")
                continue
            name, first = split_entry_key(key)
            prefix = key[1:-8]
            n, rest = divmod(len(value), ENTRY_DTYPE.itemsize)
            if rest:
                nxt = missing_before(prefix + _Q.pack(first))
                out.add(name, first + n, f"a run of {len(value)} bytes ends in a partial entry")
            run = np.frombuffer(value, dtype=ENTRY_DTYPE, count=n)
            for i, (phys, size) in enumerate(zip(run["phys"].tolist(), run["size"].tolist(),
                                                 strict=True)):
                offset = first + i
                k = prefix + _Q.pack(offset)
                nxt = missing_before(k)
                fans_out = nxt is not None and nxt[0] == k and nxt[1] < valid_end
                expected_phys = nxt[1] if fans_out and nxt is not None else -1
                if nxt is not None and nxt[0] == k:
                    nxt = next(want, None)
                entries += 1
                if phys < log_min or phys in damaged_phys:
                    continue  # expired (retention drops it), or a damaged record
                detail = _entry_problem(phys, size, expected_phys, record_phys, record_size,
                                        valid_end)
                if detail:
                    out.add(name, offset, detail)
        nxt = missing_before(b"")
        out.flush(checkpoint)
    finally:
        db.close()
    return entries, out.findings


class _Floors:
    """Tombstone floors of deleted LMQs (``D`` keys), looked up in name order."""

    def __init__(self, items: Iterator[tuple[bytes, bytes]]) -> None:
        self._items = items
        self._at: tuple[bytes, int] | None = None
        self._done = False

    def floor(self, name: bytes) -> int:
        """The floor of LMQ ``name`` (0: never deleted); names must not go back."""
        while not self._done and (self._at is None or self._at[0] < name):
            got = next(self._items, None)
            if got is None:
                self._done, self._at = True, None
                break
            k, v = got
            if len(v) == 8:
                self._at = (k[1:], int(_Q.unpack(v)[0]))
        return self._at[1] if self._at is not None and self._at[0] == name else 0


class _Findings:
    """Findings in LMQ order: at most :data:`MAX_EXAMPLES` per LMQ, then a count."""

    def __init__(self) -> None:
        self.findings: list[LmqFinding] = []
        self._name = ""
        self._count = 0
        self._missing: list[int] = []  # count, first offset
        self._checkpoint = 0

    def store(self, detail: str) -> None:
        self.findings.append(("LMQ store", -1, detail))

    def _switch(self, name: str) -> None:
        if name != self._name:
            self._close()
            self._name, self._count = name, 0

    def add(self, name: str, offset: int, detail: str) -> None:
        self._switch(name)
        self._count += 1
        if self._count <= MAX_EXAMPLES:
            self.findings.append((name, offset, detail))

    def missing(self, name: str, offset: int) -> None:
        self._switch(name)
        if self._missing:
            self._missing[0] += 1
        else:
            self._missing = [1, offset]

    def _close(self) -> None:
        if self._missing:
            count, first = self._missing
            self._missing = []
            self.add(self._name, first, f"{count} entries of records below the LMQ checkpoint "
                     f"{self._checkpoint} are missing")
        if self._count > MAX_EXAMPLES:
            self.findings.append((self._name, -1, f"... and {self._count - MAX_EXAMPLES} more"))
        self._count = 0

    def flush(self, checkpoint: int) -> None:
        self._checkpoint = checkpoint
        self._close()


def _items(db: Rdict, tag: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The keys and values of one kind (their first byte is ``tag``), in key order."""
    for k, v in db.items(from_key=tag):
        key, value = cast(bytes, k), cast(bytes, v)
        if key[:1] != tag:
            return
        yield key, value


def _entry_problem(phys: int, size: int, expected_phys: int, record_phys: Ints,
                   record_size: Ints, valid_end: int) -> str:
    if phys >= valid_end:
        return f"points at {phys}, past the end of the valid log {valid_end}"
    k = int(np.searchsorted(record_phys, phys))
    if k >= len(record_phys) or int(record_phys[k]) != phys:
        return f"no record starts at {phys}"
    if int(record_size[k]) != size:
        return f"size {size} differs from the record at {phys} ({int(record_size[k])})"
    if expected_phys != phys:
        return f"the record at {phys} does not fan out to this LMQ at this offset"
    return ""
