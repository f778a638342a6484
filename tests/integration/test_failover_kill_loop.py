"""kill -9 of the master at random moments, again and again, while ordered producers send
to two queues of a SYNC_MASTER group (20 kills; 200 with TIDEMQ_SLOW=1; TIDEMQ_KILLS=N
sets the count) and one push consumer of a clustering group reads them.

After each kill a replica of the sync-state set takes over and the producers go on by
themselves; the killed broker is started again and rejoins as a replica (cutting any
tail it alone had) before the next kill. At the end every acknowledged message is read
back from the master exactly once, and each queue holds its acknowledged messages in the
order they were acknowledged. Every send carries a body of its own, so a message that
was stored but not acknowledged (its copy unconfirmed when the master died) may appear,
but never in place of an acknowledged one.

The push consumer is started once, before the first kill, and never restarted nor called
while the masters die. After each failover a message acknowledged by the new master
reaches it within a bound, and at the end it has received every acknowledged message at
least once (a message may come twice: delivery is at least once).

Its committed offsets: before each kill the old master's offset of each queue is read;
the new master may start below it by the commits the old master answered after the
replica now elected last copied its consumer offsets (the window of
docs/replication.md: one ``slaveMetadataSyncInterval``, or however late that copy ran on
a busy machine), and by nothing once the consumer committed to it
(``persist_consumer_offset_interval``): each round carries the consumer's own position
of every queue it owns, which is past every offset it committed before. At the end each
queue's committed offset is the queue's max offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.failover_group import (
    GROUP,
    TOPIC,
    broker_group,
    eventually,
    has_topic,
    namesrvs,
    queue_offsets,
    read_queue,
)
from tests.integration.warm_broker import WarmBroker
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    PushOptions,
)
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.errors import TideMQError
from tidemq.types import MessageExt, MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

KILLS = int(os.environ.get("TIDEMQ_KILLS", "200" if os.environ.get("TIDEMQ_SLOW") == "1" else "20"))
QUEUES = 2
SEED = 20261128
CONSUMER = "loop-c"
#: How long a failover may keep an acknowledged message from the consumer, and its
#: committed offsets from coming back: generous, for a busy machine.
BOUND = 60.0
#: What each kill waits for is the controllers' timeout for the master: shorter than the
#: other failover tests', with heartbeats as often for it (the lease keeps the same
#: proportion). A lease that lapses without a kill, on a busy machine, is one failover
#: more that the loop's checks cover all the same.
TIMERS = {"controllerHeartBeatTimeoutMills": "1000", "brokerHeartbeatInterval": "200"}


@pytest.fixture
def brokers(namesrvs: list[ControllerProcess], tmp_path: Path) -> Iterator[list[WarmBroker]]:
    with broker_group(namesrvs, tmp_path, **TIMERS) as group:
        yield group


class Sender:
    """One ordered producer of one queue: the next send after the previous answer."""

    def __init__(self, producer: Producer, queue_id: int) -> None:
        self.producer = producer
        self.queue = MessageQueue(TOPIC, GROUP, queue_id)
        self.acked: list[bytes] = []
        self.sent = 0
        self.stop = False

    async def run(self) -> None:
        while not self.stop:
            self.sent += 1
            body = f"q{self.queue.queue_id}-{self.sent:07d}".encode()
            try:
                result = await self.producer.send(Message(TOPIC, body), queue=self.queue)
            except TideMQError:
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                self.acked.append(body)
            else:
                await asyncio.sleep(0.05)


class Receiver:
    """The push consumer's listener: every body it was handed, per queue."""

    def __init__(self) -> None:
        self.got: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        self.seen: set[bytes] = set()
        self.arrived = asyncio.Event()

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            self.got[m.queue_id].append(bytes(m.body))
            self.seen.add(bytes(m.body))
        self.arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    async def wait_for(self, bodies: list[bytes], timeout: float) -> None:
        """Until every one of ``bodies`` arrived; a TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while True:
                self.arrived.clear()
                if all(b in self.seen for b in bodies):
                    return
                await self.arrived.wait()

    @property
    def deliveries(self) -> int:
        return sum(len(v) for v in self.got.values())


@pytest.mark.timeout(3600)
async def test_repeated_kill9_of_the_master_loses_no_acknowledged_message(
        namesrvs: list[ControllerProcess], brokers: list[WarmBroker]) -> None:
    rng = random.Random(SEED)
    addrs = [c.addr for c in namesrvs]
    for b in brokers:
        b.start()
    for b in brokers:  # each restart's interpreter imports while the loop goes on
        b.prepare()
    config = ClientConfig(namesrv_addr=tuple(addrs), request_timeout=3.0)
    receiver = Receiver()
    consumer = PushConsumer(
        CONSUMER, listener=receiver, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        config=dataclasses.replace(config, instance_name="loop-consumer",
                                   pull_error_backoff=0.2, long_polling_timeout=5.0),
        options=PushOptions(persist_consumer_offset_interval=1.0))
    consumer.subscribe(TOPIC)
    senders: list[Sender] = []
    kills = 0
    step_back = 0  # the most a queue's committed offset went back across a failover

    def counts() -> str:
        acked = sum(len(s.acked) for s in senders)
        return (f"seed {SEED}, {kills} of {KILLS} kills, {acked} acknowledged, "
                f"{receiver.deliveries} delivered ({len(receiver.seen)} distinct, "
                f"{receiver.deliveries - len(receiver.seen)} duplicates), largest committed "
                f"offset step back {step_back}")

    async with AdminClient(config=config) as admin, Producer("loop", config=config) as p:
        controllers = ControllerAdmin(admin.instance.request, addrs)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        def settled(g: object) -> bool:  # a master and both replicas in sync
            return (g.master_broker_id is not None  # type: ignore[attr-defined]
                    and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]

        async def committed(address: str) -> list[int | None] | None:
            """The group's committed offset of each queue on ``address``."""
            read = [await queue_offsets(admin, address, CONSUMER, s.queue) for s in senders]
            return None if None in read else [r[0] for r in read]  # type: ignore[index]

        async def consumer_follows(address: str, before: list[int | None],
                                   first: list[bytes]) -> None:
            """The consumer is handed ``first`` (acknowledged by the new master at
            ``address``) and commits on it at least ``before`` again."""
            await receiver.wait_for(first, BOUND)
            await eventually(lambda: committed(address), lambda c: c is not None and all(
                (x or 0) >= (y or 0) for x, y in zip(c, before, strict=True)), timeout=BOUND)

        g = await eventually(group, settled, timeout=60)
        await admin.create_topic(TOPIC, broker_addr=g.master_address,  # type: ignore[attr-defined]
                                 read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        for b in brokers:
            if b.addr != g.master_address:  # type: ignore[attr-defined]
                await eventually(lambda r=b: has_topic(admin, r.addr), bool)
        senders += [Sender(p, q) for q in range(QUEUES)]
        await consumer.start()
        tasks = [asyncio.ensure_future(s.run()) for s in senders]
        failovers: list[float] = []
        try:
            try:
                while kills < KILLS:
                    try:
                        g = await eventually(group, settled, timeout=120)
                    except AssertionError:
                        for b in brokers:
                            print("=====", b.addr, "\n", b.log(60))
                        raise
                    epoch = g.master_epoch  # type: ignore[attr-defined]
                    master = next(b for b in brokers
                                  if b.addr == g.master_address)  # type: ignore[attr-defined]
                    await asyncio.sleep(rng.uniform(0.1, 1.0))  # the moment of the crash
                    offsets = await committed(master.addr)
                    before = [len(s.acked) for s in senders]
                    await asyncio.to_thread(master.kill9)
                    killed = time.monotonic()
                    g = await eventually(group, lambda g, e=epoch: (
                        g.master_epoch > e and g.master_broker_id is not None),  # type: ignore[attr-defined]
                        timeout=60)
                    new = g.master_address  # type: ignore[attr-defined]
                    elected = await eventually(lambda a=new: committed(a),
                                               lambda c: c is not None)
                    step_back = max([step_back] + [
                        (was or 0) - (is_ or 0)
                        for was, is_ in zip(offsets or [], elected, strict=False)])
                    await eventually(
                        lambda: asyncio.sleep(0, [len(s.acked) for s in senders]),
                        lambda n, b=before: all(x > y for x, y in zip(n, b, strict=True)),
                        timeout=60)
                    failovers.append(time.monotonic() - killed)
                    # acknowledged after the kill, so by the new master
                    first = [s.acked[n] for s, n in zip(senders, before, strict=True)]
                    await asyncio.gather(
                        asyncio.to_thread(master.start),  # rejoins as a replica
                        consumer_follows(new, offsets or [None] * QUEUES, first))
                    master.prepare()  # for its next restart
                    kills += 1
            finally:
                for s in senders:
                    s.stop = True
                await asyncio.gather(*tasks)
            g = await eventually(group, settled, timeout=120)
            for s in senders:
                got = await read_queue(admin, g.master_address, s.queue)  # type: ignore[attr-defined]
                assert len(set(got)) == len(got), f"a message of {s.queue} is stored twice"
                position = {body: i for i, body in enumerate(got)}
                missing = [b for b in s.acked if b not in position]
                assert not missing, f"{len(missing)} acknowledged messages of {s.queue} lost"
                order = [position[b] for b in s.acked]
                assert order == sorted(order), f"{s.queue} does not keep the acknowledged order"
            await receiver.wait_for([b for s in senders for b in s.acked], 2 * BOUND)
            tops = [await queue_offsets(admin, g.master_address, CONSUMER, s.queue)  # type: ignore[attr-defined]
                    for s in senders]
            ends = [t[1] for t in tops if t is not None]
            assert len(ends) == QUEUES, tops
            await eventually(lambda: committed(g.master_address),  # type: ignore[attr-defined]
                             lambda c: c == ends, timeout=BOUND)
        except BaseException:
            print(counts())
            raise
        finally:
            await consumer.close()
        print(f"{counts()}; kill to both queues acknowledged again: max {max(failovers):.2f} s")
