"""The truncation request file: a deeper cut wins, garbage is refused naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store import truncation
from tidemq.store.layout import StoreLayout


def test_the_deeper_cut_wins(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    assert truncation.pending(layout) is None
    truncation.request(layout, 900)
    truncation.request(layout, 1200)
    assert truncation.pending(layout) == 900
    truncation.request(layout, 300)
    assert truncation.pending(layout) == 300
    truncation.clear(layout)
    assert truncation.pending(layout) is None


def test_a_damaged_request_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    layout.truncation_file.write_bytes(b"12x\n")
    with pytest.raises(truncation.TruncationError, match=r"truncateTo.*not a commit-log offset"):
        truncation.pending(layout)


def test_a_kept_tail_is_noted_in_the_request_and_a_deeper_cut_keeps_again(
        tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    truncation.request(layout, 900)
    assert truncation.kept(layout) is None
    truncation.note_kept(layout, 900, "2-900.log", 12)
    assert truncation.pending(layout) == 900
    assert truncation.kept(layout) == truncation.KeptNote("2-900.log", 12)
    truncation.request(layout, 1200)  # shallower: the kept tail still covers it
    assert truncation.kept(layout) == truncation.KeptNote("2-900.log", 12)
    truncation.request(layout, 300)  # deeper: the bytes from 300 are not kept yet
    assert (truncation.pending(layout), truncation.kept(layout)) == (300, None)
    truncation.note_kept(layout, 300, None)
    assert truncation.kept(layout) == truncation.KeptNote(None, 0)
    truncation.clear(layout)
    assert truncation.kept(layout) is None


def test_a_note_without_its_record_count_still_reads_as_kept(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path)
    layout.truncation_file.write_bytes(b"900\nkept 2-900.log\n")
    assert truncation.kept(layout) == truncation.KeptNote("2-900.log", None)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(0, 2**63 - 1),
       name=st.none() | st.from_regex(r"\A[0-9]{1,19}-[0-9]{1,19}\.log\Z"),
       records=st.integers(0, 2**40))
def test_the_request_and_its_note_read_back_as_written(
        tmp_path: Path, offset: int, name: str | None, records: int) -> None:
    layout = StoreLayout(tmp_path)
    truncation.clear(layout)
    truncation.request(layout, offset)
    assert (truncation.pending(layout), truncation.kept(layout)) == (offset, None)
    truncation.note_kept(layout, offset, name, records if name else 0)
    assert truncation.pending(layout) == offset
    assert truncation.kept(layout) == truncation.KeptNote(name, records if name else 0)
