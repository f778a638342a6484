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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
from rocksdict import AccessType, Options, Rdict

from tidemq.store.lmq_store import ENTRY_DTYPE, split_entry_key

__all__ = ["LmqFinding", "check_lmq", "open_failure"]

LmqFinding = tuple[str, int, str]

_Q = struct.Struct(">q")  # the C and D values
MAX_EXAMPLES = 5

Ints = npt.NDArray[np.int64]
#: ``(name, offset) -> (phys, size)`` of the LMQ entries the commit log implies.
Expected = Mapping[tuple[str, int], tuple[int, int]]


def open_failure(path: Path) -> str:
    """Why the LMQ store at ``path`` cannot be opened read-only ("" when it can)."""
    try:
        Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only()).close()
    except Exception as exc:  # RocksDB reports every failure as a plain Exception
        return str(exc) or type(exc).__name__
    return ""


def check_lmq(path: Path, expected: Expected, *, record_phys: Ints, record_size: Ints,
              damaged_phys: set[int], log_min: int, valid_end: int
              ) -> tuple[int, list[LmqFinding]]:
    """``(entries, findings)`` for the LMQ store at ``path``; ``record_*``: the sound
    records of the valid log (sorted); entries of the damaged ones, at ``damaged_phys``,
    are left alone (the damage is reported, and readers skip the record)."""
    try:
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # RocksDB reports every failure as a plain Exception
        return 0, [("LMQ store", -1, f"cannot be opened ({exc}); --repair rebuilds its "
                    "entries, but consumer offsets and deletions kept in damaged files are "
                    "lost")]
    findings: list[LmqFinding] = []
    try:
        raw = db.get(b"C")
        checkpoint = _Q.unpack(raw)[0] if isinstance(raw, bytes) and len(raw) == 8 else 0
        floors: dict[str, int] = {}
        for k, v in _items(db, b"D"):
            if len(v) == 8:
                floors[k[1:].decode("utf-8", "replace")] = _Q.unpack(v)[0]
        present: set[tuple[str, int]] = set()
        entries = 0
        per_queue: dict[str, int] = {}
        for key, value in _items(db, b"E"):
            if len(key) < 10 or key[-9] != 0:
                findings.append(("LMQ store", -1, f"an entry key {key!r} is not name, NUL, "
                                 "offset"))
                continue
            name, first = split_entry_key(key)
            n, rest = divmod(len(value), ENTRY_DTYPE.itemsize)
            if rest:
                _add(findings, per_queue, name, first + n,
                     f"a run of {len(value)} bytes ends in a partial entry")
            run = np.frombuffer(value, dtype=ENTRY_DTYPE, count=n)
            for i, (phys, size) in enumerate(zip(run["phys"].tolist(), run["size"].tolist(),
                                                 strict=True)):
                offset = first + i
                entries += 1
                present.add((name, offset))
                if phys < log_min or phys in damaged_phys:
                    continue  # expired (retention drops it), or a damaged record
                detail = _entry_problem(name, offset, phys, size, expected, record_phys,
                                        record_size, valid_end)
                if detail:
                    _add(findings, per_queue, name, offset, detail)
        missing: dict[str, list[int]] = {}
        for (name, offset), (phys, _size) in expected.items():
            if (phys < log_min or phys >= checkpoint or phys < floors.get(name, 0)
                    or (name, offset) in present):
                continue
            missing.setdefault(name, []).append(offset)
        for name, offsets in sorted(missing.items()):
            _add(findings, per_queue, name, min(offsets),
                 f"{len(offsets)} entries of records below the LMQ checkpoint {checkpoint} "
                 "are missing")
    finally:
        db.close()
    for name, n in sorted(per_queue.items()):
        if n > MAX_EXAMPLES:
            findings.append((name, -1, f"... and {n - MAX_EXAMPLES} more"))
    return entries, findings


def _items(db: Rdict, tag: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The keys and values of one kind (their first byte is ``tag``), in key order."""
    for k, v in db.items(from_key=tag):
        key, value = cast(bytes, k), cast(bytes, v)
        if key[:1] != tag:
            return
        yield key, value


def _entry_problem(name: str, offset: int, phys: int, size: int, expected: Expected,
                   record_phys: Ints, record_size: Ints, valid_end: int) -> str:
    if phys >= valid_end:
        return f"points at {phys}, past the end of the valid log {valid_end}"
    k = int(np.searchsorted(record_phys, phys))
    if k >= len(record_phys) or int(record_phys[k]) != phys:
        return f"no record starts at {phys}"
    if int(record_size[k]) != size:
        return f"size {size} differs from the record at {phys} ({int(record_size[k])})"
    want = expected.get((name, offset))
    if want is None or want[0] != phys:
        return f"the record at {phys} does not fan out to this LMQ at this offset"
    return ""


def _add(findings: list[LmqFinding], per_queue: dict[str, int], name: str, offset: int,
         detail: str) -> None:
    per_queue[name] = per_queue.get(name, 0) + 1
    if per_queue[name] <= MAX_EXAMPLES:
        findings.append((name, offset, detail))
