"""Delayed delivery and kill -9: a ``tidemq broker`` process killed while it hands
delayed messages back to their topic -- right after it stored the first copy, before it
wrote its progress (``delayOffset.json``, ``timerCheckpoint.json``), or right after it
wrote it -- is started again on the same store, and every acknowledged delayed message
reaches its topic: none lost (a copy may come twice, the delivery being at least once, as
upstream's). Both kinds: a delay level (``DELAY``) and a timer (``TIMER_DELAY_MS``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess

TOPIC = "Later"
N = 20
SETTINGS = {"mappedFileSizeCommitLog": SMALL_SEGMENT}
#: A copy stored, progress not written; the progress file written (its first write).
STEPS = ("tidemq.broker.schedule:ScheduleService._deliver",
         "tidemq.broker.schedule:atomic_write")


async def _send(addr: str, delay: dict[str, str]) -> set[bytes]:
    async with Peer(addr) as peer:
        await peer.ok(wire.create_topic(TOPIC, 1))
        for n in range(N):
            await peer.ok(wire.send(TOPIC, b"d%d" % n, properties=wire.props(**delay)))
    return {b"d%d" % n for n in range(N)}


async def _delivered(addr: str, expected: set[bytes]) -> list[bytes]:
    """The topic's messages, read until every expected body came (or the wait ends)."""
    got: list[bytes] = []
    async with Peer(addr) as peer:
        while not expected <= set(got):
            [msg] = await collect(peer, TOPIC, 1, offset=len(got), timeout=60)
            got.append(msg.body)
    return got


@pytest.mark.parametrize("delay", [{"DELAY": "1"}, {"TIMER_DELAY_MS": "1000"}],
                         ids=lambda d: next(iter(d)))
@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.rpartition(".")[2].rpartition(":")[2])
def test_delayed_messages_survive_a_kill9_during_delivery(
        tmp_path: Path, namesrv: NameServerApp, step: str, delay: dict[str, str]) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, SETTINGS)
    broker.stop_after(step)
    broker.start()
    try:
        expected = asyncio.run(_send(broker.addr, delay))
        assert broker.stopped(timeout=60) == step
        broker.kill9()
        broker.stop_after(None)
        broker.start()
        got = asyncio.run(_delivered(broker.addr, expected))
        assert set(got) == expected
    finally:
        broker.kill9()
