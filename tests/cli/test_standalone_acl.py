"""``tidemq standalone`` with the ACL on, as docs/security.md says to turn it on: the
broker and the name server of the one process both check requests -- the admin CLI
needs an admin account for topics and for the name server's KV config, an ordinary
account sends, and unsigned requests are refused. With ACL 2.0 the name server checks
against the broker's users."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner
from tests.cli.server_process import ServerProcess
from tests.net.acl.accounts import ADMIN, USER, write_accounts
from tests.net.acl.users import ALICE, ROOT

from tidemq.cli.main import app
from tidemq.codec.signature import Credentials


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A standalone with the ACL 1.0 accounts and its web console, for the module's tests
    of that set-up (each on topics of its own)."""
    home = tmp_path_factory.mktemp("acl-standalone")
    server = ServerProcess("standalone", {
        "aclEnable": "true", "aclFile": str(write_accounts(home)),
        "accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key},
        "--data", str(home / "data"), console=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _admin(server: ServerProcess, who: Credentials | None, *args: str) -> tuple[int, str]:
    account = [] if who is None else ["--access-key", who.access_key,
                                      "--secret-key", who.secret_key]
    result = CliRunner().invoke(app, ["admin", *account, *args, "-n", server.addr])
    return result.exit_code, result.output


def test_standalone_checks_every_request(standalone: ServerProcess) -> None:
    code, out = _admin(standalone, None, "updateTopic", "-t", "Sa", "-r", "1", "-w", "1")
    assert code == 1 and "the request has no AccessKey" in out, out
    code, out = _admin(standalone, ADMIN, "updateTopic", "-t", "Sa", "-r", "1", "-w", "1")
    assert code == 0, out
    code, out = _admin(standalone, USER, "sendMessage", "-t", "Sa", "-p", "signed")
    assert code == 0, out
    code, out = _admin(standalone, None, "sendMessage", "-t", "Sa", "-p", "unsigned")
    assert code == 1 and "NO_PERMISSION" in out, out
    # The name server of the same process checks too: KV writes are admin-only.
    code, out = _admin(standalone, None, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
    assert code == 1 and "PUT_KV_CONFIG needs admin" in out, out
    code, out = _admin(standalone, ADMIN, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
    assert code == 0, out


def test_standalone_with_acl2_protects_its_name_server_with_the_brokers_users(
        tmp_path: Path) -> None:
    server = ServerProcess("standalone", {
        "authenticationEnabled": "true", "authorizationEnabled": "true",
        "initAuthenticationUser": json.dumps({"username": ROOT.access_key,
                                              "password": ROOT.secret_key}),
        "accessKey": ROOT.access_key, "secretKey": ROOT.secret_key},
        "--data", str(tmp_path / "data"))
    server.start()
    try:
        code, out = _admin(server, None, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
        assert code == 1 and "the request has no AccessKey" in out, out
        code, out = _admin(server, ROOT, "createUser", "-u", "alice", "-p",
                           ALICE.secret_key)
        assert code == 0, out
        code, out = _admin(server, ALICE, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
        assert code == 1 and ("PUT_KV_CONFIG needs a Super user, or action Update on resource "
                              "Cluster:DefaultCluster; alice is a Normal user with no ACL") in out
        code, out = _admin(server, ROOT, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v")
        assert code == 0, out
        code, out = _admin(server, ROOT, "updateTopic", "-t", "Sa2", "-r", "1", "-w", "1")
        assert code == 0, out  # the broker registered with the name server as root
    finally:
        server.stop()


def test_the_console_of_a_standalone_with_the_acl_signs_as_its_broker(
        standalone: ServerProcess) -> None:
    """Standalone's web console is the broker's own client: with the ACL on it signs
    with the broker's credentials, so its pages show the cluster instead of refusals."""
    code, out = _admin(standalone, ADMIN, "updateTopic", "-t", "Shown", "-r", "1", "-w", "1")
    assert code == 0, out
    url = f"http://127.0.0.1:{standalone.console_port}/topics"
    with urllib.request.urlopen(url, timeout=30) as page:
        text = page.read().decode()
    assert "Shown" in text and "NO_PERMISSION" not in text
