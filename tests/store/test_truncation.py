"""The truncation request file: a deeper cut wins, garbage is refused naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

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
