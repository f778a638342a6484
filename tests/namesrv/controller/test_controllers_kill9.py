"""Three controller processes on loopback. The test plays two brokers of broker-a (their
registrations and heartbeats over real TCP) and kills controllers with SIGKILL:

* a lapsed master lease elects the replica of the sync-state set, the epoch rises;
* with the leading controller killed, the other two still elect;
* with two of three killed, the last one elects nobody and the master stays;
* with nothing configured, the controllers keep their Raft log on disk: the state
  survives kill -9 of all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.namesrv.controller.fake_broker import (
    GROUP,
    LEASE_MS,
    FakeBroker,
    set_up_group,
    wait_master,
)
from tests.namesrv.controller.processes import ControllerProcess, controller_trio

from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import ElectMasterRequestHeader
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient


def _running(controllers: list[ControllerProcess]) -> Iterator[list[ControllerProcess]]:
    try:
        for c in controllers:
            c.start()
        yield controllers
    finally:
        for c in controllers:
            c.kill9()


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    yield from _running(controller_trio(
        tmp_path, {"controllerBrokerHeartbeatTimeout": str(LEASE_MS)}))


@pytest.fixture
def kept_trio(tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    """Three controllers that keep their Raft log in the files ``controllerStorePath``
    names."""
    controllers = controller_trio(tmp_path, {"controllerBrokerHeartbeatTimeout": str(LEASE_MS)})
    for i, c in enumerate(controllers):
        c.settings["controllerStorePath"] = str(tmp_path / f"raft-{i}")
    yield from _running(controllers)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout=3.0)
    yield remoting
    await remoting.close()


async def test_a_lapsed_master_is_replaced_even_with_the_leading_controller_killed(
        trio: list[ControllerProcess], client: RemotingClient) -> None:
    addrs = [c.addr for c in trio]
    admin = ControllerAdmin(client.request, addrs)
    master, replica = FakeBroker(client, addrs, 1), FakeBroker(client, addrs, 2)
    try:
        await set_up_group(admin, client, [master, replica])
        info = await admin.sync_state_set([GROUP])
        assert [r.broker_id for r in info.replicas_info_table[GROUP].in_sync_replicas] == [1, 2]

        leader = await admin.leader()
        next(c for c in trio if c.addr == leader).kill9()
        await master.stop()  # the master dies too: its lease lapses
        admin.controllers = [c.addr for c in trio if c.proc is not None]
        assert await wait_master(admin, 2) == 2
        (group,) = (await admin.sync_state_set([GROUP])).replicas_info_table.values()
        assert group.master_address == replica.address
        assert [r.broker_id for r in group.in_sync_replicas] == [2]
    finally:
        await master.stop()
        await replica.stop()


async def test_with_two_controllers_killed_nobody_is_elected_and_the_master_stays(
        kept_trio: list[ControllerProcess], client: RemotingClient) -> None:
    # The controller that comes back keeps its log: one restarted with nothing could give
    # its vote to the survivor even if the survivor had not received the group yet (the
    # two killed had committed it alone), and the group would be lost (see
    # docs/replication.md, controllerStorePath).
    trio = kept_trio
    addrs = [c.addr for c in trio]
    admin = ControllerAdmin(client.request, addrs)
    master, replica = FakeBroker(client, addrs, 1), FakeBroker(client, addrs, 2)
    try:
        await set_up_group(admin, client, [master, replica])
        survivor = trio[2]
        for c in trio[:2]:
            c.kill9()
        await master.stop()
        # well past the lease and Raft's leader fallback: a controller without a quorum
        # must neither elect nor answer as leader
        await asyncio.sleep(LEASE_MS / 1000 * 3)
        meta = await admin.metadata(survivor.addr)
        assert not meta.is_leader
        refused = await client.request(survivor.addr, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP}))
        assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert "not the leader" in (refused.remark or "")
        elect = ElectMasterRequestHeader(broker_name=GROUP, broker_id=2, designate_elect=True)
        refused = await client.request(survivor.addr, RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, elect.to_ext()))
        assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
        # one controller comes back: the pair has a quorum again and fails over
        trio[0].start()
        admin.controllers = [trio[0].addr, survivor.addr]
        assert await wait_master(admin, 2, timeout=30) == 2
    finally:
        await master.stop()
        await replica.stop()


@pytest.mark.parametrize("command", ["controller", "namesrv"])
async def test_by_default_the_state_survives_kill9_of_every_controller(
        command: str, tmp_path: Path, client: RemotingClient) -> None:
    # No controllerStorePath: standalone controllers keep the log under their HOME, name
    # servers beside their own files (kvConfigPath).
    trio = controller_trio(tmp_path, {"controllerBrokerHeartbeatTimeout": str(LEASE_MS)},
                           command)
    stores = [c.default_store for c in trio]
    if command == "namesrv":
        for i, c in enumerate(trio):
            c.settings["kvConfigPath"] = str(tmp_path / f"ns{i}" / "kvConfig.json")
        stores = [tmp_path / f"ns{i}" / "controller" / c.self_id for i, c in enumerate(trio)]
    addrs = [c.addr for c in trio]
    admin = ControllerAdmin(client.request, addrs)
    master, replica = FakeBroker(client, addrs, 1), FakeBroker(client, addrs, 2)
    try:
        for c in trio:
            c.start()
        await set_up_group(admin, client, [master, replica])
        for c in trio:
            c.kill9()
        assert all((store / "raft.journal").is_file() for store in stores)
        for c in trio:  # off the event loop: the brokers go on heartbeating meanwhile
            await asyncio.to_thread(c.start)
        info = (await admin.sync_state_set([GROUP])).replicas_info_table[GROUP]
        assert (info.master_broker_id, info.master_epoch) == (1, 1)
        assert [r.broker_id for r in info.in_sync_replicas] == [1, 2]
    finally:
        await master.stop()
        await replica.stop()
        for c in trio:
            c.kill9()
