"""skipDispatchLingerWhenHeld: held pulls switch the store dispatcher's linger off.

Unit tests drive :class:`DispatchLinger` with a stand-in dispatcher and a short grace;
the integration tests hold real pulls (plain and batch-protocol) on a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.test_long_poll import held_pull, park
from tests.broker.wire import Peer

from tidemq.broker.long_poll import DispatchLinger
from tidemq.codec.batch_protocol import encode_batch_request
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

#: The broker tests configure a linger (``dispatchLingerMs``; the store's default is 0).
LINGER = {"dispatch_linger_ms": 1.0}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, store=LINGER) as c:
        yield c


class _Dispatcher:
    def __init__(self, linger: float) -> None:
        self.linger = linger


async def _until(predicate: object, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_hold_switches_the_linger_off_until_nothing_is_held() -> None:
    dispatcher = _Dispatcher(0.001)
    holding = [True]
    linger = DispatchLinger(dispatcher, lambda: holding[0], grace=0.02)
    linger.held()
    assert dispatcher.linger == 0.0 and linger.active
    await asyncio.sleep(0.1)  # still held: stays off through several checks
    assert dispatcher.linger == 0.0
    holding[0] = False
    await _until(lambda: not linger.active)
    assert dispatcher.linger == 0.001
    linger.held()  # the next hold switches it off again
    assert dispatcher.linger == 0.0
    linger.close()
    assert dispatcher.linger == 0.001 and not linger.active


async def test_recent_holds_keep_it_off_between_pulls() -> None:
    dispatcher = _Dispatcher(0.002)
    linger = DispatchLinger(dispatcher, lambda: False, grace=0.05)
    linger.held()
    for _ in range(4):  # a consumer re-pulling more often than the grace
        await asyncio.sleep(0.03)
        linger.held()
        assert dispatcher.linger == 0.0
    await _until(lambda: not linger.active)
    assert dispatcher.linger == 0.002


async def test_no_linger_configured_means_nothing_to_switch() -> None:
    dispatcher = _Dispatcher(0.0)
    linger = DispatchLinger(dispatcher, lambda: True, grace=0.01)
    linger.held()
    assert not linger.active and dispatcher.linger == 0.0


async def test_a_held_pull_switches_the_broker_dispatcher(cluster: Cluster, peer: Peer) -> None:
    broker = cluster.brokers[0]
    dispatcher = broker.store.dispatcher
    assert dispatcher is not None and broker.dispatch_linger is not None
    configured = dispatcher.linger
    assert configured > 0
    await peer.ok(wire.create_topic("LP", 1))
    task = await park(peer, held_pull("LP", 0))
    assert dispatcher.linger == 0.0
    await peer.ok(wire.send("LP", b"wake"))
    assert (await asyncio.wait_for(task, 5)).code == ResponseCode.SUCCESS


async def test_a_held_batch_parent_switches_it_too(cluster: Cluster, peer: Peer) -> None:
    broker = cluster.brokers[0]
    dispatcher = broker.store.dispatcher
    assert dispatcher is not None and broker.batch is not None
    await peer.ok(wire.create_topic("LPB", 2))
    holds = broker.batch.holds
    calls: list[None] = []
    wired = holds.on_hold
    assert wired is not None
    holds.on_hold = lambda: (calls.append(None), wired())[-1]  # type: ignore[func-returns-value]
    children = [wire.pull("LPB", q, 0, sys_flag=wire.PULL_SUSPEND, suspend_ms=10_000)
                for q in (0, 1)]
    parent = encode_batch_request(RequestCode.PULL_MESSAGE, children)
    task = asyncio.ensure_future(peer(parent, timeout=30.0))
    await _until(lambda: holds.held_count == 1)
    assert calls and dispatcher.linger == 0.0
    await peer.ok(wire.send("LPB", b"wake"))
    assert (await asyncio.wait_for(task, 5)).code == ResponseCode.SUCCESS
    assert holds.held_count == 0


async def test_the_setting_off_leaves_the_linger_alone(tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker={"skip_dispatch_linger_when_held": False},
                       store=LINGER) as c:
        broker = c.brokers[0]
        assert broker.dispatch_linger is None and broker.pull_holds.on_hold is None
        async with Peer(broker.broker_addr) as peer:
            await peer.ok(wire.create_topic("LP", 1))
            task = await park(peer, held_pull("LP", 0))
            dispatcher = broker.store.dispatcher
            assert dispatcher is not None and dispatcher.linger > 0
            await peer.ok(wire.send("LP", b"wake"))
            assert (await asyncio.wait_for(task, 5)).code == ResponseCode.SUCCESS
