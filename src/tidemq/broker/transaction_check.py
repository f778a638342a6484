"""The transaction checker: asks producers about the transactions they left open.

Every ``transactionCheckInterval`` ms, each open transaction whose newest half copy is
``transactionTimeOut`` ms old (RocketMQ's defaults: 30 s and 6 s) is

* discarded (op message, WARNING, ``tidemq_broker_transactions_discarded_total``) when it
  has been checked ``transactionCheckMax`` (15) times already;
* otherwise renewed -- a copy with one more ``TRANSACTION_CHECK_TIMES`` is stored, so the
  count survives a restart and the next check waits another ``transactionTimeOut`` --
  and CHECK_TRANSACTION_STATE (39) is sent oneway, with the copy as its body, on the
  connection of one live producer of its group (the broker knows them from their
  heartbeats). The producer answers with END_TRANSACTION (``fromTransactionCheck``).
  A group with no live producer still has the check counted, as upstream.

A replica checks nothing (its master does); with ``slaveActingMaster``, the replica
acting for a master that is down hands the due transactions to another group's master
instead (:mod:`tidemq.broker.transaction_escape`). All of it runs on the broker's event loop,
between requests: a pass decides and stores synchronously, then writes the oneway
requests.
"""

from __future__ import annotations

import asyncio
import logging
import random

from tidemq.broker.context import BrokerContext
from tidemq.broker.half_queue import CheckCopy
from tidemq.broker.transaction_escape import TransactionEscape
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import CheckTransactionStateRequestHeader
from tidemq.errors import BrokerResponseError, TideMQError
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.net import Connection
from tidemq.net.tasks import cancel_and_wait

__all__ = ["TransactionChecker"]

log = logging.getLogger(__name__)

#: Check-backs sent per pass at most; the rest wait for the next pass.
MAX_CHECKS_PER_PASS = 2000


class TransactionChecker:
    def __init__(self, ctx: BrokerContext, escape: TransactionEscape | None = None) -> None:
        self.ctx = ctx
        #: The acting replica's pass (``slaveActingMaster``), run instead on a replica.
        self.escape = escape
        #: CHECK_TRANSACTION_STATE requests sent, and checks no live producer could take.
        self.sent = 0
        self.unanswerable = 0
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="broker-transaction-check")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for write in list(self._writes):
            write.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.ctx.config.transaction_check_interval / 1000)
            try:
                if self.ctx.store.replica and self.escape is not None:
                    await self.escape.run_pass()
                else:
                    self.check()
            except Exception:  # a bug here must not stop the checks for good
                log.exception("transaction check pass failed")

    def check(self) -> int:
        """One pass (see the module docstring); how many check-backs it sent. The
        transactions' progress is saved after it."""
        try:
            return self._check()
        finally:
            self.ctx.transactions.save_progress()

    def _check(self) -> int:
        ctx = self.ctx
        if ctx.store.replica or not ctx.transactions.table:
            return 0
        cfg = ctx.config
        half = ctx.transactions
        sent = 0
        for msg in half.table.due(ctx.store.clock(), cfg.transaction_time_out):
            if sent >= MAX_CHECKS_PER_PASS:
                break
            if msg.checks >= cfg.transaction_check_max:
                try:
                    half.discard(msg, msg.checks)
                except BrokerResponseError as exc:
                    log.error("transaction %s not discarded: %s", msg.key, exc.remark)
                    return sent
                continue
            try:
                copy = half.renew(msg)
            except BrokerResponseError as exc:
                log.error("transaction %s not checked: %s", msg.key, exc.remark)
                return sent
            sent += 1
            self._ask(copy)
        return sent

    def _ask(self, copy: CheckCopy) -> None:
        msg = copy.msg
        conns = [ch.conn for ch in self.ctx.producers.groups.get(msg.group, {}).values()
                 if ch.conn.is_open]
        if not conns:
            self.unanswerable += 1
            log.info("transaction %s of producer group %s: no live producer to ask "
                     "(check %d)", msg.key, msg.group, msg.checks)
            return
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=msg.offset, commit_log_offset=msg.phys,
            msg_id=copy.uniq_key, transaction_id=copy.uniq_key,
            offset_msg_id=encode_offset_msg_id(self.ctx.store.store_host, msg.phys),
            topic=msg.topic, broker_name=self.ctx.config.broker_name)
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext(),
                                      copy.body, oneway=True)
        self.sent += 1
        task = asyncio.get_running_loop().create_task(_oneway(random.choice(conns), cmd))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


async def _oneway(conn: Connection, cmd: RemotingCommand) -> None:
    try:
        await conn.oneway(cmd)
    except TideMQError as exc:
        log.info("CHECK_TRANSACTION_STATE to %s not sent: %s", conn.remote_address, exc)


