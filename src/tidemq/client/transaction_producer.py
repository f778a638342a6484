"""TransactionProducer: RocketMQ's transactional messages -- a message becomes visible to
consumers only if the producer's local transaction commits.

::

    def place_order(msg: Message) -> LocalTransactionState:
        ok = db.insert_order(msg.body)          # the local transaction
        return LocalTransactionState.COMMIT if ok else LocalTransactionState.ROLLBACK

    def order_exists(msg: MessageExt) -> LocalTransactionState:   # the broker asks
        return (LocalTransactionState.COMMIT if db.has_order(msg.msg_id)
                else LocalTransactionState.ROLLBACK)

    async with TransactionProducer("orders-tx", "127.0.0.1:9876",
                                   check=order_exists) as producer:
        result = await producer.send_in_transaction(Message("Orders", b"..."), place_order)

:meth:`TransactionProducer.send_in_transaction`

1. sends the message *prepared* (``TRAN_MSG=true``, ``PGROUP`` = the group, sysFlag type
   PREPARED): the broker holds it where no consumer sees it;
2. runs ``local_tx(msg)`` (a function or a coroutine function) when the send succeeded;
   a send that failed is rolled back, a ``local_tx`` that raises counts as UNKNOWN;
3. ends the transaction with END_TRANSACTION (oneway, as upstream) to the broker that
   holds it -- after a heartbeat, the first time, so that the broker knows a producer
   of the group to check back with: COMMIT stores the message in its topic, ROLLBACK
   drops it, UNKNOWN leaves it to the broker's check-backs.

A transaction left open (UNKNOWN, a lost END_TRANSACTION, a producer that crashed) is
checked by its broker: after ``transactionTimeOut`` (6 s) it sends CHECK_TRANSACTION_STATE
to a live producer of the group, which runs ``check(msg)`` and answers the same way;
after ``transactionCheckMax`` (15) unanswered checks the broker discards the message. A
check reaches any producer of the group, so ``check`` must answer from shared state (the
database), not from this process's memory. With message trace on, each end is recorded
as an ``EndTransaction`` trace record.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance
from tidemq.client.producer import Producer
from tidemq.client.sending import prepare_message
from tidemq.client.stamps import now_ms
from tidemq.client.topic_route import TopicRoute
from tidemq.client.tracer import end_transaction_record, pub_records
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from tidemq.codec.message import decode_messages, send_request
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.transaction import PRODUCER_GROUP, TRAN_MSG, TransactionState
from tidemq.errors import TideMQError
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import PropertyKey
from tidemq.net.connection import Connection
from tidemq.types import Message, MessageExt, MessageQueue, SendResult, SendStatus

__all__ = ["CheckTransaction", "LocalTransaction", "LocalTransactionState",
           "TransactionProducer", "TransactionSendResult"]

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """What a local transaction, or a check of it, says (upstream's names as values)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @property
    def wire(self) -> TransactionState:
        return _WIRE[self]


_WIRE = {LocalTransactionState.COMMIT: TransactionState.COMMIT,
         LocalTransactionState.ROLLBACK: TransactionState.ROLLBACK,
         LocalTransactionState.UNKNOWN: TransactionState.NOT_TYPE}

LocalTransaction = Callable[[Message],
                            LocalTransactionState | Awaitable[LocalTransactionState]]
CheckTransaction = Callable[[MessageExt],
                            LocalTransactionState | Awaitable[LocalTransactionState]]


class TransactionSendResult:
    """The prepared send's result and how the transaction ended here."""

    __slots__ = ("send_result", "state")

    def __init__(self, send_result: SendResult, state: LocalTransactionState) -> None:
        self.send_result = send_result
        self.state = state

    def __repr__(self) -> str:
        return f"<TransactionSendResult {self.state.name} {self.send_result!r}>"


async def _decided(value: LocalTransactionState | Awaitable[LocalTransactionState]
                   ) -> LocalTransactionState:
    state = await value if inspect.isawaitable(value) else value
    if not isinstance(state, LocalTransactionState):
        raise TypeError(f"a local transaction answers a LocalTransactionState, not {state!r}")
    return state


class TransactionProducer(Producer):
    """A producer of transactional messages for one group; see the module docstring."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 check: CheckTransaction, config: ClientConfig | None = None,
                 instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, config=config, instance=instance)
        self.check = check
        self._checks: set[asyncio.Task[None]] = set()
        #: Brokers told of this group by a heartbeat of ours since the start (the
        #: instance's periodic heartbeats follow its routes).
        self._announced: set[str] = set()

    def __repr__(self) -> str:
        return f"<TransactionProducer group={self.group!r}>"

    def _register(self, inst: ClientInstance) -> None:
        super()._register(inst)
        inst.register_transaction_checker(self.group, self._on_check)

    async def _unregister(self, inst: ClientInstance) -> None:
        inst.register_transaction_checker(self.group, None)
        for task in list(self._checks):
            task.cancel()
        await super()._unregister(inst)

    async def send_in_transaction(self, msg: Message, local_tx: LocalTransaction, *,
                                  timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` prepared, run ``local_tx`` and end the transaction as it says
        (module docstring). A send that fails raises, as :meth:`send` does."""
        prepared, result = await self.send_prepared(msg, timeout=timeout)
        state = LocalTransactionState.ROLLBACK
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _decided(local_tx(prepared))
            except Exception:
                log.exception("%r: the local transaction of %s failed; the broker will "
                              "check it", self, result.msg_id)
                state = LocalTransactionState.UNKNOWN
        await self.end_transaction(prepared, result, state)
        return TransactionSendResult(result, state)

    async def send_prepared(self, msg: Message, *, timeout: float | None = None
                            ) -> tuple[Message, SendResult]:
        """The first half of :meth:`send_in_transaction`: ``msg`` sent prepared; the
        message as sent (what ``local_tx`` is given) and the send's result. End it with
        :meth:`end_transaction`."""
        inst = self.instance
        born = now_ms()
        props = {k: v for k, v in msg.properties.items() if k != PropertyKey.DELAY}
        props.update({TRAN_MSG: "true", PRODUCER_GROUP: self.group})
        prepared = prepare_message(Message(msg.topic, msg.body, props, msg.flag),
                                   max_size=self.config.max_message_size,
                                   keys=inst.uniq_keys, now_ms=born)
        uniq = prepared.properties[PropertyKey.UNIQ_KEY]

        async def build(_route: TopicRoute, mq: MessageQueue,
                        _addr: str) -> tuple[RemotingCommand, str]:
            cmd = send_request(prepared, self._opts, queue_id=mq.queue_id, now_ms=born,
                               keys=inst.uniq_keys, broker_name=mq.broker_name,
                               sys_flag=int(TransactionState.PREPARED))
            return cmd, uniq

        result = await self._deliver(prepared.topic, self._plan(prepared, None, None, None),
                                     build, timeout, coalesce=False)
        if self.tracer is not None:
            self._trace_pub(prepared, uniq, result, born)
        return prepared, result

    def _trace_pub(self, prepared: Message, uniq: str, result: SendResult, born: int) -> None:
        assert self.tracer is not None
        self.tracer.record(lambda: pub_records(self.group, (prepared,), (uniq,), result, born,
                                               now_ms() - born), len(prepared.body))

    async def end_transaction(self, msg: Message, result: SendResult,
                              state: LocalTransactionState) -> None:
        """The second half of :meth:`send_in_transaction`: END_TRANSACTION with ``state``
        for the prepared send of ``msg`` that answered ``result``, oneway to its broker
        (a failure to send it is logged: the broker's check-back will ask)."""
        _, phys = decode_offset_msg_id(result.offset_msg_id)
        inst = self.instance
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset,
            commit_log_offset=phys, commit_or_rollback=int(state.wire),
            msg_id=result.msg_id, transaction_id=result.transaction_id or result.msg_id,
            topic=msg.topic)
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext(),
                                      oneway=True)
        try:
            addr = await inst.master_address(result.queue)
            if addr not in self._announced:  # so that its check-backs can reach us
                failed = await inst.send_heartbeat([addr])
                if addr not in failed:
                    self._announced.add(addr)
            await inst.remoting.oneway(addr, cmd)
        except TideMQError as exc:  # the broker's check-back will ask
            log.warning("%r: END_TRANSACTION %s of %s not sent (%s); the broker will check "
                        "it", self, state.name, result.msg_id, exc)
        self._trace_end(msg, result.msg_id, result.transaction_id or result.msg_id,
                        result.offset_msg_id, state, from_check=False)

    def _trace_end(self, msg: Message | MessageExt, msg_id: str, transaction_id: str,
                   offset_msg_id: str, state: LocalTransactionState, *, from_check: bool
                   ) -> None:
        if self.tracer is not None:
            self.tracer.record(end_transaction_record(
                self.group, msg, msg_id, transaction_id, offset_msg_id, state.value,
                from_check=from_check, now=now_ms()), 0)

    # ------------------------------------------------------------------ check-backs

    def _on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from a broker: ask ``check`` in a task of its own
        (the answer may take a while), answer on the same connection."""
        task = asyncio.get_running_loop().create_task(self._answer(conn, cmd))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            h = CheckTransactionStateRequestHeader.from_ext(cmd.ext_fields)
            [msg] = decode_messages(cmd.body)
        except (HeaderFieldError, TideMQError, ValueError) as exc:
            log.info("%r: bad CHECK_TRANSACTION_STATE from %s: %s", self,
                     conn.remote_address, exc)
            return
        try:
            state = await _decided(self.check(msg))
        except Exception:
            log.exception("%r: checking transaction %s failed; the broker will ask again",
                          self, msg.msg_id)
            state = LocalTransactionState.UNKNOWN
        uniq = h.msg_id or msg.msg_id
        answer = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset, commit_or_rollback=int(state.wire),
            msg_id=uniq, transaction_id=h.transaction_id or uniq,
            from_transaction_check=True, topic=msg.topic)
        reply = RemotingCommand.request(RequestCode.END_TRANSACTION, answer.to_ext(),
                                        oneway=True)
        credentials = self.instance.remoting.credentials
        if credentials is not None:
            credentials.sign(reply)
        try:
            await conn.oneway(reply)
        except TideMQError as exc:
            log.info("%r: the answer to a check of %s was not sent: %s", self, uniq, exc)
        self._trace_end(msg, uniq, h.transaction_id or uniq, h.offset_msg_id or "", state,
                        from_check=True)
