"""Importing the controllers' Raft log leaves the process's socket functions as they were."""

from __future__ import annotations

import socket
import subprocess
import sys


def test_importing_the_raft_log_keeps_inet_ntop_working() -> None:
    # A fresh interpreter: this one may have imported PySyncObj already.
    code = ("import socket, tidemq.namesrv.controller.raft; "
            "print(socket.inet_ntop(socket.AF_INET, bytes([127, 0, 0, 1])), "
            "socket.inet_ntop(socket.AF_INET6, bytes(15) + bytes([1])))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["127.0.0.1", "::1"]
    assert socket.inet_ntop(socket.AF_INET, bytes([10, 0, 0, 1])) == "10.0.0.1"
