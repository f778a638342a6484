"""The ACL over real TCP, on a broker and a name server with ``aclEnable=true``.

Table-driven over :data:`~tidemq.net.acl.PERMISSIONS`: every request code either server
serves is sent without credentials, by an ordinary account and by an admin account, and
is refused (NO_PERMISSION, counted by the gate) exactly when its rule says so. Then the
cases that matter on their own: a wrong secret stores nothing, per-topic DENY, batch
children checked one by one, brokers registering with their own account, a changed
accounts file taking effect.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.net.acl.accounts import ACCOUNTS, ADMIN, USER
from tests.net.acl.sweep import signed_client, sweep

from tidemq.broker.app import BrokerApp
from tidemq.broker.config import BrokerConfig
from tidemq.codec.batch_protocol import MERGED_REMARK, decode_batch_response, encode_batch_request
from tidemq.codec.bodies import LockBatchRequestBody, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.shared_send import decode_send_answers, encode_shared_send
from tidemq.codec.signature import Credentials
from tidemq.errors import ConfigError, ResponseCode
from tidemq.inprocess import Cluster
from tidemq.namesrv.app import NameServerApp
from tidemq.namesrv.config import NamesrvConfig
from tidemq.net.acl import PERMISSIONS, AclFile, AclGate
from tidemq.net.acl.gate import Refusal

NO_PERMISSION = ResponseCode.NO_PERMISSION


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return path


@pytest.fixture
async def cluster(tmp_path: Path, acl_file: Path) -> AsyncIterator[Cluster]:
    acl = {"acl_enable": True, "acl_file": str(acl_file)}
    async with Cluster(tmp_path / "c", broker={**acl, "access_key": "admin",
                                               "secret_key": "admin-secret"},
                       namesrv=acl) as cluster:
        async with Peer(cluster.brokers[0].broker_addr, signed_client(ADMIN)) as admin:
            for topic in ("Pt", "Secret", "ReadOnly"):
                await admin.ok(wire.create_topic(topic, 4))
        yield cluster


def _gate(cluster: Cluster, server: str) -> AclGate:
    app: BrokerApp | NameServerApp | None = (
        cluster.brokers[0] if server == "broker" else cluster.namesrv)
    assert app is not None and app.acl is not None
    return app.acl


def _codes(cluster: Cluster, server: str) -> list[int]:
    if server == "broker":
        return sorted(cluster.brokers[0].pipeline.codes)
    assert cluster.namesrv is not None
    return sorted(cluster.namesrv.server.codes)


@pytest.mark.parametrize("server", ["broker", "namesrv"])
@pytest.mark.parametrize("who", ["nobody", "user", "admin"])
async def test_every_code_is_refused_exactly_when_its_rule_says(
        cluster: Cluster, server: str, who: str) -> None:
    creds = {"nobody": None, "user": USER, "admin": ADMIN}[who]
    addr = cluster.brokers[0].broker_addr if server == "broker" else cluster.namesrv_addr
    role = {"nobody": "nobody", "user": "normal", "admin": "admin"}[who]
    got, expected = await sweep(addr, _gate(cluster, server), creds,
                                _codes(cluster, server), role)
    assert got == expected


@pytest.mark.parametrize("server", ["broker", "namesrv"])
async def test_every_served_code_has_an_entry(cluster: Cluster, server: str) -> None:
    assert [RequestCode(c).name for c in _codes(cluster, server)
            if c not in PERMISSIONS] == []


async def test_a_wrong_secret_is_refused_and_stores_nothing(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(Credentials("user", "not-the-secret"))) as wrong, \
            Peer(addr, signed_client(ADMIN)) as admin:
        resp = await wrong(wire.send("Pt", b"nope"))
        assert resp.code == NO_PERMISSION
        assert "signature of AccessKey user does not check" in (resp.remark or "")
        assert await admin.max_offset("Pt") == 0
    async with Peer(addr, signed_client(Credentials("stranger", "whatever1"))) as stranger:
        resp = await stranger(wire.send("Pt", b"nope"))
        assert (resp.code, "no account has AccessKey stranger" in (resp.remark or "")) == (
            NO_PERMISSION, True)
    assert _gate(cluster, "broker").refused["signature"] == 1


async def test_only_an_admin_reads_a_brokers_config(cluster: Cluster) -> None:
    # The answer names every file path of the broker (and which secrets are set).
    async with Peer(cluster.brokers[0].broker_addr, signed_client(USER)) as user:
        resp = await user(wire.request(RequestCode.GET_BROKER_CONFIG))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "GET_BROKER_CONFIG needs an admin account; user is not admin")
    async with Peer(cluster.brokers[0].broker_addr, signed_client(ADMIN)) as admin:
        resp = await admin(wire.request(RequestCode.GET_BROKER_CONFIG))
        assert resp.code == ResponseCode.SUCCESS and b"storePathRootDir=" in resp.full_body()


async def test_only_an_admin_reads_a_name_servers_config(cluster: Cluster) -> None:
    assert cluster.namesrv is not None  # its answer names the name server's file paths
    async with Peer(cluster.namesrv.address, signed_client(USER)) as user:
        resp = await user(wire.request(RequestCode.GET_NAMESRV_CONFIG))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "GET_NAMESRV_CONFIG needs an admin account; user is not admin")
    async with Peer(cluster.namesrv.address, signed_client(ADMIN)) as admin:
        resp = await admin(wire.request(RequestCode.GET_NAMESRV_CONFIG))
        assert resp.code == ResponseCode.SUCCESS and resp.full_body()


async def test_topic_and_group_permissions(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(USER)) as user, Peer(addr, signed_client(ADMIN)) as admin:
        await user.ok(wire.send("Pt", b"fine"))
        resp = await user(wire.send("Secret", b"no"))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "SEND_MESSAGE_V2 needs PUB on topic Secret; user does not have it")
        resp = await user(wire.send("ReadOnly", b"no"))
        assert resp.code == NO_PERMISSION and "PUB on topic ReadOnly" in (resp.remark or "")
        resp = await user(wire.pull("Pt", group="closed"))
        assert resp.code == NO_PERMISSION and "SUB on group closed" in (resp.remark or "")
        await wire.dispatched(cluster.brokers[0])
        assert [m.body for m in await user.messages("Pt")] == [b"fine"]
        assert await admin.max_offset("Secret") == 0
        assert await admin.max_offset("ReadOnly") == 0


async def test_heartbeats_and_locks_are_checked_by_their_bodies(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    lock_body = encode_body(LockBatchRequestBody(consumer_group="closed", client_id="c1"))
    async with Peer(addr, signed_client(USER)) as user:
        await user.ok(wire.heartbeat("c1", consumer_groups={"cg": {"Pt": "*"}}))
        for beat, missing in (
                (wire.heartbeat("c1", consumer_groups={"closed": {"Pt": "*"}}),
                 "SUB on group closed"),
                (wire.heartbeat("c1", consumer_groups={"cg": {"Secret": "*"}}),
                 "SUB on topic Secret"),
                (wire.heartbeat("c1", consumer_groups={"cg": {"%RETRY%closed": "*"}}),
                 "SUB on group closed"),
                (wire.request(RequestCode.LOCK_BATCH_MQ, lock_body), "SUB on group closed"),
                (wire.request(RequestCode.UNLOCK_BATCH_MQ, lock_body),
                 "SUB on group closed")):
            resp = await user(beat)
            assert (resp.code, missing in (resp.remark or "")) == (NO_PERMISSION, True), (
                resp.remark)
    consumers = cluster.brokers[0].consumers
    assert (consumers.client_ids("closed"), consumers.subscription("cg", "Secret")) == (
        [], None)


async def test_batch_children_are_checked_one_by_one(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    children = [wire.send("Pt", b"a"), wire.send("Secret", b"b"), wire.send("Pt", b"c")]
    async with Peer(addr, signed_client(USER)) as user, Peer(addr, signed_client(None)) as nobody, \
            Peer(addr, signed_client(ADMIN)) as admin:
        resp = await user(encode_batch_request(RequestCode.SEND_MESSAGE_V2, children))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, MERGED_REMARK)
        answers = decode_batch_response(resp, [c.opaque for c in children])
        assert [a.code for a in answers] == [0, NO_PERMISSION, 0]
        assert "PUB on topic Secret" in (answers[1].remark or "")
        unsigned = [wire.send("Pt", b"x")]
        resp = await nobody(encode_batch_request(RequestCode.SEND_MESSAGE_V2, unsigned))
        assert resp.code == NO_PERMISSION
        # A child carrying someone else's AccessKey still acts as the parent's account.
        forged = wire.send("Secret", b"f")
        forged.ext_fields["AccessKey"] = "admin"
        resp = await user(encode_batch_request(RequestCode.SEND_MESSAGE_V2, [forged]))
        assert [a.code for a in decode_batch_response(resp, [forged.opaque])] == [
            NO_PERMISSION]
        await wire.dispatched(cluster.brokers[0])
        assert await admin.max_offset("Secret") == 0
        assert await admin.max_offset("Pt") == 2


async def test_batch_pull_and_shared_send_children_are_checked(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(USER)) as user, Peer(addr, signed_client(ADMIN)) as admin:
        await admin.ok(wire.send("Secret", b"hidden"))
        await user.ok(wire.send("Pt", b"open"))
        await wire.dispatched(cluster.brokers[0])
        pulls = [wire.pull("Pt", 0), wire.pull("Secret", 0)]
        resp = await user(encode_batch_request(RequestCode.PULL_MESSAGE, pulls))
        answers = decode_batch_response(resp, [c.opaque for c in pulls])
        assert [a.code for a in answers] == [ResponseCode.SUCCESS, NO_PERMISSION]
        assert "SUB on topic Secret" in (answers[1].remark or "")
        template = wire.send("Secret", b"")
        shared = encode_shared_send(RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, dict(template.ext_fields)),
            [(0, 0, 1, 0, b"", b"s0"), (1, 0, 1, 0, b"", b"s1")])
        resp = await user(shared)
        answers = decode_send_answers(resp.full_body(), 2)
        assert [a.code if isinstance(a, RemotingCommand) else 0 for a in answers] == [
            NO_PERMISSION, NO_PERMISSION]
        assert await admin.max_offset("Secret") == 1
        # Children the account may send are cleared once for the parent and stored.
        refused = sum(_gate(cluster, "broker").refused.values())
        template = wire.send("Pt", b"")
        shared = encode_shared_send(RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, dict(template.ext_fields)),
            [(2, 0, 1, 0, b"", b"p0"), (2, 0, 1, 0, b"", b"p1")])
        answers = decode_send_answers((await user(shared)).full_body(), 2)
        assert [a.code if isinstance(a, RemotingCommand) else 0 for a in answers] == [0, 0]
        assert sum(_gate(cluster, "broker").refused.values()) == refused
        await wire.dispatched(cluster.brokers[0])
        assert await admin.max_offset("Pt", 2) == 2


async def test_the_broker_registers_with_its_own_account(cluster: Cluster) -> None:
    async with Peer(cluster.namesrv_addr, signed_client(None)) as ns:
        route = await wire.eventually_route(ns, "Pt")
        assert [b.broker_name for b in route.broker_datas] == [
            cluster.brokers[0].config.broker_name]


async def test_a_changed_accounts_file_takes_effect(cluster: Cluster, acl_file: Path
                                                   ) -> None:
    gate = _gate(cluster, "broker")
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(USER)) as user:
        await user.ok(wire.send("Pt", b"before"))
        acl_file.write_text(ACCOUNTS.replace("user-secret", "rotated-secret"))
        os.utime(acl_file, ns=(1, 1))
        assert isinstance(gate.directory, AclFile)
        gate.directory.poll_seconds = 0.0
        resp = await user(wire.send("Pt", b"old key"))
        assert resp.code == NO_PERMISSION
    async with Peer(addr, signed_client(Credentials("user", "rotated-secret"))) as user:
        await user.ok(wire.send("Pt", b"new key"))


async def test_a_revoked_permission_is_refused_on_a_connection_that_had_it(
        cluster: Cluster, acl_file: Path) -> None:
    # The gate remembers decisions per connection; a reloaded file must forget them.
    gate = _gate(cluster, "broker")
    assert isinstance(gate.directory, AclFile)
    gate.directory.poll_seconds = 0.0
    async with Peer(cluster.brokers[0].broker_addr, signed_client(USER)) as user:
        await user.ok(wire.send("Pt", b"allowed"))
        await user.ok(wire.send("Pt", b"allowed again"))
        acl_file.write_text(ACCOUNTS.replace('"Secret=DENY"', '"Secret=DENY", "Pt=SUB"'))
        os.utime(acl_file, ns=(1, 1))
        resp = await user(wire.send("Pt", b"revoked"))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "SEND_MESSAGE_V2 needs PUB on topic Pt; user does not have it")
        acl_file.write_text(ACCOUNTS)
        os.utime(acl_file, ns=(2, 2))
        await user.ok(wire.send("Pt", b"granted again"))


def test_decisions_kept_are_bounded(acl_file: Path) -> None:
    gate = AclGate(AclFile(acl_file))
    rule = PERMISSIONS[RequestCode.SEND_MESSAGE_V2]
    for i in range(gate.MAX_DECISIONS * 2 + 3):
        cmd = USER.sign(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                                {"b": f"T{i}"}, b"x"))
        gate.check(RequestCode.SEND_MESSAGE_V2, rule, f"127.0.0.1:{i}", cmd)
    assert 0 < len(gate._decisions) <= gate.MAX_DECISIONS
    assert 0 < len(gate._passes) <= gate.MAX_DECISIONS
    assert 0 < len(gate._granted) <= gate.MAX_DECISIONS
    denied = USER.sign(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                               {"b": "Secret"}, b"x"))
    with pytest.raises(Refusal):
        gate.check(RequestCode.SEND_MESSAGE_V2, rule, "127.0.0.1:1", denied)


def test_a_remembered_pass_still_checks_every_signature(acl_file: Path) -> None:
    """Who an AccessKey from an address is and what it was granted are remembered; its
    next request's signature is checked all the same."""
    gate = AclGate(AclFile(acl_file))
    rule = PERMISSIONS[RequestCode.SEND_BATCH_MESSAGE]

    def request(body: bytes) -> RemotingCommand:
        return USER.sign(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                                 {"b": "Pt", "a": "G"}, body))

    gate.check(RequestCode.SEND_BATCH_MESSAGE, rule, "127.0.0.1:1", request(b"one"))
    tampered = request(b"two")
    tampered.body = b"twO"
    with pytest.raises(Refusal) as info:
        gate.check(RequestCode.SEND_BATCH_MESSAGE, rule, "127.0.0.1:1", tampered)
    assert info.value.reason == "signature"
    unsigned = request(b"three")
    del unsigned.ext_fields["Signature"]
    with pytest.raises(Refusal) as info:
        gate.check(RequestCode.SEND_BATCH_MESSAGE, rule, "127.0.0.1:1", unsigned)
    assert info.value.reason == "signature"
    gate.check(RequestCode.SEND_BATCH_MESSAGE, rule, "127.0.0.1:1", request(b"four"))


def test_long_names_are_decided_every_time_and_not_kept(acl_file: Path) -> None:
    """A peer's long topic (allowed by the account's default) and long AccessKey from a
    trusted address are decided as any other, and the gate keeps none of them."""
    acl_file.write_text(ACCOUNTS + 'globalWhiteRemoteAddresses: ["10.0.0.1"]\n')
    gate = AclGate(AclFile(acl_file))
    rule = PERMISSIONS[RequestCode.SEND_MESSAGE_V2]
    topic = "T" * 100_000
    for _ in range(2):
        cmd = USER.sign(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": topic},
                                                b"x"))
        gate.check(RequestCode.SEND_MESSAGE_V2, rule, "127.0.0.1:1", cmd)
        trusted = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                          {"b": "Pt", "AccessKey": "k" * 100_000}, b"x")
        assert gate.check(RequestCode.SEND_MESSAGE_V2, rule, "10.0.0.1:1", trusted).by_address
    assert not gate._granted and not gate._decisions
    assert list(gate._passes) == [("user", "127.0.0.1:1")]


def test_acl_enable_needs_a_file() -> None:
    with pytest.raises(ConfigError) as info:
        NamesrvConfig(acl_enable=True)
    assert info.value.key == "aclFile"
    assert dataclasses.replace(NamesrvConfig(), acl_enable=False).acl_file == ""


async def test_refusals_are_counted_in_the_metrics(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    async with Peer(broker.broker_addr, signed_client(None)) as nobody:
        assert (await nobody(wire.send("Pt", b"x"))).code == NO_PERMISSION
    async with Peer(cluster.namesrv_addr, signed_client(USER)) as user:
        resp = await user(wire.request(RequestCode.REGISTER_BROKER, brokerName="evil"))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "REGISTER_BROKER needs an admin account; user is not admin")
    assert cluster.namesrv is not None
    assert 'tidemq_broker_acl_refused_total{reason="credentials"} 1.0' in (
        broker.metrics.render().decode())
    assert 'tidemq_namesrv_acl_refused_total{reason="admin"} 1.0' in (
        cluster.namesrv.metrics.render().decode())


def test_a_brokers_secret_stays_out_of_its_config_repr() -> None:
    config = BrokerConfig(access_key="ops", secret_key="ops-secret-value")
    assert "ops-secret-value" not in repr(config)
    with pytest.raises(ConfigError) as info:
        BrokerConfig(access_key="ops")
    assert info.value.key == "secretKey"
