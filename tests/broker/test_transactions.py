"""Transactional messages on the broker over real TCP, as RocketMQ clients put them on
the wire: a prepared send is held in the half topic, END_TRANSACTION commits it (visible
once, in its topic and queue) or rolls it back (never visible), refusals leave the store
alone, and the checker asks a producer connection, counts its checks and discards the
transaction after ``transactionCheckMax`` of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.delivery import collect, records
from tests.broker.held import Held, slow_writes
from tests.broker.wire import Peer

import tidemq.broker.topics as topics_module
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from tidemq.codec.transaction import HALF_TOPIC, OP_TOPIC, TransactionState, decode_op_body
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.net import Connection, RemotingClient
from tidemq.testing import Cluster

GROUP = "txn-pg"


#: Checks after 300 ms, at most 2; the tests that end transactions themselves wait
#: for no check (a minute).
CHECKING = {"transaction_time_out": 300, "transaction_check_interval": 100,
            "transaction_check_max": 2}
QUIET = {"transaction_time_out": 60_000}


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """A broker with :data:`QUIET` settings, or those a test passes (indirect)."""
    async with Cluster(tmp_path, broker=getattr(request, "param", QUIET)) as c:
        yield c


checking = pytest.mark.parametrize("cluster", [CHECKING], indirect=True)


@pytest.fixture
async def peer(cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(cluster.brokers[0].broker_addr) as p:
        await p.ok(wire.create_topic("Tx", 2))
        yield p


def _prepared(body: bytes = b"order-1", queue_id: int = 1, **extra: str) -> RemotingCommand:
    return wire.send("Tx", body, queue_id=queue_id, group=GROUP, sys_flag=0x4,
                     properties=wire.props(tags="T", keys="k1", TRAN_MSG="true",
                                           PGROUP=GROUP, **extra))


def _end(resp: RemotingCommand, state: TransactionState, *, group: str = GROUP,
         offset: int | None = None, phys: int | None = None, check: bool = False
         ) -> RemotingCommand:
    _, half_phys = decode_offset_msg_id(resp.ext_fields["msgId"])
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=int(resp.ext_fields["queueOffset"]) if offset is None
        else offset,
        commit_log_offset=half_phys if phys is None else phys,
        commit_or_rollback=int(state), msg_id="m", from_transaction_check=check)
    return RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext())


def _records(cluster: Cluster, topic: str, queue_id: int = 0) -> list[Record]:
    return records(cluster.brokers[0], topic, queue_id)


async def test_a_committed_transaction_is_visible_once(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.send("Tx", b"before", queue_id=0))  # the half message is not at 0
    resp = await peer.ok(_prepared())
    assert resp.ext_fields["queueId"] == "1"
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("Tx", 1) == 0  # held, not in the topic
    [half] = _records(cluster, HALF_TOPIC)
    props = decode_properties(half.properties)
    assert (props["REAL_TOPIC"], props["REAL_QID"], props["PGROUP"]) == ("Tx", "1", GROUP)
    assert half.sys_flag & 0xC == 0
    await peer.ok(_end(resp, TransactionState.COMMIT))
    [msg] = await collect(peer, "Tx", 1, queue_id=1)
    assert (msg.body, msg.tags, msg.keys) == (b"order-1", "T", ["k1"])
    assert msg.sys_flag & 0xC == TransactionState.COMMIT
    assert msg.uniq_key == props["UNIQ_KEY"]
    for name in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG"):
        assert name not in msg.properties
    assert msg.properties["PGROUP"] == GROUP
    # as upstream, the committed record names the half message it came from
    assert msg.prepared_transaction_offset == half.physical_offset
    [stored] = _records(cluster, "Tx", 1)
    assert stored.prepared_tx_offset == half.physical_offset
    assert stored.sys_flag & 0xC == TransactionState.COMMIT
    again = await peer(_end(resp, TransactionState.COMMIT))
    assert again.code == ResponseCode.SYSTEM_ERROR and "no open transaction" in (
        again.remark or "")
    await wire.dispatched(cluster.brokers[0])
    assert await peer.max_offset("Tx", 1) == 1
    [op] = _records(cluster, OP_TOPIC)
    assert decode_op_body(op.body) == [half.queue_offset]
    assert decode_properties(op.properties)["TAGS"] == "d"


async def test_a_rolled_back_transaction_is_never_visible(cluster: Cluster,
                                                          peer: Peer) -> None:
    resp = await peer.ok(_prepared())
    await peer.ok(_end(resp, TransactionState.ROLLBACK))
    await peer.ok(wire.send("Tx", b"after", queue_id=1))
    [msg] = await collect(peer, "Tx", 1, queue_id=1)
    assert msg.body == b"after"
    assert len(cluster.brokers[0].ctx.transactions.table) == 0


async def test_unknown_then_refusals_change_nothing(cluster: Cluster, peer: Peer) -> None:
    broker = cluster.brokers[0]
    resp = await peer.ok(_prepared())
    await peer.ok(_end(resp, TransactionState.NOT_TYPE))  # left open
    await wire.dispatched(broker)
    mark = broker.store.commitlog.max_offset
    cases = [
        (_end(resp, TransactionState.COMMIT, group="other"), ResponseCode.SYSTEM_ERROR,
         "producer group wrong"),
        (_end(resp, TransactionState.COMMIT, phys=12345), ResponseCode.SYSTEM_ERROR,
         "is not the half message"),
        (_end(resp, TransactionState.COMMIT, offset=99), ResponseCode.SYSTEM_ERROR,
         "no open transaction"),
        (_end(resp, TransactionState.PREPARED), ResponseCode.INVALID_PARAMETER,
         "commitOrRollback"),
        (wire.request(RequestCode.END_TRANSACTION, producerGroup=GROUP),
         ResponseCode.INVALID_PARAMETER, "tranStateTableOffset"),
    ]
    for cmd, code, remark in cases:
        got = await peer(cmd)
        assert got.code == code and remark in (got.remark or ""), (got.code, got.remark)
    assert broker.store.commitlog.max_offset == mark
    assert len(broker.ctx.transactions.table) == 1


async def test_a_batch_cannot_be_prepared(peer: Peer) -> None:
    cmd = wire.send_batch("Tx", [(b"a", wire.props()), (b"b", wire.props())])
    cmd.ext_fields["i"] = wire.props(TRAN_MSG="true", PGROUP=GROUP)
    got = await peer(cmd)
    assert got.code == ResponseCode.MESSAGE_ILLEGAL, got.remark


async def test_a_prepared_message_cannot_fan_out(peer: Peer) -> None:
    got = await peer(_prepared(INNER_MULTI_DISPATCH="%LMQ%a"))
    assert got.code == ResponseCode.MESSAGE_ILLEGAL
    assert "cannot fan out" in (got.remark or "")


class _Producer:
    """A producer connection that announces its group and collects check-backs."""

    def __init__(self, addr: str) -> None:
        self.checks: asyncio.Queue[tuple[CheckTransactionStateRequestHeader, Record]] = (
            asyncio.Queue())
        self.client = RemotingClient(request_timeout=10.0)
        self.client.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        self.peer = Peer(addr, self.client)

    def _on_check(self, _conn: Connection, cmd: RemotingCommand) -> None:
        assert cmd.is_oneway
        rec = decode_record(bytes(cmd.body))
        assert isinstance(rec, Record)
        self.checks.put_nowait((CheckTransactionStateRequestHeader.from_ext(cmd.ext_fields),
                                rec))

    async def join(self) -> None:
        await self.peer.ok(wire.heartbeat("producer-1", producer_groups=[GROUP]))


@checking
async def test_the_check_back_reaches_a_producer_and_its_answer_ends_it(
        cluster: Cluster, peer: Peer) -> None:
    producer = _Producer(cluster.brokers[0].broker_addr)
    try:
        await producer.join()
        resp = await producer.peer.ok(_prepared(b"checked"))
        header, rec = await asyncio.wait_for(producer.checks.get(), 10)
        assert (rec.topic, rec.queue_id, bytes(rec.body)) == ("Tx", 1, b"checked")
        props = decode_properties(rec.properties)
        assert props["TRANSACTION_CHECK_TIMES"] == "1"
        assert header.topic == "Tx" and header.msg_id == props["UNIQ_KEY"]
        assert header.tran_state_table_offset != int(resp.ext_fields["queueOffset"])
        answer = EndTransactionRequestHeader(
            producer_group=GROUP, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=int(TransactionState.COMMIT), msg_id=header.msg_id or "",
            from_transaction_check=True, transaction_id=header.transaction_id)
        await producer.peer.ok(RemotingCommand.request(RequestCode.END_TRANSACTION,
                                                       answer.to_ext()))
        [msg] = await collect(peer, "Tx", 1, queue_id=1)
        assert msg.body == b"checked" and "TRANSACTION_CHECK_TIMES" not in msg.properties
        # the original offsets name the same (ended) transaction
        again = await peer(_end(resp, TransactionState.COMMIT))
        assert again.code == ResponseCode.SYSTEM_ERROR
    finally:
        await producer.peer.close()


@checking
async def test_an_unanswered_transaction_is_discarded_after_the_maximum_checks(
        cluster: Cluster, peer: Peer) -> None:
    broker = cluster.brokers[0]
    producer = _Producer(broker.broker_addr)
    try:
        await producer.join()
        await producer.peer.ok(_prepared(b"silent"))
        for times in ("1", "2"):
            _, rec = await asyncio.wait_for(producer.checks.get(), 10)
            assert decode_properties(rec.properties)["TRANSACTION_CHECK_TIMES"] == times
        half = broker.ctx.transactions
        while half.discarded == 0:
            await asyncio.sleep(0.05)  # the checker's own period; no event to wait on
        assert len(half.table) == 0 and producer.checks.empty()
        await wire.dispatched(broker)
        assert await peer.max_offset("Tx", 1) == 0
        metrics = broker.metrics.render().decode()
        assert 'tidemq_broker_transactions_ended_total{outcome="discard"} 1.0' in metrics
    finally:
        await producer.peer.close()


@checking
async def test_a_prepared_send_keeps_the_check_count_it_carries(
        cluster: Cluster, peer: Peer) -> None:
    """A replica acting for its master hands a half message on with the checks it had
    (TRANSACTION_CHECK_TIMES): the count goes on from there, and ends at the maximum."""
    broker = cluster.brokers[0]
    producer = _Producer(broker.broker_addr)
    try:
        await producer.join()
        await producer.peer.ok(_prepared(b"moved", TRANSACTION_CHECK_TIMES="1"))
        _, rec = await asyncio.wait_for(producer.checks.get(), 10)
        assert decode_properties(rec.properties)["TRANSACTION_CHECK_TIMES"] == "2"
        half = broker.ctx.transactions
        while half.discarded == 0:
            await asyncio.sleep(0.05)  # the checker's own period; no event to wait on
        assert producer.checks.empty()  # one check here, the second of two
        # a count that is not one is dropped, not trusted
        await producer.peer.ok(_prepared(b"odd", TRANSACTION_CHECK_TIMES="-3"))
        _, rec = await asyncio.wait_for(producer.checks.get(), 10)
        assert decode_properties(rec.properties)["TRANSACTION_CHECK_TIMES"] == "1"
    finally:
        await producer.peer.close()


async def test_open_transactions_are_found_again_after_a_restart(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, broker=QUIET) as first,
                Peer(first.brokers[0].broker_addr) as p):
        await p.ok(wire.create_topic("Tx", 2))
        ended = await p.ok(_prepared(b"ended"))
        await p.ok(_end(ended, TransactionState.ROLLBACK))
        open_one = await p.ok(_prepared(b"open"))
    async with (Cluster(tmp_path, broker=QUIET) as second,
                Peer(second.brokers[0].broker_addr) as p):
        assert len(second.brokers[0].ctx.transactions.table) == 1
        await p.ok(_end(open_one, TransactionState.COMMIT))
        [msg] = await collect(p, "Tx", 1, queue_id=1)
        assert msg.body == b"open"


async def test_a_replica_that_becomes_master_holds_the_open_transactions(
        tmp_path: Path) -> None:
    from tests.broker.replication.test_group import caught_up

    from tidemq.broker.replication.role import BrokerRole

    async with Cluster(tmp_path, broker={**QUIET, "broker_role": BrokerRole.SYNC_MASTER},
                       store={"mapped_file_size_commit_log": 64 * 1024}) as group:
        master = group.brokers[0]
        replica = await group.add_replica(master)
        async with Peer(master.broker_addr) as peer:
            await peer.ok(wire.create_topic("Tx", 2))
            open_one = await peer.ok(_prepared(b"carried"))
            ended = await peer.ok(_prepared(b"ended"))
            await peer.ok(_end(ended, TransactionState.ROLLBACK))
        await caught_up(master, replica)
        assert len(replica.ctx.transactions.table) == 0  # a replica holds none
        await replica.ctx.replication.role.become_master()
        assert len(replica.ctx.transactions.table) == 1
        async with Peer(replica.broker_addr) as rpeer:
            await rpeer.ok(_end(open_one, TransactionState.COMMIT))
            [msg] = await collect(rpeer, "Tx", 1, queue_id=1)
            assert msg.body == b"carried"


async def test_with_the_acl_on_an_end_needs_pub_on_its_transactions_topic(
        tmp_path: Path) -> None:
    """PUB on the topic the request names, else (the C++ and older Java clients name
    none) on the topic of the half message it ends."""
    from tests.net.acl.accounts import ADMIN, USER, write_accounts
    from tests.net.acl.sweep import signed_client

    def end_of(resp: RemotingCommand, topic: str | None, group: str = GROUP
               ) -> RemotingCommand:
        cmd = _end(resp, TransactionState.COMMIT, group=group)
        if topic is not None:
            cmd.ext_fields["topic"] = topic
        return cmd

    acl = {"acl_enable": True, "acl_file": str(write_accounts(tmp_path))}
    async with Cluster(tmp_path / "c", broker={**QUIET, **acl, "access_key": "admin",
                                               "secret_key": "admin-secret"},
                       namesrv=acl) as cluster:
        addr = cluster.brokers[0].broker_addr
        gate = cluster.brokers[0].acl
        assert gate is not None
        async with (Peer(addr, signed_client(ADMIN)) as admin,
                    Peer(addr, signed_client(USER)) as user,
                    Peer(addr, signed_client(None)) as nobody):
            await admin.ok(wire.create_topic("ReadOnly", 1))  # the user may only SUB
            await admin.ok(wire.create_topic("Tx", 2))
            held = await admin.ok(wire.send(
                "ReadOnly", b"guarded", queue_id=0, group=GROUP, sys_flag=0x4,
                properties=wire.props(TRAN_MSG="true", PGROUP=GROUP)))
            for named in ("ReadOnly", None):
                refused = await user(end_of(held, named))
                assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
                assert "PUB on topic ReadOnly" in (refused.remark or ""), refused.remark
            unsigned = await nobody(end_of(held, None))
            assert unsigned.code == ResponseCode.NO_PERMISSION, unsigned.remark
            before = gate.refused["permission"]
            unknown = await admin(_end(held, TransactionState.COMMIT, offset=99))
            assert unknown.code == ResponseCode.NO_PERMISSION, unknown.remark
            assert "no open transaction" in (unknown.remark or ""), unknown.remark
            assert gate.refused["permission"] == before + 1
            elsewhere = await admin(end_of(held, "Tx"))  # PUB there, not the message's
            assert elsewhere.code == ResponseCode.INVALID_PARAMETER, elsewhere.remark
            assert len(cluster.brokers[0].ctx.transactions.table) == 1
            await admin.ok(end_of(held, None))
            [msg] = await collect(admin, "ReadOnly", 1)
            assert msg.body == b"guarded"
            mine = await user.ok(wire.send(
                "Tx", b"own", queue_id=1, group=GROUP, sys_flag=0x4,
                properties=wire.props(TRAN_MSG="true", PGROUP=GROUP)))
            await user.ok(end_of(mine, None))
            [msg] = await collect(admin, "Tx", 1, queue_id=1)
            assert msg.body == b"own"
            assert len(cluster.brokers[0].ctx.transactions.table) == 0


async def test_a_start_reads_the_queues_from_the_saved_progress(tmp_path: Path) -> None:
    async with (Cluster(tmp_path, broker=QUIET) as first,
                Peer(first.brokers[0].broker_addr) as p):
        await p.ok(wire.create_topic("Tx", 2))
        for _ in range(5):  # half offsets 0-4, ended by op offsets 0-4
            await p.ok(_end(await p.ok(_prepared(b"early")), TransactionState.ROLLBACK))
        open_one = await p.ok(_prepared(b"open"))  # half offset 5
        for _ in range(3):  # half offsets 6-8, op offsets 5-7
            await p.ok(_end(await p.ok(_prepared(b"late")), TransactionState.ROLLBACK))
    async with (Cluster(tmp_path, broker=QUIET) as second,
                Peer(second.brokers[0].broker_addr) as p):
        half = second.brokers[0].ctx.transactions
        assert len(half.table) == 1
        assert half.scanned == 4 + 3  # half offsets 5-8, op offsets 5-7
        await p.ok(_end(open_one, TransactionState.COMMIT))
        [msg] = await collect(p, "Tx", 1, queue_id=1)
        assert msg.body == b"open"


async def test_a_commit_while_its_topic_is_deleted_is_refused_and_kept_open(
        cluster: Cluster, peer: Peer, held: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit of a transaction whose topic is being deleted would store the message
    above the deletion's mark, into queues the deletion removes: it is refused and the
    transaction stays open (a check-back asks again), as a send is refused meanwhile.
    The commit after the deletion stores it from offset 0 of the topic created again."""
    broker = cluster.brokers[0]
    resp = await peer.ok(_prepared(queue_id=0))
    slow_writes(monkeypatch, topics_module, held)  # step 2, after the mark, held
    async with Peer(broker.broker_addr) as deleter:
        deleting = asyncio.create_task(deleter.ok(wire.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, topic="Tx")))
        await held.entered_soon()
        during = await peer(_end(resp, TransactionState.COMMIT))
        assert during.code == ResponseCode.SYSTEM_ERROR, during.remark
        assert "being deleted" in (during.remark or "")
        held.release.set()
        await deleting
    assert held.gave_up == [False]
    await peer.ok(wire.create_topic("Tx", 1))
    await peer.ok(_end(resp, TransactionState.COMMIT))  # still open: committed now
    [msg] = await collect(peer, "Tx", 1)
    assert (msg.body, msg.queue_offset) == (b"order-1", 0)
