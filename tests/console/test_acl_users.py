"""Console logins from the broker's ACL 2.0 users (``consoleUsersFromAcl``), over HTTP
against a real cluster: Super users and cluster administrators are admins, other users
viewers; a wrong password, a disabled user and a console account that may not read the
users are refused; a changed password or a removed user ends the sessions at the next
read; a read that fails keeps the users read before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.console.conftest import Http
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.acl_logins import AclLogin
from tidemq.client.auth_admin import AuthAdmin
from tidemq.console import ConsoleServer
from tidemq.console.acl_users import AclUsers
from tidemq.console.config import ConsoleConfig
from tidemq.console.users import Role
from tidemq.errors import ConfigError, ResponseCode, TideMQError, error_for_code
from tidemq.testing import Cluster


def _client(cluster: Cluster, access_key: str, secret_key: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), access_key=access_key,
                        secret_key=secret_key)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path / "c", broker=ACL2) as running:
        async with AdminClient(config=_client(running, ROOT.access_key, ROOT.secret_key)
                               ) as admin:
            auth = AuthAdmin(admin)
            await auth.create_user(ALICE.access_key, ALICE.secret_key)
            await auth.create_user("ops", "ops-secret")
            cluster_name = running.brokers[0].config.broker_cluster_name
            await auth.create_acl("User:ops", [f"Cluster:{cluster_name}"], ["Update"])
            await auth.create_user("gone", "gone-secret")
            await auth.update_user("gone", user_status="disable")
        yield running


@pytest.fixture
async def web(cluster: Cluster) -> AsyncIterator[ConsoleServer]:
    config = ConsoleConfig(users_from_acl=True, acl_refresh=3600)
    async with ConsoleServer(cluster.namesrv_addr, port=0, config=config,
                             client=_client(cluster, ROOT.access_key, ROOT.secret_key)
                             ) as server:
        yield server


def _auth(web: ConsoleServer) -> AuthAdmin:
    return AuthAdmin(web.admin)


async def test_acl_users_log_in_with_their_roles(web: ConsoleServer) -> None:
    assert web.acl_users is not None and web.acl_users.names() == ["alice", "ops", "root"]
    for name, password, role in (("root", ROOT.secret_key, "admin"),
                                 ("ops", "ops-secret", "admin"),
                                 ("alice", ALICE.secret_key, "viewer")):
        http = Http(web.url)
        page = await http.login(name, password)
        assert page.status == 200 and f'id="role">{role}<' in page.text, page.text[:300]
        posted = await http.post("/topics", {"topic": f"By-{name}", "read_queues": "1",
                                             "write_queues": "1"})
        assert (posted.status == 403) is (role == "viewer"), posted.text[:300]


@pytest.mark.parametrize(("name", "password"), [("alice", "wrong-secret"),
                                                ("gone", "gone-secret"),
                                                ("nobody", "nobody-secret")])
async def test_wrong_passwords_disabled_and_unknown_users_are_refused(
        web: ConsoleServer, name: str, password: str) -> None:
    page = await Http(web.url).login(name, password)
    assert "Wrong user name or password" in page.text


async def test_a_changed_password_or_a_removed_user_ends_the_session(
        web: ConsoleServer) -> None:
    assert web.acl_users is not None
    alice, ops = Http(web.url), Http(web.url)
    await alice.login("alice", ALICE.secret_key)
    await ops.login("ops", "ops-secret")
    assert "/login" not in (await alice.get("/topics")).url
    await _auth(web).update_user("alice", password="alice-rotated")
    await _auth(web).delete_user("ops")
    assert "/login" not in (await alice.get("/topics")).url  # not read again yet
    assert await web.acl_users.refresh()
    assert "/login" in (await alice.get("/topics")).url
    assert "/login" in (await ops.get("/topics")).url
    assert "Wrong user name or password" in (
        await Http(web.url).login("alice", ALICE.secret_key)).text
    page = await Http(web.url).login("alice", "alice-rotated")
    assert 'id="role">viewer<' in page.text


async def test_a_console_account_that_may_not_read_the_users_logs_nobody_in(
        cluster: Cluster) -> None:
    config = ConsoleConfig(users_from_acl=True, acl_refresh=3600)
    async with ConsoleServer(cluster.namesrv_addr, port=0, config=config,
                             client=_client(cluster, ALICE.access_key, ALICE.secret_key)
                             ) as web:
        assert web.acl_users is not None and web.acl_users.names() == []
        assert not await web.acl_users.refresh()
        assert "Wrong user name or password" in (
            await Http(web.url).login("root", ROOT.secret_key)).text


async def test_a_failed_read_keeps_the_users_read_before() -> None:
    answers: list[list[AclLogin] | TideMQError] = [
        [AclLogin("root", "root-secret", True), AclLogin("alice", "alice-secret", False)],
        error_for_code(ResponseCode.NO_PERMISSION, "GET_AUTH_METADATA needs an admin"),
        [AclLogin("alice", "alice-secret", True)],
    ]

    async def fetch() -> list[AclLogin]:
        answer = answers.pop(0)
        if isinstance(answer, TideMQError):
            raise answer
        return answer

    users = AclUsers(fetch)
    assert await users.refresh()
    root = users.authenticate("root", "root-secret")
    assert root is not None and root.role is Role.ADMIN
    assert users.authenticate("root", "root-secreT") is None
    assert not await users.refresh()
    assert users.lookup("root") == root
    assert await users.refresh()
    assert users.lookup("root") is None
    alice = users.lookup("alice")
    assert alice is not None and alice.role is Role.ADMIN
    assert "alice-secret" not in repr(alice) and "alice-secret" not in alice.credential


def test_users_come_from_one_place() -> None:
    with pytest.raises(ConfigError) as info:
        ConsoleConfig(users_from_acl=True, users_file="users.yml")
    assert info.value.key == "consoleUsersFromAcl"
