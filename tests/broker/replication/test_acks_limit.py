"""SYNC_MASTER sends under a cap on what may be acknowledged (a master whose lease lapsed
acknowledges only what its sync-state set confirmed)."""

from __future__ import annotations

import asyncio

from tidemq.broker.replication.acks import (
    FLUSH_SLAVE_TIMEOUT,
    SUCCESS,
    AckPolicy,
    ReplicaAcks,
)


class Waits:
    def __init__(self, need: int) -> None:
        self.acked = [0]
        self.limit = 2**63 - 1
        self.wanted = 0
        self.answers: list[tuple[str, int]] = []
        self.acks = ReplicaAcks(AckPolicy(need), lambda: self.acked, lambda: 1,
                                lambda item, code: self.answers.append((item, code)),
                                timeout=0.05, limit=lambda: self.limit, want=self.want)

    def want(self) -> None:
        self.wanted += 1


async def test_a_send_beyond_the_cap_waits_though_its_copies_are_there() -> None:
    w = Waits(need=2)
    w.acked = [1000]
    w.limit = 100
    assert w.acks.wait(100, "a") == SUCCESS
    assert w.acks.wait(200, "b") is None and w.wanted == 1
    w.acks.on_report()
    assert w.answers == [] and w.wanted == 2  # still capped: asked again
    w.limit = 300
    w.acks.on_report()
    assert w.answers == [("b", SUCCESS)]


async def test_the_cap_holds_for_a_master_that_waits_for_no_replica() -> None:
    w = Waits(need=1)
    w.limit = 100
    assert w.acks.wait(50, "a") == SUCCESS
    assert w.acks.wait(150, "b") is None
    w.limit = 150
    w.acks.on_report()
    assert w.answers == [("b", SUCCESS)]


async def test_a_capped_send_times_out_as_one_without_copies() -> None:
    w = Waits(need=2)
    w.acked = [1000]
    w.limit = 0
    assert w.acks.wait(10, "a") is None
    while not w.answers:
        await asyncio.sleep(0.01)
    assert w.answers == [("a", FLUSH_SLAVE_TIMEOUT)]
