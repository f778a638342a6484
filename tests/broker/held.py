"""A slow step a test holds (as a broker's thread would run long) until the test lets it
go: the broker's loop must answer others meanwhile."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import ModuleType

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.command import RequestCode


class Held:
    """A slow step: the first call waits until released (or gives up after a while),
    and records whether it waited in vain."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.left = threading.Event()
        self.gave_up: list[bool] = []

    def hold(self) -> None:
        if self.entered.is_set():
            return
        self.entered.set()
        self.gave_up.append(not self.release.wait(10))
        self.left.set()

    async def entered_soon(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 20)


def slow_writes(monkeypatch: pytest.MonkeyPatch, module: ModuleType, held: Held) -> None:
    """``module``'s ``atomic_write`` held (as a slow disk) before it writes."""
    write = module.atomic_write

    def slow(path: Path, data: bytes) -> None:
        held.hold()
        write(path, data)

    monkeypatch.setattr(module, "atomic_write", slow)


async def answered_meanwhile(peer: Peer, held: Held) -> None:
    """Another client's request is answered while the slow step is held."""
    await held.entered_soon()
    await asyncio.wait_for(peer.ok(wire.request(RequestCode.GET_BROKER_CONFIG)), 5)
    held.release.set()
    assert await asyncio.to_thread(held.left.wait, 20)


async def created_while_held(broker_addr: str, peer: Peer, held: Held, topic: str,
                             queues: int) -> None:
    """Create ``topic`` from a connection of its own while the slow step is held: ``peer``
    is answered meanwhile, and the creation answered once the step is let go."""
    async with Peer(broker_addr) as creator:
        task = asyncio.create_task(creator.ok(wire.create_topic(topic, queues)))
        await answered_meanwhile(peer, held)
        await task
    assert held.gave_up == [False]
