"""Three controller processes on loopback. The test plays two brokers of broker-a (their
registrations and heartbeats over real TCP) and kills controllers with SIGKILL:

* a lapsed master lease elects the replica of the sync-state set, the epoch rises;
* with the leading controller killed, the other two still elect;
* with two of three killed, the last one elects nobody and the master stays.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from tests.namesrv.controller.processes import ControllerProcess, controller_trio

from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.bodies import encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import (
    AlterSyncStateSetRequestHeader,
    ElectMasterRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from tidemq.codec.headers import BrokerHeartbeatRequestHeader
from tidemq.errors import ConnectionLost, ResponseCode
from tidemq.net import RemotingClient

GROUP = "broker-a"
LEASE_MS = 1500


@pytest.fixture
def trio() -> Iterator[list[ControllerProcess]]:
    controllers = controller_trio({"controllerBrokerHeartbeatTimeout": str(LEASE_MS)})
    try:
        for c in controllers:
            c.start()
        yield controllers
    finally:
        for c in controllers:
            c.kill9()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout=3.0)
    yield remoting
    await remoting.close()


class FakeBroker:
    """One broker of broker-a as the controllers see it: registers, heartbeats to every
    controller until stopped."""

    def __init__(self, client: RemotingClient, controllers: list[str], broker_id: int) -> None:
        self.client = client
        self.controllers = controllers
        self.broker_id = broker_id
        self.address = f"127.0.0.1:{20000 + broker_id}"
        self.offset = 0
        self._task: asyncio.Task[None] | None = None

    def heartbeat(self) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr=self.address, broker_name=GROUP,
            broker_id=self.broker_id, epoch=1, max_offset=self.offset,
            heartbeat_timeout_millis=LEASE_MS)
        return RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.to_ext())

    async def _beat_forever(self) -> None:
        while True:
            for addr in self.controllers:
                with contextlib.suppress(Exception):
                    await self.client.request(addr, self.heartbeat(), 1.0)
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._beat_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def register(self) -> RemotingCommand:
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name="c", broker_name=GROUP, broker_id=self.broker_id,
            broker_address=self.address)
        return RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, header.to_ext())


async def _at_leader(admin: ControllerAdmin, client: RemotingClient,
                     cmd: RemotingCommand) -> RemotingCommand:
    for _ in range(50):
        leader = await admin.leader()
        with contextlib.suppress(ConnectionLost):
            response = await client.request(leader, cmd)
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return response
        await asyncio.sleep(0.2)
    raise AssertionError("no controller leader answered")


async def _wait_master(admin: ControllerAdmin, want: int, timeout: float = 20) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info, _ = await admin.replica_info(GROUP)
        if info.master_broker_id == want:
            assert info.master_epoch is not None
            return info.master_epoch
        assert loop.time() < deadline, f"master is {info.master_broker_id}, not {want}"
        await asyncio.sleep(0.1)


async def _set_up_group(admin: ControllerAdmin, client: RemotingClient,
                        brokers: list[FakeBroker]) -> None:
    for broker in brokers:
        broker.start()
        assert (await _at_leader(admin, client, broker.register())).code == 0
    first = ElectMasterRequestHeader(cluster_name="c", broker_name=GROUP, broker_id=1)
    response = await _at_leader(admin, client, RemotingCommand.request(
        RequestCode.CONTROLLER_ELECT_MASTER, first.to_ext()))
    assert response.code == 0, response.remark
    # the master reports its replica in sync
    alter = AlterSyncStateSetRequestHeader(broker_name=GROUP, master_broker_id=1,
                                           master_epoch=1)
    body = SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=1)
    response = await _at_leader(admin, client, RemotingCommand.request(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter.to_ext(), encode_body(body)))
    assert response.code == 0, response.remark


async def test_a_lapsed_master_is_replaced_even_with_the_leading_controller_killed(
        trio: list[ControllerProcess], client: RemotingClient) -> None:
    addrs = [c.addr for c in trio]
    admin = ControllerAdmin(client.request, addrs)
    master, replica = FakeBroker(client, addrs, 1), FakeBroker(client, addrs, 2)
    try:
        await _set_up_group(admin, client, [master, replica])
        info = await admin.sync_state_set([GROUP])
        assert [r.broker_id for r in info.replicas_info_table[GROUP].in_sync_replicas] == [1, 2]

        leader = await admin.leader()
        next(c for c in trio if c.addr == leader).kill9()
        await master.stop()  # the master dies too: its lease lapses
        admin.controllers = [c.addr for c in trio if c.proc is not None]
        assert await _wait_master(admin, 2) == 2
        (group,) = (await admin.sync_state_set([GROUP])).replicas_info_table.values()
        assert group.master_address == replica.address
        assert [r.broker_id for r in group.in_sync_replicas] == [2]
    finally:
        await master.stop()
        await replica.stop()


async def test_with_two_controllers_killed_nobody_is_elected_and_the_master_stays(
        trio: list[ControllerProcess], client: RemotingClient) -> None:
    addrs = [c.addr for c in trio]
    admin = ControllerAdmin(client.request, addrs)
    master, replica = FakeBroker(client, addrs, 1), FakeBroker(client, addrs, 2)
    try:
        await _set_up_group(admin, client, [master, replica])
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
        assert await _wait_master(admin, 2, timeout=30) == 2
    finally:
        await master.stop()
        await replica.stop()
