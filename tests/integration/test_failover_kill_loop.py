"""kill -9 of the master at random moments, again and again, while ordered producers send
to two queues of a SYNC_MASTER group (20 kills; 200 with TIDEMQ_SLOW=1).

After each kill a replica of the sync-state set takes over and the producers go on by
themselves; the killed broker is started again and rejoins as a replica (cutting any
tail it alone had) before the next kill. At the end every acknowledged message is read
back from the master exactly once, and each queue holds its acknowledged messages in the
order they were acknowledged. Every send carries a body of its own, so a message that
was stored but not acknowledged (its copy unconfirmed when the master died) may appear,
but never in place of an acknowledged one.
"""

from __future__ import annotations

import asyncio
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
    read_queue,
)
from tests.integration.warm_broker import WarmBroker
from tests.namesrv.controller.processes import ControllerProcess

from tidemq.client import AdminClient, ClientConfig, Message, Producer
from tidemq.client.controller_admin import ControllerAdmin
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue, SendStatus

__all__ = ["namesrvs"]  # fixture

KILLS = int(os.environ.get("TIDEMQ_KILLS", "200" if os.environ.get("TIDEMQ_SLOW") == "1" else "20"))
QUEUES = 2
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


@pytest.mark.timeout(3600)
async def test_repeated_kill9_of_the_master_loses_no_acknowledged_message(
        namesrvs: list[ControllerProcess], brokers: list[WarmBroker]) -> None:
    rng = random.Random(20261128)
    addrs = [c.addr for c in namesrvs]
    for b in brokers:
        b.start()
    for b in brokers:  # each restart's interpreter imports while the loop goes on
        b.prepare()
    config = ClientConfig(namesrv_addr=tuple(addrs), request_timeout=3.0)
    async with AdminClient(config=config) as admin, Producer("loop", config=config) as p:
        controllers = ControllerAdmin(admin.instance.request, addrs)

        async def group() -> object:
            return (await controllers.sync_state_set([GROUP])).replicas_info_table[GROUP]

        def settled(g: object) -> bool:  # a master and both replicas in sync
            return (g.master_broker_id is not None  # type: ignore[attr-defined]
                    and len(g.in_sync_replicas) == 3)  # type: ignore[attr-defined]

        g = await eventually(group, settled, timeout=60)
        await admin.create_topic(TOPIC, broker_addr=g.master_address,  # type: ignore[attr-defined]
                                 read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        for b in brokers:
            if b.addr != g.master_address:  # type: ignore[attr-defined]
                await eventually(lambda r=b: has_topic(admin, r.addr), bool)
        senders = [Sender(p, q) for q in range(QUEUES)]
        tasks = [asyncio.ensure_future(s.run()) for s in senders]
        failovers: list[float] = []
        try:
            for _ in range(KILLS):
                try:
                    g = await eventually(group, settled, timeout=120)
                except AssertionError:
                    for b in brokers:
                        print("=====", b.addr, "\n", b.log(60))
                    raise
                epoch = g.master_epoch  # type: ignore[attr-defined]
                master = next(b for b in brokers
                              if b.addr == g.master_address)  # type: ignore[attr-defined]
                before = [len(s.acked) for s in senders]
                await asyncio.sleep(rng.uniform(0.1, 1.0))  # the moment of the crash
                await asyncio.to_thread(master.kill9)
                killed = time.monotonic()
                await eventually(group, lambda g, e=epoch: (
                    g.master_epoch > e and g.master_broker_id is not None),  # type: ignore[attr-defined]
                    timeout=60)
                await eventually(lambda: asyncio.sleep(0, [len(s.acked) for s in senders]),
                                 lambda n, b=before: all(x > y for x, y in zip(n, b, strict=True)),
                                 timeout=60)
                failovers.append(time.monotonic() - killed)
                await asyncio.to_thread(master.start)  # rejoins as a replica
                master.prepare()  # for its next restart
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
        print(f"{KILLS} kills, {sum(len(s.acked) for s in senders)} acknowledged; kill to "
              f"both queues acknowledged again: max {max(failovers):.2f} s")
