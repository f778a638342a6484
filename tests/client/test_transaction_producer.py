"""TransactionProducer against a real broker over TCP: a committed transaction is
visible once, a rolled-back one never; UNKNOWN is settled by the broker's check-back as
the producer's ``check`` answers (COMMIT, ROLLBACK), or discarded after
``transactionCheckMax`` unanswered checks; with trace on, the end is an EndTransaction
record that the message's trace shows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer

from tidemq.client import (
    AdminClient,
    ClientConfig,
    LocalTransactionState,
    Message,
    MessageExt,
    TransactionProducer,
)
from tidemq.client.trace_view import MessageTrace, query_trace
from tidemq.codec.bodies import TopicRouteData
from tidemq.testing import Cluster
from tidemq.types import SendStatus

COMMIT, ROLLBACK, UNKNOWN = (LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK,
                             LocalTransactionState.UNKNOWN)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, broker={"transaction_time_out": 300,
                                         "transaction_check_interval": 100,
                                         "transaction_check_max": 3,
                                         "trace_topic_enable": True}) as running:
        yield running


@pytest.fixture
async def peer(cluster: Cluster) -> AsyncIterator[Peer]:
    """A connection to the broker, once topic Orders (one queue) is routed."""
    async with Peer(cluster.brokers[0].broker_addr) as p, Peer(cluster.namesrv_addr) as ns:
        await p.ok(wire.create_topic("Orders", 1))
        await wire.eventually_route(ns, "Orders")
        yield p


def _config(cluster: Cluster, **kw: object) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), **kw)  # type: ignore[arg-type]


class Checks:
    """A ``check`` callback answering ``answer`` and counting the check-backs."""

    def __init__(self, answer: LocalTransactionState) -> None:
        self.answer = answer
        self.seen: list[MessageExt] = []
        self.arrived = asyncio.Event()

    async def __call__(self, msg: MessageExt) -> LocalTransactionState:
        self.seen.append(msg)
        self.arrived.set()
        return self.answer


async def test_commit_is_visible_once_and_rollback_never(cluster: Cluster,
                                                         peer: Peer) -> None:
    checks = Checks(UNKNOWN)
    async with TransactionProducer("tx-pg", config=_config(cluster), check=checks) as tp:
        committed = await tp.send_in_transaction(
            Message("Orders", b"committed", {"KEYS": "o1"}), lambda m: COMMIT)
        rolled = await tp.send_in_transaction(Message("Orders", b"rolled"),
                                              lambda m: ROLLBACK)
    assert committed.state is COMMIT and rolled.state is ROLLBACK
    assert committed.send_result.status is SendStatus.SEND_OK
    [msg] = await collect(peer, "Orders", 1)
    assert (msg.body, msg.msg_id, msg.keys) == (b"committed", committed.send_result.msg_id,
                                                ["o1"])
    assert "TRAN_MSG" not in msg.properties
    await peer.ok(wire.send("Orders", b"marker"))
    got = await collect(peer, "Orders", 2)
    assert [m.body for m in got] == [b"committed", b"marker"]
    assert checks.seen == []
    assert len(cluster.brokers[0].ctx.transactions.table) == 0


@pytest.mark.parametrize(("answer", "visible"), [(COMMIT, True), (ROLLBACK, False)])
async def test_unknown_is_settled_by_the_check_back(cluster: Cluster, peer: Peer,
                                                    answer: LocalTransactionState,
                                                    visible: bool) -> None:
    checks = Checks(answer)

    async def local_tx(msg: Message) -> LocalTransactionState:
        return UNKNOWN

    async with TransactionProducer("tx-pg", config=_config(cluster), check=checks) as tp:
        sent = await tp.send_in_transaction(Message("Orders", b"pending"), local_tx)
        assert sent.state is UNKNOWN
        await asyncio.wait_for(checks.arrived.wait(), 20)
        [asked] = checks.seen[:1]
        assert (asked.topic, asked.body, asked.msg_id) == (
            "Orders", b"pending", sent.send_result.msg_id)
        half = cluster.brokers[0].ctx.transactions
        while len(half.table):  # the answer is oneway: no event reaches the test
            await asyncio.sleep(0.02)
    await peer.ok(wire.send("Orders", b"marker"))
    got = await collect(peer, "Orders", 2 if visible else 1)
    assert [m.body for m in got] == ([b"pending", b"marker"] if visible else [b"marker"])


async def test_a_local_transaction_that_raises_is_checked(cluster: Cluster,
                                                          peer: Peer) -> None:
    checks = Checks(COMMIT)

    def broken(msg: Message) -> LocalTransactionState:
        raise RuntimeError("database down")

    async with TransactionProducer("tx-pg", config=_config(cluster), check=checks) as tp:
        sent = await tp.send_in_transaction(Message("Orders", b"retried"), broken)
        assert sent.state is UNKNOWN
        [msg] = await collect(peer, "Orders", 1, timeout=20)
    assert msg.body == b"retried"


async def test_unanswered_transactions_are_discarded(cluster: Cluster, peer: Peer) -> None:
    checks = Checks(UNKNOWN)
    half = cluster.brokers[0].ctx.transactions
    async with TransactionProducer("tx-pg", config=_config(cluster), check=checks) as tp:
        await tp.send_in_transaction(Message("Orders", b"never"), lambda m: UNKNOWN)
        while half.discarded == 0:  # the checker's period: no event to wait on
            await asyncio.sleep(0.05)
    assert len(checks.seen) == 3  # transactionCheckMax
    assert len(half.table) == 0
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("Orders") == 0


async def _trace(cluster: Cluster, admin: AdminClient, msg_id: str) -> MessageTrace:
    await wire.dispatched(cluster.brokers[0])
    async with asyncio.timeout(10):
        while True:  # the key index is written a moment after dispatch
            trace = await query_trace(admin, msg_id)
            if trace.sends and len(trace.transactions) >= 2:
                return trace
            await asyncio.sleep(0.05)


async def test_the_transaction_end_is_traced(cluster: Cluster, peer: Peer) -> None:
    config = _config(cluster, enable_msg_trace=True)
    checks = Checks(COMMIT)
    async with AdminClient(config=config) as admin:
        async with TransactionProducer("tx-pg", config=config, check=checks) as tp:
            sent = await tp.send_in_transaction(Message("Orders", b"t", {"TAGS": "a"}),
                                                lambda m: UNKNOWN)
            await asyncio.wait_for(checks.arrived.wait(), 20)
            assert tp.tracer is not None
            while tp.tracer.queued or len(cluster.brokers[0].ctx.transactions.table):
                await asyncio.sleep(0.02)
            await tp.tracer.flush()
        trace = await _trace(cluster, admin, sent.send_result.msg_id)
    [pub] = trace.sends
    assert (pub.group, pub.topic, pub.success) == ("tx-pg", "Orders", True)
    first, answer = trace.transactions[:2]
    assert (first.group, first.state, first.from_check) == ("tx-pg", "UNKNOW", False)
    assert (answer.state, answer.from_check) == ("COMMIT_MESSAGE", True)
    assert first.transaction_id == sent.send_result.msg_id


def _masters(route: TopicRouteData) -> list[str]:
    return sorted(d.broker_name for d in route.broker_datas if 0 in d.broker_addrs)


async def test_sends_choose_a_group_again_after_a_refresh_once_its_master_is_back(
        tmp_path: Path) -> None:
    """broker-a's master stops; a send that tries it fails and fetches the route without
    it, between two periodic refreshes. broker-a's master comes back: the next periodic
    refresh fetches that route again, however recently it was fetched, and transactions
    go to broker-a again."""
    # a name server answers for its whole life as one that has heard from every broker
    async with Cluster(tmp_path, brokers=2, namesrv={"broker_rejoin_window": 0}) as cluster, \
            Peer(cluster.namesrv_addr) as ns:
        for broker in cluster.brokers:
            async with Peer(broker.broker_addr) as peer:
                await peer.ok(wire.create_topic("Orders", 1))
        await wire.eventually_route(ns, "Orders", lambda r: len(r.queue_datas) == 2)
        # the periodic refresh is the test's to run: its own timer is far off
        config = _config(cluster, poll_name_server_interval=3600.0)
        async with TransactionProducer("tx-back-pg", config=config,
                                       check=Checks(COMMIT)) as tp:

            async def brokers_chosen(sends: int) -> set[str]:
                return {(await tp.send_in_transaction(
                    Message("Orders", b"o"), lambda m: COMMIT)).send_result.queue.broker_name
                    for _ in range(sends)}

            assert await brokers_chosen(2) == {"broker-a", "broker-b"}
            await cluster.brokers[0].stop()
            await wire.eventually_route(ns, "Orders", lambda r: _masters(r) == ["broker-b"])
            assert await brokers_chosen(2) == {"broker-b"}  # one tried broker-a first
            route = tp.instance.routes.cached("Orders")
            assert route is not None and route.master_addresses.keys() == {"broker-b"}

            await cluster.restart_broker(0)
            await wire.eventually_route(ns, "Orders", lambda r: _masters(r) == [
                "broker-a", "broker-b"])
            await tp.instance.routes.refresh_all()  # the next periodic refresh
            assert await brokers_chosen(2) == {"broker-a", "broker-b"}
