"""The failover group's child processes (real ``tidemq namesrv`` processes)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tidemq.bench.group import Child, start_child, stop_children


def test_a_child_that_cannot_start_says_why(tmp_path: Path) -> None:
    # a port another process holds: the error names the cause, not only the log file
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = Child("namesrv-0", "namesrv", {"listenPort": str(port),
                                               "bindAddress": "127.0.0.1"},
                      f"127.0.0.1:{port}")
        try:
            with pytest.raises(RuntimeError) as info:
                start_child(child, tmp_path)
        finally:
            stop_children([child])
    message = str(info.value)
    assert message.startswith("namesrv-0 did not start: ")
    assert "address already in use" in message
    assert message.endswith(f"see {tmp_path / 'namesrv-0.log'}")
