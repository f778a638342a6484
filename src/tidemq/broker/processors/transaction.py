"""END_TRANSACTION (37): a producer ends a transaction it prepared here -- commit,
rollback, or "still unknown" (left open for the check-backs).

RocketMQ's producers send it oneway, so a refusal is only logged (rate-limited); a
producer that asks for an answer gets the refusal's code and remark. What is decided
and stored is :meth:`tidemq.broker.half_queue.HalfQueue.end`'s. A replica refuses
(SERVICE_NOT_AVAILABLE): the master holds the transactions. With the ACL on the request
must name its topic, on which it needs PUB, like a send.
"""

from __future__ import annotations

import logging

from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import parse_header
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import EndTransactionRequestHeader
from tidemq.errors import BrokerResponseError, ResponseCode, error_for_code
from tidemq.net import Connection
from tidemq.net.rate_limited_log import RateLimitedLog

__all__ = ["TransactionProcessor"]

log = logging.getLogger(__name__)
_refusals = RateLimitedLog(log)


class TransactionProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)  # type: ignore[attr-defined]

    def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        try:
            if ctx.store.replica:
                raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                                     "this broker is a replica: end the transaction on its "
                                     "master")
            h = parse_header(EndTransactionRequestHeader, cmd)
            acl = ctx.config.acl_enable or ctx.config.authentication_enabled
            done = ctx.transactions.end(h, topic_required=acl)
        except BrokerResponseError as exc:
            _refusals.info("END_TRANSACTION from %s refused: %s", conn.remote_address,
                           exc.remark)
            raise
        log.debug("transaction %s of %s at half-queue offset %d %s%s", h.transaction_id or
                  h.msg_id, h.producer_group, h.tran_state_table_offset, done,
                  " (check-back answer)" if h.from_transaction_check else "")
        return cmd.response()
