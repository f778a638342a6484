"""The epoch file: upstream's text layout, round trips, refusal of damage, and the
consistent point of two logs."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.store.epoch_file import (
    EpochEntry,
    EpochFile,
    EpochFileError,
    consistent_point,
    decode,
    encode,
)


@st.composite
def histories(draw: st.DrawFn) -> list[EpochEntry]:
    epochs = sorted(draw(st.sets(st.integers(1, 10**6), max_size=8)))
    starts = sorted(draw(st.lists(st.integers(0, 2**62), min_size=len(epochs),
                                  max_size=len(epochs))))
    return [EpochEntry(e, s) for e, s in zip(epochs, starts, strict=True)]


def test_the_layout_is_upstreams() -> None:
    data = encode([EpochEntry(1, 0), EpochEntry(2, 4096)])
    count, crc, *lines = data.decode().split("\n")
    assert (count, lines) == ("2", ["1-0", "2-4096", ""])
    assert int(crc) == zlib.crc32(b"1-0\n2-4096\n") & 0x7FFFFFFF


@given(histories())
def test_round_trip(entries: list[EpochEntry]) -> None:
    assert decode(encode(entries)) == entries


@given(histories(), st.data())
def test_any_damage_is_refused(entries: list[EpochEntry], data: st.DataObject) -> None:
    raw = bytearray(encode(entries))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.sampled_from(b"0123456789-\nx").filter(lambda b: b != raw[at]))
    try:
        decoded = decode(bytes(raw))
    except EpochFileError:
        return
    # the only changes that still parse leave the same entries (a CRC digit that maps back)
    assert decoded == entries


def test_a_broken_file_says_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    path.write_bytes(b"2\n0\n1-0\n")
    with pytest.raises(EpochFileError, match="CRC"):
        EpochFile(path).load()


def test_append_and_truncate(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path / "epochFileCheckpoint")
    assert epochs.load() == []
    assert epochs.append(1, 0)
    assert not epochs.append(1, 0)
    assert epochs.append(3, 500)
    with pytest.raises(EpochFileError, match="does not follow"):
        epochs.append(2, 900)
    epochs.truncate(500)
    assert EpochFile(epochs.path).load() == [EpochEntry(1, 0)]


def test_an_old_master_agrees_up_to_where_the_new_one_took_over() -> None:
    old = [EpochEntry(1, 0)]  # wrote up to 900 as master of epoch 1
    new = [EpochEntry(1, 0), EpochEntry(2, 700)]  # replica held 700 when elected
    assert consistent_point(old, 900, new, 1200) == 700
    # a replica that is behind has nothing to cut
    assert consistent_point([EpochEntry(1, 0)], 300, new, 1200) == 300
    assert consistent_point([EpochEntry(5, 0)], 300, new, 1200) is None


@given(histories(), st.integers(0, 2**62), st.integers(0, 2**62))
def test_logs_of_one_history_agree_up_to_the_shorter(entries: list[EpochEntry], a: int,
                                                     b: int) -> None:
    point = consistent_point(entries, a, entries, b)
    assert point == (min(a, b) if entries else None)
