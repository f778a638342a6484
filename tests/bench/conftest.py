"""The benchmarks' tests keep their files on a disk, wherever the rest of the suite's are.

The benches start brokers with the default 1 GiB commit-log segments, created at their
full size with ``posix_fallocate``: on a disk a reservation, on a tmpfs a gigabyte of
memory allocated and zeroed there and then, which holds a broker's first send (or a
replica's first copy, which a SYNC_MASTER's send waits for) past the second or so these
tests measure. ``tmp_path`` here is :func:`disk_path`, and so is ``TMPDIR`` (where the
benches and their scripts make their own data directories).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def tmp_path(disk_path: Path) -> Path:
    return disk_path


@pytest.fixture(autouse=True)
def temporary_files_on_disk(disk_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(disk_path))
    monkeypatch.setattr(tempfile, "tempdir", str(disk_path))
