"""A standalone controller's protections, in-process over real TCP: its remoting port
with TLS only and the ACL 1.0 accounts (signed admin requests pass, unsigned ones are
refused, a plain connection gets nothing), and its Raft traffic keyed by
``controllerRaftPassword`` (a controller with another password cannot join)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.crash.broker_process import free_port
from tests.net.acl.accounts import ADMIN, USER, write_accounts
from tests.tls_certs import Certs

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ConfigError, ResponseCode
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.net import RemotingClient
from tidemq.net.tls import TlsClientSettings
from tidemq.net.tls_listener import PLAIN_REFUSED_REMARK


async def _leading(app: ControllerApp, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (app.is_leader and app.leader_address()):
        assert loop.time() < deadline, f"{app!r} never led"
        await asyncio.sleep(0.05)


@pytest.fixture
async def guarded(tmp_path: Path, tls_certs: Certs) -> AsyncIterator[ControllerApp]:
    config = ControllerConfig(
        listen_port=0, controller_raft_self_id="n0",
        controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
        tls_server_mode="enforcing", tls_server_cert_path=str(tls_certs.server_cert),
        tls_server_key_path=str(tls_certs.server_key),
        acl_enable=True, acl_file=str(write_accounts(tmp_path)),
        controller_store_path=str(tmp_path / "raft"))
    async with ControllerApp(config) as app:
        await _leading(app)
        yield app


async def test_the_remoting_port_speaks_tls_and_checks_the_acl(
        guarded: ControllerApp, tls_certs: Certs) -> None:
    tls = TlsClientSettings(enable=True, trust_cert_path=str(tls_certs.ca))
    meta = RemotingCommand.request
    clients = {who: RemotingClient(request_timeout=5.0, tls=tls, credentials=creds)
               for who, creds in (("admin", ADMIN), ("user", USER), ("nobody", None))}
    plain = RemotingClient(request_timeout=5.0, credentials=ADMIN)
    try:
        addr = guarded.address
        answer = await clients["admin"].request(
            addr, meta(RequestCode.CONTROLLER_GET_METADATA_INFO))
        assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["isLeader"] == "true"
        refused = await clients["nobody"].request(
            addr, meta(RequestCode.CONTROLLER_GET_METADATA_INFO))
        assert refused.code == ResponseCode.NO_PERMISSION
        elect = meta(RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": "c",
                                                           "brokerName": "b"})
        refused = await clients["user"].request(addr, elect)
        assert (refused.code, refused.remark) == (
            ResponseCode.NO_PERMISSION,
            "CONTROLLER_ELECT_MASTER needs an admin account; user is not admin")
        assert guarded.acl is not None and guarded.acl.refused["admin"] == 1
        answer = await plain.request(addr, meta(RequestCode.CONTROLLER_GET_METADATA_INFO))
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                                PLAIN_REFUSED_REMARK)
    finally:
        for client in (*clients.values(), plain):
            await client.close()


async def test_a_controller_with_another_raft_password_cannot_join(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    passwords = ["raft-key-1", "raft-key-1", "another-key"]
    apps = [ControllerApp(ControllerConfig(
        listen_port=0, controller_raft_self_id=f"n{i}", controller_raft_peers=peers,
        controller_raft_password=password, controller_store_path=str(tmp_path / f"raft-{i}")))
        for i, password in enumerate(passwords)]
    async with contextlib.AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(app)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not any(a.is_leader and a.leader_address() for a in apps[:2]):
            assert loop.time() < deadline, "the two controllers sharing a key never led"
            await asyncio.sleep(0.05)
        for keyed in apps[:2]:  # both applied the leader's announcement
            while keyed.leader_address() is None:
                assert loop.time() < deadline
                await asyncio.sleep(0.05)
        stranger = apps[2]
        assert stranger.raft is not None and not stranger.raft.has_quorum
        assert stranger.leader_address() is None
        with stranger.raft.reading() as state:
            assert state.controllers == {}


def test_tls_settings_are_checked_at_start(tls_certs: Certs) -> None:
    with pytest.raises(ConfigError) as info:
        ControllerConfig(tls_server_mode="sometimes")
    assert info.value.key == "tls.server.mode"
    with pytest.raises(ConfigError) as missing:
        ControllerConfig(acl_enable=True)
    assert missing.value.key == "aclFile"


@pytest.mark.parametrize(("peer", "password", "exposed"), [
    ("127.0.0.1:9880", "", False), ("[::1]:9880", "", False),
    ("10.0.0.5:9880", "", True), ("10.0.0.5:9880", "raft-key", False),
])
def test_a_raft_port_beyond_loopback_without_a_password_is_called_exposed(
        peer: str, password: str, exposed: bool) -> None:
    config = ControllerConfig(controller_raft_peers=f"n0-{peer}", controller_raft_self_id="n0",
                              controller_raft_password=password)
    assert config.raft_exposed is exposed


async def test_a_raft_port_beyond_loopback_without_a_password_refuses_to_start(
        tmp_path: Path) -> None:
    """PySyncObj unpickles what its port receives: a controller would run the code of
    whoever reaches it. Such a controller does not start unless told the network is the
    controllers' own, and then it starts (with a warning)."""
    peer = f"n0-0.0.0.0:{free_port()}"
    refused = ControllerApp(ControllerConfig(
        listen_port=0, controller_raft_self_id="n0", controller_raft_peers=peer,
        controller_store_path=str(tmp_path / "refused")))
    with pytest.raises(ConfigError) as info:
        await refused.start()
    assert info.value.key == "controllerRaftPassword"
    assert "controllerRaftAllowUnauthenticated" in str(info.value)
    allowed = ControllerApp(ControllerConfig(
        listen_port=0, controller_raft_self_id="n0", controller_raft_peers=peer,
        controller_store_path=str(tmp_path / "allowed"),
        controller_raft_allow_unauthenticated=True))
    async with allowed:
        assert allowed.address
