"""A name server of its own (not the one ``tidemq standalone`` embeds) checking requests
against the brokers' ACL 2.0 users, over real TCP: the brokers register with the
``initAuthenticationUser`` it knows from the start; the users it copies from a broker
sign requests, with their roles; a copy that fails keeps the previous one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.net.acl.sweep import signed_client
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.codec.command import RequestCode
from tidemq.codec.signature import Credentials
from tidemq.errors import ConfigError, ResponseCode
from tidemq.inprocess import Cluster
from tidemq.namesrv.app import NameServerApp
from tidemq.namesrv.auth_mirror import NOT_COPIED_YET, AuthMirror
from tidemq.namesrv.config import NamesrvConfig

NO_PERMISSION = ResponseCode.NO_PERMISSION
NAMESRV_ACL2 = {
    "authentication_enabled": True, "authorization_enabled": True,
    "init_authentication_user": json.dumps({"username": ROOT.access_key,
                                            "password": ROOT.secret_key}),
    "auth_metadata_refresh_seconds": 3600.0,  # the tests copy when they mean to
}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path / "c", broker=ACL2, namesrv=NAMESRV_ACL2) as running:
        yield running


def _mirror(cluster: Cluster) -> AuthMirror:
    assert cluster.namesrv is not None and cluster.namesrv.auth_mirror is not None
    return cluster.namesrv.auth_mirror


async def test_copied_users_sign_name_server_requests(cluster: Cluster) -> None:
    mirror = _mirror(cluster)
    assert cluster.namesrv is not None and cluster.namesrv.routes.cluster_info(
        ).broker_addr_table  # the broker registered with the initial user
    ns = cluster.namesrv_addr
    put_kv = wire.request(RequestCode.PUT_KV_CONFIG, namespace="ns", key="k", value="v")
    async with Peer(ns, signed_client(ALICE)) as alice:
        resp = await alice(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns"))
        assert resp.code == NO_PERMISSION and "no account has AccessKey alice" in (
            resp.remark or "")
        async with AdminClient(config=ClientConfig(
                namesrv_addr=(ns,), access_key=ROOT.access_key,
                secret_key=ROOT.secret_key)) as admin:
            auth = AuthAdmin(admin)
            await auth.create_user(ALICE.access_key, ALICE.secret_key)
            await auth.create_user("ops", "ops-secret")
            await auth.create_acl("User:ops", [f"Cluster:{cluster.cluster_name}"], ["Update"])
        assert await mirror.copy_once()
        assert mirror.source == cluster.brokers[0].broker_addr
        resp = await alice(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns"))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND  # answered: alice is known now
        resp = await alice(put_kv)
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "PUT_KV_CONFIG needs a Super user, or action Update on resource "
                           "Cluster:DefaultCluster; alice is a Normal user with no ACL")
    async with Peer(ns, signed_client(Credentials("ops", "ops-secret"))) as ops:
        await ops.ok(put_kv)
    async with Peer(ns, signed_client(Credentials("ops", "wrong-secret"))) as forger:
        resp = await forger(put_kv)
        assert resp.code == NO_PERMISSION and "does not check" in (resp.remark or "")


async def test_a_failed_copy_keeps_the_previous_one(cluster: Cluster) -> None:
    mirror = _mirror(cluster)
    async with AdminClient(config=ClientConfig(
            namesrv_addr=(cluster.namesrv_addr,), access_key=ROOT.access_key,
            secret_key=ROOT.secret_key)) as admin:
        await AuthAdmin(admin).create_user(ALICE.access_key, ALICE.secret_key)
    assert await mirror.copy_once()
    version = mirror.version
    mirror.broker = "127.0.0.1:1"  # nobody listens there
    assert not await mirror.copy_once()
    assert mirror.version == version and mirror.user("alice") is not None
    async with Peer(cluster.namesrv_addr, signed_client(ALICE)) as alice:
        resp = await alice(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ns"))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND  # answered, not refused


async def test_before_the_first_copy_a_refusal_says_no_copy_was_taken() -> None:
    namesrv = NameServerApp(NamesrvConfig(listen_port=0, **NAMESRV_ACL2))
    await namesrv.start()
    try:
        async with Peer(namesrv.address, signed_client(ALICE)) as alice:
            resp = await alice(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                            namespace="ns"))
        assert (resp.code, resp.remark) == (
            NO_PERMISSION, "GET_KVLIST_BY_NAMESPACE needs any account: no account has "
                           f"AccessKey alice ({NOT_COPIED_YET})")
    finally:
        await namesrv.stop()


async def test_a_restart_with_auth_metadata_broker_refuses_no_copied_user(
        cluster: Cluster) -> None:
    """With ``authMetadataBroker`` the copy is taken before the port listens: the first
    request after a restart, signed by a copied user, is answered."""
    broker = cluster.brokers[0].broker_addr
    async with AdminClient(config=ClientConfig(
            namesrv_addr=(cluster.namesrv_addr,), access_key=ROOT.access_key,
            secret_key=ROOT.secret_key)) as admin:
        await AuthAdmin(admin).create_user(ALICE.access_key, ALICE.secret_key)
    assert cluster.namesrv is not None
    port = cluster.namesrv.port
    await cluster.namesrv.stop()
    restarted = NameServerApp(NamesrvConfig(listen_port=port, auth_metadata_broker=broker,
                                            **NAMESRV_ACL2))
    await restarted.start()
    try:
        mirror = restarted.auth_mirror
        assert mirror is not None and (mirror.copies, mirror.source) == (1, broker)
        async with Peer(restarted.address, signed_client(ALICE)) as alice:
            resp = await alice(wire.request(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                            namespace="ns"))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND  # answered, not refused
    finally:
        await restarted.stop()


@pytest.mark.parametrize(("settings", "key"), [
    ({"authentication_enabled": True}, "initAuthenticationUser"),
    ({"authorization_enabled": True}, "authorizationEnabled"),
    ({**NAMESRV_ACL2, "acl_enable": True, "acl_file": "plain_acl.yml"},
     "authenticationEnabled"),
    ({**NAMESRV_ACL2, "init_authentication_user": '{"username": "root"}'},
     "initAuthenticationUser"),
])
def test_configuration_errors_name_the_key(settings: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        NamesrvConfig(**settings)  # type: ignore[arg-type]
    assert info.value.key == key
