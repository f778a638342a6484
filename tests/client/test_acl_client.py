"""The clients sign what they send: against a broker and a name server with
``aclEnable=true``, the asyncio and blocking clients and the admin CLI work with an
account (from the config, the environment or the command line) and are refused
without one or with a wrong secret, storing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.cli.conftest import ThreadedCluster
from tests.net.acl.accounts import ADMIN, USER, write_accounts
from typer.testing import CliRunner

from tidemq.cli.main import app
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
from tidemq.client.config import ACCESS_KEY_ENV, SECRET_KEY_ENV
from tidemq.codec.signature import Credentials
from tidemq.errors import BrokerResponseError, ConfigError, ResponseCode, TopicNotExistError
from tidemq.testing import Cluster
from tidemq.types import MessageQueue, PullStatus


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    acl = {"acl_enable": True, "acl_file": str(write_accounts(tmp_path))}
    async with Cluster(tmp_path / "c", broker={**acl, "access_key": ADMIN.access_key,
                                               "secret_key": ADMIN.secret_key},
                       namesrv=acl) as running:
        yield running


def _cfg(cluster: Cluster, who: Credentials | None) -> ClientConfig:
    keys = {} if who is None else {"access_key": who.access_key, "secret_key": who.secret_key}
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=2.0,
                        pull_error_backoff=0.1, retry_times_when_send_failed=0, **keys)


async def _topic(cluster: Cluster, topic: str) -> None:
    async with AdminClient(config=_cfg(cluster, ADMIN)) as admin:
        await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        async with asyncio.timeout(10):
            while True:  # the name server learns of it when the broker registers again
                with contextlib.suppress(TopicNotExistError):
                    if (await admin.topic_route(topic)).queue_datas:
                        return
                await asyncio.sleep(0.02)


async def test_asyncio_clients_send_and_pull_with_an_account(cluster: Cluster) -> None:
    await _topic(cluster, "Orders")
    async with Producer("pg", config=_cfg(cluster, USER)) as producer:
        sent = await producer.send(Message("Orders", b"signed"))
    assert sent.status is SendStatus.SEND_OK
    async with PullConsumer("cg", config=_cfg(cluster, USER),
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
        c.assign([sent.queue])
        got = await c.poll(timeout=5)
    assert [m.body for m in got] == [b"signed"]


async def test_a_wrong_secret_or_no_account_is_refused_and_stores_nothing(
        cluster: Cluster) -> None:
    await _topic(cluster, "Orders")
    for who in (Credentials("user", "wrong-secret"), None):
        async with Producer("pg", config=_cfg(cluster, who)) as producer:
            with pytest.raises(BrokerResponseError) as info:
                await producer.send(Message("Orders", b"nope"))
        assert info.value.code == ResponseCode.NO_PERMISSION
    async with AdminClient(config=_cfg(cluster, USER)) as user:
        with pytest.raises(BrokerResponseError) as denied:
            await user.create_topic("Nope")
        assert denied.value.code == ResponseCode.NO_PERMISSION
    broker = cluster.brokers[0]
    assert broker.store.max_offset("Orders", 0) == 0


async def test_blocking_clients_take_the_account_from_the_environment(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    await _topic(cluster, "Blocking")
    monkeypatch.setenv(ACCESS_KEY_ENV, USER.access_key)
    monkeypatch.setenv(SECRET_KEY_ENV, USER.secret_key)
    cfg = _cfg(cluster, None)
    assert cfg.credentials is not None and cfg.credentials.access_key == "user"

    def produce() -> MessageQueue:
        with BlockingProducer("pg", config=cfg) as producer:
            return producer.send(Message("Blocking", b"b0")).queue

    def consume(queue: MessageQueue) -> list[bytes]:
        with BlockingPullConsumer("cg", config=cfg) as consumer:
            result = consumer.pull(queue, 0, 8)
            assert result.status is PullStatus.FOUND
            return [m.body for m in result.messages]

    queue = await asyncio.to_thread(produce)
    await wire.dispatched(cluster.brokers[0])  # pullable once the store dispatched it
    assert await asyncio.to_thread(consume, queue) == [b"b0"]


def test_half_an_account_names_the_missing_key() -> None:
    with pytest.raises(ConfigError) as info:
        ClientConfig(access_key="user")
    assert info.value.key == "secret_key"
    assert "user-secret" not in repr(ClientConfig(access_key="user", secret_key="user-secret"))


def test_the_admin_cli_signs_with_its_flags(tmp_path: Path) -> None:
    acl = {"acl_enable": True, "acl_file": str(write_accounts(tmp_path))}
    threaded = ThreadedCluster(tmp_path / "c", brokers=1, broker=acl).start()
    runner = CliRunner()
    try:
        ns = ["-n", threaded.namesrv, "--json"]
        refused = runner.invoke(app, ["admin", "updateTopic", "-t", "CliAcl", *ns])
        assert (refused.exit_code == 1 and "NO_PERMISSION" in refused.output) or (
            "needs an admin account" in refused.output), refused.output
        created = runner.invoke(app, ["admin", "--access-key", ADMIN.access_key,
                                      "--secret-key", ADMIN.secret_key,
                                      "updateTopic", "-t", "CliAcl", *ns])
        assert created.exit_code == 0, created.output
        assert json.loads(created.output)
        half = runner.invoke(app, ["admin", "--access-key", "admin", "clusterList", *ns])
        assert half.exit_code == 2
    finally:
        threaded.stop()
