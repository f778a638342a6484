"""Transactional messages in the store: the half topic, the op topic and the open
transactions they imply (RocketMQ's two-phase model; :mod:`tidemq.codec.transaction`
has the wire facts).

* **Prepare.** A send with ``TRAN_MSG=true`` is stored in ``RMQ_SYS_TRANS_HALF_TOPIC``
  queue 0 instead of its topic (:meth:`HalfQueue.divert` decides; the send path stores),
  with ``REAL_TOPIC``/``REAL_QID`` naming where it goes and its sysFlag's transaction type
  cleared: consumers of the topic never see it. A ``TRANSACTION_CHECK_TIMES`` the send
  carries is kept (a half message another group's acting replica handed on brings the
  checks it had, :mod:`tidemq.broker.transaction_escape`).
* **Commit** (END_TRANSACTION 8): the newest copy of the half message is read back and
  stored in its real topic and queue -- body, flag, born time and host, reconsume count
  and properties kept, less ``REAL_TOPIC``, ``REAL_QID``, ``TRAN_MSG`` and
  ``TRANSACTION_CHECK_TIMES``; sysFlag's transaction type COMMIT and
  PREPAREDTRANSACTIONOFFSET the half message's commit-log offset, as upstream -- then an
  op message ends it. **Rollback** (12): only the op message.
* **Op messages** go to ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tagged ``d``, the body
  the half-queue offsets they end (every copy of the transaction).
* **Check-backs** (:mod:`tidemq.broker.transaction_check`): :meth:`HalfQueue.renew`
  stores a copy with one more ``TRANSACTION_CHECK_TIMES``; :meth:`HalfQueue.discard`
  ends a transaction checked ``transactionCheckMax`` times (WARNING, counted).
* **Master down** (``slaveActingMaster``): the replica acting for it rebuilds the same
  table from its copy, hands the due half messages to another group's master
  (:meth:`HalfQueue.escape_copy`, :meth:`HalfQueue.forget`) and saves the progress;
  the returning master takes it back (:mod:`tidemq.broker.replication.reclaim`).
* **Restart.** :meth:`HalfQueue.rebuild` reads the op queue, then the half queue: every
  half message no op ended is open again, its checks counted from its store time. A
  replica that becomes master rebuilds the same way from the log it copied.
* **Progress.** So that a start does not read the two queues from their beginning, the
  broker keeps, as consumer offsets of group ``CID_RMQ_SYS_TRANS`` (upstream's name), the
  lowest half-queue offset still open (every one below it is ended) and the first op
  offset that ends a half message at or above it (:meth:`HalfQueue.save_progress`, at
  every checker pass and at stop; the offsets are written with the consumer offsets). A
  start reads from there. An older saved progress only makes the start read more.

Every record goes through the store's one append point; each decision (the checks of an
END_TRANSACTION, the message to store) is made before anything is written. A crash
between a commit's copy and its op message leaves the transaction open: the next check
asks the producer again, and a producer answering COMMIT a second time gets a second copy
(at least once, as upstream).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Iterator

from tidemq.broker.half_table import HalfMessage, HalfTable
from tidemq.broker.offsets import OffsetManager
from tidemq.broker.topics import PERM_READ, PERM_WRITE, TopicManager
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.headers import EndTransactionRequestHeader, SendMessageRequestHeader
from tidemq.codec.transaction import (
    CHECK_TIMES,
    HALF_TOPIC,
    OP_TAG,
    OP_TOPIC,
    PRODUCER_GROUP,
    TRAN_MSG,
    TransactionState,
    decode_op_body,
    encode_op_body,
    with_transaction_type,
)
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    RemoteProtocolError,
    ResponseCode,
    StoreReadOnly,
    TopicRefused,
    error_for_code,
)
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    PropertyKey,
    decode_properties,
    encode_properties,
)
from tidemq.formats.record import Record, decode_record, encode_record
from tidemq.store.message_store import MessageInput, MessageStore, PutResult
from tidemq.types import GetStatus

__all__ = ["HalfQueue", "is_prepared"]

log = logging.getLogger(__name__)

HALF_QUEUE = 0
#: The group whose offsets of the half and op queues are the checker's progress.
PROGRESS_GROUP = "CID_RMQ_SYS_TRANS"
_READ_BATCH = 256
_READ_BYTES = 4 * 1024 * 1024
#: Properties of the half message the committed message does not keep.
_HALF_ONLY = (PropertyKey.REAL_TOPIC, PropertyKey.REAL_QID, TRAN_MSG, CHECK_TIMES)
_SKIPPING = (GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_TOO_SMALL,
             GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_FOUND_NULL)


def _is_count(text: str) -> bool:
    return text.isdigit() and len(text) < 10


def is_prepared(props: dict[str, str]) -> bool:
    """Whether a send's properties make it a transactional half message (upstream reads
    ``TRAN_MSG`` as Java's ``Boolean.parseBoolean``)."""
    return props.get(TRAN_MSG, "").lower() == "true"


@dataclasses.dataclass(frozen=True, slots=True)
class CheckCopy:
    """A renewed half message, to ask its producer group about: the transaction and the
    CHECK_TRANSACTION_STATE body (the copy as a record of its real topic and queue)."""

    msg: HalfMessage
    body: bytes
    uniq_key: str | None


class HalfQueue:
    def __init__(self, store: MessageStore, topics: TopicManager,
                 topics_changed: Callable[[], object], offsets: OffsetManager) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self._topics_changed = topics_changed
        self.table = HalfTable()
        #: (op-queue offset, highest half-queue offset it ends) of the op messages that
        #: may end a half message at or above the progress, in op-queue order.
        self._ops: collections.deque[tuple[int, int]] = collections.deque()
        #: Records the last :meth:`rebuild` read (both queues).
        self.scanned = 0
        #: Transactions ended by END_TRANSACTION, and discarded after too many checks.
        self.committed = 0
        self.rolled_back = 0
        self.discarded = 0

    # ------------------------------------------------------------------ prepare

    def divert(self, h: SendMessageRequestHeader, props: dict[str, str], queue_id: int
               ) -> SendMessageRequestHeader:
        """The send ``h`` (to ``queue_id``) as a half message: to the half topic, with its
        destination in its properties. Refuses what cannot be a half message."""
        group = props.get(PRODUCER_GROUP) or h.producer_group
        if not group:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "a transactional message needs its producer group (PGROUP)")
        if self.table.full:
            raise error_for_code(ResponseCode.SYSTEM_BUSY,
                                 f"{len(self.table)} transactions are open on this broker; "
                                 "end some first")
        props = {**props, PRODUCER_GROUP: group, PropertyKey.REAL_TOPIC: h.topic,
                 PropertyKey.REAL_QID: str(queue_id)}
        if not _is_count(props.get(CHECK_TIMES, "")):
            props.pop(CHECK_TIMES, None)
        self._ensure_topic(HALF_TOPIC)
        return dataclasses.replace(
            h, topic=HALF_TOPIC, queue_id=HALF_QUEUE,
            properties=encode_properties(props).decode("utf-8"),
            sys_flag=with_transaction_type(h.sys_flag, TransactionState.NOT_TYPE))

    def prepared(self, result: PutResult, properties: str | None) -> None:
        """Hold the half message a send just stored."""
        props = decode_properties((properties or "").encode("utf-8"))
        self.table.add(self._half(props, result.queue_offset, result.phys_offsets[0],
                                  result.store_timestamp))

    # ------------------------------------------------------------------ end

    def topic_of(self, offset: int, phys: int) -> str:
        """The topic of the open transaction whose half message is at half-queue
        ``offset`` and commit-log ``phys``; :class:`LookupError` saying so when there is
        none (the ACL's check of an END_TRANSACTION that names no topic)."""
        msg = self.table.find(offset)
        if msg is None or not msg.owns(offset, phys):
            raise LookupError(f"no open transaction has its half message at half-queue "
                              f"offset {offset} and commit-log offset {phys}")
        return msg.topic

    def end(self, h: EndTransactionRequestHeader) -> str:
        """Commit or roll back the transaction ``h`` names; what was done, for the log.
        Every check comes before anything is stored; a refusal raises with the response
        code and a remark."""
        try:
            state = TransactionState(h.commit_or_rollback)
        except ValueError:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"commitOrRollback must be 0, 8 or 12, not "
                                 f"{h.commit_or_rollback}") from None
        if state is TransactionState.PREPARED:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 "commitOrRollback must be 0, 8 or 12, not 4")
        if state is TransactionState.NOT_TYPE:
            return "left open (the producer does not know yet)"
        msg = self.table.find(h.tran_state_table_offset)
        if msg is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"no open transaction at half-queue offset "
                                 f"{h.tran_state_table_offset}: it ended already, or was "
                                 "never prepared on this broker")
        if not msg.owns(h.tran_state_table_offset, h.commit_log_offset):
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"commitLogOffset {h.commit_log_offset} is not the half "
                                 f"message at half-queue offset {h.tran_state_table_offset}")
        if h.producer_group != msg.group:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"The producer group wrong: the transaction is "
                                 f"{msg.group!r}'s, not {h.producer_group!r}'s")
        if h.topic and h.topic != msg.topic:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"the transaction's topic is {msg.topic}, not {h.topic}")
        if state is TransactionState.COMMIT:
            rec = self._read(msg.phys)
            target, queue_id, committed = self._committed(rec)
            try:
                self._store(target, queue_id, rec, committed,
                            with_transaction_type(rec.sys_flag, TransactionState.COMMIT),
                            index=True, prepared=msg.phys)
            except TopicRefused:  # the store takes nothing into a topic being deleted
                raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                     f"topic {target} is being deleted: the transaction "
                                     "stays open, to be committed once it is over") from None
            self.committed += 1
            done = f"committed to {target} queue {queue_id}"
        else:
            self.rolled_back += 1
            done = "rolled back"
        self._end(msg)
        return done

    # ------------------------------------------------------------------ check-backs

    def renew(self, msg: HalfMessage) -> CheckCopy:
        """Store a copy of ``msg``'s half message with one more check counted; the copy
        to ask the producer group about."""
        rec = self._read(msg.phys)
        props = decode_properties(rec.properties)
        props[CHECK_TIMES] = str(msg.checks + 1)
        raw = encode_properties(props)
        result = self._store(HALF_TOPIC, HALF_QUEUE, rec, raw, rec.sys_flag, index=False)
        held = self.table.add(self._half(props, result.queue_offset, result.phys_offsets[0],
                                         result.store_timestamp))
        target, queue_id = msg.topic, int(props.get(PropertyKey.REAL_QID, "0") or 0)
        body = encode_record(
            topic=target.encode("utf-8"), queue_id=queue_id, body=rec.body, properties=raw,
            flag=rec.flag, sys_flag=rec.sys_flag, born_timestamp=rec.born_timestamp,
            born_host=rec.born_host, store_host=rec.store_host,
            store_timestamp=result.store_timestamp, queue_offset=result.queue_offset,
            physical_offset=result.phys_offsets[0], reconsume_times=rec.reconsume_times)
        return CheckCopy(held, bytes(body), props.get(PropertyKey.UNIQ_KEY))

    def escape_copy(self, msg: HalfMessage) -> tuple[Record, dict[str, str]]:
        """``msg``'s half message as the prepared send a replica acting for its master
        hands to another group's master (upstream's
        ``buildTransactionalMessageFromHalfMessage``): the record, and its properties
        with one more check counted, ``TRAN_MSG`` set and the half-queue place dropped
        (the receiving master sets its own)."""
        rec = self._read(msg.phys)
        props = decode_properties(rec.properties)
        props[CHECK_TIMES] = str(msg.checks + 1)
        props[TRAN_MSG] = "true"
        props.pop(PropertyKey.REAL_TOPIC, None)
        props.pop(PropertyKey.REAL_QID, None)
        return rec, props

    def real_queue(self, rec: Record) -> int:
        """The queue id half message ``rec`` was sent to (``REAL_QID``)."""
        qid = decode_properties(rec.properties).get(PropertyKey.REAL_QID, "0")
        return int(qid) if _is_count(qid) else 0

    def forget(self, msg: HalfMessage) -> None:
        """Stop holding ``msg`` without an op message: a replica acting for its master
        handed it to another master (the progress it saves then covers it)."""
        self.table.remove(msg)

    def discard(self, msg: HalfMessage, checks: int) -> None:
        """End ``msg`` unresolved after ``checks`` check-backs."""
        self._end(msg)
        self.discarded += 1
        log.warning("transaction %s of producer group %s (topic %s) discarded: still "
                    "unknown after %d check-backs", msg.key, msg.group, msg.topic, checks)

    # ------------------------------------------------------------------ restart

    def rebuild(self) -> int:
        """Hold every half message of the store no op message ended, instead of what is
        held (at start, before serving, and when a replica becomes master); how many
        transactions are open. A transaction held now whose half message is beyond what
        the half queue shows yet (prepared since, not dispatched) stays held."""
        held, self.table = self.table, HalfTable()
        end = self.store.max_offset(HALF_TOPIC, HALF_QUEUE)
        half_from = self.offsets.query(PROGRESS_GROUP, HALF_TOPIC, HALF_QUEUE) or 0
        op_from = self.offsets.query(PROGRESS_GROUP, OP_TOPIC, HALF_QUEUE) or 0
        ended: set[int] = set()
        self._ops.clear()
        self.scanned = 0
        for rec in self._records(OP_TOPIC, op_from):
            self.scanned += 1
            try:
                offsets = decode_op_body(rec.body)
            except RemoteProtocolError as exc:
                log.warning("op message at commit-log offset %d ignored: %s",
                            rec.physical_offset, exc)
                continue
            ended.update(o for o in offsets if o >= half_from)
            self._ops.append((rec.queue_offset, max(offsets)))
        for rec in self._records(HALF_TOPIC, half_from):
            self.scanned += 1
            if rec.queue_offset not in ended:
                props = decode_properties(rec.properties)
                self.table.add(self._half(props, rec.queue_offset, rec.physical_offset,
                                          rec.store_timestamp))
        for msg in held:
            if msg.offset >= end:
                self.table.add(msg)
        if self.table:
            log.info("%d open transactions found in %s", len(self.table), HALF_TOPIC)
        return len(self.table)

    def progress(self) -> tuple[int, int]:
        """The half-queue offset below which every half message is ended, and the first
        op offset that may end one at or above it (module docstring)."""
        half = min((o for m in self.table for o in m.offsets()),
                   default=self.store.max_offset(HALF_TOPIC, HALF_QUEUE))
        ops = self._ops
        while ops and ops[0][1] < half:
            ops.popleft()
        return half, ops[0][0] if ops else self.store.max_offset(OP_TOPIC, HALF_QUEUE)

    def save_progress(self, *, acting: bool = False) -> None:
        """Keep :meth:`progress` as group ``CID_RMQ_SYS_TRANS``'s offsets (written with the
        consumer offsets); on a replica only when it acts for its master (``acting``),
        the table then being the one it rebuilt from its copy of the log."""
        if self.store.replica and not acting:
            return
        if not acting and not self.table and not self._ops \
                and self.topics.get(HALF_TOPIC) is None:
            return
        half, op = self.progress()
        self.offsets.commit(PROGRESS_GROUP, HALF_TOPIC, HALF_QUEUE, half)
        self.offsets.commit(PROGRESS_GROUP, OP_TOPIC, HALF_QUEUE, op)

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _half(props: dict[str, str], offset: int, phys: int, stored_ms: int) -> HalfMessage:
        checks = props.get(CHECK_TIMES, "0")
        return HalfMessage(
            key=props.get(PropertyKey.UNIQ_KEY) or f"@{offset}",
            group=props.get(PRODUCER_GROUP, ""), topic=props.get(PropertyKey.REAL_TOPIC, ""),
            offset=offset, phys=phys, stored_ms=stored_ms,
            checks=int(checks) if _is_count(checks) else 0)

    def _end(self, msg: HalfMessage) -> None:
        """Store the op message ending every copy of ``msg``, then forget it."""
        self._ensure_topic(OP_TOPIC)
        body = encode_op_body(msg.offsets())
        props = encode_properties({PropertyKey.TAGS: OP_TAG})
        try:
            result = self.store.put(OP_TOPIC, HALF_QUEUE,
                                    MessageInput(body, props, 0, tags_code(OP_TAG)),
                                    sys_flag=0, born_timestamp=self.store.clock(),
                                    born_host=self.store.store_host, wait_flush=False)
        except StoreReadOnly as exc:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc)) from None
        self._ops.append((result.queue_offset, max(msg.offsets())))
        self.table.remove(msg)

    @staticmethod
    def _committed(rec: Record) -> tuple[str, int, bytes]:
        """Where the committed copy of half message ``rec`` goes, and its properties."""
        props = decode_properties(rec.properties)
        target = props.get(PropertyKey.REAL_TOPIC, "")
        queue = props.get(PropertyKey.REAL_QID, "")
        if not target or not queue.isdigit() or len(queue) > 9:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"the half message at {rec.physical_offset} has no "
                                 "REAL_TOPIC/REAL_QID")
        for name in _HALF_ONLY:
            props.pop(name, None)
        raw = encode_properties(props)
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        return target, int(queue), raw

    def _store(self, topic: str, queue_id: int, rec: Record, raw: bytes, sys_flag: int, *,
               index: bool, prepared: int = 0) -> PutResult:
        """Store ``rec`` anew with properties ``raw``; ``prepared``: the commit-log offset
        of the half message a committed copy names (its PREPAREDTRANSACTIONOFFSET)."""
        props = decode_properties(raw)
        keys: tuple[str, ...] = ()
        if index:
            keys = tuple(k for k in (props.get(PropertyKey.UNIQ_KEY),
                                     *props.get(PropertyKey.KEYS, "").split(" ")) if k)
        msg = MessageInput(bytes(rec.body), raw, rec.flag, tags_code(props.get("TAGS")), keys)
        try:
            if prepared:
                return self.store.put_batch(
                    topic, queue_id, (msg,), sys_flag=sys_flag,
                    born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                    reconsume_times=rec.reconsume_times, wait_flush=False,
                    prepared_tx_offset=prepared)
            return self.store.put(topic, queue_id, msg, sys_flag=sys_flag,
                                  born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                                  reconsume_times=rec.reconsume_times, wait_flush=False)
        except MessageTooLarge as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        except StoreReadOnly as exc:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc)) from None

    def _read(self, phys: int) -> Record:
        view = self.store.read_record(phys)
        try:
            rec = decode_record(view, expected_physical_offset=phys) if view else None
        except CorruptRecord:
            rec = None
        if not isinstance(rec, Record):
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"the half message at commit-log offset {phys} cannot be "
                                 "read")
        return rec

    def _records(self, topic: str, start: int = 0) -> Iterator[Record]:
        """Every readable record of ``topic`` queue 0 from offset ``start``, in queue
        order."""
        offset = max(start, self.store.min_offset(topic, HALF_QUEUE))
        while True:
            res = self.store.get(topic, HALF_QUEUE, offset, _READ_BATCH, _READ_BYTES)
            if res.status is GetStatus.FOUND:
                for buf in res.buffers:
                    pos = 0
                    while pos < len(buf):
                        try:
                            rec = decode_record(buf, pos)
                        except CorruptRecord as exc:
                            log.error("%s: a damaged record skipped: %s", topic, exc)
                            break
                        if not isinstance(rec, Record):
                            break
                        yield rec
                        pos += rec.total_size
            elif res.status not in _SKIPPING or res.next_begin_offset == offset:
                return
            if res.next_begin_offset <= offset:
                return
            offset = res.next_begin_offset

    def _ensure_topic(self, topic: str) -> None:
        if self.topics.get(topic) is None:
            self.topics.upsert(TopicConfig(topic_name=topic, read_queue_nums=1,
                                           write_queue_nums=1, perm=PERM_READ | PERM_WRITE))
            self._topics_changed()
