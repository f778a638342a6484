"""ACL 2.0 over real TCP: a broker with ``authenticationEnabled`` and
``authorizationEnabled`` answers every request code by the permission table -- the same
gate and table as ACL 1.0 -- for no credentials, a Normal user with an ACL, and a Super
user; resource patterns, Deny winning, source addresses, disabled users, password
rotation, authentication without authorisation, and administration by a Cluster policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.net.acl.sweep import signed_client, sweep
from tests.net.acl.users import ACL2, ALICE, ALICE_ACL, ROOT

from tidemq.broker.config import BrokerConfig
from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import Credentials
from tidemq.errors import BrokerResponseError, ConfigError, ResponseCode
from tidemq.inprocess import Cluster

NO_PERMISSION = ResponseCode.NO_PERMISSION


def _auth(cluster: Cluster) -> AdminClient:
    return AdminClient(config=ClientConfig(namesrv_addr=(cluster.namesrv_addr,),
                                           access_key=ROOT.access_key,
                                           secret_key=ROOT.secret_key))


async def _setup(cluster: Cluster) -> None:
    async with _auth(cluster) as admin:
        auth = AuthAdmin(admin, broker_addr=cluster.brokers[0].broker_addr)
        await auth.create_user(ALICE.access_key, ALICE.secret_key)
        for resources, actions, decision in ALICE_ACL:
            await auth.create_acl("User:alice", resources, actions, decision=decision)
    async with Peer(cluster.brokers[0].broker_addr, signed_client(ROOT)) as root:
        for topic in ("Pt", "orders-1", "orders-secret", "ReadOnly", "Other"):
            await root.ok(wire.create_topic(topic, 2))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path / "c", broker=ACL2) as running:
        await _setup(running)
        yield running


@pytest.mark.parametrize("who", ["nobody", "alice", "root"])
async def test_every_code_is_refused_exactly_when_its_rule_says(cluster: Cluster,
                                                                who: str) -> None:
    creds = {"nobody": None, "alice": ALICE, "root": ROOT}[who]
    broker = cluster.brokers[0]
    gate = broker.acl
    assert gate is not None
    role = {"nobody": "nobody", "alice": "normal", "root": "admin"}[who]
    got, expected = await sweep(broker.broker_addr, gate, creds, sorted(broker.pipeline.codes),
                                role)
    assert got == expected
    assert {RequestCode.AUTH_CREATE_USER.name, RequestCode.AUTH_LIST_ACL.name} <= set(got)


async def test_patterns_and_deny_wins(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(ALICE)) as alice, Peer(addr, signed_client(ROOT)) as root:
        await alice.ok(wire.send("Pt", b"p"))
        await alice.ok(wire.send("orders-1", b"o"))
        for topic, missing in (("orders-secret", "PUB on topic orders-secret"),
                               ("Other", "PUB on topic Other"),
                               ("ReadOnly", "PUB on topic ReadOnly")):
            resp = await alice(wire.send(topic, b"x"))
            assert (resp.code, resp.remark) == (
                NO_PERMISSION, f"SEND_MESSAGE_V2 needs {missing}; alice does not have it")
        resp = await alice(wire.pull("orders-1", group="cg"))  # Pub only: no Sub
        assert resp.code == NO_PERMISSION and "SUB on topic orders-1" in (resp.remark or "")
        resp = await alice(wire.pull("Pt", group="other-group"))
        assert resp.code == NO_PERMISSION and "SUB on group other-group" in (resp.remark or "")
        await wire.dispatched(cluster.brokers[0])
        assert [m.body for m in await alice.messages("Pt")] == [b"p"]
        for topic in ("orders-secret", "Other", "ReadOnly"):
            assert await root.max_offset(topic, 0) + await root.max_offset(topic, 1) == 0


async def test_an_end_that_names_no_topic_needs_pub_on_the_transactions_topic(
        cluster: Cluster) -> None:
    """As the C++ client ends a transaction (no topic): alice may end hers on orders-1,
    not one on ReadOnly (Sub only), whichever account prepared it."""
    from tidemq.codec.headers import EndTransactionRequestHeader
    from tidemq.codec.transaction import TransactionState
    from tidemq.formats.msgid import decode_offset_msg_id

    def end(resp: RemotingCommand) -> RemotingCommand:
        _, phys = decode_offset_msg_id(resp.ext_fields["msgId"])
        header = EndTransactionRequestHeader(
            producer_group="pg", tran_state_table_offset=int(resp.ext_fields["queueOffset"]),
            commit_log_offset=phys, commit_or_rollback=int(TransactionState.COMMIT),
            msg_id="m")
        return RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext())

    def prepared(topic: str) -> RemotingCommand:
        return wire.send(topic, b"t", queue_id=0, group="pg", sys_flag=0x4,
                         properties=wire.props(TRAN_MSG="true", PGROUP="pg"))

    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(ALICE)) as alice, Peer(addr, signed_client(ROOT)) as root:
        guarded = await root.ok(prepared("ReadOnly"))
        resp = await alice(end(guarded))
        assert resp.code == NO_PERMISSION and "PUB on topic ReadOnly" in (resp.remark or "")
        await alice.ok(end(await alice.ok(prepared("orders-1"))))
        await root.ok(end(guarded))
        assert len(cluster.brokers[0].ctx.transactions.table) == 0


async def test_users_are_refused_when_disabled_or_signing_with_an_old_password(
        cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with _auth(cluster) as admin:
        auth = AuthAdmin(admin, broker_addr=addr)
        await auth.update_user("alice", password="alice-rotated")
        async with Peer(addr, signed_client(ALICE)) as old:
            resp = await old(wire.send("Pt", b"x"))
            assert resp.code == NO_PERMISSION and "does not check" in (resp.remark or "")
        rotated = Credentials("alice", "alice-rotated")
        async with Peer(addr, signed_client(rotated)) as new:
            await new.ok(wire.send("Pt", b"y"))
            await auth.update_user("alice", user_status="disable")
            resp = await new(wire.send("Pt", b"z"))
            assert (resp.code, "user alice is disabled" in (resp.remark or "")) == (
                NO_PERMISSION, True)
        users = await auth.list_users()
        assert [(u.username, u.user_type, u.user_status, u.password)
                for u in users[addr]] == [("alice", "Normal", "disable", None),
                                          ("root", "Super", "enable", None)]
        with pytest.raises(BrokerResponseError) as info:
            await auth.create_user("alice", "whatever1")
        assert info.value.code == ResponseCode.INVALID_PARAMETER
        with pytest.raises(BrokerResponseError) as short:
            await auth.create_user("bob", "short")
        assert "at least 6 characters" in str(short.value)


async def test_a_changed_acl_is_decided_again_on_a_connection_that_was_allowed(
        cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with _auth(cluster) as admin, Peer(addr, signed_client(ALICE)) as alice:
        auth = AuthAdmin(admin, broker_addr=addr)
        await alice.ok(wire.send("Pt", b"allowed"))
        await alice.ok(wire.send("Pt", b"allowed again"))
        await auth.update_acl("User:alice", ["Topic:Pt"], ["Pub"], decision="Deny")
        resp = await alice(wire.send("Pt", b"denied"))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "SEND_MESSAGE_V2 needs PUB on topic Pt; alice does not have it")
        await auth.update_acl("User:alice", ["Topic:Pt"], ["Pub", "Sub"])
        await alice.ok(wire.send("Pt", b"allowed once more"))


async def test_source_ips_and_cluster_policies(cluster: Cluster) -> None:
    addr = cluster.brokers[0].broker_addr
    async with _auth(cluster) as admin:
        auth = AuthAdmin(admin, broker_addr=addr)
        await auth.create_user("ops", "ops-secret")
        await auth.create_acl("User:ops", ["Topic:*"], ["Pub"], ["10.0.0.0/8"])
        await auth.create_acl("User:ops", ["Cluster:DefaultCluster"], ["Update"])
        ops = Credentials("ops", "ops-secret")
        async with Peer(addr, signed_client(ops)) as peer:
            resp = await peer(wire.send("Pt", b"x"))  # from 127.0.0.1, not 10/8
            assert resp.code == NO_PERMISSION
            await peer.ok(wire.create_topic("ByOps", 1))  # Update on its cluster
            resp = await peer(wire.request(RequestCode.AUTH_LIST_USER))
            assert resp.code == 0  # administration: the same rule as every admin code
        await auth.update_acl("User:ops", ["Topic:*"], ["Pub"], ["127.0.0.1"])
        async with Peer(addr, signed_client(ops)) as peer:
            await peer.ok(wire.send("Pt", b"x"))
        acl = (await auth.get_acl("User:ops"))[addr]
        assert [(e.resource, e.source_ips) for p in acl.policies or () for e in p.entries or ()
                ] == [("Cluster:DefaultCluster", None), ("Topic:*", ["127.0.0.1/32"])]
        await auth.delete_acl("User:ops", "Cluster:DefaultCluster")
        async with Peer(addr, signed_client(ops)) as peer:
            resp = await peer(wire.create_topic("ByOps2", 1))
            assert resp.code == NO_PERMISSION


async def test_an_administrative_refusal_names_what_acl_2_asks(cluster: Cluster) -> None:
    """ACL 2.0 has no admin accounts: the remark names the user type and the resource and
    action an administrative request needs, and why this user lacks them."""
    addr = cluster.brokers[0].broker_addr
    async with _auth(cluster) as admin:
        auth = AuthAdmin(admin, broker_addr=addr)
        await auth.create_user("bare", "bare-secret")
        await auth.create_user("barred", "barred-secret")
        await auth.create_acl("User:barred", ["Cluster:DefaultCluster"], ["Update"],
                              decision="Deny")
    need = ("UPDATE_AND_CREATE_TOPIC needs a Super user, or action Update on resource "
            "Cluster:DefaultCluster; ")
    for creds, why in ((ALICE, "alice is a Normal user whose ACL does not allow it"),
                       (Credentials("bare", "bare-secret"), "bare is a Normal user with no ACL"),
                       (Credentials("barred", "barred-secret"),
                        "barred is a Normal user whose ACL denies it")):
        async with Peer(addr, signed_client(creds)) as peer:
            resp = await peer(wire.create_topic("Refused", 1))
            assert (resp.code, resp.remark) == (NO_PERMISSION, need + why)


async def test_bad_bodies_are_invalid_parameter(cluster: Cluster) -> None:
    async with Peer(cluster.brokers[0].broker_addr, signed_client(ROOT)) as root:
        for code, body, subject, why in (
                (RequestCode.AUTH_CREATE_ACL, b"{}", "User:alice", "no policy entry"),
                (RequestCode.AUTH_CREATE_ACL, b"not json", "User:alice", "not a valid"),
                (RequestCode.AUTH_CREATE_ACL, b'{"policies":[{"entries":[{"resource":'
                 b'"Topic:a*b","actions":["Pub"],"decision":"Allow"}]}]}', "User:alice",
                 "'*' may only end"),
                (RequestCode.AUTH_CREATE_ACL, b'{"policies":[{"entries":[{"resource":'
                 b'"Topic:a","actions":["Fly"],"decision":"Allow"}]}]}', "User:alice",
                 "'Fly'"),
                (RequestCode.AUTH_CREATE_ACL, b'{"policies":[{"entries":[{"resource":'
                 b'"Topic:a","actions":["Pub"],"decision":"Allow"}]}]}', "User:nobody",
                 "no user nobody"),
                (RequestCode.AUTH_CREATE_ACL, b'{"policies":[{"entries":[{"resource":'
                 b'"Topic:a","actions":["Pub"],"decision":"Allow","sourceIps":["x"]}]}]}',
                 "User:alice", "'x' is not an address")):
            resp = await root(wire.request(code, body, subject=subject))
            assert (resp.code, why in (resp.remark or "")) == (
                ResponseCode.INVALID_PARAMETER, True), resp.remark
        resp = await root(wire.request(RequestCode.AUTH_GET_ACL, subject="User:root"))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND


async def test_authentication_without_authorisation(tmp_path: Path) -> None:
    config = {**ACL2, "authorization_enabled": False}
    async with Cluster(tmp_path / "c", broker=config) as cluster:
        await _setup(cluster)
        addr = cluster.brokers[0].broker_addr
        async with Peer(addr, signed_client(ALICE)) as alice, \
                Peer(addr, signed_client(None)) as nobody:
            await alice.ok(wire.send("orders-secret", b"any user may"))
            await alice.ok(wire.create_topic("AliceMay", 1))
            resp = await nobody(wire.send("Pt", b"x"))
            assert resp.code == NO_PERMISSION


async def test_users_and_acls_survive_a_restart(cluster: Cluster) -> None:
    await cluster.restart_broker(0)
    addr = cluster.brokers[0].broker_addr
    async with Peer(addr, signed_client(ALICE)) as alice:
        await alice.ok(wire.send("Pt", b"after restart"))
        resp = await alice(wire.send("orders-secret", b"x"))
        assert resp.code == NO_PERMISSION


def test_configuration_errors_name_the_key() -> None:
    for changes, key in (({"acl_enable": True, "acl_file": "x"}, "authenticationEnabled"),
                         ({"authentication_enabled": False}, "authorizationEnabled"),
                         ({"init_authentication_user": "{"}, "initAuthenticationUser"),
                         ({"init_authentication_user": '{"username": "u", "password": "p"}'},
                          "initAuthenticationUser"),
                         ({"inner_client_authentication_credentials": '{"accessKey": "a"}'},
                          "innerClientAuthenticationCredentials"),
                         ({"migrate_auth_from_v1_enabled": True}, "migrateAuthFromV1Enabled")):
        with pytest.raises(ConfigError) as info:
            BrokerConfig(**{**ACL2, **changes})
        assert info.value.key == key, changes
    config = BrokerConfig(**ACL2)
    assert "root-secret" not in repr(config)
    assert config.credentials == (ROOT.access_key, ROOT.secret_key)
    assert dataclasses.replace(config, access_key="x", secret_key="y-secret").credentials == (
        "x", "y-secret")
