"""Connections beyond the slots of a process's listeners are closed at once; those open
go on being served, and a slot freed admits the next."""

from __future__ import annotations

import asyncio
import logging
import resource

import pytest
from tests.net.support import ECHO, RawPeer, make_server

from tidemq.codec.command import RemotingCommand
from tidemq.net.connection_slots import ConnectionSlots, process_slots


async def _echoed(peer: RawPeer, text: str) -> None:
    await peer.send(RemotingCommand.request(ECHO, {"say": text}))
    assert (await peer.read_command()).ext_fields["say"] == text


async def test_a_connection_over_the_slots_is_closed_and_the_open_ones_served(
        caplog: pytest.LogCaptureFixture) -> None:
    slots = ConnectionSlots(2)
    server = make_server()
    server.slots = slots
    closed = asyncio.Event()
    server.on_connection_closed(lambda _conn, _error: closed.set())
    async with server:
        first, second = await RawPeer.connect(server.port), await RawPeer.connect(server.port)
        await _echoed(first, "one")
        await _echoed(second, "two")
        with caplog.at_level(logging.WARNING, logger="tidemq.net.connection_slots"):
            third = await RawPeer.connect(server.port)
            await third.wait_eof()
        assert (slots.open, slots.refused) == (2, 1)
        assert f"remoting server {server.address}: a connection was closed at once" in caplog.text
        await _echoed(first, "still")
        await first.close()
        await asyncio.wait_for(closed.wait(), 5)
        assert slots.open == 1
        fourth = await RawPeer.connect(server.port)
        await _echoed(fourth, "four")
        for peer in (second, third, fourth):
            await peer.close()
    assert slots.open == 0


def test_the_process_keeps_half_its_open_files() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert process_slots() is process_slots()
    assert process_slots().limit == max(64, soft // 2)
    with pytest.raises(ValueError, match="positive"):
        ConnectionSlots(0)
