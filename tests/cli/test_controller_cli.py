"""``tidemq admin`` controller commands through typer's CliRunner against three real
controller processes; two brokers of broker-a are played over TCP from a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.runner import CliRunner
from tests.namesrv.controller.fake_broker import GROUP, FakeBroker, set_up_group
from tests.namesrv.controller.processes import controller_trio

from tidemq.cli.commands.controller import _print_sync_state_sets
from tidemq.cli.main import app
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.controller import BrokerReplicasInfo
from tidemq.net import RemotingClient

runner = CliRunner()
#: These tests elect and clean by hand: a busy machine must not make a heartbeating fake
#: broker look dead between two commands.
LONG_LEASE_MS = 15_000


class Brokers:
    """The fake brokers' event loop on a thread of its own, heartbeating throughout."""

    def __init__(self, controllers: list[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.controllers = controllers
        self.brokers: list[FakeBroker] = []

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _setup(self) -> None:
        self.client = RemotingClient(request_timeout=3.0)
        admin = ControllerAdmin(self.client.request, self.controllers)
        self.brokers = [FakeBroker(self.client, self.controllers, i, lease_ms=LONG_LEASE_MS)
                        for i in (1, 2)]
        await set_up_group(admin, self.client, self.brokers)

    async def _close(self) -> None:
        for b in self.brokers:
            await b.stop()
        await self.client.close()

    def close(self) -> None:
        self.run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Brokers]]:
    trio = controller_trio(tmp_path_factory.mktemp("home"),
                           {"controllerBrokerHeartbeatTimeout": str(LONG_LEASE_MS)})
    brokers = None
    try:
        for c in trio:
            c.start()
        addrs = ";".join(c.addr for c in trio)
        brokers = Brokers([c.addr for c in trio])
        brokers.run(brokers._setup())
        yield addrs, brokers
    finally:
        if brokers is not None:
            brokers.close()
        for c in trio:
            c.kill9()


def admin(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, ["admin", *args, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if code == 0 else result.output


def test_get_controller_metadata(group: tuple[str, Brokers]) -> None:
    addrs, _ = group
    # a follower learns who leads from the leader's next heartbeat: ask until all agree
    deadline = time.monotonic() + 30
    while True:
        rows = admin("getControllerMetaData", "-a", addrs)
        assert [r["address"] for r in rows] == addrs.split(";")
        leaders = [r for r in rows if r["isLeader"]]
        views = {r["controllerLeaderAddress"] for r in rows}
        if len(leaders) == 1 and views == {leaders[0]["address"]}:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    assert all(r["peers"].count("-127.0.0.1:") == 3 for r in rows)
    table = runner.invoke(app, ["admin", "getControllerMetaData", "-a", addrs])
    assert table.exit_code == 0, table.output
    # mqadmin's lines for each controller, after the address asked
    expected: list[str] = []
    for r in rows:
        expected += ["", f"#ControllerAddress\t{r['address']}", f"#ControllerGroup\t{r['group']}",
                     f"#ControllerLeaderId\t{r['controllerLeaderId']}",
                     f"#ControllerLeaderAddress\t{leaders[0]['address']}"]
        expected += [f"#Peer:\t{peer}" for peer in r["peers"].split(";")]
    assert table.stdout.splitlines() == expected


def test_get_sync_state_set_elect_and_clean(group: tuple[str, Brokers]) -> None:
    addrs, brokers = group
    info = admin("getSyncStateSet", "-a", addrs, "-b", GROUP)
    replicas = info["replicasInfoTable"][GROUP]
    assert replicas["masterBrokerId"] == 1
    assert [r["brokerId"] for r in replicas["inSyncReplicas"]] == [1, 2]
    epoch = replicas["masterEpoch"]
    table = runner.invoke(app, ["admin", "getSyncStateSet", "-a", addrs])
    assert table.exit_code == 0, table.output
    a, b = (x.address for x in brokers.brokers)
    assert table.stdout.splitlines() == [  # mqadmin's lines, its replicas as Java prints them
        "", f"#brokerName\t{GROUP}", "#MasterBrokerId\t1", f"#MasterAddr\t{a}",
        f"#MasterEpoch\t{epoch}", f"#SyncStateSetEpoch\t{replicas['syncStateSetEpoch']}",
        "#SyncStateSetNums\t2",
        "", f"InSyncReplica:\tReplicaIdentity{{brokerName='{GROUP}', brokerId=1, "
            f"brokerAddress='{a}', alive=true}}",
        "", f"InSyncReplica:\tReplicaIdentity{{brokerName='{GROUP}', brokerId=2, "
            f"brokerAddress='{b}', alive=true}}"]

    # a group the controllers do not know is named, and the command fails
    unknown = admin("getSyncStateSet", "-a", addrs, "-b", GROUP, "-b", "no-such-group", code=1)
    assert "no broker group named no-such-group" in unknown

    elected = admin("electMaster", "-a", addrs, "-b", "2", "-bn", GROUP, "-c", "c")
    assert (elected["masterBrokerId"], elected["masterEpoch"]) == (2, epoch + 1)
    assert elected["masterAddress"] == brokers.brokers[1].address
    # already master: reported, not an error
    again = admin("electMaster", "-a", addrs, "-b", "2", "-bn", GROUP)
    assert again["masterEpoch"] == epoch + 1
    assert again["brokers"] == {"1": brokers.brokers[0].address, "2": brokers.brokers[1].address}
    in_sync = admin("getSyncStateSet", "-a", addrs)["replicasInfoTable"][GROUP]["inSyncReplicas"]
    assert again["syncStateSet"] == [r["brokerId"] for r in in_sync]
    table = runner.invoke(app, ["admin", "electMaster", "-a", addrs, "-b", "2", "-bn", GROUP,
                                "-c", "c"])
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines() == [
        "", "#ClusterName\tc", f"#BrokerName\t{GROUP}", f"#BrokerMasterAddr\t{b}",
        f"#MasterEpoch\t{epoch + 1}", f"#SyncStateSetEpoch\t{again['syncStateSetEpoch']}",
        f"\t#Broker\t1\t{a}", f"\t#Broker\t2\t{b}"]
    # a broker outside the set is refused with the reason
    refused = admin("electMaster", "-a", addrs, "-b", "1", "-bn", GROUP, code=1)
    assert "CONTROLLER_ELECT_MASTER_FAILED" in refused and "sync-state set" in refused

    refused = admin("cleanBrokerMetadata", "-a", addrs, "-bn", GROUP, "-b", "1", code=1)
    assert "alive" in refused
    assert admin("cleanBrokerMetadata", "-a", addrs, "-bn", GROUP, "-b", "1", "-l")[
        "cleaned"] == [1]
    info = admin("getSyncStateSet", "-a", addrs)["replicasInfoTable"][GROUP]
    assert [r["brokerId"] for r in info["inSyncReplicas"] + info["notInSyncReplicas"]] == [2]


def test_bad_flags_are_refused(group: tuple[str, Brokers],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    addrs, _ = group
    result = runner.invoke(app, ["admin", "cleanBrokerMetadata", "-a", addrs, "-bn", GROUP,
                                 "-b", "1;x"])
    assert result.exit_code == 2 and "not a ';'-separated list" in result.output
    # nothing listens there: the admin gives up once its (shortened) search for a leader ends
    monkeypatch.setattr("tidemq.client.controller_admin.LEADER_WAIT", 0.5)
    result = runner.invoke(app, ["admin", "getSyncStateSet", "-a", "127.0.0.1:1"])
    assert result.exit_code == 1 and "no controller leader found" in result.output



def test_get_sync_state_set_with_an_interval_prints_until_interrupted(
        group: tuple[str, Brokers], monkeypatch: pytest.MonkeyPatch) -> None:
    addrs, _ = group
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("tidemq.cli.commands.admin_common.time.sleep", nap)
    result = runner.invoke(app, ["admin", "getSyncStateSet", "-a", addrs, "-i", "2"])
    assert result.exit_code == 130
    assert naps == [2, 2, 2] and result.stdout.count(f"#brokerName\t{GROUP}\n") == 3


def test_get_and_update_controller_config(group: tuple[str, Brokers]) -> None:
    addrs, _ = group
    first = addrs.split(";")[0]
    got = admin("getControllerConfig", "-a", addrs)
    assert list(got) == addrs.split(";")
    assert got[first]["controllerBrokerHeartbeatTimeout"] == str(LONG_LEASE_MS)
    assert got[first]["enableElectUncleanMaster"] == "false"
    assert got[first]["controllerRaftSelfId"] == "n0"
    table = runner.invoke(app, ["admin", "getControllerConfig", "-a", first])
    assert table.exit_code == 0
    lines = [line.split() for line in table.stdout.splitlines()]
    assert lines[0] == [f"============{first}============"]
    assert ["enableElectUncleanMaster", "=", "false"] in lines

    out = admin("updateControllerConfig", "-a", addrs, "-k", "enableElectUncleanMaster",
                "-v", "true")
    assert out == {"controllers": addrs.split(";"), "key": "enableElectUncleanMaster",
                   "value": "true"}
    try:
        after = admin("getControllerConfig", "-a", addrs)
        assert {c["enableElectUncleanMaster"] for c in after.values()} == {"true"}
    finally:
        said = runner.invoke(app, ["admin", "updateControllerConfig", "-a", addrs, "-k",
                                   "enableElectUncleanMaster", "-v", "false"])
    assert said.exit_code == 0
    assert said.stdout.splitlines() == [
        f"update controller config success![{', '.join(addrs.split(';'))}]",
        "enableElectUncleanMaster : false"]
    fixed = admin("updateControllerConfig", "-a", first, "-k", "controllerRaftPeers", "-v",
                  "n0-127.0.0.1:1", code=1)
    assert "controllerRaftPeers cannot change while the controller runs" in fixed
    assert "INVALID_PARAMETER" in fixed
    assert admin("getControllerConfig", "-a", first)[first] == got[first]


def test_no_broker_group_prints_nothing_on_stdout_and_says_so_on_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    """mqadmin prints no line for controllers that know no group: a script reading the
    output finds none here either; a person is told on stderr."""
    _print_sync_state_sets(BrokerReplicasInfo(), json_out=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert "no broker group is known to the controllers" in err
