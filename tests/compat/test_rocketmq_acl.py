"""The C++ RocketMQ client (``rocketmq`` 0.4.4) with session credentials against a broker
and a name server with ``aclEnable=true``: with the right secret it sends and pulls; with
a wrong one its send is refused with NO_PERMISSION and nothing is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.compat.test_rocketmq_client import SCENARIOS, scenario
from tests.net.acl.accounts import ADMIN, USER, write_accounts

from tidemq.codec.bodies import TopicRouteData
from tidemq.net import RemotingClient
from tidemq.testing import Cluster

pytest.importorskip("rocketmq")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    acl = {"acl_enable": True, "acl_file": str(write_accounts(tmp_path))}
    async with Cluster(tmp_path / "cluster", brokers=2,
                       broker={**acl, "access_key": ADMIN.access_key,
                               "secret_key": ADMIN.secret_key}, namesrv=acl) as c:
        # The warm-up topic on both brokers (as the scenarios expect); CppAcl on the first
        # only, since this client's pull consumer reads the queues of one broker.
        for topic, brokers in ((SCENARIOS.WARM_UP_TOPIC, c.brokers), ("CppAcl", c.brokers[:1])):
            for broker in brokers:
                async with _admin(broker.broker_addr) as peer:
                    await peer.ok(wire.create_topic(topic, 2))
            async with Peer(c.namesrv_addr) as ns:  # route reads need no account
                await wire.eventually_route(ns, topic, _on(len(brokers)))
        yield c


def _on(brokers: int) -> Callable[[TopicRouteData], bool]:
    return lambda route: len(route.queue_datas) == brokers


def _admin(addr: str) -> Peer:
    return Peer(addr, RemotingClient(request_timeout=10.0, credentials=ADMIN))


async def _stored(cluster: Cluster, topic: str) -> list[bytes]:
    bodies = []
    for broker in cluster.brokers:
        await wire.dispatched(broker)
        async with _admin(broker.broker_addr) as peer:
            for qid in range(2):
                if await peer.max_offset(topic, qid):
                    bodies += [m.body for m in await peer.messages(topic, qid)]
    return sorted(bodies)


async def test_signed_sends_and_pulls(cluster: Cluster, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMQ_ACCESS_KEY", USER.access_key)
    monkeypatch.setenv("TIDEMQ_SECRET_KEY", USER.secret_key)
    sent = (await scenario(cluster, tmp_path, "send_sync", "CppAcl", "pg", 3))["sent"]
    assert [s["status"] for s in sent] == ["OK"] * 3
    assert await _stored(cluster, "CppAcl") == [f"body-{i}".encode() for i in range(3)]
    pulled = await scenario(cluster, tmp_path, "pull", "CppAcl", "cg", 32)
    assert [dict(b.acl.refused) for b in cluster.brokers if b.acl is not None] == [{}, {}]
    assert sorted(m["body"] for m in pulled["messages"]) == [f"body-{i}" for i in range(3)]


async def test_a_wrong_secret_is_refused_and_stores_nothing(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMQ_ACCESS_KEY", USER.access_key)
    monkeypatch.setenv("TIDEMQ_SECRET_KEY", "not-the-secret")
    result = await scenario(cluster, tmp_path, "send_denied", "CppAcl", "pg", 2,
                            refused=True)
    # Two sends: the first may lose the C++ client's connection race and reach no broker.
    assert len(result["errors"]) == 2 and all(result["errors"]), result  # "No route info"
    # ... having logged each broker answer: NO_PERMISSION with the gate's remark.
    logged = "".join(f.read_text(errors="replace")
                     for f in (tmp_path / "logs" / "rocketmq-cpp").iterdir())
    assert ("remark:SEND_MESSAGE needs topic PUB: the signature of AccessKey user does not "
            "check, error code:16") in logged
    refused = sum(b.acl.refused["signature"] for b in cluster.brokers if b.acl is not None)
    assert refused >= 1
    assert await _stored(cluster, "CppAcl") == []
