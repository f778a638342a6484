"""A requested cut of the commit log (an old master returning as a replica) goes through
recovery in a process killed with SIGKILL right after: the tail is gone from the log, the
consume queues, the index and the epoch file, nothing before it is lost, the request is
gone, and a second run of the same request (a kill before it was cleared) changes
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemq.store import kept_cuts, truncation
from tidemq.store.epoch_file import EpochEntry, EpochFile
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageStore, PutStatus

from .conftest import check_store, fill, run_helper
from .store_proc import SEGMENT, TOPIC, crash_config, message


def _recover_in_a_killed_child(root: Path) -> dict[str, object]:
    proc = run_helper("recover", root)
    assert proc.returncode == -9, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_a_requested_cut_survives_kill9_and_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    placed = fill(root, 60)  # [queue offset, phys, size] per message; killed -9 after
    layout = StoreLayout(root)
    cut = placed[25][1]
    epochs = EpochFile(layout.epoch_file)
    epochs.load()
    epochs.append(1, 0)
    epochs.append(2, placed[40][1])
    truncation.request(layout, cut)

    report = _recover_in_a_killed_child(root)
    assert report["end_offset"] == cut
    assert "cut at" in str(report["reason"])
    assert truncation.pending(layout) is None
    assert EpochFile(layout.epoch_file).load() == [EpochEntry(1, 0)]
    _, ids = check_store(root)
    assert ids[0] == list(range(25))

    # killed after the cut but before the request was cleared: the same cut again
    truncation.request(layout, cut)
    report = _recover_in_a_killed_child(root)
    assert report["end_offset"] == cut
    _, ids = check_store(root)
    assert ids[0] == list(range(25))

    store = MessageStore(crash_config(root))
    store.start()
    try:
        result = store.put(TOPIC, 0, message(1000))
        assert result.wait_durable(30) is PutStatus.PUT_OK
        assert (result.queue_offset, result.phys_offsets[0]) == (25, cut)
    finally:
        store.shutdown()


def test_a_cut_beyond_the_log_cuts_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    placed = fill(root, 10)
    end = placed[-1][1] + placed[-1][2]
    truncation.request(StoreLayout(root), end + 4096)
    report = _recover_in_a_killed_child(root)
    assert report["end_offset"] == end
    _, ids = check_store(root)
    assert ids[0] == list(range(10))


def _tail(root: Path, placed: list[tuple[int, int, int]]) -> list[tuple[int, bytes]]:
    """The records ``placed`` names, each with its bytes as the commit log holds them."""
    out = []
    for _, phys, size in placed:
        base = phys - phys % SEGMENT
        with open(StoreLayout(root).commitlog_segment(base), "rb") as f:
            f.seek(phys - base)
            out.append((phys, f.read(size)))
    return out


def _kept(root: Path) -> list[tuple[int, bytes]]:
    out = []
    for cut in kept_cuts.kept_cuts(StoreLayout(root).truncated_dir):
        data = cut.path.read_bytes()
        pos = 0
        for rec in kept_cuts.read_kept(cut.path):
            out.append((rec.physical_offset, data[pos : pos + rec.total_size]))
            pos += rec.total_size
    return out


@pytest.mark.parametrize("running", [False, True], ids=["at-start", "running"])
@pytest.mark.parametrize("step", ["keeping", "kept", "cutting"])
def test_a_kill_while_keeping_or_cutting_leaves_the_log_or_the_kept_tail_and_the_cut(
        tmp_path: Path, step: str, running: bool) -> None:
    """A cut made by recovery at start, or by a running replica (its tail kept in a
    thread, then cut)."""
    root = tmp_path / "store"
    placed = fill(root, 60)
    layout = StoreLayout(root)
    cut = placed[25][1]
    assert cut // SEGMENT < placed[-1][1] // SEGMENT  # the cut spans a segment roll
    epochs = EpochFile(layout.epoch_file)
    epochs.load()
    epochs.append(1, 0)
    epochs.append(2, placed[40][1])
    tail = _tail(root, placed[25:])
    if running:
        proc = run_helper("running-cut-dying", root, str(cut), step)
    else:
        truncation.request(layout, cut)
        proc = run_helper("cut-dying", root, step)
    assert proc.returncode == -9, proc.stderr
    if step == "keeping":  # the log is whole: nothing is kept yet
        assert _kept(root) == []
        assert _tail(root, placed[25:]) == tail
    else:  # the tail is kept whole before a byte of it is cut
        assert _kept(root) == tail
    assert truncation.pending(layout) == cut

    report = _recover_in_a_killed_child(root)
    assert report["end_offset"] == cut
    assert truncation.pending(layout) is None
    assert _kept(root) == tail  # exactly the records cut, once
    assert [c.path.name for c in kept_cuts.kept_cuts(layout.truncated_dir)] == [f"1-{cut}.log"]
    assert sorted(p.name for p in layout.truncated_dir.iterdir()) == [f"1-{cut}.log"]
    _, ids = check_store(root)
    assert ids[0] == list(range(25))
