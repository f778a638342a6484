"""Open transactions while the master is down (``slaveActingMaster``): the replica acting
for its master hands the half messages due for a check-back to another group's master.

A replica holds copies of its master's half and op queues but checks nothing. While it
acts for its master (:func:`tidemq.broker.acting_master.acting_for`), each pass of the
transaction checker here, as upstream's acting replica does:

1. a pass reads the open transactions from the replica's copy of the two queues, from
   the progress the master last saved (group ``CID_RMQ_SYS_TRANS``'s offsets, which
   reach the replica with the consumer offsets), when it starts acting and whenever the
   copy has grown since (its master may have come back and gone again between two
   passes); what it handed on or dropped meanwhile is not held again;
2. each transaction whose newest half copy is ``transactionTimeOut`` ms old is sent,
   prepared (``TRAN_MSG=true``, sysFlag type PREPARED), to its real topic on the master
   of another group serving the topic, with its producer group (``PGROUP``, also the
   send's producerGroup), its transaction id (``UNIQ_KEY``) and one more
   ``TRANSACTION_CHECK_TIMES``. That master holds it as its own half message and checks
   it with a producer of the group after its own ``transactionTimeOut``; the producer's
   answer commits or rolls it back there. One checked ``transactionCheckMax`` times
   already is dropped instead (WARNING), as a master discards it;
3. a transaction handed on (or dropped) is no longer held, and the pass records the
   progress as ``CID_RMQ_SYS_TRANS``'s offsets on the replica. A returning master takes
   them back with the other offsets (:mod:`tidemq.broker.replication.reclaim`) and holds
   again only the transactions past them.

A transaction whose hand-over fails stays held and is tried again at the next pass; each
failure is counted by its reason (:data:`FAILURE_REASONS`): its half message cannot be
read (``unreadable``), no other group's master takes writes of its topic, or no name
server answered (``no_master``), or none of those masters stored it (``refused``). When
the replica stops acting (its master is listed again) it drops what it held. The send is
made before the transaction is forgotten, so a replica that dies between the two hands
it on again (at least once). The counts are the broker's metrics
(:mod:`tidemq.broker.transaction_escape_metrics`).
"""

from __future__ import annotations

import asyncio
import logging

from tidemq.broker.acting_master import ActingMaster, Escape
from tidemq.broker.context import BrokerContext
from tidemq.broker.half_table import MAX_HALF_MESSAGES, HalfMessage, HalfTable
from tidemq.codec.transaction import HALF_TOPIC, OP_TOPIC, TransactionState, with_transaction_type
from tidemq.errors import BrokerResponseError, TideMQError
from tidemq.formats.properties import encode_properties

__all__ = ["TransactionEscape"]

log = logging.getLogger(__name__)

#: Transactions handed on per pass at most; the rest wait for the next pass.
MAX_ESCAPES_PER_PASS = 2000
#: Why a due transaction was not handed on at a pass (module docstring).
FAILURE_REASONS = ("unreadable", "no_master", "refused")
#: Why a transaction was dropped instead: checked ``transactionCheckMax`` times already.
DROP_REASONS = ("check_max",)


class TransactionEscape:
    def __init__(self, ctx: BrokerContext, acting: ActingMaster) -> None:
        self.ctx = ctx
        self.acting = acting
        #: Transactions handed to another master; dropped, by reason (:data:`DROP_REASONS`);
        #: hand-overs that failed, by reason (:data:`FAILURE_REASONS`).
        self.escaped = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.failures = dict.fromkeys(FAILURE_REASONS, 0)
        #: Passes made while acting.
        self.passes = 0
        #: The ends of the half and op queues when the open transactions were last read
        #: (``None``: not acting); read again when the replica's copy has grown.
        self._ends: tuple[int, int] | None = None
        #: Half-queue offsets handed on or dropped while acting (not held again when the
        #: queues are read again); at most :data:`MAX_HALF_MESSAGES` kept.
        self._ended: set[int] = set()
        #: Half-queue offsets handed on -> the master that took them (END_TRANSACTION's
        #: refusal names it); at most :data:`MAX_HALF_MESSAGES` kept.
        self.escaped_to: dict[int, str] = {}

    @property
    def discarded(self) -> int:
        """Transactions dropped after ``transactionCheckMax`` check-backs."""
        return self.dropped["check_max"]

    async def run_pass(self) -> int:
        """One pass on a replica (module docstring); how many transactions it handed on."""
        ctx = self.ctx
        try:
            info = await self.acting.acting()
        except TideMQError as exc:
            log.info("cannot tell whether this replica acts for its master: %s", exc)
            info = None
        if info is None:
            if self._ends is not None:
                self._ends = None
                self._ended.clear()
                ctx.transactions.table = HalfTable()
                log.info("no longer acting for the master: its open transactions are its own")
            return 0
        ends = (ctx.store.max_offset(HALF_TOPIC, 0), ctx.store.max_offset(OP_TOPIC, 0))
        if ends != self._ends:  # reading the queues may take a while: off the event loop
            await asyncio.get_running_loop().run_in_executor(None, ctx.transactions.rebuild)
            for msg in ctx.transactions.table:
                if any(offset in self._ended for offset in msg.offsets()):
                    ctx.transactions.forget(msg)
            if self._ends is None:
                log.info("acting for the master: %d open transactions to hand on when due",
                         len(ctx.transactions.table))
            self._ends = ends
        try:
            return await self._escape_due()
        finally:
            self.passes += 1

    async def _escape_due(self) -> int:
        ctx = self.ctx
        cfg = ctx.config
        half = ctx.transactions
        moved = 0
        for msg in half.table.due(ctx.store.clock(), cfg.transaction_time_out):
            if moved >= MAX_ESCAPES_PER_PASS:
                break
            if msg.checks >= cfg.transaction_check_max:
                half.forget(msg)
                self._note_ended(msg)
                self.dropped["check_max"] += 1
                log.warning("transaction %s of producer group %s (topic %s) discarded: "
                            "still unknown after %d check-backs", msg.key, msg.group,
                            msg.topic, msg.checks)
                continue
            try:
                rec, props = half.escape_copy(msg)
            except BrokerResponseError as exc:
                self.failures["unreadable"] += 1
                log.error("transaction %s not handed on: %s", msg.key, exc.remark)
                continue
            escape = Escape(
                topic=msg.topic, body=bytes(rec.body),
                properties=encode_properties(props).decode("utf-8"), flag=rec.flag,
                sys_flag=with_transaction_type(rec.sys_flag, TransactionState.PREPARED),
                born_timestamp=rec.born_timestamp, reconsume_times=rec.reconsume_times,
                queue_id=half.real_queue(rec), producer_group=msg.group)
            targets = await self.acting.topic_masters(escape.topic, escape.queue_id)
            if not targets:
                self.failures["no_master"] += 1
                log.warning("transaction %s of producer group %s not handed on (tried "
                            "again at the next pass): no other broker group's master takes "
                            "writes of topic %s, or no name server answered", msg.key,
                            msg.group, msg.topic)
                continue
            try:
                addr = await self.acting.hand_to(targets, escape)
            except TideMQError as exc:
                self.failures["refused"] += 1
                log.warning("transaction %s of producer group %s not handed on (tried "
                            "again at the next pass): %s", msg.key, msg.group, exc)
                continue
            self.escaped += 1  # sent, whatever this replica does next
            if half.table.find(msg.offset) is not msg:
                continue  # the table was replaced meanwhile (acting ended)
            half.forget(msg)
            self._note_ended(msg)
            if len(self.escaped_to) < MAX_HALF_MESSAGES:
                self.escaped_to.update(dict.fromkeys(msg.offsets(), addr))
            moved += 1
            log.info("transaction %s of producer group %s handed to %s (check %d)",
                     msg.key, msg.group, addr, msg.checks + 1)
        half.save_progress(acting=True)
        return moved

    def _note_ended(self, msg: HalfMessage) -> None:
        if len(self._ended) < MAX_HALF_MESSAGES:
            self._ended.update(msg.offsets())
