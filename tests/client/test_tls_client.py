"""The clients over TLS against a real name server and broker with ``tls.server.mode``
set: the broker registers with the name server over TLS, the asyncio and blocking
clients send and pull with TLS from their config or the environment, and a plain client
to an enforcing cluster is refused with an error that says TLS is required."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.tls_certs import Certs

from tidemq.client import (
    AdminClient,
    BlockingProducer,
    BlockingPullConsumer,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
)
from tidemq.client.config import TLS_CA_ENV, TLS_CERT_ENV, TLS_ENV, TLS_KEY_ENV
from tidemq.errors import ConfigError, TideMQError, TopicNotExistError
from tidemq.net.tls_listener import PLAIN_REFUSED_REMARK
from tidemq.testing import Cluster

pytestmark = pytest.mark.timeout(120)


def server_keys(certs: Certs, mode: str, client_auth: str = "none") -> dict[str, Any]:
    return {"tls_server_mode": mode, "tls_server_cert_path": str(certs.server_cert),
            "tls_server_key_path": str(certs.server_key),
            "tls_server_need_client_auth": client_auth,
            "tls_server_trust_cert_path": str(certs.ca)}


def broker_client_keys(certs: Certs) -> dict[str, Any]:
    return {"tls_enable": True, "tls_client_trust_cert_path": str(certs.ca),
            "tls_client_cert_path": str(certs.client_cert),
            "tls_client_key_path": str(certs.client_key)}


@pytest.fixture
async def enforcing(tmp_path: Any, tls_certs: Certs) -> AsyncIterator[Cluster]:
    """Both servers TLS-only and asking for client certificates; the broker registers
    with its own client certificate."""
    keys = server_keys(tls_certs, "enforcing", "require")
    async with Cluster(tmp_path / "c", broker={**keys, **broker_client_keys(tls_certs)},
                       namesrv=keys) as running:
        yield running


def tls_cfg(cluster: Cluster, certs: Certs, **extra: Any) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=2.0,
                        pull_error_backoff=0.1, retry_times_when_send_failed=0,
                        use_tls=True, tls_trust_cert_path=str(certs.ca),
                        tls_cert_path=str(certs.client_cert),
                        tls_key_path=str(certs.client_key), **extra)


async def make_topic(config: ClientConfig, topic: str) -> None:
    async with AdminClient(config=config) as admin:
        await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        async with asyncio.timeout(20):
            while True:  # the name server learns of it when the broker registers again
                with contextlib.suppress(TopicNotExistError):
                    if (await admin.topic_route(topic)).queue_datas:
                        return
                await asyncio.sleep(0.02)


async def test_tls_clients_send_and_pull_through_an_enforcing_cluster(
        enforcing: Cluster, tls_certs: Certs) -> None:
    config = tls_cfg(enforcing, tls_certs)
    async with AdminClient(config=config) as admin:  # the broker registered over TLS
        assert [b.address for b in await admin.cluster_list()] == [
            enforcing.brokers[0].broker_addr]
    await make_topic(config, "Secure")
    async with Producer("pg", config=config) as producer:
        sent = await producer.send(Message("Secure", b"over tls"))
    assert sent.status is SendStatus.SEND_OK
    async with PullConsumer("cg", config=config,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
        c.assign([sent.queue])
        got = await c.poll(timeout=5)
    assert [m.body for m in got] == [b"over tls"]

    def blocking() -> list[bytes]:
        with BlockingProducer("bpg", config=config) as sync_producer:
            assert sync_producer.send(Message("Secure", b"blocking")).status is \
                SendStatus.SEND_OK
        with BlockingPullConsumer("bcg", config=config) as consumer:
            result = consumer.pull(sent.queue, 0, 32)
            return [m.body for m in result.messages]
    assert await asyncio.to_thread(blocking) == [b"over tls", b"blocking"]


async def test_plain_client_to_an_enforcing_cluster_is_told_tls_is_required(
        enforcing: Cluster, tls_certs: Certs) -> None:
    plain = ClientConfig(namesrv_addr=(enforcing.namesrv_addr,), use_tls=False,
                         retry_times_when_send_failed=0)
    with pytest.raises(TideMQError) as info:
        async with Producer("pg", config=plain) as producer:
            await producer.send(Message("Secure", b"never"))
    assert PLAIN_REFUSED_REMARK in str(info.value)


async def test_tls_settings_come_from_the_environment(
        enforcing: Cluster, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TLS_CA_ENV, str(tls_certs.ca))  # a CA file alone turns TLS on
    monkeypatch.setenv(TLS_CERT_ENV, str(tls_certs.client_cert))
    monkeypatch.setenv(TLS_KEY_ENV, str(tls_certs.client_key))
    config = ClientConfig(namesrv_addr=(enforcing.namesrv_addr,))
    assert config.use_tls
    async with AdminClient(config=config) as admin:
        assert len(await admin.cluster_list()) == 1
    monkeypatch.setenv(TLS_ENV, "false")
    assert not ClientConfig(namesrv_addr=(enforcing.namesrv_addr,)).use_tls
    monkeypatch.setenv(TLS_ENV, "maybe")
    with pytest.raises(ConfigError) as bad:
        ClientConfig(namesrv_addr=(enforcing.namesrv_addr,))
    assert bad.value.key == TLS_ENV


async def test_permissive_cluster_serves_tls_and_plain_clients(
        tmp_path: Any, tls_certs: Certs) -> None:
    keys = server_keys(tls_certs, "permissive")
    async with Cluster(tmp_path / "p", broker=keys, namesrv=keys) as cluster:
        plain = ClientConfig(namesrv_addr=(cluster.namesrv_addr,), use_tls=False,
                             retry_times_when_send_failed=0)
        await make_topic(plain, "Mixed")
        for config in (plain, tls_cfg(cluster, tls_certs)):
            async with Producer("pg", config=config) as producer:
                assert (await producer.send(Message("Mixed", b"m"))).status is \
                    SendStatus.SEND_OK
