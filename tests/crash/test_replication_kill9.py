"""A SYNC_MASTER and its replica as separate processes: the master is killed with
SIGKILL at random moments while a real client sends, and after every kill everything the
master acknowledged is read back from the replica -- exactly once, at the offset its
acknowledgement named, in its sender's order.

An acknowledgement (SEND_OK) from a SYNC_MASTER means the replica's commit log holds the
message; a send answered SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT (while the replica
reconnects to the restarted master) is stored but not acknowledged, and may or may not
be found. The number of kills is ``TIDEMQ_HA_KILLS`` (20 by default, 200 with
``TIDEMQ_SLOW=1``).

On loopback an ASYNC_MASTER's replica is rarely behind when the kill lands, so this test
alone would not tell the two apart; that a SYNC_MASTER answers only once the replica
holds the message is checked send by send in ``tests/broker/replication/test_group.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.codec.command import RequestCode
from tidemq.errors import ResponseCode, TideMQError
from tidemq.namesrv import NameServerApp
from tidemq.types import MessageQueue, SendStatus

from .broker_process import BrokerProcess, free_port
from .kill_round import KillRound
from .test_broker_kill9 import QUEUES, STORE, TOPIC, body_for, body_id, check

SLOW = os.environ.get("TIDEMQ_SLOW") == "1"
KILLS = int(os.environ.get("TIDEMQ_HA_KILLS", "200" if SLOW else "20"))
NOT_ACKED = (SendStatus.SLAVE_NOT_AVAILABLE, SendStatus.FLUSH_SLAVE_TIMEOUT)


class WarmBroker(BrokerProcess):
    """A :class:`BrokerProcess` whose next process is started ahead, importing TideMQ
    while the current one runs, and told to go when :meth:`start` is called: a restart
    after a kill then costs the broker's start, not the interpreter's imports."""

    _warm: subprocess.Popen[str] | None = None

    def prepare(self) -> None:
        args = [arg for key, value in self.settings.items()
                for arg in ("--set", f"{key}={value}")]
        self._warm = subprocess.Popen(
            [sys.executable, "-c", _WAIT_THEN_MAIN, "broker", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "COLUMNS": "400"})

    def start(self, timeout: float = 60) -> None:
        if self._warm is None:
            self.prepare()
        proc, self._warm = self._warm, None
        assert proc is not None and proc.stdin is not None and self.proc is None
        proc.stdin.write("go\n")
        proc.stdin.close()
        with self._printed:
            self.lines = []
            self._ended = False
        self.returncode = None
        self.proc = proc
        self._drainer = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._drainer.start()
        if self.wait_for(self.ready, timeout) is None:
            self.kill9()
            raise AssertionError("the broker did not start:\n" + self.log())

    def discard(self) -> None:
        proc, self._warm = self._warm, None
        if proc is not None:
            proc.kill()
            proc.wait(30)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


#: Imports what ``tidemq broker`` runs (the broker, its command), then waits for a line on
#: stdin before it starts.
_WAIT_THEN_MAIN = ("import sys, tidemq.broker.app, tidemq.cli.commands.server; "
                   "from tidemq.cli.main import main; sys.stdin.readline(); main()")


class Life(KillRound):
    """One life of the master: senders until the kill, what was acknowledged."""

    producer_group = "ha-crash-producer"

    def __init__(self, namesrv: str, ids: Iterator[int], rng: random.Random,
                 kill_after: int) -> None:
        super().__init__(ClientConfig(namesrv_addr=(namesrv,), retry_times_when_send_failed=0,
                                      send_msg_timeout=30.0, request_timeout=30.0),
                         ids, rng, kill_after, QUEUES)
        self.failures: list[str] = []

    async def sender(self, producer: Producer, queue_id: int) -> None:
        mq = MessageQueue(TOPIC, "broker-a", queue_id)
        while not self.killed:
            batch = [next(self.ids) for _ in range(self.rng.choice((1, 1, 2, 5)))]
            msgs = [Message(TOPIC, body_for(i)) for i in batch]
            try:
                if len(msgs) == 1:
                    result = await producer.send(msgs[0], queue=mq)
                else:
                    result = await producer.send_batch(msgs, queue=mq)
            except TideMQError as exc:
                if self.killed:
                    return  # the master is gone: this send is not acknowledged
                # not acknowledged either (a busy machine: a timeout, a route being
                # refreshed); what is checked is that every acknowledged send survives
                self.failures.append(repr(exc))
                assert len(self.failures) < 100, self.failures[-5:]
                await asyncio.sleep(0.05)
                continue
            if result.status in NOT_ACKED:
                await asyncio.sleep(0.02)  # the replica is reconnecting; not acknowledged
                continue
            assert result.status is SendStatus.SEND_OK, result
            self.acknowledged(queue_id, result, batch)


async def read_replica(addr: str, acked: dict[int, list[tuple[int, int]]]) -> dict[int, list[int]]:
    """Every queue of TOPIC from the replica, from offset 0 up to at least the highest
    acknowledged offset: held pulls wait for records the replica is still dispatching,
    and one that ends empty ends the queue (:func:`check` reports what is missing)."""
    out: dict[int, list[int]] = {}
    async with Peer(addr) as peer:
        for queue_id in range(QUEUES):
            want = max((o + 1 for o, _ in acked[queue_id]), default=0)
            ids: list[int] = []
            while True:
                end = await peer.max_offset(TOPIC, queue_id)
                if len(ids) >= max(end, want):
                    break
                resp = await peer(wire.pull(TOPIC, queue_id, len(ids), max_nums=64,
                                            sys_flag=wire.PULL_SUSPEND, suspend_ms=10_000),
                                  timeout=30)
                assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), (
                    resp.code, resp.remark)
                if resp.code != ResponseCode.SUCCESS:
                    break  # nothing arrived while the pull was held: what is missing is lost
                for m in wire.decode_messages(resp.full_body()):
                    assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, queue_id, len(ids))
                    assert m.body == body_for(body_id(m.body)), (queue_id, m.queue_offset)
                    ids.append(body_id(m.body))
            out[queue_id] = ids
    return out


async def topic_on(addr: str, topic: str = TOPIC) -> None:
    """Wait until the replica copied ``topic`` from its master (metadata sync)."""
    async with Peer(addr) as peer:
        for _ in range(300):
            resp = await peer(wire.request(RequestCode.GET_TOPIC_CONFIG, topic=topic))
            if resp.code == ResponseCode.SUCCESS:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"the replica never got {topic}")


async def started(master: BrokerProcess, replica: BrokerProcess, namesrv: str) -> None:
    """Both started, and the topic created on the master and known to the replica."""
    await asyncio.gather(asyncio.to_thread(master.start), asyncio.to_thread(replica.start))
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)
    await topic_on(replica.addr)


def master_and_replica(root: Path, namesrv: str, role: str, common: dict[str, str]
                       ) -> Iterator[tuple[WarmBroker, BrokerProcess]]:
    """A warm master (brokerRole ``role``) and its replica under ``root``, both with the
    ``common`` settings (and small commit-log segments unless those say otherwise); not
    started. Stopped and cleaned up afterwards."""
    common = {"mappedFileSizeCommitLog": SMALL_SEGMENT, **common}
    ha_port = free_port()
    master = WarmBroker(root / "master", namesrv, {
        **common, "brokerRole": role, "haListenPort": str(ha_port)})
    replica = BrokerProcess(root / "replica", namesrv, {
        **common, "brokerRole": "SLAVE", "brokerId": "1",
        "haMasterAddress": f"127.0.0.1:{ha_port}"})
    yield master, replica
    master.stop()
    master.discard()
    replica.stop()


@pytest.fixture
def group(tmp_path: Path, namesrv: NameServerApp) -> Iterator[tuple[WarmBroker, BrokerProcess]]:
    yield from master_and_replica(tmp_path, namesrv.address, "SYNC_MASTER", {
        **STORE, "flushIntervalCommitLog": "100", "slaveTimeout": "10000",
        "haSendHeartbeatInterval": "1000", "slaveMetadataSyncInterval": "300"})


@pytest.mark.timeout(900)
async def test_kill9_of_a_sync_master_loses_nothing_it_acknowledged(
        group: tuple[WarmBroker, BrokerProcess], namesrv: NameServerApp) -> None:
    master, replica = group
    rng = random.Random(20261128)
    await started(master, replica, namesrv.address)
    ids = itertools.count()
    acked: dict[int, list[tuple[int, int]]] = {q: [] for q in range(QUEUES)}
    for kill in range(KILLS):
        async with Peer(namesrv.address) as ns:
            await wire.eventually_route(ns, TOPIC, timeout=30)
        life = Life(namesrv.address, ids, rng, kill_after=rng.randint(10, 80))
        if kill + 1 < KILLS:
            master.prepare()  # the next life's interpreter imports while this one runs
        await life.run(master)
        for queue_id, pairs in life.acked.items():
            acked[queue_id] += pairs
        issued = next(ids)
        # the master recovers (same port, same store) while the replica is read
        restart = asyncio.create_task(asyncio.to_thread(
            master.start if kill + 1 < KILLS else lambda: None))
        stored = await read_replica(replica.addr, acked)
        try:
            check(stored, acked, issued)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- replica:\n{replica.log(200)}\n--- master:\n"
                                 f"{master.log(200)}") from None
        await restart
    total = sum(map(len, acked.values()))
    assert total >= 10 * KILLS
    assert replica.proc is not None and replica.proc.poll() is None, replica.log()
    print(f"{KILLS} kills, {total} acknowledged, each read back from the replica")
