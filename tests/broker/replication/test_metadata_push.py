"""A controller-mode master's topic and group changes reach its in-sync replica before
they are answered (NOTIFY_METADATA_CHANGED, 20400), and a notice a replica must not act
on is refused naming why. In-process: a name server with the controller embedded (a
Raft group of one) and two brokers of one group in controller mode, over real TCP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import free_port

from tidemq.broker.app import BrokerApp
from tidemq.broker.config import BrokerConfig
from tidemq.broker.replication.role import BrokerRole
from tidemq.client.logical_admin import plan_create
from tidemq.codec.auth_bodies import AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo, encode_auth
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv.app import NameServerApp
from tidemq.namesrv.config import NamesrvConfig
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.store.config import StoreConfig


async def until(check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "not reached"
        await asyncio.sleep(0.05)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[BrokerApp, BrokerApp]]:
    controller = ControllerApp(ControllerConfig(
        controller_raft_self_id="n0", controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
        enable_controller_in_namesrv=True, controller_store_path=str(tmp_path / "raft")))
    namesrv = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"),
                            controller=controller)
    await namesrv.start()
    brokers: list[BrokerApp] = []
    try:
        for broker_id in (1, 2):
            config = BrokerConfig(
                broker_name="broker-a", listen_port=0, ha_listen_port=0,
                namesrv_addr=namesrv.address, enable_controller_mode=True,
                controller_addr=namesrv.address, broker_id=broker_id,
                broker_role=BrokerRole.SYNC_MASTER, broker_heartbeat_interval=100,
                # a lease of 2.8 s: a busy event loop does not lapse it
                controller_heart_beat_timeout_mills=3000,
                slave_metadata_sync_interval=600_000)  # only a notice copies in time
            store = StoreConfig(store_path_root_dir=str(tmp_path / f"b{broker_id}"),
                                mapped_file_size_commit_log=64 * 1024)
            app = BrokerApp(config, store)
            await app.start()
            brokers.append(app)
            if broker_id == 1:
                await until(lambda a=app: a.role.is_master)  # type: ignore[misc]
        master, replica = brokers
        link = master.controller_link
        assert link is not None
        await until(lambda: link.in_sync_replicas() == [replica.broker_addr])
        # and its copy connected to the master's HA port: the controllers' in-sync set is
        # read from the replicas' epoch caches, which an empty replica passes before it
        # connects
        ha = master.ctx.replication
        await until(lambda: replica.role.state.master_ha_address == ha.ha_address
                    and ha.server is not None and ha.server.in_sync() >= 1)
        yield master, replica
    finally:
        for app in brokers:
            await app.stop()
        await namesrv.stop()


def notice(master_addr: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.NOTIFY_METADATA_CHANGED,
                                   {"masterAddr": master_addr})


async def test_a_change_is_on_the_replica_when_it_is_answered(
        pair: tuple[BrokerApp, BrokerApp]) -> None:
    master, replica = pair
    async with Peer(master.broker_addr) as peer:
        await peer.ok(wire.create_topic("Fresh", 2))
        assert replica.topics.get("Fresh") is not None
        group = json.dumps({"groupName": "fresh-group", "retryMaxTimes": 5}).encode()
        await peer.ok(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                              body=group))
        assert replica.subscription_groups.groups["fresh-group"]["retryMaxTimes"] == 5
        await peer.ok(wire.send("Fresh", b"m"))
        await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="Fresh"))
        assert replica.topics.get("Fresh") is None
        mark = master.store.topic_deletion_marks()["Fresh"]  # where the master deleted it
        assert replica.store.topic_deletion_marks() == {"Fresh": mark}


async def test_a_logical_queue_mapping_is_on_the_replica_when_it_is_answered(
        pair: tuple[BrokerApp, BrokerApp]) -> None:
    """A replica elected master must know which topics are logical and where their
    segments are: the mapping, its seal and its deletion reach it with the answer."""
    master, replica = pair
    mapping = plan_create("Mapped", 2, ["broker-a"])
    async with Peer(master.broker_addr) as peer:
        await peer.ok(RemotingCommand.request(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {},
                                              json.dumps(mapping.to_json()).encode()))
        assert replica.ctx.logical.get("Mapped") == master.ctx.logical.get("Mapped")
        held = replica.topics.get("Mapped")
        assert held is not None and held.attributes["logical.queues"] == "2"
        await peer.ok(wire.request(RequestCode.SEAL_LOGICAL_QUEUE, topic="Mapped", lq="0"))
        sealed = replica.ctx.logical.get("Mapped")
        assert sealed is not None and sealed == master.ctx.logical.get("Mapped")
        assert sealed.leader(0) is None
        await peer.ok(wire.request(RequestCode.DELETE_LOGICAL_QUEUE_MAPPING, topic="Mapped"))
        assert replica.ctx.logical.get("Mapped") is None


async def test_users_and_acls_are_on_the_replica_when_answered(
        pair: tuple[BrokerApp, BrokerApp]) -> None:
    """An ACL 2.0 change answered by the master holds on the replica elected after it:
    a user created can sign in there, and a user deleted (a leaked password revoked)
    is gone there too."""
    master, replica = pair
    user = encode_auth(UserInfo(username="app", password="app-secret-1", user_type="Normal"))
    acl = encode_auth(AclInfo(subject="User:app", policies=[PolicyInfo(
        policy_type="Custom", entries=[PolicyEntryInfo(
            resource="Topic:orders", actions=["Pub"], source_ips=[], decision="Allow")])]))
    async with Peer(master.broker_addr) as peer:
        await peer.ok(RemotingCommand.request(RequestCode.AUTH_CREATE_USER,
                                              {"username": "app"}, user))
        assert replica.ctx.auth.user("app") is not None
        await peer.ok(RemotingCommand.request(RequestCode.AUTH_CREATE_ACL,
                                              {"subject": "User:app"}, acl))
        assert replica.ctx.auth.acl_of("app") is not None
        await peer.ok(RemotingCommand.request(RequestCode.AUTH_DELETE_ACL,
                                              {"subject": "User:app"}))
        assert replica.ctx.auth.acl_of("app") is None
        await peer.ok(RemotingCommand.request(RequestCode.AUTH_DELETE_USER,
                                              {"username": "app"}))
        assert replica.ctx.auth.user("app") is None


async def test_a_notice_the_broker_must_not_follow_is_refused_naming_why(
        pair: tuple[BrokerApp, BrokerApp]) -> None:
    master, replica = pair
    async with Peer(master.broker_addr) as peer, Peer(replica.broker_addr) as rpeer:
        to_master = await peer(notice(replica.broker_addr))
        assert to_master.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "is a master" in (to_master.remark or "")
        stranger = await rpeer(notice("127.0.0.1:1"))
        assert stranger.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert master.broker_addr in (stranger.remark or "")
        assert "127.0.0.1:1" in (stranger.remark or "")
        unnamed = await rpeer(RemotingCommand.request(RequestCode.NOTIFY_METADATA_CHANGED))
        assert unnamed.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert (await rpeer(notice(master.broker_addr))).code == ResponseCode.SUCCESS
