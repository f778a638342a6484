"""free_ports draws distinct, bindable loopback ports below the kernel's ephemeral range
(which outgoing connections take their local ports from)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tidemq.net import ports


def test_ports_are_distinct_bindable_and_not_ephemeral() -> None:
    first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    got = ports.free_ports(20)
    assert len(set(got)) == 20
    assert all(10_000 <= p < first for p in got)
    for port in got:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_taken_ports_are_drawn_again_and_an_unreadable_range_falls_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports, "_below_ephemeral", lambda: range(taken, taken + 1))
        assert ports.free_port() != taken  # every draw hit the taken port: the kernel's
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "absent")
    monkeypatch.undo()
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "absent")
    assert ports._below_ephemeral() == range(0)
    assert ports.free_port() > 0
