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


def test_a_slice_keeps_side_by_side_processes_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = range(10_000, 32_768)
    first, second = ports._slice(whole, "0/2"), ports._slice(whole, "1/2")
    assert (first.start, first.stop, second.start, second.stop) == (
        10_000, 21_384, 21_384, 32_768)
    assert ports._slice(whole, "") == whole
    monkeypatch.setenv("TIDEMQ_PORT_SLICE", "1/3")
    drawn = ports.free_ports(10)
    third = ports._below_ephemeral()
    assert len(third) < 12_000 and all(p in third for p in drawn)
    for bad in ("2/2", "x/2", "1", "-1/2", "0/0"):
        with pytest.raises(ValueError, match="TIDEMQ_PORT_SLICE"):
            ports._slice(whole, bad)


def test_a_port_handed_out_lately_is_not_handed_out_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one at a time, as a test picks an HA port and then a broker its own: none is bound
    monkeypatch.setattr(ports, "_handed", ports.collections.deque(maxlen=ports._RECENT))
    monkeypatch.setattr(ports, "_below_ephemeral", lambda: range(20_000, 20_300))
    drawn = [ports.free_port() for _ in range(150)]
    assert len(set(drawn)) == len(drawn)
