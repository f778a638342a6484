"""Where a controller keeps its Raft log, and the lock on it: decided from the settings,
created, refused with a ConfigError naming ``controllerStorePath`` when it cannot be
created or another controller -- in this process or another -- holds it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemq.errors import ConfigError
from tidemq.namesrv.controller.store_dir import LOCK_FILE, StoreLock, store_dir


def test_an_empty_setting_means_a_directory_under_home_or_beside_the_name_server(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert store_dir("", "n1", home=home) == home / "tidemq" / "controller" / "n1"
    ns = tmp_path / "ns"
    assert store_dir("", "n1", beside=ns, home=home) == ns / "controller" / "n1"
    assert store_dir(" ", "n1", home=home) == home / "tidemq" / "controller" / "n1"


def test_memory_opts_out_and_an_explicit_directory_wins(tmp_path: Path) -> None:
    assert store_dir("memory", "n0", beside=tmp_path) is None
    assert store_dir("MEMORY", "n0") is None
    assert store_dir(str(tmp_path / "raft"), "n0", beside=tmp_path / "ns") == tmp_path / "raft"


def test_a_directory_is_created_and_locked_once(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    lock = StoreLock.acquire(directory)
    try:
        assert (directory / LOCK_FILE).is_file()
        with pytest.raises(ConfigError, match="in use by another running controller") as info:
            StoreLock.acquire(directory)
        assert info.value.key == "controllerStorePath"
    finally:
        lock.release()
    StoreLock.acquire(directory).release()  # released: the next controller takes it


def test_a_directory_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot create") as info:
        StoreLock.acquire(blocker / "raft")
    assert info.value.key == "controllerStorePath"
    assert str(blocker / "raft") in str(info.value)


_HOLD = """
import sys
from pathlib import Path
from tidemq.namesrv.controller.store_dir import StoreLock
lock = StoreLock.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of ``tmp_path / "raft"``."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "raft")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(30)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def test_a_lock_held_by_another_process_is_refused_until_it_is_killed(
        tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(ConfigError, match=f"process {holder.pid}") as info:
        StoreLock.acquire(tmp_path / "raft")
    assert info.value.key == "controllerStorePath"
    holder.kill()  # SIGKILL: the kernel drops the lock with the process
    holder.wait(30)
    StoreLock.acquire(tmp_path / "raft").release()
