"""The Spark source and sink with credentials, in local mode against a ``tidemq
standalone`` process whose broker runs ACL 2.0: with a user's ``accessKey`` /
``secretKey`` they write and read; without, the job fails saying the request was
refused, and nothing is stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.net.acl.users import ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.errors import TopicNotExistError

from .conftest import Server, start_standalone

pytestmark = pytest.mark.spark

TOPIC = "SparkAcl"


async def _prepare(namesrv: str) -> None:
    config = ClientConfig(namesrv_addr=(namesrv,), access_key=ROOT.access_key,
                          secret_key=ROOT.secret_key)
    async with AdminClient(config=config) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        auth = AuthAdmin(admin)
        await auth.create_user(ALICE.access_key, ALICE.secret_key)
        await auth.create_acl("User:alice", [f"Topic:{TOPIC}", "Group:spark-*"],
                              ["Pub", "Sub"])
        while True:  # another process: its next registration is the event
            with contextlib.suppress(TopicNotExistError):
                if (await admin.topic_route(TOPIC)).queue_datas:
                    return
            await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory,
            monkeypatch_module: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch_module.delenv("TIDEMQ_ACCESS_KEY", raising=False)
    monkeypatch_module.delenv("TIDEMQ_SECRET_KEY", raising=False)
    server = start_standalone(
        tmp_path_factory.mktemp("acl"), "authenticationEnabled=true",
        "authorizationEnabled=true",
        "initAuthenticationUser=" + json.dumps({"username": ROOT.access_key,
                                                "password": ROOT.secret_key}),
        f"accessKey={ROOT.access_key}", f"secretKey={ROOT.secret_key}")
    try:
        asyncio.run(_prepare(server.namesrv))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _stored(server: Server) -> int:
    config = ClientConfig(namesrv_addr=(server.namesrv,), access_key=ROOT.access_key,
                          secret_key=ROOT.secret_key)
    with BlockingPullConsumer("probe", config=config) as c:
        return sum(c.get_max_offset(q) for q in c.queues(TOPIC))


def test_spark_reads_and_writes_with_credentials(spark: Any, secured: Server) -> None:
    rows = spark.createDataFrame([(f"m{i}".encode(),) for i in range(20)], ["body"])
    (rows.write.format("tidemq").option("namesrv", secured.namesrv).option("topic", TOPIC)
     .option("accessKey", ALICE.access_key).option("secretKey", ALICE.secret_key)
     .mode("append").save())
    assert _stored(secured) == 20
    read = (spark.read.format("tidemq").option("namesrv", secured.namesrv)
            .option("topic", TOPIC).option("group", "spark-acl")
            .option("accessKey", ALICE.access_key).option("secretKey", ALICE.secret_key)
            .load().collect())
    assert sorted(r.body for r in read) == sorted(f"m{i}".encode() for i in range(20))


def test_spark_without_credentials_fails_clearly(spark: Any, secured: Server) -> None:
    before = _stored(secured)
    rows = spark.createDataFrame([(b"refused",)], ["body"])
    with pytest.raises(Exception, match="NO_PERMISSION") as write:
        (rows.write.format("tidemq").option("namesrv", secured.namesrv)
         .option("topic", TOPIC).mode("append").save())
    assert "the request has no AccessKey" in str(write.value)
    with pytest.raises(Exception, match="NO_PERMISSION") as read:
        (spark.read.format("tidemq").option("namesrv", secured.namesrv)
         .option("topic", TOPIC).load().collect())
    assert "the request has no AccessKey" in str(read.value)
    assert _stored(secured) == before


def test_half_an_account_names_the_option(spark: Any, secured: Server) -> None:
    with pytest.raises(Exception, match="'secretKey'"):
        (spark.read.format("tidemq").option("namesrv", secured.namesrv)
         .option("topic", TOPIC).option("accessKey", "alice").load().collect())


def test_the_sink_and_source_options_carry_no_secret_in_their_repr() -> None:
    from tidemq.spark.options import parse_sink_options

    opts = parse_sink_options({"namesrv": "127.0.0.1:1", "accessKey": "a",
                               "secretKey": "s3cret-value"})
    assert "s3cret-value" not in repr(opts)
