"""The chunked queue checks (:mod:`tidemq.store.queue_check`): what they find does not
depend on how many entries are read at a time, over queue files of any content."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.store import spool
from tidemq.store.batch_consume_queue import BCQ_DTYPE, HOLE_SIZE
from tidemq.store.consume_queue import BLANK_UNIT_SIZE, CQ_DTYPE
from tidemq.store.entry_chunks import entry_chunks, valid_prefix
from tidemq.store.queue_check import QueueTotals, check_batch_queue, check_consume_queue

#: Records of the commit log: where each starts, its size, topic id, queue and offset.
PHYS = np.array([100, 200, 300, 400, 500, 600], dtype=np.int64)
COLS = {"phys": PHYS, "size": np.full(6, 100, dtype=np.int32),
        "topic": np.array([0, 0, 0, 1, 0, 0], dtype=np.int32),
        "queue_id": np.array([0, 0, 0, 0, 1, 0], dtype=np.int32),
        "queue_offset": np.arange(6, dtype=np.int64)}
TOPICS = {"T": 0, "U": 1}

_phys = st.sampled_from([0, -1, 50, 100, 200, 300, 350, 400, 500, 600, 700, 900])
_size = st.sampled_from([0, -5, 17, 100, BLANK_UNIT_SIZE])
_cq_entry = st.tuples(_phys, _size, st.integers(0, 3))
_bcq_entry = st.tuples(_phys, _size, st.integers(-1, 9), st.integers(-1, 3))


def _write(root: Path, name: str, rows: list[tuple[Any, ...]], dtype: np.dtype[Any],
           fields: tuple[str, ...], extra: int) -> tuple[int, Path]:
    arr = np.zeros(len(rows), dtype=dtype)
    for i, row in enumerate(rows):
        for field, value in zip(fields, row, strict=True):
            arr[field][i] = value
    path = root / name
    path.write_bytes(arr.tobytes() + bytes(extra))
    return int(name), path


def _files(rows: list[tuple[Any, ...]], per_file: int, dtype: np.dtype[Any],
           fields: tuple[str, ...], cut: int, root: Path) -> list[tuple[int, Path]]:
    unit = dtype.itemsize
    out = []
    for k, at in enumerate(range(0, max(len(rows), 1), per_file)):
        part = rows[at : at + per_file]
        pad = (per_file - len(part)) * unit
        if k == len(rows) // per_file and cut:  # the last file cut short
            pad = max(pad - cut, 0)
        out.append(_write(root, f"{at * unit:020d}", part, dtype, fields, pad))
    return out


def _runs(check: Any, found: list[tuple[int, Path]], file_size: int) -> list[Any]:
    results = []
    for chunk in (1, 2, 3, 7, 1 << 16):
        spool.CHUNK = chunk
        totals = QueueTotals()
        result = check("T", 0, found, file_size, COLS, TOPICS, 150, 650, totals)
        results.append((result, totals))
    return results


@pytest.fixture(autouse=True)
def _restore_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool, "CHUNK", spool.CHUNK)


@settings(max_examples=150, deadline=None)
@given(st.lists(_cq_entry, max_size=20), st.integers(1, 6), st.integers(0, 39))
def test_consume_queue_findings_do_not_depend_on_the_chunk(
        rows: list[tuple[int, int, int]], per_file: int, cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        found = _files(rows, per_file, CQ_DTYPE, ("phys", "size", "tags"), cut, Path(tmp))
        results = _runs(check_consume_queue, found, per_file * CQ_DTYPE.itemsize)
    assert all(r == results[-1] for r in results), results


@settings(max_examples=150, deadline=None)
@given(st.lists(_bcq_entry, max_size=20), st.integers(1, 6), st.integers(0, 91))
def test_batch_queue_findings_do_not_depend_on_the_chunk(
        rows: list[tuple[int, int, int, int]], per_file: int, cut: int) -> None:
    rows = [(phys, size if size != BLANK_UNIT_SIZE else HOLE_SIZE, base, batch)
            for phys, size, base, batch in rows]
    with tempfile.TemporaryDirectory() as tmp:
        found = _files(rows, per_file, BCQ_DTYPE, ("phys", "size", "base", "batch"), cut,
                       Path(tmp))
        results = _runs(check_batch_queue, found, per_file * BCQ_DTYPE.itemsize)
    assert all(r == results[-1] for r in results), results


def test_a_queue_is_checked_entry_by_entry(tmp_path: Path) -> None:
    """Findings in order, at their queue offsets, with the counts."""
    rows = [(0, BLANK_UNIT_SIZE, 0), (100, 100, 0), (200, 100, 0), (150, 100, 0),
            (400, 100, 0), (500, 17, 0), (900, 100, 0), (200, BLANK_UNIT_SIZE, 0),
            (0, 0, 0), (0, 0, 5)]
    found = [_write(tmp_path, f"{0:020d}", rows, CQ_DTYPE, ("phys", "size", "tags"), 0)]
    spool.CHUNK = 3
    totals = QueueTotals()
    result = check_consume_queue("T", 0, found, len(rows) * 20, COLS, TOPICS, 150, 650, totals)
    assert result.findings == [
        (8, "non-zero entries after the end of valid entries"),
        (3, "physical offsets do not increase"),
        (6, "points at 900, past the end of the valid log 650"),
        (3, "no record starts at 150"),
        (5, "size differs from record at 500"),
        (4, "record at 400 belongs to another queue"),
        (5, "record at 500 belongs to another queue"),
        (2, "record at 200 has another queue offset"),
        (4, "record at 400 has another queue offset"),
        (5, "record at 500 has another queue offset")]
    assert (result.dropped, result.end) == (1, 8)
    assert (totals.entries, totals.expired, totals.holes) == (6, 1, 1)


def test_entries_are_read_a_chunk_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(range(200)) + b"x")  # a partial entry at the end
    spool.CHUNK = 3
    dtype = np.dtype("u1,u1,u1,u1,u1")
    chunks = list(entry_chunks(path, dtype))
    assert [len(c) for c in chunks] == [3] * 13 + [1]
    assert b"".join(c.tobytes() for c in chunks) == bytes(range(200))
    assert [len(c) for c in entry_chunks(path, dtype, start=5, count=4)] == [3, 1]
    # valid up to the first chunk starting at byte 100 or later: seven chunks of 15 bytes
    assert valid_prefix(path, dtype, lambda e: len(e) * 5 if e[0][0] < 100 else 0) == 105
