"""The broker's registration with name servers over real TCP: a name server that restarts
(and so forgot every broker) hears from the brokers again at once, not a period later."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.testing import Cluster

#: Longer than any test here runs: the periodic registration plays no part.
PERIOD_MS = 600_000


async def _restart_namesrv(cluster: Cluster) -> NameServerApp:
    """Stop the name server and start an empty one on the same port."""
    old = cluster.namesrv
    assert old is not None
    port = old.port
    await old.stop()
    new = NameServerApp(NamesrvConfig(listen_port=port, bind_address="127.0.0.1"))
    await new.start()
    cluster.namesrv = new
    return new


async def test_brokers_register_again_with_a_restarted_name_server(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=2,
                       broker={"register_name_server_period": PERIOD_MS}) as cluster:
        for broker in cluster.brokers:
            async with Peer(broker.broker_addr) as peer:
                await peer.ok(wire.create_topic("Both", 2))
        async with Peer(cluster.namesrv_addr) as ns:
            await wire.eventually_route(ns, "Both", lambda r: len(r.broker_datas) == 2)
        await _restart_namesrv(cluster)
        async with Peer(cluster.namesrv_addr) as ns:
            route = await wire.eventually_route(ns, "Both", lambda r: len(r.broker_datas) == 2,
                                                timeout=30)
        assert sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]


async def test_a_broker_started_before_its_name_server_registers_once_it_is_up(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=0) as cluster:
        namesrv = cluster.namesrv
        assert namesrv is not None
        port = namesrv.port
        await namesrv.stop()
        broker = await cluster.add_broker(0, register_name_server_period=PERIOD_MS)
        assert broker.registrar is not None and broker.registrar.last_error
        new = NameServerApp(NamesrvConfig(listen_port=port, bind_address="127.0.0.1"))
        await new.start()
        cluster.namesrv = new
        async with Peer(cluster.namesrv_addr) as ns:
            await wire.eventually_route(ns, "TBW102", timeout=30)


async def test_a_stopping_broker_does_not_say_it_registers_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its shutdown closes its connection to the name server, after unregistering: that
    is no name server lost, and no registration follows."""
    async with Cluster(tmp_path, brokers=1) as cluster:
        broker = cluster.brokers[0]
        with caplog.at_level(logging.INFO, logger="tidemq.broker.registrar"):
            await broker.stop()
    assert [r.getMessage() for r in caplog.records
            if r.name == "tidemq.broker.registrar"] == []
