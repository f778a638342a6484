"""kill -9 during a logical-queue migration (issue #22): the admin process, the old leader,
the new leader or a bystander broker, killed right after each step (planned, sealed,
committed) is printed, under produce and consume load.

Three ``tidemq broker`` processes, the name server in-process, the admin command as its
own process. After each kill, with the killed broker restarted and before anyone runs the
command again, the brokers' own reconciliation must leave one mapping on all three, with
every logical queue writable; re-running the command then finishes the migration. At the
end every acknowledged send is consumed exactly once, in logical order, and a push
consumer of the topic never lost a queue to a rebalance.

The twelve (victim, step) pairs run on one cluster as twelve successive migrations of
LQ 0 (a -> b -> c -> a -> ...), so each broker plays old leader, new leader and bystander
several times.
``TIDEMQ_SLOW=1`` adds a soak of random victims and steps.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    ConsumeStatus,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.logical_admin import LogicalQueueAdmin, writable
from tidemq.client.rebalance import RebalancePlan
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError
from tidemq.formats.logical_mapping import TopicMapping
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.namesrv import NameServerApp
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue, SendResult

from .broker_process import BrokerProcess

TOPIC = "LQT"
N = 3
NAMES = ("broker-a", "broker-b", "broker-c")
STEPS = ("planned", "sealed", "committed")
VICTIMS = ("admin", "old", "new", "bystander")
SETTINGS = {"logicalSyncInterval": "300", "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
            "mappedFileSizeConsumeQueue": str(6000 * 20)}
QUEUES = [MessageQueue(TOPIC, LOGICAL_BROKER, i) for i in range(N)]


@pytest.fixture
def brokers(tmp_path: Path, namesrv: NameServerApp) -> Iterator[dict[str, BrokerProcess]]:
    procs = {name: BrokerProcess(tmp_path / name, namesrv.address,
                                 {**SETTINGS, "brokerName": name}) for name in NAMES}
    yield procs
    stopping = [threading.Thread(target=proc.stop) for proc in procs.values()]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join()


@dataclass
class Load:
    """Sends round robin over the LQs (a failed send is counted: a broker is down) and a
    pull consumer reading every LQ from 0; a push group that must never rebalance."""

    namesrv: str
    acked: dict[int, dict[int, bytes]] = field(default_factory=dict)
    consumed: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    failed: int = 0
    #: Bodies of the sends that failed: one cut off by a kill -9 may have been stored.
    unanswered: set[bytes] = field(default_factory=set)
    running: bool = True

    def config(self, name: str) -> ClientConfig:
        return ClientConfig(namesrv_addr=(self.namesrv,), instance_name=name,
                            poll_name_server_interval=1.0, retry_times_when_send_failed=0)

    async def produce(self) -> None:
        async with Producer("lq-kill-producer", config=self.config("p")) as producer:
            n = 0
            while self.running:
                lq, body = n % N, f"m{n}".encode()
                n += 1
                try:
                    res = await producer.send(Message(TOPIC, body), queue=QUEUES[lq])
                except TideMQError:
                    self.failed += 1
                    self.unanswered.add(body)
                    await asyncio.sleep(0.05)  # pacing while a broker is down
                    continue
                self.acknowledged(lq, res, body)
                await asyncio.sleep(0.005)  # pacing: a steady trickle, not a benchmark

    def acknowledged(self, lq: int, res: SendResult, body: bytes) -> None:
        assert res.queue.queue_id == lq
        assert res.queue_offset not in self.acked.setdefault(lq, {}), "offset twice"
        self.acked[lq][res.queue_offset] = body

    async def consume(self, stop: asyncio.Event) -> None:
        consumer = PullConsumer("lq-kill-reader", config=self.config("c"))
        await consumer.start()
        consumer.assign(QUEUES)
        for q in QUEUES:
            consumer.seek(q, 0)
        try:
            while not (stop.is_set() and self.caught_up()):
                for m in await consumer.poll(timeout=0.2):
                    self.consumed.setdefault(m.queue_id, []).append((m.queue_offset, m.body))
        finally:
            await consumer.close(commit=False)

    def caught_up(self) -> bool:
        got = {lq: {o for o, _ in v} for lq, v in self.consumed.items()}
        return all(set(offs) <= got.get(lq, set()) for lq, offs in self.acked.items())

    def check(self) -> None:
        for lq in range(N):
            got = self.consumed.get(lq, [])
            offsets = [o for o, _ in got]
            assert offsets == list(range(len(offsets))), f"LQ {lq}: a gap or a duplicate"
            assert self.acked.get(lq, {}).items() <= dict(got).items(), f"LQ {lq}: lost"


@dataclass
class Migration:
    target: str
    old: str
    bystander: str

    def broker_for(self, victim: str) -> str | None:
        return {"old": self.old, "new": self.target, "bystander": self.bystander}.get(victim)


PLAN = (Migration("broker-b", "broker-a", "broker-c"),
        Migration("broker-c", "broker-b", "broker-a"),
        Migration("broker-a", "broker-c", "broker-b"))


async def admin_process(namesrv: str, target: str, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from tidemq.cli.main import main; main()", "admin",
        "migrateLogicalQueue", "-n", namesrv, "-t", TOPIC, "-q", "0", "-b", target, *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "400", "PYTHONUNBUFFERED": "1"})


async def run_admin(namesrv: str, target: str, kill_at: str | None = None,
                    kill: Callable[[asyncio.subprocess.Process], Awaitable[None]] | None = None,
                    extra: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    """The migration command; ``kill`` runs when the line of step ``kill_at`` appears.
    Returns its exit status and output lines."""
    proc = await admin_process(namesrv, target, *extra)
    assert proc.stdout is not None
    lines: list[str] = []
    fired = False
    while line := await proc.stdout.readline():
        text = line.decode().strip()
        lines.append(text)
        if kill is not None and not fired and text.startswith(f"{kill_at}:"):
            fired = True
            await kill(proc)
    code = await proc.wait()
    assert kill is None or fired, f"step {kill_at} never printed:\n" + "\n".join(lines)
    return code, lines


async def copy_on(admin: AdminClient, addr: str) -> TopicMapping | None:
    try:
        resp = await admin._broker(addr, RemotingCommand.request(
            RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": TOPIC}))
    except TideMQError:
        return None
    return TopicMapping.from_json(json.loads(resp.full_body()))


async def one_mapping(admin: AdminClient, brokers: dict[str, BrokerProcess],
                      timeout: float = 60.0) -> TopicMapping:
    """Wait until every broker answers with the same copy: they reconcile on a timer, and
    there is no event to wait on from outside."""
    deadline = time.monotonic() + timeout
    while True:
        held = [await copy_on(admin, b.addr) for b in brokers.values()]
        first = held[0]
        if first is not None and all(h == first for h in held):
            return first
        assert time.monotonic() < deadline, f"the copies never converged: {held}"
        await asyncio.sleep(0.1)


async def start_all(brokers: dict[str, BrokerProcess]) -> None:
    await asyncio.gather(*(asyncio.to_thread(b.start) for b in brokers.values()))


async def run_matrix(namesrv: NameServerApp, brokers: dict[str, BrokerProcess],
                     kills: list[tuple[str, str]]) -> None:
    """Migrate LQ 0 round the brokers, one kill per migration: ``(victim, step)``."""
    await start_all(brokers)
    ns = namesrv.address
    async with AdminClient(ns) as admin:
        created = await LogicalQueueAdmin(admin).create(TOPIC, N, ["broker-a", "broker-b"])
        await one_mapping(admin, brokers)
        load = Load(ns)
        removed: list[int] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            return ConsumeStatus.CONSUME_SUCCESS

        push = PushConsumer("lq-kill-push", config=load.config("push"), listener=listener,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        push.subscribe(TOPIC)
        released: list[MessageQueue] = []  # queues of the topic a rebalance gave up
        apply_plan = push.apply_plan

        async def observed(plan: RebalancePlan) -> None:
            released.extend(q for q in plan.remove if q.topic == TOPIC)
            await apply_plan(plan)

        push.apply_plan = observed  # type: ignore[method-assign]
        await push.start()
        stop = asyncio.Event()
        producer = asyncio.ensure_future(load.produce())
        consumer = asyncio.ensure_future(load.consume(stop))
        try:
            await wait_for(lambda: owned(push) == QUEUES, 30)
            for i, (victim, step) in enumerate(kills):
                move = PLAN[i % len(PLAN)]
                name = move.broker_for(victim)

                async def kill(proc: asyncio.subprocess.Process, name: str | None = name
                               ) -> None:
                    if name is None:
                        proc.kill()  # the admin process itself
                    else:
                        await asyncio.to_thread(brokers[name].kill9)

                code, lines = await run_admin(ns, move.target, step, kill)
                assert code in (0, 1, -9), lines
                if name is not None:
                    await asyncio.to_thread(brokers[name].start)
                # No admin command yet: the brokers reconcile by themselves ...
                m = await one_mapping(admin, brokers)
                assert writable(m) == list(range(N)), f"{victim}@{step}: {m}"
                assert all(m.leader(lq) is not None for lq in range(N)), (victim, step, m)
                # ... and the command, run again, finishes the migration everywhere.
                code, lines = await run_admin(ns, move.target)
                assert code == 0, lines
                m = await one_mapping(admin, brokers, timeout=5)
                leader = m.leader(0)
                assert leader is not None and leader.broker == move.target, (victim, step, m)
                assert m.pending(0) is None
                assert m.created == created.created
                removed.append(len(released))
        finally:
            load.running = False
            await producer
            stop.set()
            try:
                await asyncio.wait_for(consumer, 90)
            finally:
                assignment = owned(push)
                await push.close()
        load.check()
        assert sum(map(len, load.acked.values())) > 30
        assert removed == [0] * len(kills) and assignment == QUEUES  # zero rebalances


def owned(push: PushConsumer) -> list[MessageQueue]:
    return sorted(q for q in push.assignment() if q.topic == TOPIC)


async def wait_for(holds: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(600)
async def test_kill9_at_every_step_of_a_migration_converges(
        namesrv: NameServerApp, brokers: dict[str, BrokerProcess]) -> None:
    """The twelve (victim, step) pairs on one cluster, twelve migrations in a row."""
    await run_matrix(namesrv, brokers, [(victim, step) for victim in VICTIMS
                                        for step in STEPS])


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(os.environ.get("TIDEMQ_SLOW") != "1", reason="set TIDEMQ_SLOW=1")
async def test_kill9_migration_soak(namesrv: NameServerApp,
                                    brokers: dict[str, BrokerProcess]) -> None:
    seed = int(time.time())
    rng = random.Random(seed)
    kills = [(rng.choice(VICTIMS), rng.choice(STEPS)) for _ in range(24)]
    print(f"seed {seed}: {kills}")
    await run_matrix(namesrv, brokers, kills)


@pytest.mark.timeout(300)
async def test_a_dead_leader_is_cut_out_and_converges_when_it_returns(
        namesrv: NameServerApp, brokers: dict[str, BrokerProcess]) -> None:
    """LQ 0 leads on broker-b; the gateway (broker-a) forwards every send to it. broker-b
    is killed with SIGKILL under load and stays down: without ``--force`` the migration to
    broker-c stops at the seal naming it; with ``--force`` the queue is cut at the end the
    gateway saw acknowledged and is writable again on broker-c while broker-b is still
    down. broker-b then returns, takes the cut mapping before it serves, and every
    acknowledged send of every LQ is consumed exactly once, in logical order."""
    await start_all(brokers)
    ns = namesrv.address
    async with AdminClient(ns) as admin:
        await LogicalQueueAdmin(admin).create(TOPIC, N, ["broker-b", "broker-c"])
        leader = (await one_mapping(admin, brokers)).leader(0)
        assert leader is not None and leader.broker == "broker-b"
        load = Load(ns)
        stop = asyncio.Event()
        producer = asyncio.ensure_future(load.produce())
        consumer = asyncio.ensure_future(load.consume(stop))
        try:
            await wait_for(lambda: len(load.acked.get(0, {})) >= 20, 60)
            await asyncio.to_thread(brokers["broker-b"].kill9)
            acked_before = set(load.acked.get(0, {}))

            code, lines = await run_admin(ns, "broker-c")
            assert code == 1 and "--force" in "\n".join(lines), lines
            code, lines = await run_admin(ns, "broker-c", extra=("--force", "--wait", "1"))
            assert code == 0, lines
            assert any("forced cut: broker-b unreachable" in line for line in lines), lines

            live = {n: b for n, b in brokers.items() if n != "broker-b"}
            m = await one_mapping(admin, live)
            old, new = m.queues[0][0], m.leader(0)
            assert old.forced and new is not None and new.broker == "broker-c"
            # The cut is where the gateway saw the last acknowledged send of LQ 0.
            assert new.logical_start == max(acked_before) + 1
            # Nothing else was acknowledged below the cut while broker-b was dead.
            assert {o for o in load.acked[0] if o <= max(acked_before)} == acked_before
            # Writable again with broker-b still down.
            await wait_for(lambda: len(load.acked[0]) > len(acked_before) + 10, 60)

            await asyncio.to_thread(brokers["broker-b"].start)
            after = await one_mapping(admin, brokers)
            assert after.queues[0] == m.queues[0]
        finally:
            load.running = False
            await producer
            stop.set()
            await asyncio.wait_for(consumer, 90)
        load.check()
        assert min(o for o in load.acked[0] if o not in acked_before) == max(acked_before) + 1


@dataclass
class LossyLoad(Load):
    """:class:`Load` whose producer keeps every acknowledgement, a logical offset given
    twice included: the loss window of a forced cut hands offsets out again."""

    #: (lq, offset, body, port of the broker that stored it)
    sends: list[tuple[int, int, bytes, int]] = field(default_factory=list)

    def acknowledged(self, lq: int, res: SendResult, body: bytes) -> None:
        port = decode_offset_msg_id(res.offset_msg_id)[0].port
        self.sends.append((lq, res.queue_offset, body, port))
        self.acked.setdefault(lq, {})[res.queue_offset] = body


@pytest.mark.timeout(300)
async def test_a_dead_gateway_leader_is_cut_where_its_peers_last_heard(
        namesrv: NameServerApp, brokers: dict[str, BrokerProcess]) -> None:
    """The documented loss window: LQ 0 leads on broker-a, which is also the gateway, so
    no other broker sees its sends; the others know its end only from their periodic
    syncs. After kill -9 and a forced cut, the queue is writable on broker-c; when
    broker-a returns it reports what it holds past the cut. Every message it
    acknowledged below the cut is consumed exactly once, in order. Those past the cut
    (at most about one sync interval of sends) are the loss window: their logical
    offsets are given to new messages on broker-c, so a reader that had read them before
    the kill may skip new ones at those offsets, or be moved back and read them; past
    the window nothing is lost."""
    await start_all(brokers)
    ns = namesrv.address
    async with AdminClient(ns) as admin:
        await LogicalQueueAdmin(admin).create(TOPIC, N, list(NAMES))
        await one_mapping(admin, brokers)
        load = LossyLoad(ns)
        stop = asyncio.Event()
        producer = asyncio.ensure_future(load.produce())
        consumer = asyncio.ensure_future(load.consume(stop))
        try:
            await wait_for(lambda: len(load.acked.get(0, {})) >= 20, 60)
            await asyncio.to_thread(brokers["broker-a"].kill9)
            code, lines = await run_admin(ns, "broker-c", extra=("--force", "--wait", "1"))
            assert code == 0, lines
            live = {n: b for n, b in brokers.items() if n != "broker-a"}
            m = await one_mapping(admin, live)
            new = m.leader(0)
            assert m.queues[0][0].forced and new is not None and new.broker == "broker-c"
            cut = new.logical_start
            by = {name: b.port for name, b in brokers.items()}
            before = {o: b for lq, o, b, port in load.sends if lq == 0 and port == by["broker-a"]}
            assert 0 < cut <= max(before) + 1  # the peers heard of its end on a sync
            sent = len(load.sends)
            await wait_for(lambda: any(lq == 0 for lq, *_ in load.sends[sent:]), 60)
            await asyncio.to_thread(brokers["broker-a"].start)
            after = await one_mapping(admin, brokers)
            assert after.queues[0] == m.queues[0]
        finally:
            load.running = False
            await producer
            stop.set()
            await asyncio.wait_for(consumer, 90)
    lost = {o: b for o, b in before.items() if o >= cut}
    got = load.consumed.get(0, [])
    later = {o: b for lq, o, b, port in load.sends if lq == 0 and port == by["broker-c"]}
    assert min(later) == cut
    below = [(o, b) for o, b in got if o < cut]  # exactly once, in order
    assert below == [(o, before[o]) for o in range(cut)]
    assert len({b for _, b in got}) == len(got)  # no message twice
    for o, b in got:  # past the cut: broker-a's lost message (read before the kill) or
        if o >= cut:  # broker-c's new one at that offset
            assert b in (lost.get(o), later.get(o)), (o, b)
    beyond = {(o, b) for o, b in later.items() if o > max(before)}
    assert beyond <= set(got)  # past the window nothing is lost
    if lost:
        assert any("past the cut" in line for line in brokers["broker-a"].lines), \
            brokers["broker-a"].log()
    for lq in (1, 2):  # the other queues lost nothing
        assert load.acked.get(lq, {}).items() <= dict(load.consumed.get(lq, [])).items()


@pytest.mark.timeout(300)
async def test_a_forced_cut_with_a_margin_loses_nothing_the_dead_gateway_acknowledged(
        namesrv: NameServerApp, brokers: dict[str, BrokerProcess]) -> None:
    """The same dead gateway leader, cut with ``--margin``: the offsets past its known
    end are reserved for what it acknowledged unseen. When it returns, every message it
    acknowledged is read from it, exactly once, and readers step over the unused
    offsets to broker-c's, which start past the margin: no logical offset is given
    twice."""
    await start_all(brokers)
    ns = namesrv.address
    async with AdminClient(ns) as admin:
        await LogicalQueueAdmin(admin).create(TOPIC, N, list(NAMES))
        await one_mapping(admin, brokers)
        load = LossyLoad(ns)
        stop = asyncio.Event()
        producer = asyncio.ensure_future(load.produce())
        consumer = asyncio.ensure_future(load.consume(stop))
        try:
            await wait_for(lambda: len(load.acked.get(0, {})) >= 20, 60)
            await asyncio.to_thread(brokers["broker-a"].kill9)
            code, lines = await run_admin(ns, "broker-c", extra=(
                "--force", "--wait", "1", "--margin", "1000"))
            assert code == 0, lines
            live = {n: b for n, b in brokers.items() if n != "broker-a"}
            m = await one_mapping(admin, live)
            new = m.leader(0)
            assert m.queues[0][0].forced and new is not None and new.broker == "broker-c"
            by = {name: b.port for name, b in brokers.items()}
            before = {o: b for lq, o, b, port in load.sends if lq == 0 and port == by["broker-a"]}
            assert new.logical_start > max(before) + 1  # the margin, past everything
            sent = len(load.sends)
            await wait_for(lambda: any(lq == 0 for lq, *_ in load.sends[sent:]), 60)
            await asyncio.to_thread(brokers["broker-a"].start)
            assert (await one_mapping(admin, brokers)).queues[0] == m.queues[0]
        finally:
            load.running = False
            await producer
            stop.set()
            await asyncio.wait_for(consumer, 90)
    offsets = [lq_o for lq_o, _ in load.consumed.get(0, [])]
    assert offsets == sorted(set(offsets))  # increasing: nothing read twice
    acked = {(o, b) for lq, o, b, _port in load.sends if lq == 0}
    got = set(load.consumed[0])
    assert acked <= got  # every acknowledged message, from both brokers
    # and nothing else but a send the kill cut off after broker-a stored it
    assert {b for _, b in got - acked} <= load.unanswered, got - acked
    for lq in (1, 2):
        assert load.acked.get(lq, {}).items() <= dict(load.consumed.get(lq, [])).items()
