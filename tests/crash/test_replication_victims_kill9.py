"""A SYNC_MASTER and its replica as separate processes; at random moments while a real
client sends, SIGKILL takes the master, the replica, or both at once. The killed ones are
started again on their stores, and everything the master acknowledged is read back from
the replica -- exactly once, at the offset its acknowledgement named, in its sender's
order.

A SYNC_MASTER's SEND_OK means the replica's commit log holds the message. A kill -9 of a
process leaves what it wrote in the page cache, so a replica killed in the middle of a
frame still holds every acknowledged message once restarted: its recovery cuts the half
record the frame left, and it asks its master for the rest from its last whole record.
Killed together, the two come back agreeing. The number of kills is ``TIDEMQ_HA_KILLS``,
as in ``test_replication_kill9``.
"""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.namesrv import NameServerApp

from .broker_process import BrokerProcess
from .test_broker_kill9 import QUEUES, TOPIC, check
from .test_replication_kill9 import KILLS, Life, WarmBroker, group, read_replica, started

__all__ = ["group"]  # fixture

VICTIMS = ("master", "replica", "both")


class Victims:
    """What one kill takes down: the processes are killed one right after the other."""

    def __init__(self, *brokers: BrokerProcess) -> None:
        self.brokers = brokers

    def kill9(self) -> None:
        for broker in self.brokers:
            broker.kill9()


@pytest.mark.timeout(900)
async def test_kill9_of_the_master_the_replica_or_both_loses_nothing_acknowledged(
        group: tuple[WarmBroker, BrokerProcess], namesrv: NameServerApp) -> None:
    master, replica = group
    rng = random.Random(20261201)
    await started(master, replica, namesrv.address)
    ids = itertools.count()
    acked: dict[int, list[tuple[int, int]]] = {q: [] for q in range(QUEUES)}
    seen = dict.fromkeys(VICTIMS, 0)
    for _ in range(KILLS):
        victim = rng.choice(VICTIMS)
        seen[victim] += 1
        killed = {"master": [master], "replica": [replica], "both": [master, replica]}[victim]
        async with Peer(namesrv.address) as ns:
            await wire.eventually_route(ns, TOPIC, timeout=30)
        life = Life(namesrv.address, ids, rng, kill_after=rng.randint(10, 80))
        if master in killed:
            master.prepare()  # its next interpreter imports while this life runs
        await life.run(Victims(*killed))  # type: ignore[arg-type]
        for queue_id, pairs in life.acked.items():
            acked[queue_id] += pairs
        issued = next(ids)
        restart = asyncio.create_task(asyncio.to_thread(
            master.start if master in killed else lambda: None))
        if replica in killed:
            await asyncio.to_thread(replica.start)
        stored = await read_replica(replica.addr, acked)
        try:
            check(stored, acked, issued)
        except AssertionError as exc:
            raise AssertionError(f"after a kill of the {victim}: {exc}\n--- replica:\n"
                                 f"{replica.log(200)}\n--- master:\n{master.log(200)}"
                                 ) from None
        await restart
    assert sum(map(len, acked.values())) >= 10 * KILLS
    assert all(seen.values()), seen
