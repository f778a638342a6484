"""Queue locks for orderly consumption: LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) as plain
functions (remoting.md §2.13).

A broker keeps one lock per (group, queue), held by one client id and expiring 60 s after
its last renewal; re-locking renews it. Orderly consumers lock a queue before consuming
it, renew every 20 s (:data:`LOCK_RENEW_INTERVAL`), stop consuming a queue whose lock was
not confirmed for 30 s (:data:`LOCK_STALE_AFTER`), and unlock it once they gave it up
and committed its offset. Locks are asked of each queue's broker, many queues per request
(:func:`by_broker`).
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemq.client.offsets import check_success
from tidemq.codec.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.types import MessageQueue

__all__ = [
    "LOCK_RENEW_INTERVAL",
    "LOCK_STALE_AFTER",
    "by_broker",
    "lock_request",
    "read_locked",
    "unlock_request",
]

#: Java ``REBALANCE_LOCK_INTERVAL``: how often held locks are renewed, seconds.
LOCK_RENEW_INTERVAL = 20.0
#: Java ``REBALANCE_LOCK_MAX_LIVE_TIME``: a lock not confirmed for this long is not
#: trusted any more (the broker's own expiry is 60 s), seconds.
LOCK_STALE_AFTER = 30.0


def by_broker(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    """``queues`` grouped by broker name, each list sorted."""
    out: dict[str, list[MessageQueue]] = {}
    for mq in sorted(set(queues)):
        out.setdefault(mq.broker_name, []).append(mq)
    return out


def lock_request(group: str, client_id: str, queues: Iterable[MessageQueue]) -> RemotingCommand:
    body = LockBatchRequestBody(consumer_group=group, client_id=client_id,
                                mq_set=[MessageQueueData.of(mq) for mq in queues])
    return RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, {}, encode_body(body))


def read_locked(response: RemotingCommand, *, address: str) -> set[MessageQueue]:
    """The queues a LOCK_BATCH_MQ answer says this client now holds."""
    check_success(response, address=address)
    body = response.full_body()
    if not body:
        return set()
    return {d.to_queue() for d in decode_body(body, LockBatchResponseBody).lock_ok_mq_set}


def unlock_request(group: str, client_id: str,
                   queues: Iterable[MessageQueue]) -> RemotingCommand:
    body = UnlockBatchRequestBody(consumer_group=group, client_id=client_id,
                                  mq_set=[MessageQueueData.of(mq) for mq in queues])
    return RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, {}, encode_body(body))
