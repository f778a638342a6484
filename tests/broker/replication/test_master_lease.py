"""A controller-mode master whose lease is not renewed (the controllers' confirmations
lost: the fault injected) refuses sends at once, steps down within its lease, and is
master again, in the same epoch, once the confirmations arrive. In-process, over real
TCP (the fixture of :mod:`tests.broker.replication.test_metadata_push`)."""

from __future__ import annotations

import asyncio

import pytest
from tests.broker import wire
from tests.broker.replication.test_metadata_push import pair, until
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.replication.role import RoleState
from tidemq.errors import ResponseCode

__all__ = ["pair"]  # fixture


async def test_a_master_without_renewals_stops_and_resumes_in_its_epoch(
        pair: tuple[BrokerApp, BrokerApp], monkeypatch: pytest.MonkeyPatch) -> None:
    master, _ = pair
    lease = master.ctx.replication.lease
    assert lease is not None
    epoch = master.role.state.epoch
    # Every state the master takes, as it takes it: without renewals it steps down and
    # the controllers' next answer may make it master again at once (its lease lapses
    # again), so polling is_master could miss the step down.
    states: list[RoleState] = []
    stepped = asyncio.Event()

    def follow(state: RoleState) -> None:
        states.append(state)
        if not state.is_master:
            stepped.set()

    master.role.add_listener(follow)
    async with Peer(master.broker_addr) as peer:
        await peer.ok(wire.create_topic("Leased", 1))
        await peer.ok(wire.send("Leased", b"before"))
        with monkeypatch.context() as m:
            m.setattr(lease, "renew", lambda sent_at: None)
            lease.revoke()
            refused = await peer(wire.send("Leased", b"lapsed"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "lease" in (refused.remark or "")
            await asyncio.wait_for(stepped.wait(), 30)  # stepped down, in its epoch
            assert next(s.epoch for s in states if not s.is_master) == epoch
            refused = await peer(wire.send("Leased", b"stepped down"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        await until(lambda: master.role.is_master and lease.holds())
        assert master.role.state.epoch == epoch
        assert [(e.epoch, e.start_offset) for e in master.store.epochs.entries][-1][0] == epoch
        server = master.ctx.replication.server  # its replica connects again
        await until(lambda: server is not None and server.in_sync() >= 1)
        await peer.ok(wire.send("Leased", b"after"))
        await asyncio.wait_for(asyncio.to_thread(master.store.wait_dispatched), 10)
        bodies = [bytes(m.body) for m in await peer.messages("Leased")]
        assert bodies == [b"before", b"after"]


async def test_a_master_back_in_its_epoch_keeps_its_replicas_connected(
        pair: tuple[BrokerApp, BrokerApp], monkeypatch: pytest.MonkeyPatch) -> None:
    """Stepped down for a lapsed lease, the master keeps its HA port and its replicas'
    connections: master of the same epoch again, its first send is acknowledged, not
    answered SLAVE_NOT_AVAILABLE while its replica connects again (a master slowed
    past its lease by a loaded machine, then confirmed)."""
    master, _ = pair
    lease = master.ctx.replication.lease
    server = master.ctx.replication.server
    assert lease is not None and server is not None
    links = list(server.links)
    assert len(links) == 1
    stepped = asyncio.Event()
    master.role.add_listener(lambda state: None if state.is_master else stepped.set())
    async with Peer(master.broker_addr) as peer:
        await peer.ok(wire.create_topic("Kept", 1))
        await peer.ok(wire.send("Kept", b"before"))
        with monkeypatch.context() as m:
            m.setattr(lease, "renew", lambda sent_at: None)
            lease.revoke()
            await asyncio.wait_for(stepped.wait(), 30)
            assert master.ctx.replication.server is server and server.links == links
        await until(lambda: master.role.is_master and lease.holds())
        assert master.ctx.replication.server is server and server.links == links
        await peer.ok(wire.send("Kept", b"after"))  # at once: no SLAVE_NOT_AVAILABLE
