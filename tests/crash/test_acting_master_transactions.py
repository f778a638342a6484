"""``slaveActingMaster`` and open transactions: a master killed with SIGKILL leaves a
transaction UNKNOWN; the replica acting for it hands the half message to the master of
the other group, whose check-back asks the producer; the producer's answer ends it
there -- COMMIT: visible once, ROLLBACK: never -- and the master, back, neither checks
nor commits it again. Separate broker processes, an in-process name server, the real
transactional producer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer
from tests.child_server import SMALL_SEGMENT

from tidemq.client import ClientConfig, LocalTransactionState, Message, TransactionProducer
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import EndTransactionRequestHeader
from tidemq.codec.transaction import HALF_TOPIC, TransactionState
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.namesrv import NameServerApp
from tidemq.types import MessageExt

from .broker_process import BrokerProcess
from .test_acting_master_return import ACTING, master_gone
from .test_replica_serving_kill9 import has_master
from .test_replication_kill9 import WarmBroker, master_and_replica

TOPIC = "TxOrders"
GROUP = "tx-orders-pg"
#: Due for a check 1 s after it is stored, passes every 300 ms.
CHECKING = {**ACTING, "transactionTimeOut": "1000", "transactionCheckInterval": "300"}


@pytest.fixture
def brokers(tmp_path: Path, namesrv: NameServerApp
            ) -> Iterator[tuple[WarmBroker, BrokerProcess, BrokerProcess]]:
    """broker-a's master and replica, and broker-b's master; not started. broker-a's
    master checks nothing in its first life (it is killed before it would)."""
    other = BrokerProcess(tmp_path / "b", namesrv.address, {
        **CHECKING, "brokerName": "broker-b", "mappedFileSizeCommitLog": SMALL_SEGMENT})
    for master, replica in master_and_replica(tmp_path, namesrv.address, "ASYNC_MASTER",
                                              CHECKING):
        master.settings["transactionCheckInterval"] = "600000"
        try:
            yield master, replica, other
        finally:
            other.kill9()


class Checks:
    """The producer's check-backs: the bodies asked about, in order, and the answer."""

    def __init__(self, answer: LocalTransactionState) -> None:
        self.answer = answer
        self.asked: list[bytes] = []
        self._changed = asyncio.Event()

    def __call__(self, msg: MessageExt) -> LocalTransactionState:
        self.asked.append(bytes(msg.body))
        self._changed.set()
        return self.answer

    async def wait_for(self, body: bytes, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while body not in self.asked:
                self._changed.clear()
                await self._changed.wait()


def unknown(_msg: Message) -> LocalTransactionState:
    return LocalTransactionState.UNKNOWN


async def left_unknown_then_master_killed(
        master: WarmBroker, replica: BrokerProcess, other: BrokerProcess,
        namesrv: str, producer: TransactionProducer) -> tuple[int, int]:
    """A transaction of :data:`TOPIC` on broker-a left UNKNOWN, held by the replica; the
    master killed; broker-b serving the topic. Its half-queue and commit-log offsets."""
    await asyncio.gather(asyncio.to_thread(master.start), asyncio.to_thread(replica.start),
                         asyncio.to_thread(other.start))
    async with Peer(master.addr) as peer:
        await peer.ok(wire.create_topic(TOPIC, 1))
    async with Peer(namesrv) as ns:
        await wire.eventually_route(ns, TOPIC, timeout=30)
    result = await producer.send_in_transaction(Message(TOPIC, b"tx"), unknown)
    assert result.state is LocalTransactionState.UNKNOWN
    sent = result.send_result
    async with Peer(replica.addr) as peer:  # the replica holds the half message
        while await peer.max_offset(HALF_TOPIC, 0) <= sent.queue_offset:
            await asyncio.sleep(0.05)
    async with Peer(other.addr) as peer:
        await peer.ok(wire.create_topic(TOPIC, 1))
    master.settings["transactionCheckInterval"] = "300"  # its next life checks
    master.prepare()
    master.kill9()
    await master_gone(namesrv, TOPIC)
    return sent.queue_offset, decode_offset_msg_id(sent.offset_msg_id)[1]


async def master_back_checks_only(master: WarmBroker, namesrv: str, checks: Checks
                                  ) -> None:
    """broker-a's master back (checking every 300 ms now): a new transaction left UNKNOWN
    there is checked and committed, and by then nothing else was."""
    await asyncio.to_thread(master.start)  # took back the replica's progress first
    async with Peer(namesrv) as ns:
        await wire.eventually_route(ns, TOPIC, has_master, timeout=30)
    checks.answer = LocalTransactionState.COMMIT
    async with Peer(master.addr) as peer:  # prepared as the producer prepares, unknown
        await peer.ok(wire.send(TOPIC, b"sentinel", group=GROUP, sys_flag=0x4,
                                properties=wire.props(TRAN_MSG="true", PGROUP=GROUP)))
    await checks.wait_for(b"sentinel")
    # due before the sentinel, the old transaction would have been asked about first
    assert await bodies(master.addr) == [b"sentinel"]


async def sends_reach(producer: TransactionProducer, broker_name: str,
                      timeout: float = 30) -> None:
    """Transactions (rolled back: nothing becomes visible) sent until one is prepared on
    ``broker_name``: its master is in the producer's route again, once refreshed."""
    async with asyncio.timeout(timeout):
        while (await producer.send_in_transaction(
                Message(TOPIC, b"probe"), lambda m: LocalTransactionState.ROLLBACK)
               ).send_result.queue.broker_name != broker_name:
            await asyncio.sleep(0.05)  # the route refresh has no event to wait on


async def bodies(addr: str) -> list[bytes]:
    """The bodies of :data:`TOPIC` on ``addr`` once it holds any."""
    async with Peer(addr) as peer:
        async with asyncio.timeout(30):
            while await peer.max_offset(TOPIC, 0) < 1:
                await asyncio.sleep(0.05)
        resp = await peer.ok(wire.pull(TOPIC, 0, 0))
    return [bytes(m.body) for m in wire.decode_messages(resp.full_body())]


@pytest.mark.timeout(120)
async def test_a_transaction_left_open_is_committed_on_another_master_once(
        brokers: tuple[WarmBroker, BrokerProcess, BrokerProcess],
        namesrv: NameServerApp) -> None:
    master, replica, other = brokers
    checks = Checks(LocalTransactionState.COMMIT)
    cfg = ClientConfig(namesrv_addr=(namesrv.address,), retry_times_when_send_failed=0,
                       poll_name_server_interval=0.3, heartbeat_broker_interval=0.3)
    async with TransactionProducer(GROUP, config=cfg, check=checks) as producer:
        offset, phys = await left_unknown_then_master_killed(
            master, replica, other, namesrv.address, producer)
        # the acting replica hands it to broker-b, whose check-back asks the producer
        await checks.wait_for(b"tx")
        assert await bodies(other.addr) == [b"tx"]
        # the replica refuses to end it (upstream's answer), naming who holds it now
        end = EndTransactionRequestHeader(
            producer_group=GROUP, tran_state_table_offset=offset, commit_log_offset=phys,
            commit_or_rollback=int(TransactionState.COMMIT), msg_id="", topic=TOPIC)
        async with Peer(replica.addr) as peer:
            resp = await peer(RemotingCommand.request(RequestCode.END_TRANSACTION,
                                                      end.to_ext()))
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, (resp.code, resp.remark)
        assert other.addr in (resp.remark or "")

        await master_back_checks_only(master, namesrv.address, checks)
        assert checks.asked.count(b"tx") == 1
        checks.answer = LocalTransactionState.ROLLBACK  # a probe checked late: never seen
        await sends_reach(producer, "broker-a")  # the producer sends there again
    assert await bodies(other.addr) == [b"tx"]


@pytest.mark.timeout(120)
async def test_a_transaction_left_open_and_rolled_back_is_never_visible(
        brokers: tuple[WarmBroker, BrokerProcess, BrokerProcess],
        namesrv: NameServerApp) -> None:
    master, replica, other = brokers
    checks = Checks(LocalTransactionState.ROLLBACK)
    cfg = ClientConfig(namesrv_addr=(namesrv.address,), retry_times_when_send_failed=0,
                       poll_name_server_interval=0.3, heartbeat_broker_interval=0.3)
    async with TransactionProducer(GROUP, config=cfg, check=checks) as producer:
        await left_unknown_then_master_killed(master, replica, other, namesrv.address,
                                              producer)
        await checks.wait_for(b"tx")  # asked by broker-b, answered ROLLBACK
        await master_back_checks_only(master, namesrv.address, checks)
    async with Peer(other.addr) as peer:  # broker-b stored nothing of the topic
        assert await peer.max_offset(TOPIC, 0) == 0
