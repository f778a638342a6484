"""When a table's file is written: at once, or later for a change made deferred; a failed
write leaves the change pending, and a write on a thread logs its failure."""

from __future__ import annotations

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
