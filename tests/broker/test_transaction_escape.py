"""The replica acting for a stopped master (``slaveActingMaster``), in process, over real
TCP: a transaction checked ``transactionCheckMax`` times is dropped and counted in the
progress; one no other group can take stays held and holds the progress back; the
replica drops what it held when its master is listed again, and the master holds again
only what the replica had not ended. Its metrics count what it handed on, dropped and
failed to hand on, as it happens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.replication.test_group import caught_up
from tests.broker.wire import Peer
from tests.child_server import free_port

from tidemq.broker.app import BrokerApp
from tidemq.broker.half_queue import PROGRESS_GROUP
from tidemq.codec.command import RemotingCommand
from tidemq.codec.transaction import HALF_TOPIC
from tidemq.errors import ResponseCode, error_for_code
from tidemq.testing import Cluster

GROUP = "escape-pg"
#: The master checks nothing; its replica's passes run every 100 ms.
MASTER = {"slave_acting_master": True, "transaction_check_interval": 600_000,
          "transaction_time_out": 300, "transaction_check_max": 2}
REPLICA = {"transaction_check_interval": 100}


def prepared(body: bytes, **extra: str) -> RemotingCommand:
    return wire.send("Tx", body, group=GROUP, sys_flag=0x4, queue_id=0,
                     properties=wire.props(TRAN_MSG="true", PGROUP=GROUP, **extra))


def progress(broker: BrokerApp) -> int | None:
    return broker.ctx.offsets.query(PROGRESS_GROUP, HALF_TOPIC, 0)


async def test_the_acting_replica_drops_the_exhausted_and_holds_what_it_cannot_hand_on(
        tmp_path: Path) -> None:
    async with Cluster(tmp_path, broker=MASTER) as cluster:
        master = cluster.brokers[0]
        replica = await cluster.add_replica(master, **REPLICA)
        escape = replica.transaction_escape
        assert escape is not None
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Tx", 1))
            await peer.ok(prepared(b"checked-enough", TRANSACTION_CHECK_TIMES="2"))
            await peer.ok(prepared(b"nowhere-to-go"))
        await caught_up(master, replica)
        assert len(replica.ctx.transactions.table) == 0  # not acting: holds none
        await master.stop()  # unregistered: the replica acts for it

        while escape.discarded == 0:
            await asyncio.sleep(0.05)  # the checker's own period; no event to wait on
        passes = escape.passes
        while escape.passes < passes + 2:  # the second one was due and tried
            await asyncio.sleep(0.05)
        assert escape.escaped == 0  # no other group serves "Tx"
        [held] = replica.ctx.transactions.table
        assert held.offset == 1 and held.checks == 0
        assert progress(replica) == 1  # past the dropped one, not past the held one

        back = await cluster.restart_broker(0)  # takes the progress back
        assert [m.offset for m in back.ctx.transactions.table] == [1]
        while len(replica.ctx.transactions.table) != 0:  # no longer acting
            await asyncio.sleep(0.05)


async def test_a_replica_acting_again_reads_what_arrived_meanwhile(tmp_path: Path) -> None:
    """The replica acted once (its master was not listed yet, say), its master came and
    went between two of its passes: the next pass reads the transactions that arrived."""
    async with Cluster(tmp_path, broker={**MASTER, "ha_listen_port": free_port()}) as cluster:
        replica = await cluster.add_replica(cluster.brokers[0],
                                            transaction_check_interval=600_000)
        escape = replica.transaction_escape
        assert escape is not None
        await cluster.brokers[0].stop()
        assert await escape.run_pass() == 0  # acting, nothing held
        master = await cluster.restart_broker(0)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Tx", 1))
            await peer.ok(prepared(b"checked-enough", TRANSACTION_CHECK_TIMES="2"))
        answered_ms = replica.store.clock()  # the transaction was stored before this
        await caught_up(master, replica)
        await master.stop()
        # The pass hands on only what is transactionTimeOut old: a time to let pass.
        wait_ms = answered_ms + MASTER["transaction_time_out"] - replica.store.clock()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000 + 0.002)
        await escape.run_pass()  # acting again, without a pass in between
        assert escape.discarded == 1 and len(replica.ctx.transactions.table) == 0
        assert progress(replica) == 1


class Scrape:
    """The acting replica's hand-over counters, as its /metrics would serve them."""

    def __init__(self, broker: BrokerApp) -> None:
        self.registry = broker.metrics.registry

    def __call__(self) -> dict[str, float | None]:
        get = self.registry.get_sample_value
        out = {"handed_on": get("tidemq_broker_transactions_handed_on_total"),
               "check_max": get("tidemq_broker_transactions_dropped_total",
                                {"reason": "check_max"})}
        for reason in ("unreadable", "no_master", "refused"):
            out[reason] = get("tidemq_broker_transactions_handover_failures_total",
                              {"reason": reason})
        return out


async def test_the_hand_over_counters_move_as_it_happens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Cluster(tmp_path, broker=MASTER) as cluster:
        master = cluster.brokers[0]
        replica = await cluster.add_replica(master, transaction_check_interval=600_000)
        escape = replica.transaction_escape
        assert escape is not None
        scrape = Scrape(replica)
        zero = {"handed_on": 0, "check_max": 0, "unreadable": 0, "no_master": 0,
                "refused": 0}
        assert scrape() == zero  # every series is there from the start
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Tx", 1))
            await peer.ok(prepared(b"checked-enough", TRANSACTION_CHECK_TIMES="2"))
            await peer.ok(prepared(b"open"))
        await caught_up(master, replica)
        await master.stop()  # unregistered: the replica acts for it

        while escape.failures["no_master"] == 0:  # both due; no other group serves "Tx"
            await escape.run_pass()
            await asyncio.sleep(0.05)  # until they are due; no event to wait on
        assert scrape() == {**zero, "check_max": 1, "no_master": 1}
        await escape.run_pass()  # the held one is tried again
        assert scrape() == {**zero, "check_max": 1, "no_master": 2}

        def unreadable(msg: object) -> None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR, "cannot be read")

        with monkeypatch.context() as patch:  # a damaged half message (fault injected)
            patch.setattr(replica.ctx.transactions, "escape_copy", unreadable)
            await escape.run_pass()
        assert scrape() == {**zero, "check_max": 1, "no_master": 2, "unreadable": 1}

        # broker-b serves "Tx" but refuses prepared sends
        refusing = await cluster.add_broker(1, reject_transaction_message=True)
        await routed_on(cluster, refusing)
        await escape.run_pass()
        assert scrape() == {**zero, "check_max": 1, "no_master": 2, "unreadable": 1,
                            "refused": 1}
        await refusing.stop()

        taking = await cluster.add_broker(2)  # broker-c takes it
        await routed_on(cluster, taking)
        assert await escape.run_pass() == 1
        assert scrape() == {"handed_on": 1, "check_max": 1, "no_master": 2,
                            "unreadable": 1, "refused": 1}
        assert len(replica.ctx.transactions.table) == 0


async def routed_on(cluster: Cluster, broker: BrokerApp) -> None:
    """Topic "Tx" created on ``broker``, and the route lists it as the only master of a
    group other than broker-a."""
    async with Peer(broker.broker_addr) as peer:
        await peer.ok(wire.create_topic("Tx", 1))
    name = broker.config.broker_name
    async with Peer(cluster.namesrv_addr) as ns:
        await wire.eventually_route(ns, "Tx", lambda r: [
            d.broker_name for d in r.broker_datas
            if d.broker_name != "broker-a" and 0 in d.broker_addrs] == [name], timeout=30)
