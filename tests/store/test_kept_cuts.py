"""The kept cut: the whole records of a tail about to be cut, copied unchanged into
``truncated/<epoch>-<from>.log``, at most ``keptCutMaxBytes`` of them; read back record
by record; a file that does not hold whole records is refused naming the byte."""

from __future__ import annotations

import logging
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import ConfigError
from tidemq.store import kept_cuts
from tidemq.store.config import StoreConfig
from tidemq.store.epoch_file import EpochEntry
from tidemq.store.message_store import MessageStore

from .conftest import FakeClock, msg, small_config

SEGMENT = 4096


def _filled(root: Path, bodies: list[bytes]) -> tuple[MessageStore, list[tuple[int, bytes]]]:
    store = MessageStore(small_config(root, mapped_file_size_commit_log=SEGMENT),
                         clock=FakeClock(1_700_000_000_000))
    store.start()
    placed = []
    for i, body in enumerate(bodies):
        result = store.put(f"T{i % 2}", i % 3, msg(body, KEYS=f"k{i}"))
        placed.append(result.phys_offsets[0])
    assert store.wait_dispatched()
    out = []
    for phys in placed:
        seg = store.commitlog.segment_for(phys)
        assert seg is not None
        size = int.from_bytes(seg.mm[phys - seg.base : phys - seg.base + 4], "big")
        out.append((phys, bytes(seg.mm[phys - seg.base : phys - seg.base + size])))
    return store, out


def _kept_file(root: Path, bodies: list[bytes]) -> tuple[kept_cuts.CutKept,
                                                         list[tuple[int, bytes]]]:
    """The records of ``bodies``, kept from the first on (epoch 1), as a cut keeps them."""
    store, placed = _filled(root, bodies)
    try:
        kept = kept_cuts.keep(store.commitlog.segments, store.layout.truncated_dir,
                              placed[0][0], 1, 1 << 30)
    finally:
        store.shutdown()
    assert kept.path is not None
    return kept, placed


def _read(path: Path) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    out, pos = [], 0
    for rec in kept_cuts.read_kept(path):
        out.append((rec.physical_offset, data[pos : pos + rec.total_size]))
        pos += rec.total_size
    assert pos == len(data)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(st.binary(min_size=0, max_size=900), min_size=1, max_size=40),
       first=st.integers(0, 10**6), limit=st.integers(0, 40_000), epoch=st.integers(0, 99))
def test_the_kept_file_holds_the_first_whole_records_of_the_tail_within_the_limit(
        bodies: list[bytes], first: int, limit: int, epoch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, placed = _filled(Path(tmp) / "store", bodies)
        try:
            k = first % len(placed)
            start = placed[k][0]
            tail = placed[k:]
            fits = 0
            while fits < len(tail) and sum(len(b) for _, b in tail[: fits + 1]) <= limit:
                fits += 1
            kept = kept_cuts.keep(store.commitlog.segments, store.layout.truncated_dir,
                                  start, epoch, limit)
            assert (kept.records, kept.bytes) == (fits, sum(len(b) for _, b in tail[:fits]))
            assert kept.over_records == len(tail) - fits
            assert kept.over_bytes == sum(len(b) for _, b in tail[fits:])
            assert kept.over_from == (tail[fits][0] if fits < len(tail) else -1)
            listed = kept_cuts.kept_cuts(store.layout.truncated_dir)
            if fits:
                assert kept.path == store.layout.truncated_dir / f"{epoch}-{start}.log"
                assert [(c.path, c.epoch, c.from_offset) for c in listed] == [
                    (kept.path, epoch, start)]
                assert _read(kept.path) == tail[:fits]
            else:
                assert kept.path is None and listed == []
        finally:
            store.shutdown()


def test_a_cut_over_the_limit_says_what_was_not_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, placed = _filled(tmp_path / "store", [b"x" * 300] * 6)
    try:
        size = len(placed[0][1])
        kept = kept_cuts.keep(store.commitlog.segments, store.layout.truncated_dir,
                              placed[2][0], 3, 2 * size)
        with caplog.at_level(logging.WARNING, logger="tidemq.store.kept_cuts"):
            kept_cuts.report(placed[2][0], kept, 2 * size)
        assert kept.path is not None
        text = caplog.text
        assert f"its 2 records there ({2 * size} bytes) are kept in {kept.path}" in text
        assert (f"exceeds keptCutMaxBytes={2 * size}: 2 records ({2 * size} bytes) from "
                f"offset {placed[4][0]} on were not kept") in text
    finally:
        store.shutdown()


def test_a_kept_file_cut_short_is_refused_naming_the_byte(tmp_path: Path) -> None:
    kept, placed = _kept_file(tmp_path / "store", [b"y" * 100] * 3)
    assert kept.path is not None
    data = kept.path.read_bytes()
    kept.path.write_bytes(data[:-10])
    with pytest.raises(kept_cuts.KeptCutError,
                       match=rf"1-{placed[0][0]}\.log: .* at byte {2 * len(placed[0][1])}"):
        list(kept_cuts.read_kept(kept.path))


def test_the_epoch_of_a_cut_is_the_one_its_first_record_was_written_in() -> None:
    entries = [EpochEntry(1, 0), EpochEntry(3, 500)]
    assert [kept_cuts.epoch_at(entries, at) for at in (0, 499, 500, 9000)] == [1, 1, 3, 3]
    assert kept_cuts.epoch_at([], 100) == 0


def test_the_limit_is_set_by_its_key_and_not_negative() -> None:
    config, unknown = StoreConfig.from_mapping({"keptCutMaxBytes": "4096"})
    assert (config.kept_cut_max_bytes, unknown) == (4096, [])
    with pytest.raises(ConfigError, match="keptCutMaxBytes"):
        StoreConfig(kept_cut_max_bytes=-1)


def test_a_kept_file_is_read_a_record_at_a_time(tmp_path: Path) -> None:
    """A cut may be as large as keptCutMaxBytes (1 GiB by default): reading it takes the
    memory of one record, not of the file."""
    body = bytes(range(250)) * 12  # 3,000 bytes: a record fits a segment
    kept, _ = _kept_file(tmp_path / "store", [body] * 200)
    assert kept.path is not None and kept.records == 200
    tracemalloc.start()
    try:
        seen = sum(rec.body == body for rec in kept_cuts.read_kept(kept.path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == 200
    assert peak < kept.bytes // 8, (peak, kept.bytes)


def test_a_total_size_beyond_the_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    kept, placed = _kept_file(tmp_path / "store", [b"z" * 100] * 2)
    assert kept.path is not None
    data = bytearray(kept.path.read_bytes())
    second = len(placed[0][1])
    data[second : second + 4] = (1 << 30).to_bytes(4, "big")
    kept.path.write_bytes(data)
    with pytest.raises(kept_cuts.KeptCutError,
                       match=rf"TOTALSIZE {1 << 30}, {len(data) - second} bytes left at "
                             rf"byte {second} of the file"):
        list(kept_cuts.read_kept(kept.path))
