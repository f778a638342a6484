"""``tidemq namesrv``, ``controller`` and ``broker`` in a subprocess, stopped at start by
a setting that cannot work: the error names it, with no traceback, and the exit status
is 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("command", ["controller", "namesrv", "broker"])
def test_a_server_whose_acl_file_does_not_read_says_so_without_a_traceback(
        command: str, tmp_path: Path) -> None:
    missing = tmp_path / "plain_acl.yml"
    sets = ["--set", "listenPort=0", "--set", "aclEnable=true", "--set", f"aclFile={missing}"]
    if command == "controller":
        sets += ["--set", "controllerRaftPeers=n0-127.0.0.1:1", "--set",
                 "controllerRaftSelfId=n0"]
    if command == "broker":
        sets += ["--set", f"storePathRootDir={tmp_path / 'store'}", "--set", "haListenPort=0"]
    done = subprocess.run(
        [sys.executable, "-c", "from tidemq.cli.main import main; main()", command, *sets],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: ACL file {missing} does not exist" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["controller", "namesrv"])
def test_a_controller_whose_store_path_cannot_be_created_says_so_without_a_traceback(
        command: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sets = ["--set", "listenPort=0", "--set", "controllerRaftPeers=n0-127.0.0.1:1",
            "--set", "controllerRaftSelfId=n0", "--set", f"controllerStorePath={blocker}/raft"]
    if command == "namesrv":
        sets += ["--set", "enableControllerInNamesrv=true"]
    done = subprocess.run(
        [sys.executable, "-c", "from tidemq.cli.main import main; main()", command, *sets],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: controllerStorePath: cannot create {blocker}/raft" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from tidemq.cli.main import main; main()", *args],
        check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "400"})


@pytest.mark.parametrize("command", ["controller", "namesrv", "broker", "standalone"])
@pytest.mark.parametrize("name", ["missing.properties", "a-directory", "latin-1.properties"])
def test_a_configuration_file_that_does_not_read_is_named_without_a_traceback(
        command: str, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    if name == "a-directory":
        path.mkdir()
    elif name.startswith("latin-1"):
        path.write_bytes("brokerName=café\n".encode("latin-1"))
    done = _run(command, "--config", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: the configuration file '{path}'" in done.stderr or (
        f"error: cannot read the configuration file '{path}'" in done.stderr), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_value_that_looks_like_markup_is_quoted_as_it_is(tmp_path: Path) -> None:
    done = _run("broker", "--set", "listenPort=[/x]", "--set",
                f"storePathRootDir={tmp_path}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error: bad value '[/x]' for listenPort" in done.stderr, done.stderr


def test_a_bad_choice_lists_the_values_the_key_takes(tmp_path: Path) -> None:
    done = _run("broker", "--set", "flushDiskType=SYNC_FLUSHX", "--set",
                f"storePathRootDir={tmp_path}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("error: bad value 'SYNC_FLUSHX' for flushDiskType: expected one of ASYNC_FLUSH, "
            "SYNC_FLUSH") in done.stderr, done.stderr


def test_a_server_whose_port_is_taken_names_the_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", "from tidemq.cli.main import main; main()", "namesrv",
             "--set", f"listenPort={port}"],
            check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: cannot listen on 127.0.0.1:{port}: address already in use" in (
        done.stdout + done.stderr)


@pytest.mark.parametrize("command", ["broker", "namesrv"])
def test_a_server_whose_kept_changes_were_cut_short_names_the_file_and_leaves_it(
        command: str, tmp_path: Path) -> None:
    """The run-time overrides file cut short (a damaged disk) inside its last value (the
    broker's) or before its last key (the name server's): the start stops naming the
    file, rather than serving with the value shortened or the key lost."""
    if command == "broker":
        from tidemq.broker.config_overrides import overrides_path, write_overrides
        kept = overrides_path(tmp_path / "store")
        write_overrides(kept, {"maxPullBytes": "1234567", "brokerPermission": "4"})
        sets = ["--set", f"storePathRootDir={tmp_path / 'store'}", "--set", "haListenPort=0"]
    else:
        from tidemq.namesrv.config_overrides import write_overrides as write_namesrv
        kept = tmp_path / "runtimeOverrides.properties"
        write_namesrv(kept, {"enableAllTopicList": "false", "orderMessageEnable": "true"})
        sets = ["--set", f"kvConfigPath={tmp_path / 'kvConfig.json'}"]
    whole = kept.read_bytes()
    last = whole.rindex(b"=")
    cut = whole[:last + 3] if command == "broker" else whole[:whole.rindex(b"\n", 0, last) + 1]
    kept.write_bytes(cut)
    done = _run(command, "--set", "listenPort=0", *sets)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert f"error: {kept} ends before its last line '# end': cut short" in said, said
    assert "Traceback" not in said
    assert kept.read_bytes() == cut
