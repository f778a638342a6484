"""Where ``tidemq standalone``, ``tidemq namesrv``, ``tidemq broker`` and ``tidemq console``
listen: real processes, their listening sockets read from the kernel's socket table
(``/proc/net/tcp``), and the address the broker gives the name server.

Every port (remoting, metrics, console) follows ``--host`` / ``bindAddress`` and is on
127.0.0.1 when nothing is said. When this machine has an address beyond loopback, a
connection to it is also tried: refused for a loopback bind, accepted for 0.0.0.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.runner import CliRunner
from tests.cli.server_process import ServerProcess

from tidemq.cli.main import app
from tidemq.client import AdminClient
from tidemq.net.bind import machine_host
from tidemq.net.ports import free_port as _free_port

pytestmark = pytest.mark.timeout(120)

TIDEMQ = str(Path(sys.executable).parent / "tidemq")
READY_TIMEOUT = 60.0
EXPOSED = "reachable from other machines"




def _ipv4(hex_addr: str) -> str:
    return socket.inet_ntoa(bytes.fromhex(hex_addr)[::-1])


def _ipv6(hex_addr: str) -> str:
    raw = b"".join(bytes.fromhex(hex_addr[i:i + 8])[::-1] for i in range(0, 32, 8))
    return socket.inet_ntop(socket.AF_INET6, raw)


def listening(pid: int) -> dict[int, str]:
    """Port -> bound host of every TCP socket ``pid`` listens on, from the socket table."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found: dict[int, str] = {}
    for table, decode in (("/proc/net/tcp", _ipv4), ("/proc/net/tcp6", _ipv6)):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    host, port = local.split(":")
                    found[int(port, 16)] = decode(host)
    return found


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


class Server:
    """One ``tidemq`` process; its output is collected line by line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDEMQ_")},
               "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
        self.proc = subprocess.Popen([TIDEMQ, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, marker: str) -> None:
        """Until a line of output contains ``marker`` (the server prints it once ready)."""
        while True:
            try:
                line = self.lines.get(timeout=READY_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no {marker!r} within {READY_TIMEOUT}s:\n"
                                     + "".join(self.output)) from None
            if line is None:
                raise AssertionError(f"exited {self.proc.wait()} before {marker!r}:\n"
                                     + "".join(self.output))
            self.output.append(line)
            if marker in line:
                return

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.reader.join(30)  # the pipe is at its end once the process has exited
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    @property
    def text(self) -> str:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.output.append(line)
        return "".join(self.output)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in reversed(started):
            server.stop()


def _start(servers: list[Server], marker: str, *args: str,
           env: dict[str, str] | None = None) -> Server:
    server = Server(*args, "--log-level", "INFO", env=env)
    servers.append(server)
    server.wait_for(marker)
    return server


def broker_addresses(namesrv: str) -> list[str]:
    async def ask() -> list[str]:
        admin = AdminClient(namesrv)
        await admin.start()
        try:
            return [b.address for b in await admin.cluster_list()]
        finally:
            await admin.close()

    return asyncio.run(ask())


def _standalone(servers: list[Server], tmp_path: Path, *host: str) -> tuple[Server, dict[str, int]]:
    ports = {"namesrv": _free_port(), "metrics": _free_port()}
    server = _start(servers, "TideMQ standalone is running", "standalone",
                    "--data", str(tmp_path), "--namesrv-port", str(ports["namesrv"]),
                    "--broker-port", "0", "--console-port", "0", *host,
                    env={"TIDEMQ_METRICSPORT": str(ports["metrics"])})
    # the variable is the broker's: the name server does not take the port first
    assert "cannot serve metrics" not in server.text, server.text
    return server, ports


def test_standalone_listens_on_loopback_only_by_default(servers: list[Server],
                                                        tmp_path: Path) -> None:
    server, ports = _standalone(servers, tmp_path)
    bound = listening(server.proc.pid)
    # name server, broker, its HA port (replicas connect there), broker metrics, console:
    # five ports, every one on loopback
    assert len(bound) == 5, (bound, server.text)
    assert set(bound.values()) == {"127.0.0.1"}, bound
    assert bound.keys() >= {ports["namesrv"], ports["metrics"]}
    assert [a.rsplit(":", 1)[0] for a in
            broker_addresses(f"127.0.0.1:{ports['namesrv']}")] == ["127.0.0.1"]
    assert EXPOSED not in server.text


def test_the_command_standalone_suggests_works(servers: list[Server], tmp_path: Path) -> None:
    server, _ = _standalone(servers, tmp_path)
    (hint,) = [line for line in server.text.splitlines() if "try: tidemq admin" in line]
    args = shlex.split(hint.split("try: tidemq", 1)[1])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (hint, result.output)
    assert "SEND_OK" in result.output


def test_standalone_host_opens_every_port_and_says_so(servers: list[Server],
                                                      tmp_path: Path) -> None:
    server, ports = _standalone(servers, tmp_path, "--host", "0.0.0.0",
                                "--console-allow-anonymous")
    bound = listening(server.proc.pid)
    assert len(bound) == 5, (bound, server.text)
    assert set(bound.values()) == {"0.0.0.0"}, bound
    # a wildcard bind advertises this machine's address, which other machines can use
    advertised = broker_addresses(f"127.0.0.1:{ports['namesrv']}")
    assert [a.rsplit(":", 1)[0] for a in advertised] == [machine_host()]
    warnings = [line for line in server.text.splitlines() if EXPOSED in line]
    for what in ("the name server ", "the broker ", "the broker's HA port", "metrics endpoint",
                 "the web console"):
        assert any(what in line for line in warnings), (what, server.text)


def test_standalone_binds_one_given_address_and_advertises_it(servers: list[Server],
                                                              tmp_path: Path) -> None:
    server, ports = _standalone(servers, tmp_path, "--host", "127.0.0.2")
    bound = listening(server.proc.pid)
    assert len(bound) == 5, (bound, server.text)
    assert set(bound.values()) == {"127.0.0.2"}, bound
    # the broker and the console found the name server where it listens
    advertised = broker_addresses(f"127.0.0.2:{ports['namesrv']}")
    assert [a.rsplit(":", 1)[0] for a in advertised] == ["127.0.0.2"]
    assert not connects("127.0.0.1", ports["namesrv"])


@pytest.mark.parametrize("host", [None, "0.0.0.0"])
def test_cluster_servers_bind_where_told_and_loopback_by_default(
        servers: list[Server], tmp_path: Path, host: str | None) -> None:
    flag = [] if host is None else ["--host", host]
    expected = host or "127.0.0.1"
    ns_port, ns_metrics, broker_metrics = _free_port(), _free_port(), _free_port()
    ns = _start(servers, "name server listening on", "namesrv", *flag,
                "--set", f"listenPort={ns_port}", "--set", f"metricsPort={ns_metrics}")
    broker = _start(servers, "serving on", "broker", *flag,
                    "--set", "listenPort=0", "--set", f"metricsPort={broker_metrics}",
                    "--set", f"namesrvAddr=127.0.0.1:{ns_port}",
                    "--set", f"storePathRootDir={tmp_path / 'store'}")
    assert listening(ns.proc.pid) == {ns_port: expected, ns_metrics: expected}
    broker_bound = listening(broker.proc.pid)
    # remoting, HA (replicas connect there) and metrics
    assert len(broker_bound) == 3 and broker_bound[broker_metrics] == expected, broker_bound
    assert set(broker_bound.values()) == {expected}
    advertised = [a.rsplit(":", 1)[0] for a in broker_addresses(f"127.0.0.1:{ns_port}")]
    assert advertised == ["127.0.0.1" if host is None else machine_host()]
    assert (EXPOSED in ns.text) == (host is not None)
    assert (EXPOSED in broker.text) == (host is not None)


def test_metrics_bind_address_is_separate(servers: list[Server]) -> None:
    ns_port, metrics = _free_port(), _free_port()
    ns = _start(servers, "name server listening on", "namesrv", "--host", "0.0.0.0",
                "--set", f"listenPort={ns_port}", "--set", f"metricsPort={metrics}",
                "--set", "metricsBindAddress=127.0.0.1")
    assert listening(ns.proc.pid) == {ns_port: "0.0.0.0", metrics: "127.0.0.1"}


def test_console_host(servers: list[Server]) -> None:
    console = _start(servers, "TideMQ console on", "console", "--host", "127.0.0.2",
                     "--port", "0", "-n", "127.0.0.1:9")
    assert set(listening(console.proc.pid).values()) == {"127.0.0.2"}


def test_advertising_an_address_nobody_can_reach_is_refused(servers: list[Server],
                                                            tmp_path: Path) -> None:
    server = Server("broker", "--set", "brokerIP1=192.0.2.77",
                    "--set", f"storePathRootDir={tmp_path}")
    servers.append(server)
    server.wait_for("brokerIP1 192.0.2.77")
    assert server.proc.wait(60) == 1
    assert "bindAddress 127.0.0.1" in server.text, server.text
    assert "Traceback" not in server.text


def test_no_warning_for_a_server_that_checks_an_acl(servers: list[Server],
                                                    tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts: [{accessKey: admin, secretKey: '12345678', admin: true}]\n")
    ns_port, metrics = _free_port(), _free_port()
    ns = _start(servers, "name server listening on", "namesrv", "--host", "0.0.0.0",
                "--set", f"listenPort={ns_port}", "--set", f"metricsPort={metrics}",
                "--set", "aclEnable=true", "--set", f"aclFile={acl}")
    warnings = [line for line in ns.text.splitlines() if EXPOSED in line]
    # the ACL guards the remoting port, not the metrics endpoint
    assert len(warnings) == 1 and "metrics endpoint" in warnings[0], ns.text


def test_a_taken_ha_port_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A master's HA port defaults to listenPort + 1, which another program may hold: the
    broker stops with a sentence naming the key, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ServerProcess("broker", {"haListenPort": str(taken.getsockname()[1]),
                                          "storePathRootDir": str(tmp_path / "store")})
        with pytest.raises(AssertionError) as info:
            server.start()
    text = str(info.value)
    assert "the HA port cannot be bound" in text and "haListenPort" in text, text
    assert "Traceback" not in text, text
