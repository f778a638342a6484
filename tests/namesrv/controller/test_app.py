"""One controller in-process (a Raft group of one) over real TCP: bad requests are
answered with a code and a remark naming what was wrong, the server keeps serving, and
heartbeats of brokers no group holds are not kept."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.crash.broker_process import free_port

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import (
    BrokerHeartbeatResponseHeader,
    ElectMasterRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from tidemq.codec.headers import BrokerHeartbeatRequestHeader
from tidemq.errors import ResponseCode
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.namesrv.controller.events import AlterSyncStateSet, ElectMaster, RegisterBroker
from tidemq.namesrv.controller.state import ControllerState
from tidemq.net import RemotingClient


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[ControllerApp]:
    config = ControllerConfig(listen_port=0, controller_raft_self_id="n0",
                              controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
                              controller_store_path=str(tmp_path / "raft"))
    app = ControllerApp(config)
    await app.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (app.is_leader and app.leader_address()):
            assert loop.time() < deadline, "a controller alone never led"
            await asyncio.sleep(0.05)
        yield app
    finally:
        await app.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout=5.0)
    yield remoting
    await remoting.close()


def _beat(name: str, broker_id: int, max_offset: int = 0) -> RemotingCommand:
    header = BrokerHeartbeatRequestHeader(cluster_name="c", broker_addr="127.0.0.1:1",
                                          broker_name=name, broker_id=broker_id,
                                          max_offset=max_offset)
    return RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, header.to_ext())


async def test_bad_requests_are_answered_naming_the_problem(controller: ControllerApp,
                                                            client: RemotingClient) -> None:
    addr = controller.address
    missing = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": "c"}))
    assert missing.code == ResponseCode.INVALID_PARAMETER
    assert "brokerName" in (missing.remark or "")
    bad_id = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_REGISTER_BROKER,
        {"clusterName": "c", "brokerName": "b", "brokerId": "one", "brokerAddress": "h:1"}))
    assert bad_id.code == ResponseCode.INVALID_PARAMETER and "brokerId" in (bad_id.remark or "")
    no_body = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": "b", "masterBrokerId": "1", "masterEpoch": "1"}))
    assert no_body.code == ResponseCode.INVALID_PARAMETER
    assert "SyncStateSet" in (no_body.remark or "")
    garbage = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b"\xff{"))
    assert garbage.code == ResponseCode.INVALID_PARAMETER
    unknown = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "nope"}))
    assert unknown.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert "nope" in (unknown.remark or "")
    # still serving
    meta = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_METADATA_INFO))
    assert meta.code == 0 and meta.ext_fields["isLeader"] == "true"


async def test_only_heartbeats_of_registered_brokers_are_kept(
        controller: ControllerApp, client: RemotingClient) -> None:
    addr = controller.address
    for i in range(50):  # a peer inventing brokers
        assert (await client.request(addr, _beat(f"ghost-{i}", 1))).code == 0
    assert all(controller.heartbeats.get((f"ghost-{i}", 1)) is None for i in range(50))
    header = RegisterBrokerToControllerRequestHeader(
        cluster_name="c", broker_name="real", broker_id=1, broker_address="127.0.0.1:1")
    response = await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_REGISTER_BROKER, header.to_ext()))
    assert response.code == 0, response.remark
    assert (await client.request(addr, _beat("real", 1, max_offset=77))).code == 0
    beat = controller.heartbeats.get(("real", 1))
    assert beat is not None and beat.max_offset == 77


async def test_a_heartbeat_is_answered_with_the_leader_and_the_groups_master(
        controller: ControllerApp, client: RemotingClient) -> None:
    addr = controller.address
    outsider = await client.request(addr, _beat("unknown", 1))
    assert BrokerHeartbeatResponseHeader.from_ext(outsider.ext_fields) == (
        BrokerHeartbeatResponseHeader(controller_leader_id="n0", is_leader=True))
    header = RegisterBrokerToControllerRequestHeader(
        cluster_name="c", broker_name="g", broker_id=1, broker_address="127.0.0.1:1")
    assert (await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_REGISTER_BROKER, header.to_ext()))).code == 0
    elect = ElectMasterRequestHeader(cluster_name="c", broker_name="g", broker_id=1)
    assert (await client.request(addr, RemotingCommand.request(
        RequestCode.CONTROLLER_ELECT_MASTER, elect.to_ext()))).code == 0
    answer = await client.request(addr, _beat("g", 1))
    assert BrokerHeartbeatResponseHeader.from_ext(answer.ext_fields) == (
        BrokerHeartbeatResponseHeader(controller_leader_id="n0", is_leader=True,
                                      master_broker_id=1, master_epoch=1))


async def test_a_leader_still_applying_what_it_inherited_says_so(
        controller: ControllerApp, client: RemotingClient) -> None:
    raft = controller.raft
    assert raft is not None
    # the fault: the node leads but has not applied its own term's first entry
    raft._sync.removeOnTickCallback(raft._note_caught_up)
    raft._caught_up_term = -1
    request = RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                      {"brokerName": "b"})
    refused = await client.request(controller.address, request)
    assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert "still applying" in (refused.remark or "")
    raft._sync.addOnTickCallback(raft._note_caught_up)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not controller.is_leader:
        assert loop.time() < deadline, "the leader never caught up"
        await asyncio.sleep(0.05)
    answered = await client.request(controller.address, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"}))
    assert answered.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST


async def test_a_memory_only_controller_warns_that_a_restart_can_lose_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    config = ControllerConfig(listen_port=0, controller_raft_self_id="n0",
                              controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
                              controller_store_path="memory")
    async with ControllerApp(config) as app:
        assert app.store_path is None
    assert any("controllerStorePath=memory" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records)


class _ReplayingLog:
    """A Raft log whose state is filled in only after this node leads, as PySyncObj does
    when it replays its journal after a restart (the fault injected here)."""

    self_address = "127.0.0.1:1"
    leader = "127.0.0.1:1"
    is_leader = True
    term = 2

    def __init__(self) -> None:
        self.state = ControllerState()
        self.submitted: list[object] = []

    def reading(self) -> contextlib.nullcontext[ControllerState]:
        return contextlib.nullcontext(self.state)

    def submit(self, event: object) -> asyncio.Future[bool]:
        self.submitted.append(event)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        future.set_result(self.state.apply(event))  # type: ignore[arg-type]
        return future


async def test_a_group_replayed_after_taking_the_lead_gets_fresh_leases() -> None:
    now = [1_000_000]
    config = ControllerConfig(controller_raft_self_id="n0",
                              controller_raft_peers="n0-127.0.0.1:1",
                              controller_broker_heartbeat_timeout=1500)
    app = ControllerApp(config, clock=lambda: now[0])
    log = _ReplayingLog()
    app.raft = log  # type: ignore[assignment]
    app._announced = True
    await app.watch_once()  # leads, the log not replayed yet
    for i in (1, 2):
        log.state.apply(RegisterBroker(cluster="c", broker_name="b", broker_id=i,
                                       address=f"h:{i}"))
    log.state.apply(ElectMaster(broker_name="b", new_master=1, expected_master_epoch=0))
    log.state.apply(AlterSyncStateSet(broker_name="b", master_id=1, master_epoch=1,
                                      expected_epoch=1, sync_state_set=frozenset({1, 2})))
    now[0] += 5000  # the replay took a while; no heartbeat has come in yet
    await app.watch_once()
    assert log.submitted == [], "a master was judged dead before it could heartbeat"
    assert log.state.groups["b"].master_id == 1
