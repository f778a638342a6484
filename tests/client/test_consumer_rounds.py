"""PullConsumer rounds against a real broker: once the broker reads shared-form pull
parents, the queues of a broker with a backlog are pulled by one round (one parent, one
task) instead of one task each. Every message still arrives exactly once and in order;
a queue sought mid-round, a failed parent, a broker that stops reading the form and a
close with rounds in flight each behave as they do with a task per queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.client import MessageQueue, PullConsumer
from tidemq.client.batch_rpc import batch_requester
from tidemq.codec.batch_protocol import CHILD_FORM_KEY, CHILD_FORMS_KEY, SHARED_FORM
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import RequestTimeout, ResponseCode
from tidemq.testing import Cluster

from .test_batch_rpc import QUEUES, config, fill, make_cluster, queues

PER_QUEUE = 40
BATCH = 4  # pulls per queue: PER_QUEUE / BATCH


@pytest.fixture
async def filled(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster whose every queue holds PER_QUEUE messages ``b"<queue>:<i>"``."""
    cluster = await make_cluster(tmp_path)
    try:
        await fill(cluster, PER_QUEUE)
        yield cluster
    finally:
        await cluster.stop()


async def consumer_of(cluster: Cluster) -> PullConsumer:
    consumer = PullConsumer("rounds", config=config(cluster, pull_batch_size=BATCH))
    await consumer.start()
    consumer.assign(queues(cluster))
    for mq in queues(cluster):
        consumer.seek(mq, 0)
    return consumer


def record_parents(consumer: PullConsumer, before: Any = None) -> list[RemotingCommand]:
    """The shared-form pull parents ``consumer`` sends, recorded; ``before(cmd)`` runs
    before each is sent, and may raise or return the response instead."""
    sent: list[RemotingCommand] = []
    inst = consumer.instance
    real = inst.request

    async def request(address: str, cmd: RemotingCommand, timeout: float | None = None
                      ) -> RemotingCommand:
        if (cmd.code == RequestCode.BATCH_REQUEST
                and cmd.ext_fields.get(CHILD_FORM_KEY) == SHARED_FORM):
            sent.append(cmd)
            answer = None if before is None else before(cmd)
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        return await real(address, cmd, timeout)

    inst.request = request  # type: ignore[method-assign]
    return sent


async def read_all(consumer: PullConsumer, want: int, *, columns: bool = False
                   ) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, body) per queue id, polled until ``want`` messages came."""
    got: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}
    count = 0
    async with asyncio.timeout(20):
        while count < want:
            if columns:
                for batch in await consumer.poll_batches(timeout=5.0):
                    rows = list(zip(batch.queue_offsets.tolist(), batch.bodies, strict=True))
                    got[batch.queue.queue_id] += rows
                    count += len(rows)
            else:
                for m in await consumer.poll(timeout=5.0):
                    got[m.queue_id].append((m.queue_offset, m.body))
                    count += 1
    return got


def expected(q: int, start: int = 0) -> list[tuple[int, bytes]]:
    return [(i, f"{q}:{i}".encode()) for i in range(start, PER_QUEUE)]


@pytest.mark.parametrize("columns", [False, True], ids=["poll", "poll_batches"])
async def test_queues_with_a_backlog_are_pulled_in_rounds_exactly_once_in_order(
        filled: Cluster, columns: bool) -> None:
    consumer = await consumer_of(filled)
    parents = record_parents(consumer)
    rounds: list[int] = []
    start = consumer._start_round

    def count(address: str, members: list[tuple[MessageQueue, int]], *, ahead: bool) -> None:
        rounds.append(len(members))
        start(address, members, ahead=ahead)

    consumer._start_round = count  # type: ignore[method-assign]
    try:
        got = await read_all(consumer, QUEUES * PER_QUEUE, columns=columns)
        for q in range(QUEUES):
            assert got[q] == expected(q)
        # The first pulls teach the consumer that the broker reads the form; from then on
        # every queue's backlog comes in rounds of all QUEUES queues, pulled ahead: one
        # parent and one task a round.
        assert len(rounds) >= PER_QUEUE // BATCH - 2 and set(rounds) == {QUEUES}
        assert len(parents) == len(rounds)
    finally:
        await consumer.close(commit=False)
    assert not consumer._rounds


async def test_a_queue_sought_during_its_round_continues_there_and_the_others_are_untouched(
        filled: Cluster) -> None:
    consumer = await consumer_of(filled)
    target = queues(filled)[2]
    sought = False

    def seek_once(_cmd: RemotingCommand) -> None:
        nonlocal sought
        if not sought:  # the round's parent is on its way: its slot for target is dropped
            sought = True
            consumer.seek(target, 30)

    parents = record_parents(consumer, seek_once)
    try:
        got: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}

        def done() -> bool:
            ends = [rows[-1][0] if rows else -1 for rows in got.values()]
            return sought and ends == [PER_QUEUE - 1] * QUEUES

        async with asyncio.timeout(20):
            while not done():
                for m in await consumer.poll(timeout=5.0):
                    got[m.queue_id].append((m.queue_offset, m.body))
        assert parents
        for q in range(QUEUES):
            if q != target.queue_id:
                assert got[q] == expected(q)
        # What came before the seek, then the queue from 30 on, nothing of the dropped pull.
        rows = got[target.queue_id]
        cut = next(i for i, (off, _) in enumerate(rows) if off == 30)
        assert rows[:cut] == expected(target.queue_id)[:cut]
        assert rows[cut:] == expected(target.queue_id, 30)
    finally:
        await consumer.close(commit=False)


async def test_a_failed_round_fails_each_of_its_queues_which_are_pulled_again(
        filled: Cluster) -> None:
    consumer = await consumer_of(filled)
    failures = 0

    def fail_twice(_cmd: RemotingCommand) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise RequestTimeout("127.0.0.1:0", RequestCode.BATCH_REQUEST, 0, 0.0)

    parents = record_parents(consumer, fail_twice)
    try:
        got = await read_all(consumer, QUEUES * PER_QUEUE)
        assert failures == 2 and len(parents) > 2
        for q in range(QUEUES):
            assert got[q] == expected(q)
    finally:
        await consumer.close(commit=False)


async def test_a_broker_that_stops_reading_the_shared_form_gets_the_round_one_by_one(
        filled: Cluster) -> None:
    consumer = await consumer_of(filled)
    addr = filled.brokers[0].broker_addr

    gone = False

    def refuse(cmd: RemotingCommand) -> RemotingCommand:
        # What a broker that no longer reads the form answers (restarted without it).
        nonlocal gone
        gone = True
        return cmd.response(ResponseCode.INVALID_PARAMETER, "childForm unknown")

    parents = record_parents(consumer, refuse)
    recorded = consumer.instance.request

    async def unadvertised(address: str, cmd: RemotingCommand, timeout: float | None = None
                           ) -> RemotingCommand:
        response = await recorded(address, cmd, timeout)
        if gone:
            response.ext_fields.pop(CHILD_FORMS_KEY, None)  # nor does it offer the form
        return response

    consumer.instance.request = unadvertised  # type: ignore[method-assign]
    try:
        got = await read_all(consumer, QUEUES * PER_QUEUE)
        for q in range(QUEUES):
            assert got[q] == expected(q)
        assert len(parents) == 1
        assert not batch_requester(consumer.instance).support.shares(addr)
    finally:
        await consumer.close(commit=False)


async def test_close_with_rounds_in_flight_settles_them(filled: Cluster) -> None:
    consumer = await consumer_of(filled)
    record_parents(consumer)
    while not consumer._rounds:
        assert await consumer.poll(timeout=5.0)
    rounds = list(consumer._rounds)
    await consumer.close(commit=False)
    assert all(r.done() for r in rounds) and not consumer._rounds
    assert all(s.task is None and s.next is None for s in consumer._states.values())
