"""A replica copies its master's ACL 2.0 users and ACLs with the rest of its metadata
(GET_AUTH_METADATA, 20300): a user made on the master signs requests the replica
accepts, its ACL holds there too, and a user deleted on the master is gone from the
replica at the next copy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker.wire import Peer, create_topic, request
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.broker.app import BrokerApp
from tidemq.broker.replication.role import BrokerRole
from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.testing import Cluster


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={**ACL2, "broker_role": BrokerRole.ASYNC_MASTER}
                       ) as c:
        yield c


async def _copied(replica: BrokerApp) -> None:
    replica.metadata_sync.synced.clear()
    replica.metadata_sync.master_known(replica.metadata_sync.master_addr)  # copy now
    await asyncio.wait_for(replica.metadata_sync.synced.wait(), 20)


async def test_users_and_acls_reach_the_replica(group: Cluster) -> None:
    master = group.brokers[0]
    replica = await group.add_replica(master, slave_metadata_sync_interval=100)
    config = ClientConfig(namesrv_addr=(group.namesrv_addr,), access_key=ROOT.access_key,
                          secret_key=ROOT.secret_key)
    async with AdminClient(config=config) as admin:
        auth = AuthAdmin(admin, broker_addr=master.broker_addr)
        await auth.create_user(ALICE.access_key, ALICE.secret_key)
        await auth.create_acl("User:alice", ["Topic:Rt"], ["Sub"])
        async with Peer(master.broker_addr, RemotingClient(credentials=ROOT)) as peer:
            await peer.ok(create_topic("Rt", 1))
            await peer.ok(create_topic("Other", 1))
        async with asyncio.timeout(20):
            while replica.auth_store.user("alice") is None:
                await _copied(replica)
        async with Peer(replica.broker_addr, RemotingClient(credentials=ALICE)) as alice:
            await alice.ok(request(RequestCode.GET_MAX_OFFSET, topic="Rt", queueId=0))
            resp = await alice(request(RequestCode.GET_MAX_OFFSET, topic="Other", queueId=0))
            assert (resp.code, "SUB on topic Other" in (resp.remark or "")) == (
                ResponseCode.NO_PERMISSION, True)
        await auth.delete_user("alice")
        await _copied(replica)
        assert replica.auth_store.user("alice") is None
        async with Peer(replica.broker_addr, RemotingClient(credentials=ALICE)) as alice:
            resp = await alice(request(RequestCode.GET_MAX_OFFSET, topic="Rt", queueId=0))
            assert resp.code == ResponseCode.NO_PERMISSION
    assert replica.metadata_sync.last_error == ""
