"""The console closes a connection whose request head does not arrive whole in time,
however it trickles in, and answers the others as before."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

import pytest

from tidemq.console import head_deadline
from tidemq.console.head_deadline import HeadDeadlineProtocol
from tidemq.console.server import ConsoleServer


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HeadDeadlineProtocol, "head_seconds", 0.5)


async def _open(web: ConsoleServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(web.url)
    assert url.hostname is not None and url.port is not None
    return await asyncio.open_connection(url.hostname, url.port)


async def _closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """What the console sends before it closes the connection (within 10 s, or this fails).
    A reset is a close too: a socket closed with bytes it has not read is reset, not shut,
    and a trickling client's next byte may arrive just before the deadline closes it."""
    got = bytearray()
    try:
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(10):
                while chunk := await reader.read(65536):
                    got += chunk
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return bytes(got)


@pytest.mark.parametrize("trickle", [False, True], ids=["stalled", "trickled"])
async def test_a_head_that_does_not_arrive_in_time_closes_the_connection(
        web: ConsoleServer, trickle: bool) -> None:
    reader, writer = await _open(web)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
    if trickle:  # a header byte every 0.1 s: each is data, none ends the head
        async def drip() -> None:
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b"X")
                    await asyncio.sleep(0.1)
        dripping = asyncio.create_task(drip())
    try:
        assert await _closed(reader, writer) == b""
    finally:
        if trickle:
            dripping.cancel()


async def test_whole_requests_are_answered_on_one_connection(
        web: ConsoleServer, caplog: pytest.LogCaptureFixture) -> None:
    """Two requests answered, then no third: the head deadline, armed again by the
    second answer, closes the connection (and says so), before uvicorn's keep-alive
    timeout, which would close it too, but later and without a word."""
    caplog.set_level(logging.INFO, logger=head_deadline.__name__)
    reader, writer = await _open(web)
    host, port = writer.get_extra_info("sockname")[:2]
    local = f"{host}:{port}"
    for _ in range(2):
        writer.write(b"GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 "), head
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
    assert await _closed(reader, writer) == b""  # then idle: closed as well
    assert f"closing {local}: no whole request head" in caplog.text
