"""The console's logins from the broker's ACL 2.0 users (``consoleUsersFromAcl``) in a
real headless Chromium against ``tidemq standalone`` with authentication and
authorisation on: the Super user logs in as an admin and changes things, a Normal user
as a viewer; a wrong password is refused; a changed password ends the session."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone
from tests.console.test_browser_login import body, login
from tests.net.acl.users import ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.auth_admin import AuthAdmin

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium is not installed (apt-get install chromium; `make test` does it)")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Standalone]:
    root = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    inner = json.dumps({"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key})
    running = Standalone(tmp_path / "data", "--set", "authenticationEnabled=true",
                         "--set", "authorizationEnabled=true",
                         "--set", f"initAuthenticationUser={root}",
                         "--set", f"innerClientAuthenticationCredentials={inner}",
                         "--set", "consoleUsersFromAcl=true",
                         "--set", "consoleAclRefreshSeconds=0.2")
    yield running
    running.stop()
    assert running.returncode == 0, running.log(40)


def _auth(server: Standalone, *calls: tuple[str, tuple[str, ...], dict[str, str]]) -> None:
    async def run() -> None:
        config = ClientConfig(namesrv_addr=(server.namesrv,), access_key=ROOT.access_key,
                              secret_key=ROOT.secret_key)
        async with AdminClient(config=config) as admin:
            auth = AuthAdmin(admin)
            for name, args, kwargs in calls:
                await getattr(auth, name)(*args, **kwargs)

    asyncio.run(run())


def test_acl_users_log_in_as_admin_or_viewer(server: Standalone, browser: Browser) -> None:
    b, base = browser, server.console
    _auth(server, ("create_user", (ALICE.access_key, ALICE.secret_key), {}))
    assert server.wait_for("added: alice", 10), server.log(20)

    login(b, base, "root", "not-the-secret")
    assert "Wrong user name or password" in b.text("#error")
    login(b, base, "root", ROOT.secret_key)
    assert b.text("#user") == "root" and b.text("#role") == "admin"
    b.goto(base + "/topics")
    b.submit("#create-topic", {"topic": "ByRoot", "read_queues": "1", "write_queues": "1"})
    assert "Topic ByRoot saved" in b.text("#flash"), body(b)
    b.click("#logout button")

    login(b, base, "alice", ALICE.secret_key)
    assert b.text("#user") == "alice" and b.text("#role") == "viewer"
    b.goto(base + "/topics")
    assert b.eval("document.querySelector('#create-topic button').matches(':disabled')")

    _auth(server, ("update_user", ("alice",), {"password": "alice-rotated"}))
    assert server.wait_for("changed: alice", 10), server.log(20)
    b.goto(base + "/topics")
    assert b.eval("location.pathname") == "/login"  # the old password's session ended
    login(b, base, "alice", ALICE.secret_key)
    assert "Wrong user name or password" in b.text("#error")
    login(b, base, "alice", "alice-rotated")
    assert b.text("#role") == "viewer"
