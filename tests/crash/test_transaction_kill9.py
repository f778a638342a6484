"""kill -9 the broker process between a transaction's prepare and its end: the
restarted broker finds the half message again in its store, checks back with the
producer once the producer's heartbeat reaches it, and the producer's answer (COMMIT)
makes the message visible, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker import wire
from tests.broker.delivery import collect
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.client import ClientConfig, LocalTransactionState, Message, TransactionProducer
from tidemq.namesrv import NameServerApp
from tidemq.types import MessageExt

from .broker_process import BrokerProcess


async def test_a_transaction_open_across_a_broker_crash_is_settled_by_its_check(
        tmp_path: Path, namesrv: NameServerApp) -> None:
    broker = BrokerProcess(tmp_path / "store", namesrv.address, {
        "transactionTimeOut": "500", "transactionCheckInterval": "200",
        "mappedFileSizeCommitLog": SMALL_SEGMENT})
    broker.start()
    checked: list[MessageExt] = []
    answered = asyncio.Event()

    def check(msg: MessageExt) -> LocalTransactionState:
        checked.append(msg)
        answered.set()
        return LocalTransactionState.COMMIT

    async def crash(msg: Message) -> LocalTransactionState:
        await asyncio.to_thread(broker.kill9)  # the half message is stored: now crash
        return LocalTransactionState.UNKNOWN

    try:
        async with Peer(broker.addr) as peer, Peer(namesrv.address) as ns:
            await peer.ok(wire.create_topic("Orders", 1))
            await wire.eventually_route(ns, "Orders")
        config = ClientConfig(namesrv_addr=(namesrv.address,), heartbeat_broker_interval=0.3)
        async with TransactionProducer("crash-pg", config=config, check=check) as producer:
            sent = await producer.send_in_transaction(Message("Orders", b"survivor"), crash)
            assert sent.state is LocalTransactionState.UNKNOWN
            await asyncio.to_thread(broker.start)
            await asyncio.wait_for(answered.wait(), 30)
            async with Peer(broker.addr) as peer:
                [msg] = await collect(peer, "Orders", 1, timeout=20)
                assert (msg.body, msg.msg_id) == (b"survivor", sent.send_result.msg_id)
                await peer.ok(wire.send("Orders", b"marker"))
                got = await collect(peer, "Orders", 2)
                assert [m.body for m in got] == [b"survivor", b"marker"]
        assert checked[0].msg_id == sent.send_result.msg_id
    finally:
        broker.stop()
