"""When a table's file is written: at once, or later for a change made deferred; a failed
write leaves the change pending, and a write on a thread logs its failure. A caller that
has a pending change written does not go on while another thread's write, which took the
change, is still under way."""

from __future__ import annotations

import threading

import pytest

from tidemq.broker.table_file import TableFile


def test_a_change_is_written_at_once_unless_deferred() -> None:
    writes: list[int] = []
    file = TableFile(lambda: writes.append(1), "t")
    file.changed()
    assert writes == [1] and not file.pending
    with file.deferred():
        file.changed()
    assert writes == [1] and file.pending
    file.write_pending()
    file.write_pending()  # nothing changed since
    assert writes == [1, 1] and not file.pending


def test_write_pending_returns_once_the_write_that_took_the_change_is_done() -> None:
    table = {"v": 0}
    written: list[int] = []
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def write() -> None:
        copy = table["v"]  # the write reads the table ...
        entered.set()
        assert release.wait(20)  # ... and is slow to get it onto the disk
        written.append(copy)

    file = TableFile(write, "t")
    with file.deferred():
        table["v"] = 1
        file.changed()
    other = threading.Thread(target=file.write_pending)  # a write on a thread, first
    other.start()
    assert entered.wait(20)

    def mine() -> None:  # an admin request's: it answers once this returns
        file.write_pending()
        returned.set()

    caller = threading.Thread(target=mine)
    caller.start()
    try:
        assert not returned.wait(0.5), "returned while the change was not written yet"
    finally:
        release.set()
        other.join(20)
        caller.join(20)
    assert returned.is_set() and written == [1]


def test_a_failed_write_stays_pending() -> None:
    def fail() -> None:
        raise OSError("disk full")

    file = TableFile(fail, "t")
    with pytest.raises(OSError):
        file.changed()
    assert file.pending


async def test_a_write_on_a_thread_logs_its_failure(caplog: pytest.LogCaptureFixture) -> None:
    def fail() -> None:
        raise OSError("disk full")

    file = TableFile(fail, "the test table")
    with file.deferred():
        file.changed()
    write = file.write_soon()
    assert write is not None
    with pytest.raises(OSError):
        await write
    assert file.pending
    assert "writing the test table failed" in caplog.text and "disk full" in caplog.text
