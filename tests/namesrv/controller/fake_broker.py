"""Brokers of broker-a as controllers see them, played over real TCP by a test: they
register, heartbeat to every controller, and the first becomes master with the second in
its sync-state set."""

from __future__ import annotations

import asyncio
import contextlib

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
from tidemq.errors import ConnectionLost, ControllerNotLeaderError, ResponseCode
from tidemq.net import RemotingClient

GROUP = "broker-a"
LEASE_MS = 1500


class FakeBroker:
    """One broker of broker-a as the controllers see it: registers, heartbeats to every
    controller until stopped."""

    def __init__(self, client: RemotingClient, controllers: list[str], broker_id: int,
                 lease_ms: int = LEASE_MS) -> None:
        self.client = client
        #: The lease each heartbeat asks for (it, not the controllers' default, decides
        #: when the controllers think this broker dead).
        self.lease_ms = lease_ms
        self.controllers = controllers
        self.broker_id = broker_id
        self.address = f"127.0.0.1:{20000 + broker_id}"
        self.offset = 0
        self._task: asyncio.Task[None] | None = None

    def heartbeat(self) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader(
            cluster_name="c", broker_addr=self.address, broker_name=GROUP,
            broker_id=self.broker_id, epoch=1, max_offset=self.offset,
            heartbeat_timeout_millis=self.lease_ms)
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


async def at_leader(admin: ControllerAdmin, client: RemotingClient,
                     cmd: RemotingCommand) -> RemotingCommand:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60  # three controller processes elect on a busy machine
    for _ in range(50):
        while True:
            try:
                leader = await admin.leader()  # waits a few seconds itself
                break
            except ControllerNotLeaderError:
                if loop.time() > deadline:
                    raise
        with contextlib.suppress(ConnectionLost):
            response = await client.request(leader, cmd)
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return response
        await asyncio.sleep(0.2)
    raise AssertionError("no controller leader answered")


async def wait_master(admin: ControllerAdmin, want: int, timeout: float = 20) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info, _ = await admin.replica_info(GROUP)
        if info.master_broker_id == want:
            assert info.master_epoch is not None
            return info.master_epoch
        assert loop.time() < deadline, f"master is {info.master_broker_id}, not {want}"
        await asyncio.sleep(0.1)


async def set_up_group(admin: ControllerAdmin, client: RemotingClient,
                        brokers: list[FakeBroker]) -> None:
    for broker in brokers:
        broker.start()
        assert (await at_leader(admin, client, broker.register())).code == 0
    first = ElectMasterRequestHeader(cluster_name="c", broker_name=GROUP, broker_id=1)
    response = await at_leader(admin, client, RemotingCommand.request(
        RequestCode.CONTROLLER_ELECT_MASTER, first.to_ext()))
    assert response.code == 0, response.remark
    # the master reports its replica in sync
    alter = AlterSyncStateSetRequestHeader(broker_name=GROUP, master_broker_id=1,
                                           master_epoch=1)
    body = SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=1)
    response = await at_leader(admin, client, RemotingCommand.request(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter.to_ext(), encode_body(body)))
    assert response.code == 0, response.remark
