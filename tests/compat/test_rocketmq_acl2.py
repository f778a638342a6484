"""The C++ RocketMQ client (``rocketmq`` 0.4.4) with session credentials against brokers
running ACL 2.0: a user's name and password are its access key and secret, so the client
sends and pulls unchanged; a topic outside the user's policies is refused with
NO_PERMISSION and nothing is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.compat.test_rocketmq_acl import _on
from tests.compat.test_rocketmq_client import SCENARIOS, scenario
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.net import RemotingClient
from tidemq.testing import Cluster

pytest.importorskip("rocketmq")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path / "cluster", brokers=2, broker=ACL2) as c:
        config = ClientConfig(namesrv_addr=(c.namesrv_addr,), access_key=ROOT.access_key,
                              secret_key=ROOT.secret_key)
        async with AdminClient(config=config) as admin:
            auth = AuthAdmin(admin)
            await auth.create_user(ALICE.access_key, ALICE.secret_key)
            await auth.create_acl("User:alice", ["Topic:Cpp*", "Group:*"], ["Pub", "Sub"])
        for topic, brokers in ((SCENARIOS.WARM_UP_TOPIC, c.brokers), ("CppAcl2", c.brokers[:1]),
                               ("Forbidden", c.brokers[:1])):
            for broker in brokers:
                async with Peer(broker.broker_addr, RemotingClient(
                        request_timeout=10.0, credentials=ROOT)) as peer:
                    await peer.ok(wire.create_topic(topic, 2))
            async with Peer(c.namesrv_addr) as ns:
                await wire.eventually_route(ns, topic, _on(len(brokers)))
        yield c


async def test_a_user_sends_and_pulls_with_the_cpp_client(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMQ_ACCESS_KEY", ALICE.access_key)
    monkeypatch.setenv("TIDEMQ_SECRET_KEY", ALICE.secret_key)
    sent = (await scenario(cluster, tmp_path, "send_sync", "CppAcl2", "pg", 3))["sent"]
    assert [s["status"] for s in sent] == ["OK"] * 3
    pulled = await scenario(cluster, tmp_path, "pull", "CppAcl2", "cg", 32)
    assert sorted(m["body"] for m in pulled["messages"]) == [f"body-{i}" for i in range(3)]
    assert [dict(b.acl.refused) for b in cluster.brokers if b.acl is not None] == [{}, {}]


async def test_a_topic_outside_the_users_policies_is_refused(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMQ_ACCESS_KEY", ALICE.access_key)
    monkeypatch.setenv("TIDEMQ_SECRET_KEY", ALICE.secret_key)
    result = await scenario(cluster, tmp_path, "send_denied", "Forbidden", "pg", 2,
                            refused=True)
    # Two sends: the first may lose the C++ client's connection race and reach no broker.
    assert len(result["errors"]) == 2 and all(result["errors"]), result
    logged = "".join(f.read_text(errors="replace")
                     for f in (tmp_path / "logs" / "rocketmq-cpp").iterdir())
    assert "needs PUB on topic Forbidden; alice does not have it, error code:16" in logged
    assert await _stored_as_root(cluster, "Forbidden") == []


async def _stored_as_root(cluster: Cluster, topic: str) -> list[bytes]:
    bodies = []
    for broker in cluster.brokers:
        await wire.dispatched(broker)
        async with Peer(broker.broker_addr, RemotingClient(request_timeout=10.0,
                                                           credentials=ROOT)) as peer:
            for qid in range(2):
                if await peer.max_offset(topic, qid):
                    bodies += [m.body for m in await peer.messages(topic, qid)]
    return bodies
