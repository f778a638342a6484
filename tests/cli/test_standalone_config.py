"""``tidemq standalone`` sets four broker keys from its flags (--broker-port, --host,
--data, its own name server), over its config file and the ``TIDEMQ_*`` variables: it
says so when the file or a variable gives one of them, and applies the file's others."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.server_process import ServerProcess


def test_standalone_warns_of_the_keys_its_flags_replace(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    props = tmp_path / "broker.properties"
    props.write_text("brokerName=broker-file\nlistenPort=1\n", "utf-8")
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("TIDEMQ_STORE_PATH_ROOT_DIR", str(elsewhere))
    server = ServerProcess("standalone", {}, "--data", str(tmp_path / "data"), "-c", str(props))
    server.start()
    try:
        log = server.log(200)
        assert (f"warning: listenPort given by {props} is not used: tidemq standalone takes it "
                "from --broker-port") in log, log
        assert ("warning: storePathRootDir given by a TIDEMQ_* variable is not used: tidemq "
                "standalone takes it from --data") in log, log
        assert "bindAddress given by" not in log and "namesrvAddr given by" not in log, log
        assert "(broker-file)" in log, log  # the file's other keys apply
        assert (tmp_path / "data" / "store").is_dir() and not elsewhere.exists()
    finally:
        server.stop()


def test_a_key_given_with_set_is_not_warned_of(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text("bindAddress=127.0.0.1\n", "utf-8")
    server = ServerProcess("standalone", {"bindAddress": "127.0.0.1"},
                           "--data", str(tmp_path / "data"), "-c", str(props))
    server.start()
    try:
        assert "is not used" not in server.log(200), server.log(200)
    finally:
        server.stop()
