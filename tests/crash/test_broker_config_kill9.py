"""updateBrokerConfig survives kill -9: a ``tidemq broker`` process started from a
properties file of the user's is changed at run time, killed with SIGKILL and started
again from the same file; it comes back with the changed keys, the user's file is left
byte for byte, and a key given with --set still wins over a change made at run time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.config_overrides import FILE_NAME
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.formats.javaprops import parse_properties, properties_text

from .broker_process import BrokerProcess, free_port

USER_FILE = """\
# broker-a of the test cluster -- the operator's own notes
brokerClusterName = DefaultCluster
! maxPullBytes is tuned for the test
maxPullBytes = 1048576
brokerPermission=6
"""


async def _config(addr: str) -> dict[str, str]:
    async with Peer(addr) as peer:
        answer = await peer.ok(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
        return parse_properties(bytes(answer.full_body()).decode())


async def _update(addr: str, changes: dict[str, str]) -> RemotingCommand:
    async with Peer(addr) as peer:
        return await peer(wire.request(RequestCode.UPDATE_BROKER_CONFIG,
                                       properties_text(changes).encode()))


def test_run_time_changes_survive_kill9(tmp_path: Path) -> None:
    user_file = tmp_path / "broker.properties"
    user_file.write_text(USER_FILE, "utf-8")
    broker = BrokerProcess(tmp_path / "store", f"127.0.0.1:{free_port()}", {})
    broker.args = ("--config", str(user_file))
    broker.start()
    try:
        before = asyncio.run(_config(broker.addr))
        assert (before["brokerPermission"], before["maxPullBytes"]) == ("6", "1048576")
        answer = asyncio.run(_update(broker.addr, {"brokerPermission": "4",
                                                   "maxPullBytes": "65536"}))
        assert answer.code == 0, answer.remark
        refused = asyncio.run(_update(broker.addr, {"brokerPermission": "4",
                                                    "listenPort": "1"}))
        assert refused.code != 0 and "listenPort" in (refused.remark or "")
        broker.kill9()

        broker.settings["brokerPermission"] = "2"  # --set wins over the kept change
        broker.start()
        after = asyncio.run(_config(broker.addr))
        assert (after["maxPullBytes"], after["brokerPermission"]) == ("65536", "2")
        assert broker.wait_for("--set gives it again", timeout=1) is not None
        assert user_file.read_text("utf-8") == USER_FILE
        kept = tmp_path / "store" / "config" / FILE_NAME
        assert parse_properties(kept.read_text("utf-8")) == {"brokerPermission": "4",
                                                            "maxPullBytes": "65536"}
    finally:
        broker.kill9()
