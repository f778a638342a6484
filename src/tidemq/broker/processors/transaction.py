"""END_TRANSACTION (37): a producer ends a transaction it prepared here -- commit,
rollback, or "still unknown" (left open for the check-backs).

RocketMQ's producers send it oneway, so a refusal is only logged (rate-limited); a
producer that asks for an answer gets the refusal's code and remark. What is decided
and stored is :meth:`tidemq.broker.half_queue.HalfQueue.end`'s. A replica refuses
(SLAVE_NOT_AVAILABLE, as upstream's): the master holds the transactions. That holds for
the replica acting for its master too: a half message it handed to another group's
master (:mod:`tidemq.broker.transaction_escape`) is that master's to end, by its
check-back (the remark names it); ending it here as well could store it twice. With
the ACL on the request needs PUB on its topic, like a send: the topic it names, else
(the C++ and older Java clients name none) the topic of the half message it ends
(:func:`transaction_topic`, the ACL gate's lookup).
"""

from __future__ import annotations

import logging

from tidemq.broker.context import BrokerContext
from tidemq.broker.half_queue import HalfQueue
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.transaction_escape import TransactionEscape
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import EndTransactionRequestHeader
from tidemq.errors import BrokerResponseError, RemoteProtocolError, ResponseCode, error_for_code
from tidemq.net import Connection
from tidemq.net.acl.gate import TopicLookup
from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["TransactionProcessor", "transaction_topic"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)


def transaction_topic(transactions: HalfQueue) -> TopicLookup:
    """The ACL gate's lookup of the topic an END_TRANSACTION acts on: its half
    message's real topic (:meth:`HalfQueue.topic_of`)."""

    def lookup(request: RemotingCommand) -> str:
        try:
            h = EndTransactionRequestHeader.from_ext(request.ext_fields)
        except RemoteProtocolError as exc:
            raise LookupError(f"its header does not name a transaction: {exc}") from None
        return transactions.topic_of(h.tran_state_table_offset, h.commit_log_offset)

    return lookup


class TransactionProcessor:
    def __init__(self, ctx: BrokerContext, escape: TransactionEscape | None = None) -> None:
        self.ctx = ctx
        self.escape = escape

    def register(self, server: object) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)  # type: ignore[attr-defined]

    def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        try:
            h = parse_header(EndTransactionRequestHeader, cmd)
            if ctx.store.replica:
                raise error_for_code(ResponseCode.SLAVE_NOT_AVAILABLE, self._replica_remark(h))
            done = ctx.transactions.end(h)
        except BrokerResponseError as exc:
            _refusals.info("END_TRANSACTION from %s refused: %s", conn.remote_address,
                           exc.remark)
            raise
        log.debug("transaction %s of %s at half-queue offset %d %s%s", h.transaction_id or
                  h.msg_id, h.producer_group, h.tran_state_table_offset, done,
                  " (check-back answer)" if h.from_transaction_check else "")
        return cmd.response()

    def _replica_remark(self, h: EndTransactionRequestHeader) -> str:
        moved = (self.escape.escaped_to.get(h.tran_state_table_offset)
                 if self.escape is not None else None)
        if moved is None:
            return "this broker is a replica: end the transaction on its master"
        return (f"this broker is a replica acting for its master and handed the half "
                f"message at half-queue offset {h.tran_state_table_offset} to the master "
                f"{moved}, which checks it with the producer group and ends it there")
