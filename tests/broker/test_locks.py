"""Orderly-consumption locks (remoting.md §2.13): the lock table with an injected clock, and
LOCK_BATCH_MQ / UNLOCK_BATCH_MQ over real TCP, including §2.7 step 5 (a retry send of a
group holding live locks goes to its DLQ)."""

from __future__ import annotations

import pytest
from tests.broker import wire
from tests.broker.delivery import retry_send
from tests.broker.wire import Peer

from tidemq.broker.locks import LOCK_RULES, UNLOCK_RULES, Holder, LockAction, LockTable
from tidemq.codec.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster
from tidemq.types import MessageQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def q(queue_id: int, topic: str = "T") -> MessageQueue:
    return MessageQueue(topic, "broker-a", queue_id)


# ---------------------------------------------------------------- the table


def test_rules_cover_every_holder() -> None:
    assert set(LOCK_RULES) == set(UNLOCK_RULES) == set(Holder)
    assert LOCK_RULES[Holder.OTHER_LIVE] is LockAction.REFUSE
    assert UNLOCK_RULES[Holder.OTHER_LIVE] is LockAction.IGNORE


def test_grant_renew_refuse_and_take_over_after_expiry() -> None:
    clock = FakeClock()
    table = LockTable(60_000, clock)
    assert table.lock("g", "c1", [q(0), q(1), q(0)]) == [q(0), q(1)]
    clock.now += 59_000
    assert table.lock("g", "c2", [q(1), q(2)]) == [q(2)]
    assert table.lock("g", "c1", [q(1)]) == [q(1)]  # renewed at +59 s
    clock.now += 59_000
    assert table.owner("g", "T", 0) is None  # not renewed for 118 s
    assert table.owner("g", "T", 1) == "c1"
    assert table.lock("g", "c2", [q(0), q(1)]) == [q(0)]
    assert table.owner("g", "T", 0) == "c2"
    # Another group is another table.
    assert table.lock("other", "c3", [q(1)]) == [q(1)]


def test_deciding_changes_nothing_until_applied() -> None:
    table = LockTable(60_000, FakeClock())
    plan = table.decide_lock("g", "c1", [q(0)])
    assert plan.held == [q(0)] and table.owner("g", "T", 0) is None
    table.apply(plan)
    assert table.owner("g", "T", 0) == "c1"


def test_only_the_owner_unlocks() -> None:
    clock = FakeClock()
    table = LockTable(60_000, clock)
    table.lock("g", "c1", [q(0), q(1)])
    table.unlock("g", "c2", [q(0)])
    assert table.owner("g", "T", 0) == "c1"
    table.unlock("g", "c1", [q(0)])
    assert table.owner("g", "T", 0) is None
    assert table.has_unexpired("g")
    clock.now += 60_001
    assert not table.has_unexpired("g")
    assert table.purge_expired() == 1 and not table.has_unexpired("g")


def test_exactly_at_expiry_is_still_held() -> None:
    clock = FakeClock()
    table = LockTable(1000, clock)
    table.lock("g", "c1", [q(0)])
    clock.now += 1000
    assert table.lock("g", "c2", [q(0)]) == []
    clock.now += 1
    assert table.lock("g", "c2", [q(0)]) == [q(0)]


# ---------------------------------------------------------------- over the wire


def lock(group: str, client: str, *queues: MessageQueue) -> RemotingCommand:
    body = LockBatchRequestBody(consumer_group=group, client_id=client,
                                mq_set=[MessageQueueData.of(mq) for mq in queues])
    return RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=encode_body(body))


def unlock(group: str, client: str, *queues: MessageQueue, oneway: bool = False
           ) -> RemotingCommand:
    body = UnlockBatchRequestBody(consumer_group=group, client_id=client,
                                  mq_set=[MessageQueueData.of(mq) for mq in queues])
    return RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=encode_body(body),
                                   oneway=oneway)


async def locked(peer: Peer, group: str, client: str, *queues: MessageQueue
                 ) -> list[MessageQueue]:
    resp = await peer.ok(lock(group, client, *queues))
    body = decode_body(resp.body, LockBatchResponseBody)
    return sorted(mq.to_queue() for mq in body.lock_ok_mq_set)


async def test_lock_unlock_and_expiry_over_tcp(cluster: Cluster, peer: Peer) -> None:
    clock = FakeClock()
    cluster.brokers[0].locks.clock = clock
    assert await locked(peer, "og", "c1", q(0), q(1)) == [q(0), q(1)]
    assert await locked(peer, "og", "c2", q(1), q(2)) == [q(2)]
    assert b"lockOKMQSet" in (await peer.ok(lock("og", "c2", q(9)))).body
    clock.now += 30_000
    assert await locked(peer, "og", "c1", q(0), q(1)) == [q(0), q(1)]  # renewal
    clock.now += 45_000  # c2's locks (taken at 0) expired, c1's (renewed at 30 s) live
    assert await locked(peer, "og", "c1", q(2)) == [q(2)]
    assert await locked(peer, "og", "c2", q(0)) == []
    await peer.ok(unlock("og", "c2", q(0)))  # not its lock: ignored
    assert await locked(peer, "og", "c2", q(0)) == []
    await peer.client.oneway(peer.addr, unlock("og", "c1", q(0), oneway=True))
    assert await locked(peer, "og", "c2", q(0)) == [q(0)]  # ordered after the oneway


@pytest.mark.parametrize("body", [b"", b"[]", b'{"clientId":"c"}', b'{"consumerGroup":"g"}',
                                  b'{"consumerGroup":"g","clientId":"c","mqSet":[{"x":1}]}'])
async def test_bad_lock_bodies_are_invalid_parameter(peer: Peer, body: bytes) -> None:
    for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        resp = await peer(RemotingCommand.request(code, body=body))
        assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark


async def test_retry_sends_of_a_group_holding_locks_are_dead_letters(
        cluster: Cluster, peer: Peer) -> None:
    """remoting.md §2.7 step 5 / §2.13: an orderly group's resend goes to its DLQ."""
    clock = FakeClock()
    cluster.brokers[0].locks.clock = clock
    assert await locked(peer, "ord", "c1", q(0)) == [q(0)]
    await peer.ok(retry_send("ord", b"locked", reconsume=1, max_times=16))
    clock.now += 60_001  # every lock of the group expired
    await peer.ok(retry_send("ord", b"free", reconsume=1, max_times=16))
    await wire.dispatched(cluster.brokers[0])
    assert [m.body for m in await peer.messages("%DLQ%ord")] == [b"locked"]
    assert [m.body for m in await peer.messages("%RETRY%ord")] == [b"free"]
