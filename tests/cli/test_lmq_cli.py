"""``tidemq admin deleteLmq`` and the LMQ figures of ``brokerStatus``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner

from tidemq.cli.main import app
from tidemq.client import ClientConfig, Message, Producer, send_to_lmqs
from tidemq.testing import Cluster
from tidemq.types import MessageQueue

runner = CliRunner()


@pytest.fixture(scope="module")
def lmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedCluster]:
    root = tmp_path_factory.mktemp("cli-lmq")
    running = ThreadedCluster(root, brokers=1)
    running.cluster = Cluster(root, brokers=1,
                              store={"enable_lmq": True, "enable_multi_dispatch": True})
    running.start()
    try:
        yield running
    finally:
        running.stop()


async def _fan_out(namesrv: str, names: list[str]) -> None:
    cfg = ClientConfig(namesrv_addr=(namesrv,))
    async with Producer("cli-lmq", config=cfg) as producer:
        await send_to_lmqs(producer, Message("CliParent", b"x"), names,
                           queue=MessageQueue("CliParent", "broker-a", 0))


def test_delete_lmq_and_broker_status(lmq_cluster: ThreadedCluster, tmp_path: Path) -> None:
    asyncio.run(_fan_out(lmq_cluster.namesrv, ["%LMQ%cli-a", "%LMQ%cli-b"]))
    broker = lmq_cluster.broker_addrs[0]
    store = lmq_cluster.cluster.brokers[0].store
    assert lmq_cluster.call(asyncio.to_thread(store.wait_dispatched, 10.0))
    result = runner.invoke(app, ["admin", "brokerStatus", "-b", broker,
                                 "-n", lmq_cluster.namesrv, "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert (status["lmqEnabled"], status["lmqCount"], status["lmqEntries"]) == ("true", "2", "2")

    result = runner.invoke(app, ["admin", "deleteLmq", "-b", broker, "-q", "%LMQ%cli-a",
                                 "-n", lmq_cluster.namesrv])
    assert result.exit_code == 0, result.output
    assert "deleted %LMQ%cli-a" in result.stdout
    assert store.max_offset("%LMQ%cli-a", 0) == 0 and store.max_offset("%LMQ%cli-b", 0) == 1

    result = runner.invoke(app, ["admin", "deleteLmq", "-b", broker, "-q", "%LMQ%cli-a",
                                 "-n", lmq_cluster.namesrv])
    assert result.exit_code == 1 and "no LMQ named %LMQ%cli-a" in result.output


def test_print_msg_reads_an_lmq_on_its_parents_brokers(lmq_cluster: ThreadedCluster) -> None:
    """mqadmin's ``printMsg -l``: an LMQ has no route; its parent topic's has its brokers."""
    created = runner.invoke(app, ["admin", "updateTopic", "-t", "CliParent", "-c",
                                  "DefaultCluster", "-n", lmq_cluster.namesrv])
    assert created.exit_code == 0, created.output  # its route is known once answered
    asyncio.run(_fan_out(lmq_cluster.namesrv, ["%LMQ%cli-print"]))
    store = lmq_cluster.cluster.brokers[0].store
    assert lmq_cluster.call(asyncio.to_thread(store.wait_dispatched, 10.0))
    result = runner.invoke(app, ["admin", "printMsg", "-t", "%LMQ%cli-print", "-l",
                                 "CliParent", "-n", lmq_cluster.namesrv, "--json"])
    assert result.exit_code == 0, result.output
    assert [m["body"] for m in json.loads(result.stdout)] == ["x"]
    result = runner.invoke(app, ["admin", "printMsg", "-t", "%LMQ%cli-print",
                                 "-n", lmq_cluster.namesrv])
    assert result.exit_code == 1 and "%LMQ%cli-print" in result.output  # no route


def test_bench_lmq_runs_small(tmp_path: Path) -> None:
    """``tidemq bench lmq`` end to end at a toy scale (the real run is ~4 minutes)."""
    out = tmp_path / "lmq.json"
    result = runner.invoke(app, [
        "bench", "lmq", "--lmqs", "2000", "--pulls", "50", "--wire-messages", "50",
        "--compare-queues", "40", "--compare-messages", "40", "--segment-size",
        str(8 << 20), "--data-dir", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["build"]["lmq_count"] == 2000 and data["broker"]["broker_lmq_count"] == 2000
    assert set(data["compare"]) == {"rocksdb", "file-cq", "put-per-target"}
    assert data["compare"]["file-cq"]["index_disk"]["files"] == 40 + 8  # + parent queues
    assert set(data["verdicts"]) == {"rss_gib", "restart_s", "dispatch_entries_per_s",
                                     "pull_p99_ms", "wire_single_msgs_per_s",
                                     "wire_batched_msgs_per_s"}
    wire = data["broker"]["wire"]
    assert {mode: wire[mode]["messages"] for mode in ("raw", "single", "batched")} == {
        "raw": 50, "single": 50, "batched": 50}
    for mode in ("raw", "single", "batched"):  # counted until dispatch caught up
        assert 0 < wire[mode]["msgs_per_s"] <= wire[mode]["answered_msgs_per_s"]
