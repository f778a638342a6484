"""The C++ RocketMQ client (``rocketmq`` 0.4.4, plain connections only) against a name
server and brokers in ``tls.server.mode=permissive`` with a certificate: its plain
connections are still served on the same ports that take TLS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.compat.test_rocketmq_client import SCENARIOS, ready, scenario, stored
from tests.tls_certs import Certs

from tidemq.testing import Cluster

pytest.importorskip("rocketmq")


@pytest.fixture
async def cluster(tmp_path: Path, tls_certs: Certs) -> AsyncIterator[Cluster]:
    keys = {"tls_server_mode": "permissive", "tls_server_cert_path": str(tls_certs.server_cert),
            "tls_server_key_path": str(tls_certs.server_key)}
    async with Cluster(tmp_path / "cluster", brokers=2, broker=keys, namesrv=keys) as c:
        assert c.namesrv is not None and c.namesrv.server.tls is not None
        assert all(b.ctx.server.tls is not None for b in c.brokers)
        await ready(c, SCENARIOS.WARM_UP_TOPIC)
        yield c


async def test_plain_cpp_client_sends_and_pulls_in_permissive_mode(
        cluster: Cluster, tmp_path: Path) -> None:
    # On the first broker only: this client's pull consumer reads the queues of one.
    async with Peer(cluster.brokers[0].broker_addr) as peer:
        await peer.ok(wire.create_topic("CppTls", 2))
    async with Peer(cluster.namesrv_addr) as ns:
        await wire.eventually_route(ns, "CppTls", lambda route: len(route.queue_datas) == 1)
    sent = (await scenario(cluster, tmp_path, "send_sync", "CppTls", "pg", 4))["sent"]
    assert [s["status"] for s in sent] == ["OK"] * 4
    assert sorted(m.body for m in await stored(cluster, "CppTls")) == [
        f"body-{i}".encode() for i in range(4)]
    pulled = await scenario(cluster, tmp_path, "pull", "CppTls", "cg", 32, "*")
    assert sorted(m["body"] for m in pulled["messages"]) == [f"body-{i}" for i in range(4)]
