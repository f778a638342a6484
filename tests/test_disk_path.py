"""The ``disk_path`` fixture of tests/conftest.py, run on a small suite by a real pytest
session in this process: a fresh directory on a disk, gone after the test; where the
directory it is told to use is on a tmpfs, a skip (a failure under CI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

#: The test writes to ``SEEN`` where its directory was and what filesystem held it.
SUITE = """
import os
import subprocess
from pathlib import Path

def test_on_disk(disk_path):
    assert not any(disk_path.iterdir())
    (disk_path / "file").write_bytes(b"x" * 4096)
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(disk_path)], check=True,
                          capture_output=True, text=True).stdout.strip()
    Path(os.environ["SEEN"]).write_text(f"{disk_path}\\n{kind}\\n")
"""

NO_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio",
              "-p", "no:asyncio", "-p", "no:timeout", "-p", "no:xdist",
              "-p", "no:xdist.looponfail")


def filesystem_of(path: Path) -> str:
    """``stat -f``'s name for the filesystem holding ``path`` (``tmpfs``, ``ext2/ext3``...)."""
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def seen(tmp_path: Path) -> Path:
    return tmp_path / "seen"


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
          seen: Path) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("SEEN", str(seen))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("TEST_DISK_TMP", raising=False)
    return pytester


def test_a_fresh_directory_on_a_disk_removed_after_the_test(suite: pytest.Pytester,
                                                             seen: Path) -> None:
    suite.runpytest(*NO_PLUGINS).assert_outcomes(passed=1)
    path, kind = seen.read_text().split("\n")[:2]
    assert Path(path).parent == Path("/var/tmp")
    assert kind != "tmpfs"
    assert not Path(path).exists()


def test_test_disk_tmp_names_the_disk_directory(suite: pytest.Pytester, seen: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    base = Path("/var/tmp") / f"tidemq-disk-base-{seen.parent.name}"
    base.mkdir()
    try:
        monkeypatch.setenv("TEST_DISK_TMP", str(base))
        suite.runpytest(*NO_PLUGINS).assert_outcomes(passed=1)
        path = Path(seen.read_text().split("\n")[0])
        assert path.parent == base and not path.exists()
    finally:
        base.rmdir()  # fails if the test's directory were left in it


def test_a_tmpfs_is_refused_with_a_skip_that_fails_under_ci(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert filesystem_of(Path("/dev/shm")) == "tmpfs"
    monkeypatch.setenv("TEST_DISK_TMP", "/dev/shm")
    result = suite.runpytest("-rs", *NO_PLUGINS)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a directory on a disk, and /dev/shm is on a tmpfs*"])
    monkeypatch.setenv("CI", "true")
    suite.runpytest(*NO_PLUGINS).assert_outcomes(errors=1)
