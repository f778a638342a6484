"""A name server killed (kill -9) and restarted under a running consumer group, with the
name server and two brokers as separate processes: the brokers register again at once
(their periodic registration is far off), the routes are whole again within seconds, and
no message is lost or delivered twice."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    PushOptions,
)
from tidemq.client.topic_route import read_route_response, route_request
from tidemq.errors import TideMQError
from tidemq.net import RemotingClient
from tidemq.net.ports import free_port as _free_port

TIDEMQ = str(Path(sys.executable).parent / "tidemq")
TOPIC = "NsRestart"
GROUP = "ns-restart"
SENT = 600
#: Far longer than the test: only re-registering on reconnection can bring routes back.
PERIOD_MS = 600_000

pytestmark = pytest.mark.timeout(240)




@dataclasses.dataclass
class Processes:
    root: Path
    ns_port: int
    procs: dict[str, subprocess.Popen[bytes]] = dataclasses.field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def start(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen([TIDEMQ, *args, "--log-level", "INFO"],
                                            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def start_namesrv(self) -> None:
        self.start("namesrv", "namesrv", "--set", f"listenPort={self.ns_port}",
                   "--set", "bindAddress=127.0.0.1")

    def start_broker(self, name: str) -> None:
        self.start(name, "broker", "--set", f"brokerName={name}",
                   "--set", "listenPort=0", "--set", f"namesrvAddr={self.namesrv}",
                   "--set", f"storePathRootDir={self.root / name}",
                   "--set", "mappedFileSizeCommitLog=16777216",
                   "--set", f"registerNameServerPeriod={PERIOD_MS}")

    def kill9(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path, _free_port())
    try:
        yield procs
    finally:
        procs.stop_all()


async def _brokers_in_route(client: RemotingClient, namesrv: str, topic: str) -> set[str]:
    """The broker names of ``topic``'s route at ``namesrv`` (empty when it has none or
    cannot be reached)."""
    try:
        resp = await client.request(namesrv, route_request(topic), timeout=2.0)
        return {q.broker_name for q in read_route_response(resp, address=namesrv).queue_datas}
    except TideMQError:
        return set()


async def _until_route(client: RemotingClient, procs: Processes, topic: str,
                       timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while await _brokers_in_route(client, procs.namesrv, topic) != {"broker-a",
                                                                         "broker-b"}:
            await asyncio.sleep(0.05)  # another process: nothing to wait on but its answers


@contextlib.asynccontextmanager
async def _members(cfg: ClientConfig, received: Counter[bytes], arrived: asyncio.Event
                   ) -> AsyncIterator[list[PushConsumer]]:
    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        received.update(m.body for m in msgs)
        arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    options = PushOptions(rebalance_interval=1.0, persist_consumer_offset_interval=0.2)
    members = [PushConsumer(GROUP, config=dataclasses.replace(cfg, instance_name=name),
                            listener=listener, options=options,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
               for name in ("c1", "c2")]
    for member in members:
        member.subscribe(TOPIC)
        await member.start()
    try:
        yield members
    finally:
        for member in members:
            await member.close()


def _split(members: list[PushConsumer], queues: int) -> bool:
    """Whether ``members`` own ``queues`` queues between them, each exactly once and each
    member its even share: a member alone owns them all for a moment before the others'
    first rebalance."""
    owned = [mq for member in members for mq in member.assignment()]
    share = queues // len(members)
    return (len(owned) == len(set(owned)) == queues
            and all(len(member.assignment()) == share for member in members))


async def _rebalance_runs(members: list[PushConsumer], more: int) -> None:
    """Until every member has run ``more`` more rebalance rounds (each reads the routes)."""
    target = [m.rebalance_stats.runs + more for m in members]
    while any(m.rebalance_stats.runs < t for m, t in zip(members, target, strict=True)):
        await asyncio.sleep(0.05)  # no client-side event for a finished round


async def test_a_name_server_restart_loses_and_repeats_nothing(processes: Processes) -> None:
    procs = processes
    procs.start_namesrv()
    procs.start_broker("broker-a")
    procs.start_broker("broker-b")
    cfg = ClientConfig(namesrv_addr=(procs.namesrv,), poll_name_server_interval=0.5,
                       heartbeat_broker_interval=1.0, long_polling_timeout=1.0,
                       pull_error_backoff=0.1)
    received: Counter[bytes] = Counter()
    arrived = asyncio.Event()
    async with RemotingClient() as probe:
        try:
            await _until_route(probe, procs, "TBW102", 60)
        except TimeoutError:
            pytest.fail("the servers did not start:\n" + procs.logs())
        async with AdminClient(config=cfg) as admin:
            await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        await _until_route(probe, procs, TOPIC, 30)
        async with _members(cfg, received, arrived) as members, \
                Producer("ns-restart-producer", config=cfg) as producer:
            async with asyncio.timeout(60):  # the group has split the 8 queues and the
                while not _split(members, 10):  # retry topic's one a broker: no client-side
                    await asyncio.sleep(0.05)  # event for it
            owned = [m.assignment() for m in members]
            rebalances = [m.rebalance_count for m in members]

            async def produce(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    await producer.send(Message(TOPIC, b"m%d" % i))
                    await asyncio.sleep(0.002)  # a steady stream across the restart

            await produce(0, SENT // 3)
            sending = asyncio.ensure_future(produce(SENT // 3, SENT))
            procs.kill9("namesrv")
            procs.start_namesrv()
            restarted = time.monotonic()
            await _until_route(probe, procs, TOPIC, 30)
            back_after = time.monotonic() - restarted
            await sending
            # The members refresh their routes every 0.5 s and rebalance every 1 s:
            # three rounds each with the restarted name server's routes.
            async with asyncio.timeout(60):
                await _rebalance_runs(members, 3)
            async with asyncio.timeout(60):
                while len(received) < SENT:
                    arrived.clear()
                    await arrived.wait()
            # No member ever gave a queue up or took one.
            assert [m.rebalance_count for m in members] == rebalances
            assert [m.assignment() for m in members] == owned
    assert back_after < PERIOD_MS / 1000 / 10
    assert set(received) == {b"m%d" % i for i in range(SENT)}  # nothing lost
    twice = sorted(body for body, n in received.items() if n > 1)
    assert twice == [], f"{len(twice)} messages delivered more than once"
