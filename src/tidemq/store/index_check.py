"""The key index checked against the commit log, read-only (``tidemq store verify``).

The layout is :mod:`tidemq.store.index`'s. Each index file must have the size the store's
``maxHashSlotNum`` and ``maxIndexNum`` give it, an ``indexCount`` within its capacity, a
header that agrees with its entries, slots and chains that point only at written entries
(backwards), and entries that each name a record of the valid log under one of that
record's keys (``UNIQ_KEY`` and ``KEYS``, as dispatch indexes them). Every key of a record
the index must cover -- from the first file's first record up to the checkpoint's
dispatched offset, below which the store flushed the index -- must have its entry.
Findings are ``(where, offset, detail)``: the file name and the entry number (or -1).

The files do not record the ``maxHashSlotNum`` and ``maxIndexNum`` they were made with.
When they are not given and the files' common size does not fit the defaults, the
geometry of RocketMQ's defaults (``maxIndexNum = 4 * maxHashSlotNum``) is tried; when
that does not fit either the index is not checked and a warning says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tidemq.store import spool
from tidemq.store.entry_chunks import entry_chunks
from tidemq.store.index import index_file_size
from tidemq.store.index_format import ENTRY_DTYPE, HEADER_SIZE, SLOT_SIZE
from tidemq.store.layout import StoreLayout
from tidemq.store.spool import SpilledColumns

__all__ = ["IndexFinding", "check_index", "geometry"]

#: ``(where, offset, detail)``: an index file's name, an entry number or -1, what is wrong.
IndexFinding = tuple[str, int, str]

_HEADER = np.dtype([("begin_ts", ">i8"), ("end_ts", ">i8"), ("begin_phys", ">i8"),
                    ("end_phys", ">i8"), ("slot_count", ">i4"), ("count", ">i4")])
_SLOT = np.dtype(">i4")
#: Hash slots read at a time (1 MiB): the slots of a file are as many whatever the size of
#: the store, and mostly empty, so they are read in a few large reads.
_SLOT_ROWS = 1 << 18
MAX_EXAMPLES = 5

Ints = npt.NDArray[np.int64]


def geometry(layout: StoreLayout, slot_num: int | None, max_index_num: int | None,
             defaults: tuple[int, int]) -> tuple[int, int] | str:
    """``(maxHashSlotNum, maxIndexNum)`` to check the files with, or why they cannot be
    checked (see the module doc): the given values; else the defaults, or the geometry
    ``maxIndexNum = 4 * maxHashSlotNum``, whichever fits the size of some file (a file of
    another size is then reported as cut short or grown)."""
    if slot_num is not None or max_index_num is not None:
        return slot_num or defaults[0], max_index_num or defaults[1]
    sizes = sorted({p.stat().st_size for _, p in layout.segments_in(layout.index_dir)})
    if not sizes or index_file_size(*defaults) in sizes:
        return defaults
    for size in sizes:
        slots, rest = divmod(size - HEADER_SIZE, SLOT_SIZE + 4 * ENTRY_DTYPE.itemsize)
        if slots >= 1 and not rest:
            return slots, 4 * slots
    return (f"the index files ({', '.join(map(str, sizes))} bytes) fit neither the default "
            f"maxHashSlotNum={defaults[0]} and maxIndexNum={defaults[1]} nor "
            "maxIndexNum = 4 * maxHashSlotNum: the index is not checked (give the broker's "
            "values)")


def check_index(layout: StoreLayout, expected_hash: Ints, expected_phys: Ints, *,
                record_phys: Ints, damaged_phys: Ints, log_min: int, valid_end: int,
                covered_end: int, slot_num: int, max_index_num: int, work_dir: Path
                ) -> tuple[int, list[IndexFinding]]:
    """``(entries, findings)`` for the index files under ``layout``. ``expected_*``: the
    entries dispatch writes for the records of the log, in log order (those from
    ``valid_end`` on are left out); ``record_phys``: where every record of the log
    starts, damaged ones included (sorted); ``damaged_phys``: where damaged ones start
    (their entries are left alone: the damage is reported, and a lookup reads and checks
    the record anyway); ``covered_end``: the index must hold every key of records below
    it.

    Memory stays bounded whatever the size of the store: each file is read mapped, its
    entries that name a record are spilled to ``work_dir`` in log order, and the two
    sorted lists are compared a window of :data:`~tidemq.store.spool.CHUNK` entries at a
    time. (Only an index whose entries go back, which is reported, is compared in
    memory.)"""
    findings: list[IndexFinding] = []
    size = index_file_size(slot_num, max_index_num)
    found = SpilledColumns(work_dir, {"found_hash": "q", "found_phys": "q"})
    beyond: set[int] = set()
    not_record: set[int] = set()
    first_begin = -1
    entries = 0
    try:
        for _, path in layout.segments_in(layout.index_dir):
            actual = path.stat().st_size
            if actual != size:
                findings.append((path.name, -1, f"{actual} bytes, expected {size} for "
                                 f"maxHashSlotNum={slot_num} and maxIndexNum={max_index_num}: "
                                 "a start deletes it and lookups of its keys are lost"))
                continue
            for fh, fp in _check_file(path, slot_num, max_index_num, findings, work_dir):
                entries += len(fp)
                if len(fp):
                    first_begin = int(fp[0]) if first_begin < 0 else first_begin
                for at in range(0, len(fp), found.chunk):
                    h, p = fh[at : at + found.chunk], fp[at : at + found.chunk]
                    live = (p >= log_min) & ~np.isin(p, damaged_phys)
                    past = live & (p >= valid_end)
                    if len(beyond) < MAX_EXAMPLES:
                        beyond.update(np.unique(p[past])[:MAX_EXAMPLES].tolist())
                    live &= ~past
                    k = np.minimum(np.searchsorted(record_phys, p),
                                   max(len(record_phys) - 1, 0))
                    is_record = (record_phys[k] == p) if len(record_phys) else np.zeros(
                        len(p), bool)
                    if len(not_record) < MAX_EXAMPLES:
                        not_record.update(np.unique(p[live & ~is_record])[:MAX_EXAMPLES].tolist())
                    live &= is_record
                    found.cols["found_hash"].extend(h[live].tolist())
                    found.cols["found_phys"].extend(p[live].tolist())
                    found.spill()
        for at in sorted(beyond)[:MAX_EXAMPLES]:
            findings.append(("index", -1, f"an entry points at {at}, past the end of the valid "
                             f"log {valid_end}"))
        for at in sorted(not_record)[:MAX_EXAMPLES]:
            findings.append(("index", -1, f"an entry points at {at}, where no record starts"))
        if first_begin < 0:
            return entries, findings
        got = found.arrays()
        fh, fp = got["found_hash"], got["found_phys"]
        if len(fp) > 1 and not _sorted(fp):
            order = np.lexsort((fh, fp))
            fh, fp = fh[order], fp[order]
        lo = max(first_begin, log_min)
        first = int(np.searchsorted(expected_phys, lo))
        last = int(np.searchsorted(expected_phys, valid_end))
        _compare(expected_hash[first:last], expected_phys[first:last], fh, fp, covered_end,
                 found.chunk, findings)
    finally:
        found.close()
    return entries, findings


def _sorted(a: Ints) -> bool:
    step = spool.CHUNK
    return all(not np.any(np.diff(a[at : at + step + 1]) < 0) for at in range(0, len(a), step))


def _compare(eh: Ints, ep: Ints, fh: Ints, fp: Ints, covered_end: int, chunk: int,
             findings: list[IndexFinding]) -> None:
    """The entries found ``(fh, fp)`` against those expected ``(eh, ep)``, both sorted by
    record, a window of records at a time: found ones no key of their record has (stray),
    and expected ones of records below ``covered_end`` that are not found (missing)."""
    i = j = 0
    ne, nf = len(ep), len(fp)
    stray: list[int] = []
    strays = missing = 0
    missing_lo = missing_hi = -1
    while i < ne or j < nf:
        least = min(int(ep[i]) if i < ne else 1 << 63, int(fp[j]) if j < nf else 1 << 63)
        hi = min(int(ep[i + chunk]) if i + chunk < ne else 1 << 63,
                 int(fp[j + chunk]) if j + chunk < nf else 1 << 63)
        hi = max(hi, least + 1)  # a window holds at least one record
        i2 = ne if hi == 1 << 63 else int(np.searchsorted(ep, hi))
        j2 = nf if hi == 1 << 63 else int(np.searchsorted(fp, hi))
        want = _pairs(eh[i:i2], ep[i:i2])
        have = _pairs(fh[j:j2], fp[j:j2])
        extra = have - want
        strays += len(extra)
        if len(stray) < MAX_EXAMPLES:
            stray.extend(sorted(at for _h, at in extra)[: MAX_EXAMPLES - len(stray)])
        lost = [at for _h, at in want - have if at < covered_end]
        if lost:
            missing += len(lost)
            missing_lo = min(lost) if missing_lo < 0 else min(missing_lo, *lost)
            missing_hi = max(missing_hi, *lost)
        i, j = i2, j2
    for at in stray:
        findings.append(("index", -1, f"an entry for the record at {at} has a key hash none "
                         "of its keys has"))
    if strays > MAX_EXAMPLES:
        findings.append(("index", -1, f"... and {strays - MAX_EXAMPLES} more such entries"))
    if missing:
        findings.append(("index", -1, f"{missing} keys of records at {missing_lo}.."
                         f"{missing_hi} have no entry (lookups by them fail)"))


def _pairs(hashes: Ints, phys: Ints) -> set[tuple[int, int]]:
    return set(zip(hashes.tolist(), phys.tolist(), strict=True))


def _check_file(path: Path, slot_num: int, max_index_num: int, findings: list[IndexFinding],
                work_dir: Path) -> Iterator[tuple[Ints, Ints]]:
    """One file's header, slots and entries, read a chunk at a time; yields its
    ``(hashes, phys)`` a chunk at a time, then adds its findings. What is held between
    chunks is a few numbers, the first examples of each finding and, for the chains, a
    count per entry in a file of ``work_dir`` (one byte each)."""
    name = path.name
    with path.open("rb") as f:
        head = np.frombuffer(f.read(HEADER_SIZE), dtype=_HEADER)[0]
    count = int(head["count"])
    if not 1 <= count <= max_index_num:
        findings.append((name, -1, f"indexCount {count} is outside 1..{max_index_num}: "
                         "a start reads the file as empty"))
        return
    entries_at = HEADER_SIZE + slot_num * SLOT_SIZE + ENTRY_DTYPE.itemsize  # after entry 0
    written = max(0, (path.stat().st_size - entries_at) // ENTRY_DTYPE.itemsize)
    if written < count - 1:
        findings.append((name, -1, f"indexCount {count} but only {written} entries written"))
        return
    bad_slots, first_bad_slot = 0, (-1, -1)
    for at, slots in _slot_chunks(path, slot_num):
        bad = np.flatnonzero((slots < 0) | (slots >= count))
        if len(bad) and not bad_slots:
            first_bad_slot = (at + int(bad[0]), int(slots[bad[0]]))
        bad_slots += len(bad)
    chains = _Chains(path, slot_num, count, entries_at, work_dir)
    try:
        bad_prev: list[IndexFinding] = []
        back: IndexFinding | None = None
        first_phys = last_phys = 0
        number = 1  # the entry number of the chunk's first entry
        for ent in entry_chunks(path, ENTRY_DTYPE, start=entries_at, count=count - 1):
            phys = ent["phys"].astype(np.int64)
            prev = ent["prev"].astype(np.int64)
            numbers = np.arange(number, number + len(ent), dtype=np.int64)
            wrong = np.flatnonzero((prev < 0) | (prev >= numbers))
            bad_prev.extend((name, int(numbers[i]), f"chain link {int(prev[i])} does not "
                             "point back") for i in wrong[:MAX_EXAMPLES - len(bad_prev)].tolist())
            if not bad_slots and not bad_prev:
                chains.links(ent["hash"].astype(np.int64) % slot_num, prev, numbers)
            if back is None:
                steps = np.diff(phys, prepend=phys[0] if number == 1 else last_phys) < 0
                if np.any(steps):
                    back = (name, int(numbers[int(np.argmax(steps))]), "physical offsets go back")
            first_phys = int(phys[0]) if number == 1 else first_phys
            last_phys = int(phys[-1])
            number += len(ent)
            yield ent["hash"].astype(np.int64), phys
        if bad_slots:
            s, v = first_bad_slot
            findings.append((name, -1, f"{bad_slots} hash slots point past the entries "
                             f"written (slot {s} -> {v})"))
        findings.extend(bad_prev)
        if not bad_prev and not bad_slots:
            chains.heads(findings)
    finally:
        chains.close()
    if back is not None:
        findings.append(back)
    if count > 1 and (int(head["begin_phys"]) != first_phys
                      or int(head["end_phys"]) != last_phys):
        findings.append((name, -1, f"header says entries {int(head['begin_phys'])}.."
                         f"{int(head['end_phys'])}, the entries {first_phys}..{last_phys}"))


def _slot_chunks(path: Path, slot_num: int) -> Iterator[tuple[int, Ints]]:
    """``(first slot, slots)`` of ``path``'s hash slots, a chunk at a time."""
    at = 0
    for chunk in entry_chunks(path, _SLOT, start=HEADER_SIZE, count=slot_num, rows=_SLOT_ROWS):
        yield at, chunk.astype(np.int64)
        at += len(chunk)


class _Chains:
    """Every entry on exactly one chain, the chain of its key's slot: it is the head of
    that slot or the link of exactly one later entry of the same slot. (Links point
    back, so chains cannot loop.) An entry off its chain is invisible to lookups.

    Fed the entries a chunk at a time (:meth:`links`), then the slots (:meth:`heads`);
    how often each entry is reached is counted, up to two, in a file of ``work_dir``,
    and the slot of an earlier entry is read from the index file itself (mapped)."""

    def __init__(self, path: Path, slot_num: int, count: int, entries_at: int,
                 work_dir: Path) -> None:
        self.path = path
        self.slot_num = slot_num
        self.count = count
        self._entries = (np.memmap(path, dtype=ENTRY_DTYPE, mode="r", offset=entries_at,
                                   shape=(count - 1,)) if count > 1 else None)
        self._reached_path = work_dir / f"{path.name}.reached"
        self._reached = np.memmap(self._reached_path, dtype=np.uint8, mode="w+",
                                  shape=(count,))  # by entry number; 0 is the null entry
        self._wrong_slot: list[IndexFinding] = []

    def _slot_of(self, numbers: Ints) -> Ints:
        assert self._entries is not None
        hashes: Ints = self._entries["hash"][numbers - 1].astype(np.int64)
        return hashes % self.slot_num

    def _reach(self, numbers: Ints) -> None:
        where, times = np.unique(numbers, return_counts=True)
        self._reached[where] = np.minimum(self._reached[where] + times, 2)

    def links(self, slot_of: Ints, prev: Ints, numbers: Ints) -> None:
        """Entries ``numbers`` (whose links all point back), their slots and links."""
        self._reach(prev)
        linked = np.flatnonzero(prev > 0)
        if len(self._wrong_slot) < MAX_EXAMPLES and len(linked):
            off = linked[self._slot_of(prev[linked]) != slot_of[linked]]
            self._wrong_slot.extend(
                (self.path.name, int(numbers[i]), f"chain link {int(prev[i])} leads to "
                 "another slot's entry") for i in off[:MAX_EXAMPLES - len(self._wrong_slot)])

    def heads(self, findings: list[IndexFinding]) -> None:
        """The slots (whose heads all lie among the entries written); then the findings."""
        name = self.path.name
        wrong_head: list[IndexFinding] = []
        for at, slots in _slot_chunks(self.path, self.slot_num):
            self._reach(slots)
            head_of = np.flatnonzero(slots > 0)
            if len(wrong_head) >= MAX_EXAMPLES or not len(head_of):
                continue
            their = self._slot_of(slots[head_of])
            for k in np.flatnonzero(their != at + head_of)[:MAX_EXAMPLES - len(wrong_head)]:
                s = at + int(head_of[k])
                wrong_head.append((name, int(slots[head_of[k]]), f"hash slot {s} points at an "
                                   f"entry of slot {int(their[k])}"))
        findings.extend(wrong_head)
        findings.extend(self._wrong_slot)
        lost = 0
        for at in range(1, self.count, max(spool.CHUNK, 1)):
            reached = np.asarray(self._reached[at : at + max(spool.CHUNK, 1)])
            off = np.flatnonzero(reached != 1)
            for i in off[:max(MAX_EXAMPLES - lost, 0)].tolist():
                findings.append((name, at + i, "not on its slot's chain (lookups miss it)"
                                 if reached[i] == 0 else "on more than one chain"))
            lost += len(off)
        if lost > MAX_EXAMPLES:
            findings.append((name, -1, f"... and {lost - MAX_EXAMPLES} more entries off "
                             "their chains"))

    def close(self) -> None:
        self._entries = None
        del self._reached
        self._reached_path.unlink(missing_ok=True)
