"""Logical-queue forwarding between two ``tidemq broker`` processes with the ACL on
(ACL 1.0 with a name server that checks too, and ACL 2.0): a logical topic spread over
both brokers, an ordinary account sending to and pulling from every logical queue
through the gateway broker, which forwards half of the requests to the other broker
signed with its own account -- and a send with a wrong secret is refused at the gateway,
storing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.server_process import ServerProcess
from tests.net.acl.accounts import ADMIN, USER, write_accounts
from tests.net.acl.users import ALICE, ROOT
from typer.testing import CliRunner

from tidemq.cli.main import app
from tidemq.client import AdminClient, ClientConfig, ConsumeFromWhere, Producer, PullConsumer
from tidemq.client.auth_admin import AuthAdmin
from tidemq.codec.signature import Credentials
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue

TOPIC = "LqAcl"
N = 4


@pytest.fixture(params=["acl1", "acl2"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path
            ) -> Iterator[tuple[ServerProcess, Credentials, Credentials]]:
    """The name server, the admin's and the ordinary account's credentials."""
    if request.param == "acl1":
        acl = {"aclEnable": "true", "aclFile": str(write_accounts(tmp_path))}
        namesrv_settings, admin, user = acl, ADMIN, USER
        broker_settings = {**acl, "accessKey": ADMIN.access_key,
                           "secretKey": ADMIN.secret_key}
    else:
        namesrv_settings, admin, user = {}, ROOT, ALICE
        broker_settings = {
            "authenticationEnabled": "true", "authorizationEnabled": "true",
            "initAuthenticationUser": json.dumps({"username": ROOT.access_key,
                                                  "password": ROOT.secret_key}),
            "innerClientAuthenticationCredentials": json.dumps(
                {"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key})}
    started: list[ServerProcess] = []
    try:
        namesrv = ServerProcess("namesrv", namesrv_settings).start()
        started.append(namesrv)
        for name in ("broker-a", "broker-b"):
            started.append(ServerProcess("broker", {
                **broker_settings, "brokerName": name, "namesrvAddr": namesrv.addr,
                "storePathRootDir": str(tmp_path / name), "logicalSyncInterval": "200"}
            ).start())
        yield namesrv, admin, user
    finally:
        for server in reversed(started):
            server.stop()


def _config(namesrv: ServerProcess, who: Credentials) -> ClientConfig:
    return ClientConfig(namesrv_addr=(namesrv.addr,), access_key=who.access_key,
                        secret_key=who.secret_key, retry_times_when_send_failed=0)


async def _both_brokers(admin: AdminClient) -> None:
    async with asyncio.timeout(30):
        while len(await admin.masters()) < 2:  # another process: registration is the event
            await asyncio.sleep(0.05)


async def _logical_route(admin: AdminClient) -> None:
    async with asyncio.timeout(30):
        while True:
            with contextlib.suppress(TideMQError):
                route = await admin.topic_route(TOPIC)
                if route.queue_datas and route.queue_datas[0].broker_name == LOGICAL_BROKER:
                    return
            await asyncio.sleep(0.05)


def test_forwarding_signs_with_the_brokers_own_account(
        cluster: tuple[ServerProcess, Credentials, Credentials]) -> None:
    namesrv, admin, user = cluster

    async def prepare() -> None:
        async with AdminClient(config=_config(namesrv, admin)) as client:
            await _both_brokers(client)
            if user is ALICE:
                auth = AuthAdmin(client)
                await auth.create_user(ALICE.access_key, ALICE.secret_key)
                await auth.create_acl("User:alice", [f"Topic:{TOPIC}", "Group:lq-*"],
                                      ["Pub", "Sub"])

    asyncio.run(prepare())
    result = CliRunner().invoke(app, [
        "admin", "--access-key", admin.access_key, "--secret-key", admin.secret_key,
        "updateTopic", "-t", TOPIC, "--logical-queue", str(N), "-n", namesrv.addr, "--json"])
    assert result.exit_code == 0, result.output
    brokers = {s["broker"] for s in _segments(json.loads(result.output))}
    assert brokers == {"broker-a", "broker-b"}  # half the queues live off the gateway

    async def traffic() -> list[tuple[int, bytes]]:
        async with AdminClient(config=_config(namesrv, admin)) as client:
            await _logical_route(client)
        queues = [MessageQueue(TOPIC, LOGICAL_BROKER, lq) for lq in range(N)]
        async with Producer("lq-producer", config=_config(namesrv, user)) as producer:
            for lq, queue in enumerate(queues):
                await producer.send(Message(TOPIC, f"lq{lq}".encode()), queue=queue)
        async with PullConsumer("lq-consumer", config=_config(namesrv, user),
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                                ) as consumer:
            consumer.assign(queues)
            got: list[tuple[int, bytes]] = []
            async with asyncio.timeout(30):
                while len(got) < N:
                    got += [(m.queue_id, m.body) for m in await consumer.poll(timeout=2)]
        wrong = Credentials(user.access_key, "not-the-secret")
        async with Producer("lq-producer", config=_config(namesrv, wrong)) as intruder:
            with pytest.raises(BrokerResponseError) as refused:
                await intruder.send(Message(TOPIC, b"intruder"), queue=queues[1])
        assert refused.value.code == ResponseCode.NO_PERMISSION
        assert "does not check" in str(refused.value)
        async with PullConsumer("lq-consumer-2", config=_config(namesrv, user),
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
                                ) as again:
            again.assign(queues)
            seen: list[bytes] = []
            async with asyncio.timeout(30):
                while len(seen) < N:
                    seen += [m.body for m in await again.poll(timeout=2)]
            seen += [m.body for m in await again.poll(timeout=1)]  # nothing more is there
        assert sorted(seen) == [f"lq{lq}".encode() for lq in range(N)]
        return sorted(got)

    assert asyncio.run(traffic()) == [(lq, f"lq{lq}".encode()) for lq in range(N)]


def _segments(doc: dict[str, object]) -> list[dict[str, object]]:
    """The segments of ``updateTopic --logical-queue --json``'s mapping."""
    out: list[dict[str, object]] = []
    for segments in doc["queues"].values():  # type: ignore[union-attr]
        out += segments
    return out
