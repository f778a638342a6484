"""A real name server process against peers that start frames and never finish them:
its memory stays bounded (RSS read from /proc) and it keeps serving a good client.

The name server is the server the issue measured too; it shares RemotingServer (frame
decoding, receive budget) with the broker.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import frame_bytes
from tidemq.errors import ResponseCode
from tidemq.net import BlockingClient
from tidemq.net.ports import free_port as _free_port

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc"),
]

MIB = 1024 * 1024
BOOT = "from tidemq.cli.main import main; main()"
#: The budget the name server gets here: incomplete frames over all connections.
BUDGET = 16 * MIB




def _memory(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of ``pid``, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


@pytest.fixture
def namesrv() -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", BOOT, "namesrv", "--log-level", "WARNING",
         "--set", f"listenPort={port}", "--set", f"maxIncompleteFrameBytes={BUDGET}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # the banner is printed once it serves
        lines.append(line)
        if "name server listening" in line:
            break
    else:
        proc.wait(10)
        raise AssertionError("".join(lines))
    try:
        yield proc, f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        finally:
            proc.stderr.close()


def _head(length: int) -> bytes:
    """The start of a frame announcing ``length`` bytes: length, header, nothing more."""
    header = frame_bytes(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                 {"topic": "T"}))[8:]
    return struct.pack(">ii", length, len(header)) + header


def _served(client: BlockingClient, address: str) -> None:
    """A well-behaved request gets its answer."""
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuch"})
    resp = client.request(address, cmd, timeout=10.0)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST


def _memory_once_serving(client: BlockingClient, address: str, pid: int) -> dict[str, int]:
    """The server's memory (:func:`_memory`) after it has answered ``client`` once."""
    _served(client, address)
    return _memory(pid)


@pytest.fixture
def client() -> Iterator[BlockingClient]:
    """A well-behaved client of the name server."""
    good = BlockingClient()
    yield good
    good.close()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def test_announced_frames_cost_only_the_bytes_sent(
        namesrv: tuple[subprocess.Popen[str], str], client: BlockingClient) -> None:
    """100 peers announce 16 MiB frames and send a few bytes each."""
    proc, address = namesrv
    before = _memory_once_serving(client, address, proc.pid)
    with contextlib.ExitStack() as stack:
        peers = [stack.enter_context(_connect(address)) for _ in range(100)]
        for peer in peers:
            peer.sendall(_head(16 * MIB - 1))
        _served(client, address)  # and the server has read what was sent before it
        for peer in peers:
            peer.sendall(b"a few more")
        _served(client, address)
        after = _memory(proc.pid)
        grown = after["VmHWM"] - before["VmRSS"]
        assert grown < 64 * MIB, f"name server grew by {grown / MIB:.0f} MiB"


def test_incomplete_frames_stay_within_the_budget_and_others_are_served(
        namesrv: tuple[subprocess.Popen[str], str], client: BlockingClient) -> None:
    """16 peers each send 4 MiB of a 16 MiB frame (64 MiB in all, 4x the budget): the
    server closes the worst of them, its memory stays bounded, a good client is served."""
    proc, address = namesrv
    before = _memory_once_serving(client, address, proc.pid)
    with contextlib.ExitStack() as stack:
        peers = [stack.enter_context(_connect(address)) for _ in range(16)]
        chunk = b"\0" * (256 * 1024)
        closed: set[socket.socket] = set()
        for peer in peers:
            try:
                peer.sendall(_head(16 * MIB - 1))
                for _ in range(16):
                    peer.sendall(chunk)
            except OSError:  # reset by the server: over the budget
                closed.add(peer)
            _served(client, address)
        # The server closed connections it found over the budget; their sockets read EOF
        # (or a reset) -- select returns as soon as one is readable.
        readable, _, _ = select.select([p for p in peers if p not in closed], [], [], 10.0)
        for peer in readable:
            with contextlib.suppress(OSError):
                peer.recv(1)
            closed.add(peer)
        after = _memory(proc.pid)
        grown = after["VmHWM"] - before["VmRSS"]
        assert len(closed) >= 8, f"only {len(closed)} of 16 connections were closed"
        assert grown < 3 * BUDGET + 32 * MIB, f"name server grew by {grown / MIB:.0f} MiB"
        _served(client, address)


def test_buffers_kept_between_frames_stay_within_the_budget(
        namesrv: tuple[subprocess.Popen[str], str], client: BlockingClient) -> None:
    """40 peers each send one whole 4 MiB frame (answered) and stay idle: the buffers
    they leave behind are given back instead of piling up (160 MiB before)."""
    proc, address = namesrv
    before = _memory_once_serving(client, address, proc.pid)
    with contextlib.ExitStack() as stack:
        body = b"z" * (4 * MIB - 1024)
        for _ in range(40):
            peer = stack.enter_context(_connect(address))
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"},
                                          body)
            peer.sendall(frame_bytes(cmd))
            assert peer.recv(1)  # answered: the frame was read whole
        _served(client, address)
        grown = _memory(proc.pid)["VmRSS"] - before["VmRSS"]
        assert grown < 3 * BUDGET + 32 * MIB, f"name server grew by {grown / MIB:.0f} MiB"
