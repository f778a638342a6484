"""``tidemq bench produce|consume|latency``: tiny runs against a real broker process.

The CLI tests load ``tidemq standalone`` in a subprocess (small segments) for about a
second; they are marked ``slow``. Those that test how the bench sets up its own broker
(flush modes, a replica, ACL and TLS, cleaning up, a broker that does not start) let it
start one each; those that test a workload load one broker process the module shares
(``--namesrv``, a topic of their own): how a workload runs does not depend on who
started the broker. The meter tests need no process, and ``--namesrv`` is also tested
against an in-process cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner

from tidemq.bench.broker import BrokerBenchConfig
from tidemq.bench.meter import Meter, Sampler, percentiles_ms
from tidemq.bench.process import BrokerProcess
from tidemq.bench.security import BenchSecurity
from tidemq.cli.main import app
from tidemq.client.config import ACCESS_KEY_ENV, SECRET_KEY_ENV, TLS_CA_ENV, TLS_ENV

runner = CliRunner()

#: Keep the broker's files small: 16 MiB commit-log segments.
SMALL = ["--broker-set", "mappedFileSizeCommitLog=16777216"]
#: Segments that a second of sends fills several times.
TINY_SEGMENT = 256 * 1024


def bench(tmp_path: Path, *args: str, segments: list[str] = SMALL) -> dict[str, Any]:
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["bench", *args, *segments, "--queues", "2",
                                 "--data-dir", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["seconds"], data
    for row in data["seconds"]:
        assert row["seconds"] > 0 and row["client_cpu_pct"] >= 0
        assert row["broker_cpu_pct"] is not None
    assert list(tmp_path.iterdir()) == [out], "the broker's data directory is left behind"
    return data


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker process as ``bench`` starts its own (:data:`SMALL` segments), for the
    workload tests of the module."""
    running = BrokerProcess(settings=SMALL[1::2],
                            data_dir=str(tmp_path_factory.mktemp("bench-broker")))
    asyncio.run(running.start())
    try:
        yield running
    finally:
        asyncio.run(running.stop())


Bench = Callable[..., dict[str, Any]]


@pytest.fixture
def shared_bench(broker: BrokerProcess, request: pytest.FixtureRequest,
                 tmp_path: Path) -> Bench:
    """``tidemq bench ARGS`` against the shared ``broker``, on a topic of the test's own."""
    topic = "Bench-" + "".join(c for c in request.node.name if c.isalnum())[-60:]

    def run(*args: str) -> dict[str, Any]:
        out = tmp_path / "result.json"
        result = runner.invoke(app, ["bench", *args, "-n", broker.namesrv_addr,
                                     "--topic", topic, "--queues", "2", "--json", str(out)])
        assert result.exit_code == 0, f"{result.output}\n{broker.log_tail()}"
        data: dict[str, Any] = json.loads(out.read_text())
        assert data["seconds"], data
        for row in data["seconds"]:
            assert row["seconds"] > 0 and row["client_cpu_pct"] >= 0
            assert row["broker_cpu_pct"] is not None
        # the broker's CPU is read from its process, found by the port it listens on
        assert data["summary"]["broker_cpu"].startswith(f"process {broker.pid}, "), data
        return data

    return run

# ---------------------------------------------------------------------- meter (no process)


def test_percentiles_in_milliseconds() -> None:
    values = array("d", [i / 1000 for i in range(1, 1001)])  # 1 .. 1000 ms
    p = percentiles_ms(values)
    assert p["p50_ms"] == pytest.approx(500.5)
    assert p["p99_ms"] == pytest.approx(990.01)
    assert p["p999_ms"] == pytest.approx(999.001)
    assert percentiles_ms(array("d")) == {"p50_ms": None, "p99_ms": None, "p999_ms": None}


def test_sampler_rows_and_summary_skip_the_warmup() -> None:
    meter = Meter()
    sampler = Sampler(meter, None)
    meter.count, meter.latencies = 10, array("d", [1.0] * 10)
    first = sampler.tick()
    meter.count += 5
    meter.latencies.extend([0.001] * 5)
    meter.fail(RuntimeError("boom"))
    second = sampler.tick()
    assert (first["msgs"], second["msgs"], second["errors"]) == (10, 5, 1)
    assert second["p50_ms"] == pytest.approx(1.0) and second["broker_cpu_pct"] is None
    first["t"], first["seconds"] = 1.0, 1.0  # pretend the rows were a second each
    second["t"], second["seconds"] = 2.0, 1.0
    summary = sampler.summary(warmup=1.0)
    assert summary["msgs"] == 5 and summary["msgs_per_s"] == pytest.approx(5.0)
    assert summary["p99_ms"] == pytest.approx(1.0)
    assert summary["errors"] == 1 and summary["last_error"] == "boom"
    assert sampler.summary(warmup=0.0)["msgs"] == 15


@pytest.mark.parametrize(("change", "word"), [
    ({"flush": "SOMETIMES"}, "flush"), ({"batch": 0}, "batch"), ({"duration": 0}, "duration"),
    ({"linger_ms": -1.0}, "linger_ms"), ({"linger_ms": 1.0, "batch": 10}, "linger_ms"),
    ({"linger_ms": 1.0, "raw": True}, "linger_ms"), ({"max_batch": 0}, "max_batch"),
    ({"columns": True, "raw": True}, "columns"),
    ({"namesrv": "127.0.0.1:9876", "tls": True}, "tls"),
    ({"namesrv": "127.0.0.1:9876", "acl": True}, "acl"),
    ({"replica": "sometimes"}, "replica"),
])
def test_config_is_checked(change: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        BrokerBenchConfig(**change).check()


# ---------------------------------------------------------------------- the commands


@pytest.mark.slow
def test_produce_writes_json(tmp_path: Path) -> None:
    data = bench(tmp_path, "produce", "--duration", "1", "--warmup", "0", "--in-flight", "8")
    assert data["command"] == "produce"
    assert data["config"]["flush"] == "ASYNC_FLUSH" and data["config"]["in_flight"] == 8
    summary = data["summary"]
    assert summary["msgs"] > 0 and summary["errors"] == 0
    assert summary["p50_ms"] > 0 and summary["p999_ms"] >= summary["p99_ms"]
    # the broker's CPU a message, user and kernel apart, and its event loop among the threads
    assert summary["broker_user_us_per_msg"] > 0 and summary["broker_sys_us_per_msg"] >= 0
    assert "main" in {t["thread"] for t in summary["broker_threads"]}
    assert summary["broker_disk_bytes_per_msg"] >= 0  # what it dirtied (0 on a tmpfs)


@pytest.mark.slow
def test_produce_to_a_sync_master_with_a_replica(tmp_path: Path) -> None:
    data = bench(tmp_path, "produce", "--duration", "1", "--warmup", "0", "--in-flight", "8",
                 "--batch", "10", "--replica", "sync",
                 segments=["--broker-set", f"mappedFileSizeCommitLog={TINY_SEGMENT}"])
    assert data["config"]["replica"] == "sync"
    summary = data["summary"]
    # every send was answered SEND_OK: the replica confirmed it (else SLAVE_NOT_AVAILABLE),
    # past the master's segment ends too: the replica has the master's segment size
    assert summary["errors"] == 0, summary["last_error"]
    assert summary["msgs"] * 200 > 2 * TINY_SEGMENT


@pytest.mark.slow
def test_latency_with_a_replica_samples_its_lag(tmp_path: Path) -> None:
    data = bench(tmp_path, "latency", "--duration", "1.5", "--warmup", "0", "--rate", "500",
                 "--replica", "async")
    lag = data["summary"]["replication_lag"]
    # the master answered how far its replica was behind, in time, many times a second
    assert lag["samples"] >= 10 and 0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"]
    assert data["summary"]["received"] > 0


@pytest.mark.slow
def test_produce_raw_batches_sync_flush(tmp_path: Path) -> None:
    data = bench(tmp_path, "produce", "--duration", "1", "--warmup", "0", "--in-flight", "4",
                 "--batch", "10", "--raw", "--producers", "2", "--flush", "SYNC_FLUSH")
    summary = data["summary"]
    assert summary["errors"] == 0, summary["last_error"]
    assert summary["msgs"] > 0 and summary["msgs"] % 10 == 0


@pytest.mark.slow
@pytest.mark.parametrize("raw", [False, True])
def test_consume_reads_everything(shared_bench: Bench, raw: bool) -> None:
    data = shared_bench("consume", "--messages", "2000", "--pull-batch", "100",
                        *(["--raw"] if raw else []))
    summary = data["summary"]
    assert summary["prefill_msgs"] == 2000
    assert summary["consumed"] == 2000 and summary["complete"] is True
    assert summary["msgs"] == 2000


@pytest.mark.slow
def test_consume_columns_reads_everything_again(shared_bench: Bench) -> None:
    data = shared_bench("consume", "--messages", "2000", "--pull-batch", "500",
                        "--columns")
    assert data["summary"]["consumed"] == 2000
    columns = data["columns"]
    assert columns["command"] == "consume-columns"
    assert columns["summary"]["consumed"] == 2000 and columns["summary"]["complete"] is True


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["produce", "consume"])
def test_with_acl_and_tls(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ACCESS_KEY_ENV, SECRET_KEY_ENV, TLS_ENV, TLS_CA_ENV):
        monkeypatch.delenv(name, raising=False)
    extra = (["--duration", "1", "--warmup", "0", "--batch", "10"] if kind == "produce"
             else ["--messages", "2000", "--pull-batch", "100"])
    data = bench(tmp_path, kind, "--acl", "--tls", *extra)
    assert data["config"]["acl"] is True and data["config"]["tls"] is True
    summary = data["summary"]
    assert summary["errors"] == 0, summary.get("last_error")
    assert summary["msgs"] > 0
    assert all(name not in os.environ  # the clients' environment is put back
               for name in (ACCESS_KEY_ENV, SECRET_KEY_ENV, TLS_ENV, TLS_CA_ENV))


def test_security_settings_turn_each_part_on(tmp_path: Path) -> None:
    settings, env = BenchSecurity(acl=True, tls=True).prepare(tmp_path)
    keys = dict(item.split("=", 1) for item in settings)
    assert keys["aclEnable"] == "true" and Path(keys["aclFile"]).is_file()
    assert keys["tls.server.mode"] == "enforcing" and keys["tls.enable"] == "true"
    assert env[ACCESS_KEY_ENV] == keys["accessKey"] and env[SECRET_KEY_ENV] == keys["secretKey"]
    assert env[TLS_ENV] == "true"
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(keys["tls.server.certPath"], keys["tls.server.keyPath"])

    async def handshake() -> str:  # the certificate checks against the CA, for 127.0.0.1
        listening = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0,
                                               ssl=server)
        port = listening.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ssl.create_default_context(cafile=env[TLS_CA_ENV]))
        version = str(writer.get_extra_info("ssl_object").version())
        writer.close()
        listening.close()
        await listening.wait_closed()
        return version

    assert asyncio.run(handshake()).startswith("TLS")
    assert BenchSecurity().prepare(tmp_path) == ([], {})


@pytest.mark.slow
def test_latency_end_to_end(shared_bench: Bench) -> None:
    data = shared_bench("latency", "--rate", "200", "--duration", "1.5", "--warmup", "0.5")
    summary = data["summary"]
    assert summary["sent"] > 0 and summary["received"] > 0 and summary["send_errors"] == 0
    assert 0 < summary["p50_ms"] < 1000
    assert summary["ack"]["p99_ms"] is not None


@pytest.mark.slow
def test_latency_in_batches(shared_bench: Bench) -> None:
    t0 = time.monotonic()
    data = shared_bench("latency", "--rate", "1000", "--batch", "50", "--duration", "1.5",
                        "--warmup", "0")
    elapsed = time.monotonic() - t0
    summary = data["summary"]
    assert data["config"]["batch"] == 50 and summary["send_errors"] == 0
    # every send carried 50 messages, and no more were offered than the rate allows
    assert summary["send_calls"] > 0 and summary["sent"] == 50 * summary["send_calls"]
    assert summary["sent"] + summary["skipped_over_in_flight"] <= 1000 * elapsed
    # the consumer read them as columns: each one's latency from its batch's stamp
    assert 0 < summary["received"] <= summary["sent"]
    assert 0 < summary["p50_ms"] <= summary["p99_ms"] < 60_000


@pytest.mark.slow
def test_latency_without_a_consumer_counts_acknowledged_sends(tmp_path: Path) -> None:
    data = bench(tmp_path, "latency", "--rate", "1000", "--batch", "10", "--duration", "1.5",
                 "--warmup", "0", "--no-receive", "--replica", "sync")
    summary = data["summary"]
    assert data["config"]["receive"] is False and "received" not in summary
    assert summary["send_errors"] == 0, summary["send_last_error"]
    # the rows count what the SYNC_MASTER acknowledged (its replica held it), by batches
    assert 0 < summary["msgs"] <= summary["sent"] and summary["msgs"] % 10 == 0
    assert summary["replica_cpu_us_per_msg"] is not None
    assert summary["replication_lag"]["samples"] >= 10


@pytest.mark.slow
def test_produce_auto_batched_sync_flush(tmp_path: Path) -> None:
    data = bench(tmp_path, "produce", "--duration", "1", "--warmup", "0", "--in-flight", "16",
                 "--linger-ms", "0", "--max-batch", "4", "--flush", "SYNC_FLUSH")
    assert data["config"]["linger_ms"] == 0 and data["config"]["max_batch"] == 4
    summary = data["summary"]
    assert summary["errors"] == 0, summary["last_error"]
    assert summary["msgs"] > 0 and summary["p50_ms"] > 0  # one latency per message


@pytest.mark.slow
def test_produce_api_batches_up_to_the_cap(shared_bench: Bench) -> None:
    """``--produce``: one produce() call per message, shipped in batches of at most
    ``--max-batch``; the summary says how many messages each request carried."""
    data = shared_bench("produce", "--duration", "1", "--warmup", "0", "--in-flight", "64",
                        "--linger-ms", "5", "--produce", "--max-batch", "4")
    summary = data["summary"]
    assert summary["errors"] == 0, summary["last_error"]
    assert summary["msgs"] > 0 and summary["p50_ms"] > 0
    assert summary["shipped_requests"] > 0
    assert 2 < summary["shipped_messages_per_request"] <= 4


@pytest.mark.slow
def test_produce_api_window_larger_than_the_default_buffer(shared_bench: Bench) -> None:
    """10,000 outstanding messages of 4 KiB are more than an auto-batcher buffers by
    default (32 MiB): the bench gives its batchers room for its window."""
    data = shared_bench("produce", "--duration", "2", "--warmup", "1", "--in-flight",
                        "10000", "--size", "4096", "--linger-ms", "0", "--produce")
    summary = data["summary"]
    assert summary["errors"] == 0, summary["last_error"]
    assert summary["msgs"] > 0  # still producing after the first second


@pytest.mark.slow
def test_latency_auto_batched(shared_bench: Bench) -> None:
    data = shared_bench("latency", "--rate", "500", "--duration", "1.5", "--warmup", "0.5",
                        "--linger-ms", "1")
    summary = data["summary"]
    assert summary["sent"] > 0 and summary["received"] > 0 and summary["send_errors"] == 0
    assert summary["ack"]["p99_ms"] is not None
    # the requests each side made: the auto-batcher's sends and the consumer's pulls
    assert 0 < summary["shipped_requests"] <= summary["sent"]
    assert summary["pull_requests"] > 0 and summary["pull_messages_per_request"] > 0
    # how late the pacer released what was due: at least 0, at most the whole run
    assert 0 <= summary["pacer_late_p99_ms"] <= summary["pacer_late_max_ms"] < 2000


@pytest.mark.slow
def test_a_broker_that_does_not_start_is_one_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", "produce", "--duration", "1", "--data-dir",
                                 str(tmp_path), "--broker-set", "mappedFileSizeCommitLog=10"])
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "exited" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ThreadedCluster]:
    running = ThreadedCluster(tmp_path / "cluster", brokers=1).start()
    try:
        yield running
    finally:
        running.stop()


def test_produce_against_a_running_cluster(cluster: ThreadedCluster, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["bench", "produce", "-n", cluster.namesrv, "--duration", "1",
                                 "--warmup", "0", "--in-flight", "4", "--topic", "Existing",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    summary = data["summary"]
    assert summary["msgs"] > 0
    assert cluster.cluster.brokers[0].topics.get("Existing") is not None
    # The broker listens in this process (a thread's loop): its CPU is read from here.
    assert summary["broker_cpu"].startswith(f"process {os.getpid()}, listening on ")
    assert summary["broker_cpu_pct"] is not None and summary["broker_cpu_pct"] > 0
    assert summary["broker_cpu_us_per_msg"] > 0
    assert "broker process" in result.output


def test_produce_against_two_masters_says_why_there_is_no_broker_cpu(tmp_path: Path) -> None:
    running = ThreadedCluster(tmp_path / "cluster", brokers=2).start()
    try:
        out = tmp_path / "result.json"
        result = runner.invoke(app, ["bench", "produce", "-n", running.namesrv,
                                     "--duration", "1", "--warmup", "0", "--in-flight", "4",
                                     "--json", str(out)])
    finally:
        running.stop()
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())["summary"]
    assert summary["broker_cpu_pct"] is None
    assert summary["broker_cpu"].startswith("not measured: the topic's route names 2 masters")
    assert "not measured" in result.output


def test_sampler_counts_a_replica_process_cpu_per_message() -> None:
    meter = Meter()
    sampler = Sampler(meter, None, os.getpid())  # this process stands in for the replica
    spin = time.process_time() + 0.05
    while time.process_time() < spin:
        pass
    meter.count = 1000
    row = sampler.tick()
    summary = sampler.summary(warmup=0.0)
    assert row["replica_cpu_pct"] is not None and row["replica_cpu_pct"] > 0
    assert summary["replica_cpu_us_per_msg"] >= 0.05 / 1000 * 1e6 * 0.5
    assert Sampler(meter, None).tick()["replica_cpu_pct"] is None
