"""BlockingTransactionProducer against a real broker over TCP, called from plain threads:
a committed transaction is visible once, a rolled-back one never, an UNKNOWN one is
settled by the check-back; ``local_tx`` runs in the caller's thread and ``check`` on the
producer's check threads, never on its event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer

from tidemq.client import (
    BlockingTransactionProducer,
    ClientConfig,
    LocalTransactionState,
    Message,
    MessageExt,
)
from tidemq.client.transaction_producer import TransactionSendResult
from tidemq.testing import Cluster
from tidemq.types import SendStatus

COMMIT, ROLLBACK, UNKNOWN = (LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK,
                             LocalTransactionState.UNKNOWN)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"transaction_time_out": 300,
                                         "transaction_check_interval": 100,
                                         "transaction_check_max": 3}) as running:
        yield running


@pytest.fixture
async def peer(cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(cluster.brokers[0].broker_addr) as p, Peer(cluster.namesrv_addr) as ns:
        await p.ok(wire.create_topic("Orders", 1))
        await wire.eventually_route(ns, "Orders")
        yield p


class Threads:
    """Where the user code ran."""

    def __init__(self) -> None:
        self.local: list[str] = []
        self.checks: list[str] = []
        self.checked = threading.Event()

    def local_tx(self, state: LocalTransactionState) -> Callable[[Message],
                                                                 LocalTransactionState]:
        def run(msg: Message) -> LocalTransactionState:
            self.local.append(threading.current_thread().name)
            return state
        return run

    def check(self, msg: MessageExt) -> LocalTransactionState:
        self.checks.append(threading.current_thread().name)
        self.checked.set()
        return COMMIT if msg.body == b"unknown" else ROLLBACK


async def test_commit_rollback_and_a_check_back_from_plain_threads(cluster: Cluster,
                                                                    peer: Peer) -> None:
    seen = Threads()
    config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    tp = await asyncio.to_thread(BlockingTransactionProducer, "tx-pg", config=config,
                                 check=seen.check)
    try:
        def send_three() -> tuple[list[TransactionSendResult], str]:
            sent = [tp.send_in_transaction(Message("Orders", body), seen.local_tx(state))
                    for body, state in ((b"committed", COMMIT), (b"rolled", ROLLBACK),
                                        (b"unknown", UNKNOWN))]
            return sent, threading.current_thread().name

        sent, caller = await asyncio.to_thread(send_three)
        assert [s.state for s in sent] == [COMMIT, ROLLBACK, UNKNOWN]
        assert all(s.send_result.status is SendStatus.SEND_OK for s in sent)
        assert seen.local == [caller] * 3
        assert await asyncio.to_thread(seen.checked.wait, 20)
        half = cluster.brokers[0].ctx.transactions
        while len(half.table):  # the answer is oneway: no event reaches the test
            await asyncio.sleep(0.02)
    finally:
        await asyncio.to_thread(tp.close)
    assert seen.checks and all(n.startswith("tidemq-tx-check-") for n in seen.checks)
    await peer.ok(wire.send("Orders", b"marker"))
    got = await collect(peer, "Orders", 3)
    assert [m.body for m in got] == [b"committed", b"unknown", b"marker"]
    assert got[1].msg_id == sent[2].send_result.msg_id


async def test_a_closed_producer_refuses_and_close_is_idempotent(
        cluster: Cluster, peer: Peer) -> None:
    config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    tp = await asyncio.to_thread(BlockingTransactionProducer, "tx-pg", config=config,
                                 check=lambda m: COMMIT)
    await asyncio.to_thread(tp.close)
    await asyncio.to_thread(tp.close)
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.to_thread(tp.send_in_transaction, Message("Orders", b"late"),
                                lambda m: COMMIT)


async def test_close_from_inside_a_check_returns_without_waiting_for_that_check(
        cluster: Cluster, peer: Peer) -> None:
    """``check`` may close its own producer: the close unregisters the group and stops
    the loop, returns to the check (whose answer is no longer sent), and a later close
    from another thread waits for that check to end."""
    closed_inside: list[BaseException | None] = []
    check_ended = threading.Event()
    producers: list[BlockingTransactionProducer] = []

    def check(msg: MessageExt) -> LocalTransactionState:
        try:
            producers[0].close()
            closed_inside.append(None)
        except BaseException as exc:  # the outcome is what is tested
            closed_inside.append(exc)
        check_ended.set()
        return COMMIT

    config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    tp = await asyncio.to_thread(BlockingTransactionProducer, "tx-close-pg",
                                 config=config, check=check)
    producers.append(tp)
    try:
        sent = await asyncio.to_thread(tp.send_in_transaction, Message("Orders", b"open"),
                                       lambda m: UNKNOWN)
        assert sent.send_result.status is SendStatus.SEND_OK
        assert await asyncio.to_thread(check_ended.wait, 20)
        assert "tx-close-pg" not in cluster.brokers[0].ctx.producers.groups
    finally:
        await asyncio.to_thread(tp.close)
    assert closed_inside == [None]
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.to_thread(tp.send_in_transaction, Message("Orders", b"late"),
                                lambda m: COMMIT)
    assert not [t.name for t in threading.enumerate() if t.name.endswith("tx-close-pg")
                or "tx-close-pg_" in t.name]  # its loop and check threads ended


async def test_a_check_closing_while_another_thread_closes_does_not_wait_for_it(
        cluster: Cluster, peer: Peer) -> None:
    """Another thread closes the producer while a check runs, and the check closes it
    too: the check's close returns at once, the other one once the check has ended."""
    in_check = threading.Event()
    closed_inside: list[BaseException | None] = []
    producers: list[BlockingTransactionProducer] = []
    groups = cluster.brokers[0].ctx.producers.groups

    def check(msg: MessageExt) -> LocalTransactionState:
        in_check.set()
        deadline = time.monotonic() + 20
        while "tx-both-pg" in groups and time.monotonic() < deadline:
            time.sleep(0.01)  # the other close has begun: no event reaches this thread
        try:
            producers[0].close()
            closed_inside.append(None)
        except BaseException as exc:  # the outcome is what is tested
            closed_inside.append(exc)
        return COMMIT

    config = ClientConfig(namesrv_addr=(cluster.namesrv_addr,))
    tp = await asyncio.to_thread(BlockingTransactionProducer, "tx-both-pg",
                                 config=config, check=check)
    producers.append(tp)
    try:
        await asyncio.to_thread(tp.send_in_transaction, Message("Orders", b"open"),
                                lambda m: UNKNOWN)
        assert await asyncio.to_thread(in_check.wait, 20)
    finally:
        await asyncio.wait_for(asyncio.to_thread(tp.close), 30)
    assert closed_inside == [None]
    assert "tx-both-pg" not in groups
