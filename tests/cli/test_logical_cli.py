"""``tidemq admin`` logical-queue commands (RIP-21) through typer's CliRunner against a
real two-broker cluster (:class:`tests.cli.conftest.ThreadedCluster`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner
from tests.cli.test_admin_cli import eventually
from typer.testing import Result

from tidemq.cli.main import app
from tidemq.client import AdminClient, Message, Producer
from tidemq.client.logical_admin import plan_migration
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.formats.logical_mapping import TopicMapping
from tidemq.types import LOGICAL_BROKER, MessageQueue

runner = CliRunner()


def run(cluster: ThreadedCluster, *args: str, code: int = 0) -> Result:
    result = runner.invoke(app, ["admin", *args, "-n", cluster.namesrv])
    assert result.exit_code == code, result.output
    return result


def flat(text: str) -> str:
    """Rich's error box, unwrapped: words joined by single spaces."""
    return " ".join(text.replace("│", " ").split())


def run_json(cluster: ThreadedCluster, *args: str) -> Any:
    return json.loads(run(cluster, *args, "--json").stdout)


def logical_route(cluster: ThreadedCluster, topic: str, write: int) -> dict[str, Any]:
    """The topic's route once the name server publishes ``write`` writable queues."""
    def probe() -> dict[str, Any]:
        result = runner.invoke(app, ["admin", "topicRoute", "-t", topic, "-n", cluster.namesrv,
                                     "--json"])
        return json.loads(result.stdout) if result.exit_code == 0 else {}

    def ok(r: dict[str, Any]) -> bool:
        qd = r.get("queueDatas", [])
        return len(qd) == 1 and qd[0]["brokerName"] == LOGICAL_BROKER and (
            qd[0]["writeQueueNums"] == write)

    route = eventually(probe, ok)
    assert ok(route), route
    return route


def send(cluster: ThreadedCluster, topic: str, lq: int, count: int) -> list[int]:
    async def go() -> list[int]:
        async with Producer("cli-lq", cluster.namesrv) as producer:
            return [(await producer.send(Message(topic, f"{lq}-{i}".encode()), queue=(
                MessageQueue(topic, LOGICAL_BROKER, lq)))).queue_offset for i in range(count)]

    return cluster.call(go())


def test_create_query_migrate_and_resume(cluster: ThreadedCluster, tmp_path: Path) -> None:
    out = run_json(cluster, "updateTopic", "-t", "CliLogical", "--logical-queue", "3",
                   "-b", "broker-a")
    assert out["total"] == 3 and out["writable"] == 3
    assert {s["broker"] for segs in out["queues"].values() for s in segs} == {"broker-a"}
    route = logical_route(cluster, "CliLogical", 3)
    assert route["queueDatas"][0]["readQueueNums"] == 3
    assert send(cluster, "CliLogical", 0, 5) == [0, 1, 2, 3, 4]

    table = run(cluster, "queryLogicalQueueMapping", "-t", "CliLogical").stdout.splitlines()
    assert re.fullmatch(r"CliLogical \(epoch \d+, 3/3 writable\)", table[0]), table
    assert table[1:] == [
        "#brokerName  #MessageQueue                          #LogicalQueue(range)  #QueueStatus",
        "broker-a     MessageQueue(CliLogical, broker-a, 0)  LogicalQueue(0, 0-)   NORMAL",
        "broker-a     MessageQueue(CliLogical, broker-a, 1)  LogicalQueue(1, 0-)   NORMAL",
        "broker-a     MessageQueue(CliLogical, broker-a, 2)  LogicalQueue(2, 0-)   NORMAL"]

    steps = run(cluster, "migrateLogicalQueue", "-t", "CliLogical", "-q", "0",
                "-b", "broker-b").stdout
    lines = [ln.strip() for ln in steps.splitlines()]
    assert lines[0].startswith("planned: LogicalQueue(0) gets MessageQueue(CliLogical, "
                               "broker-b, 0) as PENDING")
    assert lines[1] == "sealed: MessageQueue(CliLogical, broker-a, 0) READONLY at logical end 5"
    assert lines[2].startswith("committed: LogicalQueue(0) continues at 5 on "
                               "MessageQueue(CliLogical, broker-b, 0)")
    assert send(cluster, "CliLogical", 0, 2) == [5, 6]  # contiguous across the cut
    table = run(cluster, "queryLogicalQueueMapping", "-t", "CliLogical").stdout.splitlines()
    assert table[2:4] == [
        "broker-a     MessageQueue(CliLogical, broker-a, 0)  LogicalQueue(0, 0-4)  READONLY",
        "broker-b     MessageQueue(CliLogical, broker-b, 0)  LogicalQueue(0, 5-)   NORMAL"]

    again = run(cluster, "migrateLogicalQueue", "-t", "CliLogical", "-q", "0", "-b",
                "broker-b").stdout
    assert "(already)" in again and "is already on broker-b" in again

    # An admin that died after the planned step: the mapping is pushed as it left it,
    # and migrateLogicalQueue resumes from there.
    mapping = TopicMapping.from_json(run_json(cluster, "queryLogicalQueueMapping", "-t",
                                              "CliLogical"))
    planned = plan_migration(mapping, 1, "broker-b")
    assert planned is not None
    file = tmp_path / "planned.json"
    file.write_text(json.dumps(planned.to_json()))
    pushed = run_json(cluster, "updateLogicalQueueMapping", "-t", "CliLogical", "-f", str(file))
    assert pushed["epoch"] == planned.epoch
    other = run(cluster, "migrateLogicalQueue", "-t", "CliLogical", "-q", "1", "-b",
                "broker-a", code=1)
    assert "has a migration to broker-b pending" in flat(other.output)
    resumed = run_json(cluster, "migrateLogicalQueue", "-t", "CliLogical", "-q", "1", "-b",
                       "broker-b")
    assert [(s["step"], s["done"]) for s in resumed["steps"]] == [
        ("planned", "already"), ("sealed", "now"), ("committed", "now")]
    assert [s["state"] for s in resumed["mapping"]["queues"]["1"]] == ["READONLY", "NORMAL"]

    # The old epoch is refused now, unless forced.
    refused = run(cluster, "updateLogicalQueueMapping", "-t", "CliLogical", "-f", str(file),
                  code=1)
    assert "error:" in refused.output and "older" in refused.output
    forced = run_json(cluster, "updateLogicalQueueMapping", "-t", "CliLogical", "-f",
                      str(file), "--force")
    assert forced["epoch"] == planned.epoch
    assert run_json(cluster, "queryLogicalQueueMapping", "-t", "CliLogical")["epoch"] == (
        planned.epoch)


def test_decrease_reopen_increase_and_delete(cluster: ThreadedCluster) -> None:
    run_json(cluster, "updateTopic", "-t", "CliResize", "--logical-queue", "4")
    logical_route(cluster, "CliResize", 4)
    send(cluster, "CliResize", 3, 3)

    out = run_json(cluster, "updateLogicalQueueNum", "-t", "CliResize", "-q", "2")
    assert (out["total"], out["writable"]) == (4, 2)  # sealed: still readable
    assert out["queues"]["3"][0]["state"] == "READONLY"
    assert out["queues"]["3"][0]["physicalEnd"] == 3
    logical_route(cluster, "CliResize", 2)
    refused = run(cluster, "sendMessage", "-t", "CliResize", "-p", "late", "-b", LOGICAL_BROKER,
                  "-i", "3", code=1)
    assert "NO_PERMISSION" in refused.output and "is sealed" in flat(refused.output)

    text = run(cluster, "updateLogicalQueueNum", "-t", "CliResize", "-q", "5").stdout
    assert "now has 5 writable logical queues of 5" in text
    logical_route(cluster, "CliResize", 5)
    out = run_json(cluster, "queryLogicalQueueMapping", "-t", "CliResize")
    reopened = out["queues"]["3"]
    assert [s["state"] for s in reopened] == ["READONLY", "NORMAL"]
    assert reopened[1]["logicalStart"] == 3  # continues after the sealed end
    assert send(cluster, "CliResize", 3, 1) == [3]

    assert run_json(cluster, "deleteLogicalQueueMapping", "-t", "CliResize") == {
        "topic": "CliResize", "deleted": True}
    gone = run(cluster, "queryLogicalQueueMapping", "-t", "CliResize", code=1)
    assert "error:" in gone.output and "no logical-queue mapping" in gone.output


def test_clean_errors(cluster: ThreadedCluster, tmp_path: Path) -> None:
    run_json(cluster, "updateTopic", "-t", "CliErrors", "--logical-queue", "1")
    bad = run(cluster, "migrateLogicalQueue", "-t", "CliErrors", "-q", "0", "-b", "broker-z",
              code=1)
    assert "error:" in bad.output and "no broker 'broker-z'" in bad.output
    assert "(its brokers: broker-a, broker-b" in bad.output and "[" not in bad.output
    bad = run(cluster, "migrateLogicalQueue", "-t", "CliErrors", "-q", "7", "-b", "broker-b",
              code=1)
    assert "has no logical queue 7" in bad.output
    bad = run(cluster, "updateTopic", "-t", "CliErrors2", "--logical-queue", "2", "-b",
              "broker-a,nowhere", code=1)
    assert "no master broker 'nowhere'" in bad.output
    file = tmp_path / "other.json"
    file.write_text(json.dumps({"topic": "Other", "epoch": 1, "queues": {}}))
    bad = run(cluster, "updateLogicalQueueMapping", "-t", "CliErrors", "-f", str(file), code=2)
    assert "maps topic 'Other', not 'CliErrors'" in flat(bad.output)
    file.write_text("{not json")
    bad = run(cluster, "updateLogicalQueueMapping", "-t", "CliErrors", "-f", str(file), code=2)
    assert "is not a logical-queue mapping" in flat(bad.output)
    run(cluster, "updateLogicalQueueNum", "-t", "CliErrors", "-q", "0", code=2)


async def push(cluster: ThreadedCluster, addr: str, mapping: TopicMapping) -> None:
    """UPDATE_LOGICAL_QUEUE_MAPPING to one broker only."""
    async with AdminClient(cluster.namesrv) as admin:
        await admin._broker(addr, RemotingCommand.request(
            RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {}, json.dumps(mapping.to_json()).encode()))


def test_query_reads_without_repairing_a_copy_behind(tmp_path: Path) -> None:
    """queryLogicalQueueMapping shows every copy merged and writes nothing: a broker whose
    copy is behind keeps it (its own sync is off here, so only the query could push)."""
    quiet = ThreadedCluster(tmp_path, broker={"logical_sync_interval": 3_600_000}).start()
    try:
        created = TopicMapping.from_json(run_json(quiet, "updateTopic", "-t", "CliRead",
                                                  "--logical-queue", "2"))
        planned = plan_migration(created, 0, "broker-b")
        assert planned is not None
        ahead, behind = quiet.cluster.brokers
        assert ahead.config.broker_name == "broker-a"
        quiet.call(push(quiet, ahead.broker_addr, planned))
        assert ahead.logical.get("CliRead") == planned
        assert behind.logical.get("CliRead") == created

        shown = run_json(quiet, "queryLogicalQueueMapping", "-t", "CliRead")
        assert shown["epoch"] == planned.epoch  # the merged view
        assert behind.logical.get("CliRead") == created  # not repaired
        synced = run(quiet, "migrateLogicalQueue", "-t", "CliRead", "-q", "0", "-b",
                     "broker-b").stdout
        assert synced.splitlines()[0].strip().startswith("synced:")  # a mutating command
    finally:
        quiet.stop()
