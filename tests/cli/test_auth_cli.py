"""The ACL 2.0 commands of ``tidemq admin`` against real ``tidemq namesrv`` and
``tidemq broker`` processes with ``authenticationEnabled`` and ``authorizationEnabled``:
the first Super user from ``initAuthenticationUser``, users and ACLs made with mqadmin's
commands and flags, their tables and JSON, refusals for a Normal user, and users and ACLs
still in force after the broker is killed with SIGKILL and started again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner
from tests.cli.server_process import ServerProcess
from tests.net.acl.users import ALICE, ROOT

from tidemq.cli.main import app
from tidemq.codec.signature import Credentials


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    namesrv = ServerProcess("namesrv", {}).start()
    broker = ServerProcess("broker", {
        "brokerName": "broker-a", "namesrvAddr": namesrv.addr,
        "storePathRootDir": str(tmp_path / "store"),
        "authenticationEnabled": "true", "authorizationEnabled": "true",
        "initAuthenticationUser": json.dumps({"username": ROOT.access_key,
                                              "password": ROOT.secret_key}),
        "accessKey": ROOT.access_key, "secretKey": ROOT.secret_key})
    try:
        broker.start()
        yield namesrv, broker
    finally:
        broker.stop()
        namesrv.stop()


def _admin(namesrv: ServerProcess, who: Credentials | None, *args: str) -> tuple[int, str]:
    account = [] if who is None else ["--access-key", who.access_key,
                                      "--secret-key", who.secret_key]
    result = CliRunner().invoke(app, ["admin", *account, *args, "-n", namesrv.addr])
    return result.exit_code, result.output


def test_users_and_acls_from_the_cli_survive_kill9(
        servers: tuple[ServerProcess, ServerProcess]) -> None:
    namesrv, broker = servers
    b = ["-b", broker.addr]
    code, out = _admin(namesrv, ROOT, "createUser", *b, "-u", "alice", "-p", ALICE.secret_key)
    assert (code, out.strip()) == (0, f"create user to {broker.addr} success.")
    code, out = _admin(namesrv, ROOT, "createAcl", *b, "-s", "User:alice",
                       "-r", "Topic:orders-*,Group:g1", "-a", "Pub,Sub", "-d", "Allow")
    assert (code, out.strip()) == (0, f"create acl to {broker.addr} success."), out
    code, out = _admin(namesrv, ROOT, "updateAcl", *b, "-s", "User:alice",
                       "-r", "Topic:orders-secret", "-a", "All", "-d", "Deny", "--json")
    assert (code, json.loads(out)) == (0, {"subject": "User:alice", "brokers": [broker.addr]})
    code, out = _admin(namesrv, ROOT, "updateTopic", "-c", "DefaultCluster",
                       "-t", "orders-1", "-r", "1", "-w", "1")
    assert code == 0, out
    code, out = _admin(namesrv, ALICE, "createUser", *b, "-u", "mallory", "-p", "mallory1")
    assert code == 1 and ("AUTH_CREATE_USER needs a Super user, or action Update on resource "
                          "Cluster:DefaultCluster; alice is a Normal user whose ACL does not "
                          "allow it") in out
    code, out = _admin(namesrv, None, "listUser", *b)
    assert code == 1 and "the request has no AccessKey" in out

    broker.kill9()
    broker.start()

    code, out = _admin(namesrv, ROOT, "listUser", "-c", "DefaultCluster", "--json")
    assert code == 0, out
    assert json.loads(out) == {broker.addr: [
        {"username": "alice", "userType": "Normal", "userStatus": "enable"},
        {"username": "root", "userType": "Super", "userStatus": "enable"}]}
    code, out = _admin(namesrv, ROOT, "listUser", *b)
    assert (code, out.splitlines()) == (0, [  # mqadmin's columns; no password is sent
        "#UserName  #Password  #UserType  #UserStatus",
        "alice      -          Normal     enable",
        "root       -          Super      enable"]), out
    code, out = _admin(namesrv, ROOT, "listUser", "-f", "ali")
    assert (code, out.splitlines()) == (0, [  # every master's, each under its address
        f"============{broker.addr}============",
        "#UserName  #Password  #UserType  #UserStatus",
        "alice      -          Normal     enable"]), out
    code, out = _admin(namesrv, ROOT, "getAcl", *b, "-s", "User:alice", "--json")
    assert code == 0, out
    [policy] = json.loads(out)[broker.addr][0]["policies"]
    assert sorted((e["resource"], e["decision"]) for e in policy["entries"]) == [
        ("Group:g1", "Allow"), ("Topic:orders-*", "Allow"), ("Topic:orders-secret", "Deny")]
    code, out = _admin(namesrv, ROOT, "listAcl", *b, "-r", "orders")
    assert code == 0, out
    assert out.splitlines() == [
        "#Subject    #PolicyType  #Resource            #Actions    #SourceIp  #Decision",
        "User:alice  Custom       Topic:orders-*       [Pub, Sub]  []         Allow",
        "User:alice  Custom       Group:g1             [Pub, Sub]  []         Allow",
        "User:alice  Custom       Topic:orders-secret  [All]       []         Deny"], out
    code, out = _admin(namesrv, ALICE, "sendMessage", "-t", "orders-1", "-p", "signed")
    assert code == 0, out
    code, out = _admin(namesrv, ALICE, "updateTopic", "-b", broker.addr, "-t", "orders-2")
    assert code == 1 and "needs a Super user, or action Update on resource Cluster:" in out

    code, out = _admin(namesrv, ROOT, "deleteAcl", *b, "-s", "User:alice",
                       "-r", "Topic:orders-*")
    assert (code, out.strip()) == (0, f"delete acl to {broker.addr} success.")
    code, out = _admin(namesrv, ALICE, "sendMessage", "-t", "orders-1", "-p", "refused")
    assert code == 1 and "needs PUB on topic orders-1; alice does not have it" in out, out
    code, out = _admin(namesrv, ROOT, "updateUser", *b, "-u", "alice", "-s", "disable")
    assert (code, out.strip()) == (0, f"update user to {broker.addr} success.")
    code, out = _admin(namesrv, ROOT, "getUser", *b, "-u", "alice")
    assert (code, out.splitlines()) == (0, [
        "#UserName  #Password  #UserType  #UserStatus",
        "alice      -          Normal     disable"]), out
    code, out = _admin(namesrv, ALICE, "sendMessage", "-t", "orders-1", "-p", "disabled")
    assert code == 1 and "user alice is disabled" in out, out
    code, out = _admin(namesrv, ROOT, "deleteUser", *b, "-u", "alice")
    assert code == 0, out
    code, out = _admin(namesrv, ROOT, "getAcl", *b, "-s", "User:alice")
    assert code == 1 and "no ACL for User:alice" in out, out
