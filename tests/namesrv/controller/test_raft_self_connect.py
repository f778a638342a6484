"""A controller's dial to a Raft peer that is down can meet itself (the peer's port in the
ephemeral range, picked as the dial's own end): it is closed, so the port frees and the
peer, once back, listens there and joins. The collision, rare by chance, is made certain
by binding the dial's own end to the port dialled."""

from __future__ import annotations

import asyncio
import socket
import types
from collections.abc import Callable

import pytest
from pysyncobj import tcp_connection
from tests.net.support import port_frees

from tidemq.namesrv.controller.raft import RaftLog, RaftTiming
from tidemq.net.ports import free_ports


async def _until(probe: Callable[[], bool], what: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not probe():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_dial_to_a_peer_that_meets_itself_is_closed_and_the_peer_joins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = sorted(free_ports(2), key=str)
    dialler, peer = f"127.0.0.1:{high}", f"127.0.0.1:{low}"
    assert dialler > peer  # PySyncObj: the node with the greater address dials
    made: list[socket.socket] = []

    def colliding(family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM
                  ) -> socket.socket:
        sock = socket.socket(family, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", low))  # the dial's own end: the peer's port
        made.append(sock)
        return sock

    shim = types.SimpleNamespace(**{k: getattr(socket, k) for k in dir(socket)
                                    if not k.startswith("__")})
    shim.socket = colliding
    monkeypatch.setattr(tcp_connection, "socket", shim)
    timing = RaftTiming(reconnect=0.2)
    first = RaftLog(dialler, [peer], timing=timing)
    second: RaftLog | None = None
    try:
        await _until(lambda: bool(made), "the dial")
        await _until(lambda: all(s.fileno() == -1 for s in made), "the dial to be closed")
        monkeypatch.undo()
        assert port_frees(low)
        assert not first.is_leader  # its own vote, read back as the peer's, did not count
        second = RaftLog(peer, [dialler], timing=timing)
        await _until(lambda: first.is_leader or bool(second and second.is_leader),
                     "a leader of the two")
    finally:
        first.close()
        if second is not None:
            second.close()
