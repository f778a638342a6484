"""A broker registers its controller epoch as its DataVersion's stateVersion, and the name
server keeps a broker id with the broker of the later state: a master that an election
replaced and that is still running does not take the routes back when it registers
again. In-process, a master and its replica over real TCP, elected by hand."""

from __future__ import annotations

from pathlib import Path

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.inprocess import Cluster

TOPIC = "StateVersioned"


async def test_an_old_master_registering_again_does_not_take_the_routes_back(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path) as group:
        old = group.brokers[0]
        new = await group.add_replica(old, slave_metadata_sync_interval=600_000)
        assert old.registrar is not None and new.registrar is not None
        async with Peer(old.broker_addr) as peer:
            await peer.ok(wire.create_topic(TOPIC, 1))
        await new.metadata_sync.copy_now()
        await new.role.become_master(old.role.state.epoch + 1, sync=False)
        assert new.topics.data_version.state_version == old.role.state.epoch + 1
        async with Peer(group.namesrv_addr) as ns:
            await wire.eventually_route(
                ns, TOPIC, lambda r: r.broker_datas[0].broker_addrs.get(0) == new.broker_addr)
            await old.registrar.register_all()  # the replaced master, still running
            route = await wire.eventually_route(ns, TOPIC)
            assert route.broker_datas[0].broker_addrs == {0: new.broker_addr}
            await new.registrar.register_all()  # the new master keeps the place
            route = await wire.eventually_route(ns, TOPIC)
            assert route.broker_datas[0].broker_addrs == {0: new.broker_addr}
