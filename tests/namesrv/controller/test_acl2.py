"""A standalone controller with ``authenticationEnabled`` checks requests against a copy
of the brokers' ACL 2.0 users, in-process over real TCP: a controller-mode broker
registers and heartbeats with the initial user, the controller copies the users from the
master it elects, and then admin commands pass for an administrator and are refused,
with a remark, for a Normal user or a wrong password. Before the first copy every user
but the initial one is refused saying so; with ``authMetadataBroker`` the copy is taken
before the port listens, and an unreachable source refuses nobody the initial user
admits."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.child_server import free_port
from tests.net.acl.users import ACL2, ALICE, ROOT
from tests.tls_certs import Certs

from tidemq.broker.app import BrokerApp
from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import ElectMasterRequestHeader, encode_broker_names
from tidemq.codec.signature import Credentials
from tidemq.errors import BrokerResponseError, ConfigError, ResponseCode
from tidemq.namesrv.auth_mirror import NOT_COPIED_YET
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.net import RemotingClient
from tidemq.net.acl import PERMISSIONS
from tidemq.testing import Cluster

NO_PERMISSION = ResponseCode.NO_PERMISSION
OPS = Credentials("ops", "ops-secret")
GROUP = "broker-a"
COPY_KEYS = {
    "authentication_enabled": True, "authorization_enabled": True,
    "init_authentication_user": json.dumps({"username": ROOT.access_key,
                                            "password": ROOT.secret_key}),
    "auth_metadata_refresh_seconds": 3600.0,  # copies only when woken or asked
}


def controller_config(tmp_path: Path, **changes: object) -> ControllerConfig:
    return ControllerConfig(
        listen_port=0, controller_raft_self_id="n0",
        controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
        controller_store_path=str(tmp_path / "raft"), **{**COPY_KEYS, **changes})


async def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.05)


def metadata() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)


async def ask(addr: str, credentials: Credentials | None,
              cmd: RemotingCommand) -> RemotingCommand:
    client = RemotingClient(request_timeout=10.0, credentials=credentials)
    try:
        return await client.request(addr, cmd)
    finally:
        await client.close()


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[tuple[ControllerApp, Cluster]]:
    """A standalone controller with ACL 2.0, and an ACL 2.0 broker in controller mode
    that it elected master."""
    controller = ControllerApp(controller_config(tmp_path))
    async with controller:
        broker_settings = {
            **ACL2, "enable_controller_mode": True, "controller_addr": controller.address,
            "broker_id": 1, "ha_listen_port": 0, "broker_heartbeat_interval": 100,
            "controller_heart_beat_timeout_mills": 3000}
        async with Cluster(tmp_path / "c", broker=broker_settings) as cluster:
            broker = cluster.brokers[0]
            await until(lambda: broker.role.is_master, "the broker is elected master")
            yield controller, cluster


async def test_a_broker_signing_with_an_acl2_user_registers_and_heartbeats(
        guarded: tuple[ControllerApp, Cluster]) -> None:
    controller, cluster = guarded
    broker = cluster.brokers[0]
    mirror, gate = controller.auth_mirror, controller.acl
    assert mirror is not None and gate is not None
    with controller.raft.reading() as state:  # type: ignore[union-attr]
        group = state.groups[GROUP]
        assert (group.cluster, group.brokers) == (cluster.cluster_name,
                                                  {1: broker.broker_addr})
    assert controller.heartbeats.alive((GROUP, 1), controller.clock())
    # the heartbeat naming the new master had the users copied from it
    await until(lambda: mirror.source == broker.broker_addr, "the users are copied")
    assert mirror.directory.cluster == cluster.cluster_name
    assert sum(gate.refused.values()) == 0


async def test_a_broker_signing_with_a_copied_user_joins_its_group(
        guarded: tuple[ControllerApp, Cluster], tmp_path: Path) -> None:
    """A second broker of the group signs with a user the controller knows only from its
    copy (not its initial user)."""
    controller, cluster = guarded
    master = cluster.brokers[0]
    mirror = controller.auth_mirror
    assert mirror is not None
    inner = Credentials("broker-a-2", "broker-a-2-secret")
    async with AdminClient(config=ClientConfig(
            namesrv_addr=(cluster.namesrv_addr,), access_key=ROOT.access_key,
            secret_key=ROOT.secret_key)) as admin:
        await AuthAdmin(admin, broker_addr=master.broker_addr).create_user(
            inner.access_key, inner.secret_key, "Super")
    assert await mirror.copy_once()
    config = dataclasses.replace(
        master.config, broker_id=2, listen_port=0, ha_listen_port=0,
        inner_client_authentication_credentials=json.dumps(
            {"accessKey": inner.access_key, "secretKey": inner.secret_key}))
    replica = BrokerApp(config, dataclasses.replace(
        master.store_config, store_path_root_dir=str(tmp_path / "broker-a-2")))
    await replica.start()
    try:
        def joined() -> bool:
            with controller.raft.reading() as state:  # type: ignore[union-attr]
                return 2 in state.groups[GROUP].brokers
        await until(joined, "the second broker registers")
        await until(lambda: controller.heartbeats.alive((GROUP, 2), controller.clock()),
                    "the second broker heartbeats")
    finally:
        await replica.stop()
    assert controller.acl is not None and sum(controller.acl.refused.values()) == 0


async def test_admin_commands_pass_for_an_administrator_only(
        guarded: tuple[ControllerApp, Cluster]) -> None:
    controller, cluster = guarded
    broker = cluster.brokers[0]
    mirror = controller.auth_mirror
    assert mirror is not None
    async with AdminClient(config=ClientConfig(
            namesrv_addr=(cluster.namesrv_addr,), access_key=ROOT.access_key,
            secret_key=ROOT.secret_key)) as admin:
        auth = AuthAdmin(admin, broker_addr=broker.broker_addr)
        await auth.create_user(ALICE.access_key, ALICE.secret_key)
        await auth.create_user(OPS.access_key, OPS.secret_key)
        await auth.create_acl(f"User:{OPS.access_key}", [f"Cluster:{cluster.cluster_name}"],
                              ["Update"])
    assert await mirror.copy_once()
    addr = controller.address

    def elect() -> RemotingCommand:  # a new one each time: a client signs what it sends
        return RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER,
                                       ElectMasterRequestHeader(
                                           cluster_name=cluster.cluster_name,
                                           broker_name=GROUP, broker_id=1,
                                           designate_elect=True).to_ext())

    # electMaster as the administrator: the controller answers it (broker 1 is master)
    ops = RemotingClient(request_timeout=10.0, credentials=OPS)
    try:
        header, _ = await ControllerAdmin(ops.request, [addr]).elect_master(
            cluster.cluster_name, GROUP, 1)
        assert header.master_broker_id == 1
        sync = await ControllerAdmin(ops.request, [addr]).sync_state_set([GROUP])
        assert GROUP in sync.replicas_info_table
    finally:
        await ops.close()
    # getSyncStateSet is a read any user may make; electMaster is not
    answer = await ask(addr, ALICE, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=encode_broker_names([GROUP])))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    answer = await ask(addr, ALICE, elect())
    assert (answer.code, answer.remark) == (
        NO_PERMISSION, "CONTROLLER_ELECT_MASTER needs a Super user, or action Update on resource "
                       "Cluster:DefaultCluster; alice is a Normal user with no ACL")
    answer = await ask(addr, Credentials(OPS.access_key, "not-the-secret"), elect())
    assert (answer.code, answer.remark) == (
        NO_PERMISSION, "CONTROLLER_ELECT_MASTER needs admin: the signature of "
                       "AccessKey ops does not check")
    answer = await ask(addr, None, elect())
    assert answer.code == NO_PERMISSION and "no AccessKey" in (answer.remark or "")
    # tidemq admin with a wrong password: the refusal itself, not "no leader found"
    forger = RemotingClient(request_timeout=10.0,
                            credentials=Credentials(OPS.access_key, "not-the-secret"))
    try:
        with pytest.raises(BrokerResponseError) as refused:
            await ControllerAdmin(forger.request, [addr]).sync_state_set([GROUP])
    finally:
        await forger.close()
    assert refused.value.code == NO_PERMISSION
    assert "the signature of AccessKey ops does not check" in str(refused.value)


async def test_before_the_first_copy_only_the_initial_user_passes(tmp_path: Path) -> None:
    """No broker yet, and an ``authMetadataBroker`` nobody listens on: the controller
    starts, serves the initial user, and refuses the others naming why."""
    config = controller_config(tmp_path, auth_metadata_broker=f"127.0.0.1:{free_port()}")
    async with ControllerApp(config) as controller:
        assert controller.auth_mirror is not None and controller.auth_mirror.copies == 0
        answer = await ask(controller.address, ROOT, metadata())
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        answer = await ask(controller.address, ALICE, metadata())
        assert (answer.code, answer.remark) == (
            NO_PERMISSION, "CONTROLLER_GET_METADATA_INFO needs any account: no account has "
                           f"AccessKey alice ({NOT_COPIED_YET})")
        assert controller.server is not None
        assert [RequestCode(c).name for c in controller.server.codes
                if c not in PERMISSIONS] == []


@pytest.fixture
async def users_broker(tmp_path: Path) -> AsyncIterator[Cluster]:
    """An ACL 2.0 broker (not in controller mode) that has user alice."""
    async with Cluster(tmp_path / "src", broker=ACL2) as cluster:
        async with AdminClient(config=ClientConfig(
                namesrv_addr=(cluster.namesrv_addr,), access_key=ROOT.access_key,
                secret_key=ROOT.secret_key)) as admin:
            await AuthAdmin(admin).create_user(ALICE.access_key, ALICE.secret_key)
        yield cluster


async def test_the_copy_of_auth_metadata_broker_is_taken_before_listening(
        tmp_path: Path, users_broker: Cluster) -> None:
    source = users_broker.brokers[0].broker_addr
    async with ControllerApp(controller_config(
            tmp_path, auth_metadata_broker=source)) as controller:
        mirror = controller.auth_mirror
        assert mirror is not None and (mirror.copies, mirror.source) == (1, source)
        answer = await ask(controller.address, ALICE, metadata())
        assert answer.code == ResponseCode.SUCCESS, answer.remark


@pytest.mark.parametrize(("settings", "key"), [
    ({"authentication_enabled": True, "init_authentication_user": ""},
     "initAuthenticationUser"),
    ({"authentication_enabled": False}, "authorizationEnabled"),
    ({"acl_enable": True, "acl_file": "plain_acl.yml"}, "authenticationEnabled"),
    ({"auth_metadata_refresh_seconds": 0.0}, "authMetadataRefreshSeconds"),
])
def test_configuration_errors_name_the_key(settings: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ControllerConfig(controller_raft_self_id="n0",
                         controller_raft_peers="n0-127.0.0.1:9880",
                         **{**COPY_KEYS, **settings})  # type: ignore[arg-type]
    assert info.value.key == key


async def test_the_copy_is_asked_for_over_tls_with_the_client_keys(
        tmp_path: Path, tls_certs: Certs) -> None:
    """A broker that serves TLS only: a controller with ``tls.enable`` and the CA copies
    its users; one without cannot, and starts with the initial user only."""
    tls_only = {"tls_server_mode": "enforcing",
                "tls_server_cert_path": str(tls_certs.server_cert),
                "tls_server_key_path": str(tls_certs.server_key)}
    async with Cluster(tmp_path / "tls", broker={**ACL2, **tls_only, "tls_enable": True,
                                                 "tls_client_trust_cert_path":
                                                 str(tls_certs.ca)}) as cluster:
        source = cluster.brokers[0].broker_addr
        async with ControllerApp(controller_config(
                tmp_path / "plain", auth_metadata_broker=source)) as plain:
            assert plain.auth_mirror is not None and plain.auth_mirror.copies == 0
        async with ControllerApp(controller_config(
                tmp_path / "tls-client", auth_metadata_broker=source, tls_enable=True,
                tls_client_trust_cert_path=str(tls_certs.ca))) as controller:
            mirror = controller.auth_mirror
            assert mirror is not None and (mirror.copies, mirror.source) == (1, source)
