"""``tidemq cluster`` as a real process: three name servers with embedded controllers and a
three-broker group come up, the group has a master and two in-sync replicas, the admin
commands read it (getSyncStateSet, getBrokerEpoch), a message goes through, and SIGTERM
stops every child."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.cli.runner import CliRunner

from tidemq.cli.main import app

runner = CliRunner()
#: The brokers' commit-log segments: small, as the test sends one message.
SEGMENT = 16 * 1024 * 1024
#: How long the SYNC_MASTER's send waits for a replica's copy: the default 3 s is short
#: for six servers starting on a busy machine, and the send would be answered
#: FLUSH_SLAVE_TIMEOUT (stored, copies not confirmed) instead of SEND_OK.
SLAVE_TIMEOUT_MS = 30_000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _below_ephemeral() -> int:
    """The first port the kernel hands out to outgoing connections: ports below it are
    not taken by another test's client sockets between the check and the bind."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bases() -> tuple[int, int, int]:
    """Name-server, Raft and broker port bases whose ranges are all free, below the
    ephemeral range."""
    rng = random.Random()
    top = max(_below_ephemeral(), 20200) - 100
    while True:
        base = rng.randrange(20000, top, 100)
        ns, raft, broker = base, base + 10, base + 40
        ports = [ns, ns + 1, ns + 2, raft, raft + 1, raft + 2,
                 *(broker + 10 * i + k for i in range(3) for k in (0, 1))]
        if all(_free(p) for p in ports):
            return ns, raft, broker


def admin(*args: str) -> Any:
    result = runner.invoke(app, ["admin", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def eventually(probe: Any, ok: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.2)


def test_cluster_runs_a_failover_group_and_stops_it(tmp_path: Path) -> None:
    ns, raft, broker = _bases()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from tidemq.cli.main import main; main()", "cluster",
         "--data", str(tmp_path), "--namesrv-port", str(ns), "--raft-port", str(raft),
         "--broker-port", str(broker), "--set", f"mappedFileSizeCommitLog={SEGMENT}",
         "--set", f"slaveTimeout={SLAVE_TIMEOUT_MS}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "COLUMNS": "80"})  # a narrow terminal, or none
    lines: list[str] = []
    running = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "cluster is running" in line:
                running.set()
        running.set()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        assert running.wait(180) and proc.poll() is None, "".join(lines)
        namesrvs = ";".join(f"127.0.0.1:{ns + i}" for i in range(3))
        # the commands it suggests are whole lines, to copy and paste, however narrow
        said = [line.strip() for line in lines]
        assert f"try: tidemq admin getSyncStateSet -a '{namesrvs}'" in said, said
        assert f"tidemq admin sendMessage -n '{namesrvs}' -t Hello -p hi" in said, said
        pids = [int(line.rsplit("pid", 1)[1]) for line in lines if " pid " in line]
        assert len(pids) == 6

        def group() -> Any:
            return admin("getSyncStateSet", "-a", namesrvs)["replicasInfoTable"]["broker-a"]

        g = eventually(group, lambda g: len(g["inSyncReplicas"]) == 3)
        # broker 1 is elected first; on a busy machine its lease may lapse while the six
        # processes start, and another takes over: any one of them, at its own address
        master = g["masterBrokerId"]
        assert g["masterAddress"] == f"127.0.0.1:{broker + 10 * (master - 1)}", g
        def histories(rows: list[Any]) -> list[list[int]]:
            return [[e["epoch"] for e in r["epochList"]] for r in rows]

        epochs = eventually(lambda: admin("getBrokerEpoch", "-b", "broker-a", "-n", namesrvs),
                            lambda rows: len(rows) == 3 and all(
                                h == histories(rows)[0] for h in histories(rows)))
        assert {r["brokerId"] for r in epochs} == {1, 2, 3}
        assert histories(epochs)[0][0] == 1  # one history, from the first election
        # the open epoch runs to the commit log's end (mqadmin's figure), not to 2^63-1
        assert all(r["epochList"][-1]["endOffset"] == r["maxOffset"] for r in epochs), epochs
        text = runner.invoke(app, ["admin", "getBrokerEpoch", "-b", "broker-a", "-n",
                                   namesrvs])
        assert text.exit_code == 0, text.output
        # mqadmin's: a blank line before each broker's lines
        assert text.stdout.startswith("\n") and text.stdout.endswith("}\n"), text.stdout
        blocks = text.stdout[1:-1].split("\n\n")
        assert len(blocks) == 3, text.stdout
        for block in blocks:
            head, entries = block.splitlines()[:4], block.splitlines()[4:]
            assert [line.split("\t")[0] for line in head] == [
                "#clusterName", "#brokerName", "#brokerAddr", "#brokerId"], block
            assert head[1] == "#brokerName\tbroker-a", block
            found = [re.fullmatch(r"#Epoch: EpochEntry\{epoch=(\d+), startOffset=(\d+), "
                                  r"endOffset=(\d+)\}", line) for line in entries]
            assert all(found) and [int(m[1]) for m in found if m] == histories(epochs)[0]
            assert "9223372036854775807" not in block
        sent = runner.invoke(app, ["admin", "sendMessage", "-n", namesrvs, "-t", "Hello",
                                   "-p", "hi", "--json"])
        assert sent.exit_code == 0, sent.output
        assert "SEND_OK" in sent.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        drainer.join(10)
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == 0, "".join(lines[-30:])
    for pid in pids:
        assert not _alive(pid), f"child {pid} still runs"
    assert (tmp_path / "logs" / "broker-1.log").read_text().count("serving on") >= 1
    # --set reached every broker: the master's segment, and its replicas' where they wrote
    segments = [path for broker_id in (1, 2, 3)
                for path in (tmp_path / f"broker-{broker_id}" / "commitlog").glob("0*")]
    assert tmp_path / "broker-1" / "commitlog" / f"{0:020d}" in segments
    assert {path.stat().st_size for path in segments} == {SEGMENT}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
