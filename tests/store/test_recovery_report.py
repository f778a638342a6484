"""The start's recovery line says what ended the log: a requested cut names the file its
records were kept in and how many, also when a start killed after keeping finishes it;
"torn tail" is said of a torn write only."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tidemq.store import truncation
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore

SEGMENT = 4096


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT)


def _filled(root: Path, kept: int) -> tuple[int, int]:
    """A cleanly stopped store of 3 + ``kept`` messages: where the last ``kept`` start,
    and where the log ends."""
    with MessageStore(_config(root)) as store:
        for _ in range(3):
            store.put("Report", 0, MessageInput(b"agreed"))
        cut = store.commitlog.max_offset
        for i in range(kept):
            store.put("Report", i % 2, MessageInput(b"diverged %d" % i))
        return cut, store.commitlog.max_offset


def _start(root: Path, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tidemq.store.message_store"), \
            MessageStore(_config(root)) as store:
        assert store.recovery_report is not None
        line = str(store.recovery_report)
    assert line in caplog.messages
    return line


def test_a_requested_cut_is_reported_as_a_cut_kept_in_its_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    cut, end = _filled(root, 7)
    truncation.request(StoreLayout(root), cut)
    line = _start(root, caplog)
    kept = root / "truncated" / f"0-{cut}.log"
    assert line.startswith(f"clean recovery: the log ends at {cut}, 7 records scanned from "
                           f"{cut}; ")
    assert (f"cut the tail from {cut} as requested (it diverged from the master's log): "
            f"{end - cut} bytes dropped, 7 records kept in {kept}") in line
    assert "torn" not in line


def test_a_cut_finished_by_the_next_start_names_the_file_kept_before(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A start killed once the tail was kept (the request notes the file) made no cut;
    the next one makes it and names what the first kept."""
    root = tmp_path / "store"
    cut, _ = _filled(root, 4)
    layout = StoreLayout(root)
    truncation.request(layout, cut)
    truncation.note_kept(layout, cut, f"0-{cut}.log", 4)
    line = _start(root, caplog)
    assert f"4 records kept in {root / 'truncated' / f'0-{cut}.log'}" in line
    truncation.request(layout, cut + SEGMENT)  # beyond the log: no cut, none reported
    line = _start(root, caplog)
    assert "cut" not in line and "torn" not in line


def test_a_torn_write_is_still_a_torn_tail(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    _, end = _filled(root, 2)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end)
        f.write(b"\x00\x00\x01\x00torn")  # a record whose write stopped half-way
    (root / "abort").touch()
    line = _start(root, caplog)
    assert "bytes of torn tail" in line and "as requested" not in line and "kept" not in line
