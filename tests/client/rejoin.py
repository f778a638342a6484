"""Set-up shared by the route-cache tests of a name server that restarts while its
brokers have yet to register again (the async and the blocking cache)."""

from __future__ import annotations

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.testing import Cluster


async def route_both_and_only_b(cluster: Cluster) -> None:
    """Topic ``Both`` on both brokers and ``OnlyB`` on the second alone, routed."""
    a, b = cluster.brokers
    for broker, topics in ((a, ["Both"]), (b, ["Both", "OnlyB"])):
        async with Peer(broker.broker_addr) as peer:
            for topic in topics:
                await peer.ok(wire.create_topic(topic, 2))
    async with Peer(cluster.namesrv_addr) as ns:
        await wire.eventually_route(ns, "Both", lambda r: len(r.broker_datas) == 2)
        await wire.eventually_route(ns, "OnlyB")


async def restart_namesrv(cluster: Cluster, **config: int) -> None:
    """Replace the cluster's name server with a new one on the same port."""
    old = cluster.namesrv
    assert old is not None
    port = old.port
    await old.stop()
    cluster.namesrv = NameServerApp(NamesrvConfig(listen_port=port, bind_address="127.0.0.1",
                                                  **config))
    await cluster.namesrv.start()
