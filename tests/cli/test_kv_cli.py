"""``tidemq admin updateKvConfig`` / ``getKvConfig`` / ``deleteKvConfig`` against a real
``tidemq namesrv`` process with ``aclEnable=true``: writes need an admin account, the
items survive a SIGKILL of the name server, and the output is mqadmin's lines or JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner
from tests.cli.server_process import ServerProcess
from tests.net.acl.accounts import ADMIN, USER, write_accounts

from tidemq.cli.main import app
from tidemq.codec.signature import Credentials


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess("namesrv", {
        "aclEnable": "true", "aclFile": str(write_accounts(tmp_path)),
        "kvConfigPath": str(tmp_path / "namesrv" / "kvConfig.json")}).start()
    try:
        yield server
    finally:
        server.stop()


def _admin(ns: ServerProcess, who: Credentials | None, *args: str) -> tuple[int, str]:
    account = [] if who is None else ["--access-key", who.access_key,
                                      "--secret-key", who.secret_key]
    result = CliRunner().invoke(app, ["admin", *account, *args, "-n", ns.addr])
    return result.exit_code, result.output


def test_kv_commands_against_a_name_server_process(namesrv: ServerProcess,
                                                   tmp_path: Path) -> None:
    code, out = _admin(namesrv, ADMIN, "updateKvConfig", "-s", "app", "-k", "color",
                       "-v", "blue")
    assert (code, out.strip()) == (
        0, f"update kv config success: [app] color=blue on {namesrv.addr}")
    code, out = _admin(namesrv, USER, "updateKvConfig", "-s", "app", "-k", "color",
                       "-v", "red")
    assert code == 1 and "PUT_KV_CONFIG needs an admin account" in out, out
    code, out = _admin(namesrv, None, "deleteKvConfig", "-s", "app", "-k", "color")
    assert code == 1 and "the request has no AccessKey" in out, out
    namesrv.kill9()
    namesrv.start()
    code, out = _admin(namesrv, USER, "getKvConfig", "-s", "app", "--json")
    assert (code, json.loads(out)) == (0, {"color": "blue"}), out
    code, out = _admin(namesrv, None, "getKvConfig", "-s", "app", "-k", "color")
    assert (code, out.splitlines()) == (0, ["#Key   #Value", "color  blue"]), out
    code, out = _admin(namesrv, ADMIN, "updateKvConfig", "-s", "app", "-k", "a.long.key",
                       "-v", "1")
    assert code == 0, out
    code, out = _admin(namesrv, USER, "getKvConfig", "-s", "app")
    assert (code, out.splitlines()) == (
        0, ["#Key        #Value", "a.long.key  1", "color       blue"]), out
    code, out = _admin(namesrv, ADMIN, "deleteKvConfig", "-s", "app", "-k", "a.long.key")
    assert code == 0, out
    code, out = _admin(namesrv, ADMIN, "deleteKvConfig", "-s", "app", "-k", "color",
                       "--json")
    assert (code, json.loads(out)) == (
        0, {"namespace": "app", "key": "color", "namesrv": [namesrv.addr]})
    code, out = _admin(namesrv, USER, "getKvConfig", "-s", "app", "--json")
    assert (code, json.loads(out)) == (0, {})
    code, out = _admin(namesrv, USER, "getKvConfig", "-s", "app", "-k", "color")
    assert (code, out.strip()) == (1, "error: no key color in KV namespace app"), out
    assert json.loads((tmp_path / "namesrv" / "kvConfig.json").read_text()) == {
        "configTable": {}}
