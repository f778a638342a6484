"""Retries while a broker group's master is down: a push consumer reads the group's
replica, and a message its listener fails is handed back through another group's master
(``%RETRY%<group>``, the client's fallback when CONSUMER_SEND_MSG_BACK has no master to
go to) and consumed again from there."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker.replication.test_group import SMALL, caught_up
from tests.broker.wire import Peer, create_topic, eventually_route, send

from tidemq.client import ClientConfig, ConsumeStatus, MessageExt, PushConsumer, PushOptions
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.testing import Cluster

LADDER = "100ms 100ms 100ms 100ms 100ms"


async def test_a_failed_message_is_retried_through_another_master(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=2, broker={"message_delay_level": LADDER},
                       store=SMALL) as group:
        master_a, master_b = group.brokers
        replica = await group.add_replica(master_a, slave_metadata_sync_interval=100)
        async with Peer(master_a.broker_addr) as peer:
            await peer.ok(create_topic("T", 1))
            await peer.ok(send("T", b"fails once"))
        await caught_up(master_a, replica)
        while replica.topics.get("T") is None:
            replica.metadata_sync.synced.clear()
            await asyncio.wait_for(replica.metadata_sync.synced.wait(), 10)
        async with Peer(group.namesrv_addr) as ns:  # the replica registered T too
            await eventually_route(ns, "T", lambda r: any(
                1 in bd.broker_addrs for bd in r.broker_datas), timeout=30)
        await master_a.stop()  # unregisters: broker-a has only its replica now

        deliveries: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            for m in msgs:
                deliveries.append((m.broker_name, m.reconsume_times))
            if all(m.reconsume_times == 0 for m in msgs):
                return ConsumeStatus.RECONSUME_LATER
            done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        cfg = ClientConfig(namesrv_addr=(group.namesrv_addr,), poll_name_server_interval=0.3,
                           long_polling_timeout=0.5, pull_error_backoff=0.1)
        consumer = PushConsumer("cg", listener=listener, config=cfg,
                                options=PushOptions(rebalance_interval=0.3),
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("T")
        await consumer.start()
        try:
            await asyncio.wait_for(done.wait(), 60)
        finally:
            await consumer.close()
        assert deliveries[0] == ("broker-a", 0)  # read from broker-a's replica
        assert deliveries[-1] == ("broker-b", 1)  # the retry, through broker-b
        assert master_b.store.max_offset("%RETRY%cg", 0) == 1
