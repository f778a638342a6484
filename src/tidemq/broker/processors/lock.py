"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42): orderly consumption (remoting.md §2.13).

Both take a ``LockBatchRequestBody``/``UnlockBatchRequestBody`` and no ext. LOCK answers
``{"lockOKMQSet": [...]}``, the requested queues the client holds afterwards; UNLOCK
answers SUCCESS with no body (Java clients may send it oneway). The rules are the table of
:mod:`tidemq.broker.locks`.

``onlyThisBroker`` is accepted and has no effect: upstream uses it to stop a master from
forwarding the lock to the other brokers of its broker set, and a TideMQ broker name has
exactly one broker.
"""

from __future__ import annotations

from typing import TypeVar

from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import decoded
from tidemq.codec.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["LockProcessor"]

B = TypeVar("B", LockBatchRequestBody, UnlockBatchRequestBody)


def _body(cmd: RemotingCommand, cls: type[B]) -> B:
    body = decoded(lambda: decode_body(cmd.body, cls))
    if not body.consumer_group or not body.client_id:
        raise error_for_code(ResponseCode.INVALID_PARAMETER,
                             "consumerGroup and clientId are required")
    return body


class LockProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.LOCK_BATCH_MQ, self.lock)
        reg(RequestCode.UNLOCK_BATCH_MQ, self.unlock)

    def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = _body(cmd, LockBatchRequestBody)
        held = self.ctx.locks.lock(body.consumer_group, body.client_id,
                                   [q.to_queue() for q in body.mq_set])
        reply = LockBatchResponseBody(lock_ok_mq_set=[MessageQueueData.of(mq) for mq in held])
        return cmd.response(body=encode_body(reply))

    def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = _body(cmd, UnlockBatchRequestBody)
        self.ctx.locks.unlock(body.consumer_group, body.client_id,
                              [q.to_queue() for q in body.mq_set])
        return cmd.response()
