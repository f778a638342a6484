"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The processor is a plain function (no task per request): it validates, appends to the
store and answers at once under ASYNC_FLUSH. Batches are split into one record per entry
on ordinary topics (outer batch, remoting.md §3.2).

One path for every send: the header's fields are read straight from the ext map
(:func:`decode_send_fields`) when they are plain numbers and deciding needs nothing else;
otherwise -- odd numbers, a topic to auto-create, a retry topic, a delay or timer -- the
header schema is decoded (it also names what is wrong). Then one function decides
(writable topic and queue, LMQ and inner-batch rules, retry/DLQ and delay routes) and
stores; a message's property text is parsed once, for its keys, WAIT and tags (the rules
of :mod:`tidemq.formats.properties`). An inner batch (RIP-26: a batch to a BatchCQ
topic with a batch-level UNIQ_KEY) whose fields are plain is decided, stored and
answered by one call of its own, with the same checks in the same order; a batch to a
BatchCQ topic without that key, or naming an LMQ, goes on to the one path before
anything is stored. Batch bodies are split by
:mod:`tidemq.broker.processors.batch_split` (columns for the usual uniform batch); the
offset message ids of the reply are one hex conversion.

SYNC_FLUSH: sends waiting for durability wait for their group commit
(:mod:`tidemq.broker.group_commit`) and are answered then.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Literal, cast, overload

from tidemq.broker.context import BrokerContext
from tidemq.broker.group_commit import GroupCommitWaiters
from tidemq.broker.lmq import batch_lmq_targets, names_lmqs, parent_refusal, parse_lmq_targets
from tidemq.broker.processors.batch_split import (
    NO_BATCH_FAN_OUT,
    UNIFORM_SMALL,
    BatchSplitter,
    inner_shape,
    new_input,
)
from tidemq.broker.processors.child_columns import column_puts
from tidemq.broker.processors.decode import decoded
from tidemq.broker.processors.retry import route_send
from tidemq.broker.topics import (
    PERM_WRITE,
    RETRY_PREFIX,
    SEND_FORBIDDEN_TOPICS,
    validate_topic,
)
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.command import (
    FLAG_RESPONSE,
    TIDEMQ_VERSION,
    PlainText,
    RemotingCommand,
    RequestCode,
)
from tidemq.codec.compression import CompressionType, compression_of, decompress
from tidemq.codec.headers import (
    SendFields,
    SendMessageRequestHeader,
    decode_send_fields,
    decode_send_header,
)
from tidemq.codec.shared_send import PlainAnswer, SendEntry, new_answer
from tidemq.codec.transaction import HALF_TOPIC
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    ResponseCode,
    StoreReadOnly,
    TopicRefused,
    error_for_code,
)
from tidemq.formats.hashing import tags_code
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    encode_properties,
    index_keys,
    names_start,
    parse_checked_property_text,
    parse_property_text,
    text_without,
    user_keys,
    wants_flush,
)
from tidemq.formats.record import HostAddr, pack_host
from tidemq.formats.record.inner_send import inner_facts
from tidemq.formats.record.loops import joined_offset_ids, offset_ids
from tidemq.net import Connection
from tidemq.store.index_keys import KeyWords
from tidemq.store.message_store import MessageInput, PutResult

__all__ = ["SendProcessor"]

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_INNER_BATCH = 0x80
_SEND = RequestCode.SEND_MESSAGE
_SEND_V2 = RequestCode.SEND_MESSAGE_V2
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_SUCCESS = int(ResponseCode.SUCCESS)
_TIMEOUT = int(ResponseCode.FLUSH_DISK_TIMEOUT)
#: The remark of each answer that is not SUCCESS but still carries the stored message.
_REMARKS = {
    _TIMEOUT: "flush disk timeout",
    int(ResponseCode.SLAVE_NOT_AVAILABLE): "slave not available: fewer replicas in sync "
                                           "than the send waits for",
    int(ResponseCode.FLUSH_SLAVE_TIMEOUT): "flush slave timeout: the replicas did not "
                                           "confirm the message in time",
    int(ResponseCode.SERVICE_NOT_AVAILABLE): "not master: this broker's lease from the "
                                             "controllers lapsed while the message waited; "
                                             "it is stored here but not acknowledged",
}
_NOT_MASTER = int(ResponseCode.SERVICE_NOT_AVAILABLE)
_STORED_ONLY = frozenset({PutResult})
#: KEYS of at least this many characters are handed to the key index as their text
#: (:class:`~tidemq.store.index_keys.KeyWords`), not as a string per key.
_WORDS_FROM = 512
#: The properties whose send reads the whole header (:meth:`SendProcessor._needs_header`):
#: a delay, a timer, a transactional half message.
_HEADER_NAMES = ("DELAY\x01", "TIMER_", "TRAN_MSG\x01")
#: The properties of a fan-out (and of its offsets, which a sender may not give).
_INNER_NAMES = ("INNER_",)
#: A single message's key: of a compressed body, one message's, not an inner batch's.
_UNIQ_NAME = ("UNIQ_KEY\x01",)
_FIRST = itemgetter(0)
#: A shared send entry's property text.
_TEXT = itemgetter(4)
#: A durable-wait entry: connection, request, reply queue id, put result, batchUniqId.
_Pending = tuple[Connection, RemotingCommand, int, PutResult, str | None]
_REPLICA_REFUSAL = ("this broker is a replica (brokerRole SLAVE): messages are put to its "
                    "master")
_LAPSED = ("not master: this broker's lease from the controllers lapsed (it cannot reach "
           "them); send to the group's master")


def _store_refusal(exc: MessageTooLarge | StoreReadOnly | TopicRefused | ValueError
                   ) -> Exception:
    """The response error for a put the store refused: a read-only store is
    SERVICE_NOT_AVAILABLE, a topic whose deletion is under way TOPIC_NOT_EXIST (as the
    send would find it in the topic table), anything about the message itself
    MESSAGE_ILLEGAL."""
    if isinstance(exc, TopicRefused):
        return error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                              f"topic[{exc.topic}] not exist, apply first please!")
    code = (ResponseCode.SERVICE_NOT_AVAILABLE if isinstance(exc, StoreReadOnly)
            else ResponseCode.MESSAGE_ILLEGAL)
    return error_for_code(code, str(exc))


def _offset_ids(prefix: str, phys: Sequence[int]) -> str:
    """The offset message ids of a batch's records at ``phys`` joined by commas: each is
    ``prefix`` and the offset as 16 upper-case hex digits. Records of one size (``phys``
    a range) are one :func:`~tidemq.formats.record.loops.offset_ids` call; beyond a few
    records, :func:`~tidemq.formats.record.loops.joined_offset_ids` instead of a format per
    record."""
    if type(phys) is range:
        return offset_ids(prefix, phys.start, phys.step, len(phys))
    if len(phys) < UNIFORM_SMALL:
        return ",".join(map(f"{prefix}%016X".__mod__, phys))
    return joined_offset_ids(prefix, phys)


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self._cluster_prop = f"CLUSTER\x01{cfg.broker_cluster_name}\x02".encode()
        #: What encode_properties writes for CLUSTER set to the cluster's name.
        self._cluster_pair = self._cluster_prop if cfg.broker_cluster_name else b""
        self._region = cfg.region_id
        self._trace = "true" if cfg.trace_on else "false"
        self._max_body = cfg.max_message_size
        self._index = ctx.store_config.message_index_enable
        self._hosts: dict[str, HostAddr] = {}
        self._max_inflated = cfg.max_inner_batch_inflated_bytes
        self._topics = ctx.topics
        #: Names of existing topics already checked by validate_topic.
        self._valid_names: set[str] = set()
        #: Topics :meth:`_writable` let sends store in, with the topic table's data version
        #: it read: the decision holds while the version is the same object (every change
        #: to the table steps it, and so does a change of the broker's permission).
        self._decided: dict[str, tuple[object, TopicConfig]] = {}
        self._sync = ctx.store_config.sync_flush
        self._waiters: GroupCommitWaiters | None = None
        self._replication = ctx.replication
        #: Controller mode: a master acknowledges only while its lease holds (or what its
        #: sync-state set confirmed, when configured).
        self._standing = ctx.replication.standing
        ctx.replication.complete = self._replicated
        self._id_host: HostAddr | None = None
        self._id_prefix = ""
        #: The BatchCQ topics (the store's set, changed in place).
        self._batch_topics = ctx.store.queues.batch_topics
        self._splitter = BatchSplitter(max_body=self._max_body, cluster_prop=self._cluster_prop,
                                       index=self._index, message=self._message)

    def register(self, server: object) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.process)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ validation

    def _header(self, cmd: RemotingCommand) -> SendMessageRequestHeader:
        return decoded(lambda: decode_send_header(cmd.code, cmd.ext_fields))

    def _needs_header(self, fields: SendFields) -> bool:
        """Whether deciding this send reads header fields :data:`SendFields` lacks: the
        auto-create template of a topic that does not exist yet, the retry rules'
        optional numbers (retry topics), the original header for a delay, a timer or a
        transactional half message."""
        topic, text = fields[0], fields[5]
        return (self._topics.get(topic) is None or topic.startswith(RETRY_PREFIX)
                or (text is not None and names_start(text, _HEADER_NAMES)))

    def _queue(self, topic: str, qid: int, h: SendMessageRequestHeader | None) -> int:
        """The queue a send to ``topic`` is stored in: the topic's name is valid, it
        exists (or is auto-created from ``h``'s template), topic and broker are writable
        (:meth:`_writable`) and ``qid`` is one of its queues (negative: a random write
        queue)."""
        decided = self._decided.get(topic)
        if decided is not None and decided[0] is self._topics.data_version:
            tc = decided[1]
        else:
            tc = self._writable(topic, h)
        if qid < 0:
            return random.randrange(tc.write_queue_nums)
        if qid >= tc.read_queue_nums and qid >= tc.write_queue_nums:
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{qid}] is illegal, topic:[{topic}] topicConfig.writeQueueNums:"
                f"[{tc.write_queue_nums}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        return qid

    def _writable(self, topic: str, h: SendMessageRequestHeader | None) -> TopicConfig:
        """``topic``'s configuration when sends may store in it (see :meth:`_queue`),
        noted in :attr:`_decided` for the next sends."""
        version = self._topics.data_version  # read before the table
        tc = self._topics.get(topic)
        if tc is None or topic not in self._valid_names:
            if topic in SEND_FORBIDDEN_TOPICS:  # upstream's isNotAllowedSendTopic
                raise error_for_code(ResponseCode.NO_PERMISSION,
                                     f"Sending message to topic[{topic}] is forbidden.")
            why = validate_topic(topic, allow_system=True)
            if why is not None:
                raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
            if tc is None:
                assert h is not None  # see _needs_header
                tc = self._topics.create_on_send(topic, h.default_topic,
                                                 h.default_topic_queue_nums)
                if tc is None:
                    raise error_for_code(
                        ResponseCode.TOPIC_NOT_EXIST,
                        f"topic[{topic}] not exist, apply first please!",
                    )
                self.ctx.topics_changed()
            if len(self._valid_names) > 65536:
                self._valid_names.clear()
            self._valid_names.add(topic)
        if not tc.perm & PERM_WRITE or not self.ctx.config.broker_permission & PERM_WRITE:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the topic[{topic}] sending is forbidden")
        if len(self._decided) > 65536:
            self._decided.clear()
        self._decided[topic] = (version, tc)
        return tc

    def _message(self, body: bytes | bytearray | memoryview, props_text: str | None,
                 flag: int) -> tuple[MessageInput, bool]:
        """The store input for one message, and whether the producer waits for the flush:
        the property text is checked and parsed once, for the keys, WAIT and tags."""
        msg, props = self._input(body, props_text, flag)
        return msg, props is None or wants_flush(props)

    def _input(self, body: bytes | bytearray | memoryview, props_text: str | None,
               flag: int) -> tuple[MessageInput, dict[str, str] | None]:
        """:meth:`_message`'s store input, and the parsed properties (``None``: the
        message has none) for what else the caller reads from them."""
        if len(body) > self._max_body:
            raise MessageTooLarge(len(body), self._max_body)
        if not props_text:
            return new_input((body, self._cluster_prop, flag, 0, ())), None
        props = parse_checked_property_text(props_text)
        if isinstance(props, str):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, props)
        raw = props_text.encode("utf-8")
        if "CLUSTER" not in props:
            raw += self._cluster_prop
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        keys: Sequence[str] = ()
        if self._index:
            if "KEYS" in props:
                text = props["KEYS"]
                # a trace message's hundreds of msgIds: kept as their text
                keys = (KeyWords.of(props.get("UNIQ_KEY", ""), text)
                        if len(text) >= _WORDS_FROM else index_keys(props))
            elif uniq := props.get("UNIQ_KEY"):  # index_keys without user keys
                keys = (uniq,)
        tags = props.get("TAGS")
        return new_input((body, raw, flag, tags_code(tags) if tags else 0, keys)), props

    def _lmq_targets(self, topic: str, text: str | None) -> list[str]:
        if self.store.lmq is None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_DISPATCH needs enableLmq=true and "
                                 "enableMultiDispatch=true on this broker")
        props = parse_property_text(text or "")
        if "INNER_MULTI_QUEUE_OFFSET" in props:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_QUEUE_OFFSET is assigned by the broker")
        targets = parse_lmq_targets(props.get("INNER_MULTI_DISPATCH", ""), topic,
                                    self.ctx.store_config.max_lmq_targets_per_message)
        if isinstance(targets, str):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, targets)
        return targets

    def _single_targets(self, topic: str, text: str) -> Sequence[str]:
        """:meth:`_lmq_targets` of a single send whose parent topic was checked: the
        well-formed property string takes the batch decision's string search instead of
        a second parse of the properties (:meth:`_message` parsed them once)."""
        if self.store.lmq is None:
            self._lmq_targets(topic, None)  # refuses
        found = batch_lmq_targets([text], self.ctx.store_config.max_lmq_targets_per_message)
        return found[0] if found is not None else self._lmq_targets(topic, text)

    def _fan_out_batch(self, topic: str, named: str, qid: int, msgs: Sequence[MessageInput],
                       texts: list[str | None], sys_flag: int, born_timestamp: int,
                       born: HostAddr, reconsume: int) -> PutResult:
        """Store an outer batch some of whose messages name LMQs (``texts``: each one's
        property text, ``None`` for one that does not): every message's targets are
        checked as a single send's are before anything is stored."""
        if topic != named:  # parked (only a delay diverts a fan-out's parent)
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_DISPATCH cannot be combined with DELAY or "
                                 "TIMER_* properties")
        if self.store.lmq is None:
            self._lmq_targets(topic, None)  # refuses
        refusal = parent_refusal(topic)
        if refusal is not None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, refusal)
        targets: Sequence[Sequence[str]] | None = batch_lmq_targets(
            texts, self.ctx.store_config.max_lmq_targets_per_message)
        if targets is None:
            targets = [() if text is None else self._lmq_targets(topic, text)
                       for text in texts]
        return self.store.put_batch_multi_dispatch(
            topic, qid, msgs, targets, sys_flag=sys_flag, born_timestamp=born_timestamp,
            born_host=born, reconsume_times=reconsume, wait_flush=False)

    def _born_host(self, address: str) -> HostAddr:
        host = self._hosts.get(address)
        if host is None:
            if len(self._hosts) > 65536:
                self._hosts.clear()
            try:
                host = pack_host(address)
            except ValueError:
                host = self.store.store_host
            self._hosts[address] = host
        return host

    # ------------------------------------------------------------------ processing

    def _inner_batch(self, topic: str, qid: int, text: str | None, sys_flag: int,
                     born_timestamp: int, body: bytes | bytearray | memoryview, born: HostAddr
                     ) -> tuple[PutResult, bool, str] | None:
        """Store a batch sent to a BatchCQ topic as ONE record (RIP-26), or ``None`` when it
        is not an inner batch (no batch-level UNIQ_KEY: split it as an outer batch). Also
        whether the producer waits for the flush, and the batch-level UNIQ_KEY.
        ``text``, ``sys_flag``, ``born_timestamp``: the send header's fields.

        The body is never trusted: a compressed body is inflated once with a hard output
        cap (decompression bombs stop there), the entries are counted with a structural
        walk (a uniform-size proof for the usual shape), and a claimed INNER_NUM must
        match. Only the original bytes are stored; consumers decompress.

        The usual send is read by one :func:`~tidemq.formats.record.inner_send.inner_facts`
        call; any other takes :meth:`_inner_batch_read`, which also names what is wrong.
        """
        facts = None
        plain: bytes | bytearray | memoryview | CorruptRecord = body
        if text:
            if sys_flag & SYSFLAG_COMPRESSED and names_start(text, _UNIQ_NAME):
                plain = self._inflated(body, sys_flag)
            if not isinstance(plain, CorruptRecord):
                facts = inner_facts(text, plain, self._cluster_pair)
        if facts is None:
            return self._inner_batch_read(topic, qid, text, sys_flag, born_timestamp, body,
                                          plain, born)
        count, raw, uniq, keys, wait, tags = facts
        result = self.store.put_inner_batch(
            topic, qid, body, raw, count, tags_code=tags, keys=keys if self._index else (),
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born,
            wait_flush=False)
        self.ctx.stats.on_put(topic, count, len(body))
        return result, wait, uniq

    def _inflated(self, body: bytes | bytearray | memoryview, sys_flag: int
                  ) -> bytes | bytearray | memoryview | CorruptRecord:
        """A compressed inner batch's body inflated (with the hard output cap), or what
        is wrong with it (:meth:`_inner_batch_read` refuses it)."""
        try:
            return decompress(body, compression_of(sys_flag) or CompressionType.ZLIB,
                              self._max_inflated)
        except CorruptRecord as exc:
            return exc

    def _inner_batch_read(self, topic: str, qid: int, text: str | None, sys_flag: int,
                          born_timestamp: int, body: bytes | bytearray | memoryview,
                          plain: bytes | bytearray | memoryview | CorruptRecord,
                          born: HostAddr) -> tuple[PutResult, bool, str] | None:
        """:meth:`_inner_batch` of any send, its property text parsed and its body walked
        in Python. ``plain``: the body as :meth:`_inner_batch` read it -- inflated (or
        what kept it from inflating) when compressed and the text names a UNIQ_KEY, which
        an inner batch's does, else the body as sent."""
        props = parse_checked_property_text(text) if text else {}
        if isinstance(props, str):  # the text is stored as the record's properties
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, props)
        uniq = props.get("UNIQ_KEY")
        if uniq is None:
            return None
        if isinstance(plain, CorruptRecord):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"inner batch body rejected: {plain.reason}")
        try:
            count, fans_out = inner_shape(plain)
        except CorruptRecord as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"inner batch body is malformed: {exc}") from None
        if fans_out or "INNER_MULTI_DISPATCH" in props:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, NO_BATCH_FAN_OUT)
        claimed = props.get("INNER_NUM")
        if claimed is not None and claimed != str(count):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM says {claimed} but the batch holds {count} messages")
        if count == 0 or count > 0x7FFF:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"an inner batch holds 1..32767 messages, not {count}")
        # The record's properties: the pairs less INNER_NUM and INNER_BASE (the store adds
        # its own), with CLUSTER. The usual text is their encoding already, less INNER_NUM.
        cut = (text_without(text, props, "INNER_NUM")
               if text and "INNER_BASE" not in props else None)
        if cut is not None:
            raw = cut.encode("utf-8")
            if "CLUSTER" not in props:
                raw += self._cluster_pair
        else:
            stored = dict(props)
            stored.pop("INNER_NUM", None)
            stored.pop("INNER_BASE", None)
            stored.setdefault("CLUSTER", self.ctx.config.broker_cluster_name)
            raw = encode_properties(stored)
        keys = (uniq, *user_keys(props))  # the batch-level UNIQ_KEY, even an empty one
        wait = wants_flush(props)
        result = self.store.put_inner_batch(
            topic, qid, body, raw, count, tags_code=tags_code(props.get("TAGS")),
            keys=keys if self._index else (), sys_flag=sys_flag,
            born_timestamp=born_timestamp, born_host=born, wait_flush=False)
        self.ctx.stats.on_put(topic, count, len(body))
        return result, wait, uniq

    def _inner_send(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
                    ) -> RemotingCommand | Literal[False] | None:
        """:meth:`_send` of a batch to a BatchCQ topic whose property text names no LMQ,
        in one call: the same checks in the same order, the inner batch stored
        (:meth:`_inner_batch`'s reading), and answered as :meth:`_finish` answers
        any send. ``False`` before anything is stored when the batch is not an inner one
        (no batch-level UNIQ_KEY) or names an LMQ: the caller takes :meth:`_send`,
        which splits it or says what is wrong."""
        topic, qid, sys_flag, born_timestamp, _flag, text, _reconsume = fields
        if not text:
            return False
        self._check_taker(topic)
        if names_start(text, _INNER_NAMES) and names_lmqs(text):
            return False  # _send refuses it
        qid = self._queue(topic, qid, None)
        body = cmd.body
        born = self._born_host(conn.remote_address)
        try:  # what _send's store refusals cover: the reading and the put
            plain: bytes | bytearray | memoryview | CorruptRecord = body
            if sys_flag & SYSFLAG_COMPRESSED and names_start(text, _UNIQ_NAME):
                plain = self._inflated(body, sys_flag)
            facts = (inner_facts(text, plain, self._cluster_pair)
                     if not isinstance(plain, CorruptRecord) else None)
            if facts is None:
                inner = self._inner_batch_read(topic, qid, text, sys_flag, born_timestamp,
                                               body, plain, born)
                if inner is None:
                    return False
                result, wait, uniq = inner
            else:
                count, raw, uniq, keys, wait, tags = facts
                result = self.store.put_inner_batch(
                    topic, qid, body, raw, count, tags_code=tags,
                    keys=keys if self._index else (), sys_flag=sys_flag,
                    born_timestamp=born_timestamp, born_host=born, wait_flush=False)
                self.ctx.stats.on_put(topic, count, len(body))
        except (MessageTooLarge, StoreReadOnly, TopicRefused, ValueError) as exc:
            raise _store_refusal(exc) from None
        return self._finish(conn, cmd, qid, result, wait, uniq)

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        is_batch = code == _SEND_BATCH
        if is_batch or code in (_SEND_V2, _SEND):
            fields = decode_send_fields(code, cmd.ext_fields, batch=is_batch)
            if fields is not None and not self._needs_header(fields):
                if is_batch and fields[0] in self._batch_topics:
                    answer = self._inner_send(conn, cmd, fields)
                    if answer is not False:
                        return answer
                return self._send(conn, cmd, fields, None, is_batch, False)
        h = self._header(cmd)
        fields = (h.topic, h.queue_id, h.sys_flag, h.born_timestamp, h.flag, h.properties,
                  h.reconsume_times or 0)
        return self._send(conn, cmd, fields, h, is_batch or h.batch, False)

    def child(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
              ) -> RemotingCommand | PlainAnswer | bool | None:
        """A shared send parent's child from ``fields`` already read (its ext may be
        empty): the answer -- a success answered at once as a
        :class:`~tidemq.codec.shared_send.PlainAnswer` (no command made for it),
        ``None`` when answered later (SYNC_FLUSH) -- or ``False`` when deciding it needs
        header fields the child lacks (see :meth:`_needs_header`): nothing was done, and
        the caller runs the registered processor on the standard child."""
        if self._needs_header(fields):
            return False
        return self._send(conn, cmd, fields, None, False, True)

    def children(self, conn: Connection, fields: SendFields, kids: Sequence[SendEntry],
                 request: Callable[[int], RemotingCommand], standard: Callable[[int], None]
                 ) -> list[PlainAnswer | RemotingCommand | Exception | None]:
        """The plain single sends of a shared send parent, each answered as
        :meth:`child` answers it, stored by one :meth:`MessageStore.put_many
        <tidemq.store.message_store.MessageStore.put_many>` (ASYNC_FLUSH without
        replicas waiting: every success is answered at once). ``fields``: what the
        children share (the topic and reconsume times of the template); ``kids``: each
        child's entry, in order; ``request(i)``: child ``i``'s request (asked for only
        when it is served on its own). The usual parent's children are read together,
        by column (:mod:`~tidemq.broker.processors.child_columns`), with the same
        outcome as read one by one. What is common to the children is decided
        once. A child fanning out to LMQs (``INNER_MULTI_DISPATCH``, no other ``INNER_``
        property) is stored with the others, its LMQs checked with theirs, and is
        refused alone as :meth:`_send` would refuse it. A child :meth:`child` would
        refuse with ``False`` is handed to ``standard(i)`` (its slot is ``None``), a
        child naming other ``INNER_`` properties goes through :meth:`child`'s own path,
        each after every child before it is stored: the log holds the children in their
        order."""
        out: list[PlainAnswer | RemotingCommand | Exception | None] = [None] * len(kids)
        topic, reconsume = fields[0], fields[6]
        tc = self._topics.get(topic)
        if tc is None or topic.startswith(RETRY_PREFIX):
            for i in range(len(kids)):  # every child needs the header (_needs_header)
                standard(i)
            return out
        common = self._common_refusal(topic)
        fan_common: Exception | None = None  # _send's refusal of every fan-out child
        fan_known = False
        born = self._born_host(conn.remote_address)
        batch_cq = self.store.is_batch_topic(topic)
        queues = max(tc.read_queue_nums, tc.write_queue_nums)
        lmq_on = self.store.lmq is not None  # without LMQs, _send refuses each fan-out
        if common is None:  # the usual parent: every child read by column
            usual = column_puts(kids, queues=queues, max_body=self._max_body,
                                cluster_prop=self._cluster_prop, index=self._index,
                                fan_out=lmq_on and parent_refusal(topic) is None)
            if usual is not None:
                every = list(range(len(usual)))
                text = kids[0][4]
                if text is not None and "INNER_" in text:  # one shape: every child fans out
                    self._put_children(topic, usual, every, list(every),
                                       list(map(_TEXT, kids)), born, reconsume, out)
                else:
                    self._put_children(topic, usual, every, [], [], born, reconsume, out)
                return out
        puts: list[tuple[int, MessageInput, int, int]] = []
        slots: list[int] = []
        #: The fan-out children in puts: their positions there and property texts.
        fans: list[int] = []
        texts: list[str] = []
        for i, (qid, sys_flag, born_ts, flag, text, body) in enumerate(kids):
            refusal = common
            fan: str | None = None
            if text is not None and names_start(text, _HEADER_NAMES):
                self._put_children(topic, puts, slots, fans, texts, born, reconsume, out)
                standard(i)
                continue
            if text is not None and names_start(text, _INNER_NAMES):
                if not lmq_on or text.count("INNER_") != 1 or not names_lmqs(text):
                    # other INNER_ properties: _send checks them in its order
                    self._put_children(topic, puts, slots, fans, texts, born, reconsume, out)
                    try:
                        out[i] = self._send(conn, request(i), (topic, qid, sys_flag,
                                                               born_ts, flag, text,
                                                               reconsume), None, False, True)
                    except Exception as exc:
                        out[i] = exc
                    continue
                if not fan_known:  # what _send checks of a fan-out before its queue
                    fan_common = self._fan_out_refusal(topic, common)
                    fan_known = True
                refusal = fan_common
                fan = text
            if refusal is not None:
                out[i] = refusal
                continue
            try:
                if qid >= queues:
                    self._queue(topic, qid, None)  # refuses with the queue's remark
                if sys_flag & SYSFLAG_INNER_BATCH and not batch_cq:
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                         f"INNER_BATCH flag on {topic}, which is not a "
                                         "BatchCQ topic")
                try:
                    msg = self._input(body, text, flag)[0]
                except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
                    raise _store_refusal(exc) from None
            except Exception as exc:
                out[i] = exc
                continue
            if fan is not None:
                fans.append(len(puts))
                texts.append(fan)
            puts.append((qid, msg, sys_flag, born_ts))
            slots.append(i)
        self._put_children(topic, puts, slots, fans, texts, born, reconsume, out)
        return out

    def _fan_out_refusal(self, topic: str, common: Exception | None) -> Exception | None:
        """What :meth:`_send` refuses every fan-out child of ``topic`` with: ``common``
        unless the topic may not carry fan-outs, which is checked after the broker may
        take the send and before the topic's queues."""
        try:
            self._check_taker(topic)
        except Exception as exc:
            return exc
        refusal = parent_refusal(topic)
        if refusal is not None:
            return error_for_code(ResponseCode.MESSAGE_ILLEGAL, refusal)
        return common

    def _common_refusal(self, topic: str) -> Exception | None:
        """What :meth:`_send` refuses every plain child of ``topic`` with (its checks
        that do not depend on the message), or ``None``."""
        try:
            self._check_taker(topic)
            self._writable(topic, None)
        except Exception as exc:
            return exc
        return None

    def _check_taker(self, topic: str) -> None:
        """Refuse a send to ``topic`` that this broker may not take whatever the message:
        a replica, a master whose lease lapsed, an LMQ named directly."""
        if self.store.replica:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE, _REPLICA_REFUSAL)
        if self._standing is not None and not self._standing.may_take():
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE, _LAPSED)
        # A name in _valid_names passed _queue, so it is no LMQ (checked first).
        if topic not in self._valid_names and self.store.is_lmq(topic):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"{topic} is a light message queue: send to its parent "
                                 "topic with INNER_MULTI_DISPATCH naming it")

    def _fan_targets(self, topic: str, puts: list[tuple[int, MessageInput, int, int]],
                     slots: list[int], fans: list[int], texts: list[str],
                     out: list[PlainAnswer | RemotingCommand | Exception | None]
                     ) -> list[Sequence[str]]:
        """The LMQs each of ``puts`` fans out to (``fans``: the fan-outs' positions,
        ``texts``: their property texts), decided together as a batch's are; when one
        needs more, each is decided as a single send's, and a child refused for its
        LMQs gets its answer in ``out`` and leaves ``puts`` and ``slots``."""
        targets: list[Sequence[str]] = [()] * len(puts)
        found: Sequence[Sequence[str]] | None = batch_lmq_targets(
            cast("list[str | None]", texts), self.ctx.store_config.max_lmq_targets_per_message)
        if found is not None:
            for at, names in zip(fans, found, strict=True):
                targets[at] = names
            return targets
        refused: list[int] = []
        for at, text in zip(fans, texts, strict=True):
            try:
                targets[at] = self._single_targets(topic, text)
            except Exception as exc:
                out[slots[at]] = exc
                refused.append(at)
        for at in reversed(refused):
            del puts[at], slots[at], targets[at]
        return targets

    def _put_children(self, topic: str, puts: list[tuple[int, MessageInput, int, int]],
                      slots: list[int], fans: list[int], texts: list[str], born: HostAddr,
                      reconsume: int,
                      out: list[PlainAnswer | RemotingCommand | Exception | None]
                      ) -> None:
        """Store the children gathered in ``puts`` (their slots in ``out``; ``fans``
        and ``texts``: the fan-outs among them, see :meth:`_fan_targets`), then empty
        the lists."""
        if not puts:
            return
        if fans:
            targets = self._fan_targets(topic, puts, slots, fans, texts, out)
            fans.clear()
            texts.clear()
            results = (self.store.put_many(topic, puts, born_host=born,
                                           reconsume_times=reconsume, wait_flush=False,
                                           targets=targets) if puts else [])
        else:
            results = self.store.put_many(topic, puts, born_host=born,
                                          reconsume_times=reconsume, wait_flush=False)
        self._msg_id_prefix()
        prefix, region, trace = self._id_prefix, self._region, self._trace
        if results and set(map(type, results)) == _STORED_ONLY:  # every put stored
            _status, offsets, phys, sizes, *_rest = zip(*results, strict=True)
            answers = list(map(new_answer, zip(
                map(f"{prefix}%016X".__mod__, map(_FIRST, phys)), map(_FIRST, puts), offsets,
                repeat(region), repeat(trace))))
            if len(slots) == len(out):  # every child, in order
                out[:] = answers
            else:
                for i, answer in zip(slots, answers, strict=True):
                    out[i] = answer
            self.ctx.stats.on_put(topic, len(answers), sum(map(_FIRST, sizes)))
            puts.clear()
            slots.clear()
            return
        count = nbytes = 0
        for i, (qid, _msg, _f, _b), result in zip(slots, puts, results, strict=True):
            if isinstance(result, Exception):
                out[i] = (_store_refusal(result) if isinstance(
                    result, MessageTooLarge | StoreReadOnly | TopicRefused | ValueError)
                    else result)
                continue
            count += 1
            nbytes += result.sizes[0]
            out[i] = new_answer((f"{prefix}{result.phys_offsets[0]:016X}", qid,
                                  result.queue_offset, region, trace))
        if count:
            self.ctx.stats.on_put(topic, count, nbytes)
        puts.clear()
        slots.clear()

    @overload
    def _send(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              h: SendMessageRequestHeader | None, is_batch: bool, plain: Literal[False]
              ) -> RemotingCommand | None: ...
    @overload
    def _send(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              h: SendMessageRequestHeader | None, is_batch: bool, plain: Literal[True]
              ) -> RemotingCommand | PlainAnswer | None: ...

    def _send(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              h: SendMessageRequestHeader | None, is_batch: bool, plain: bool
              ) -> RemotingCommand | PlainAnswer | None:
        """The one send path: decide from the facts read once (``fields``; ``h``, the
        decoded header, when :meth:`_needs_header` asked for it), then store.
        ``plain``: a success answered at once is a
        :class:`~tidemq.codec.shared_send.PlainAnswer`. Every check comes before the
        append."""
        topic, qid, sys_flag, born_timestamp, flag, text, reconsume = fields
        self._check_taker(topic)
        told = text or ""
        inner_props = "INNER_" in told  # one search of the usual text
        if inner_props and names_lmqs(told):
            refusal = parent_refusal(topic)
            if refusal is not None:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, refusal)
        qid = self._queue(topic, qid, h)
        batch_cq = topic in self._batch_topics
        if sys_flag & SYSFLAG_INNER_BATCH and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_BATCH flag on {topic}, which is not a BatchCQ topic")
        if inner_props and "INNER_NUM\x01" in told and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM on {topic}, which is not a BatchCQ topic")
        reply_qid, named = qid, topic
        if h is not None:
            # remoting.md §2.7 steps 5-6: a retry may go to the DLQ, a delay to its parking
            # queue (without retry topic, DELAY or TIMER_ the route is the send's own).
            h, qid, reply_qid = route_send(self.ctx, h, qid, cmd.version, is_batch)
            topic, text, reconsume = h.topic, h.properties, h.reconsume_times or 0
            sys_flag = h.sys_flag
        born = self._born_host(conn.remote_address)
        try:
            if is_batch:
                inner = (self._inner_batch(topic, qid, text, sys_flag, born_timestamp,
                                           cmd.body, born) if batch_cq else None)
                if inner is not None:
                    return self._finish(conn, cmd, qid, inner[0], inner[1], inner[2])
                splitter = self._splitter
                uniform = splitter.uniform(cmd.body)  # the usual batch: no fan-out
                if uniform is not None:
                    (msgs, wait), fan_out = uniform, None
                else:
                    msgs, wait, fan_out = splitter.walk_fan_out(cmd.body)
                if fan_out is None:
                    result = self.store.put_batch(
                        topic, qid, msgs, sys_flag=sys_flag, born_timestamp=born_timestamp,
                        born_host=born, reconsume_times=reconsume, wait_flush=False)
                else:
                    result = self._fan_out_batch(topic, named, qid, msgs, fan_out, sys_flag,
                                                 born_timestamp, born, reconsume)
            elif text is not None and names_lmqs(text):
                if topic != named:  # parked (only a delay diverts a fan-out's parent)
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                         "INNER_MULTI_DISPATCH cannot be combined with "
                                         "DELAY or TIMER_* properties")
                msg, wait = self._message(cmd.body, text, flag)
                result = self.store.put_multi_dispatch(
                    topic, qid, msg, self._single_targets(topic, text), sys_flag=sys_flag,
                    born_timestamp=born_timestamp, born_host=born,
                    reconsume_times=reconsume, wait_flush=False)
            else:
                msg, wait = self._message(cmd.body, text, flag)
                result = self.store.put(
                    topic, qid, msg, sys_flag=sys_flag, born_timestamp=born_timestamp,
                    born_host=born, reconsume_times=reconsume, wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, TopicRefused, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(topic, result.count, result.stored_bytes)
        if h is not None and topic == HALF_TOPIC:
            self.ctx.transactions.prepared(result, text)
        if plain:
            if wait and (self._sync or self._replication.acks is not None):
                code = self._wait(result, (conn, cmd, reply_qid, result, None))
                if code is None:
                    return None
                if code != _SUCCESS:
                    return self._response(cmd, reply_qid, result, code)
            return PlainAnswer(self._msg_id(result), reply_qid, result.queue_offset,
                               self._region, self._trace)
        return self._finish(conn, cmd, reply_qid, result, wait)

    def _durability(self) -> GroupCommitWaiters:
        waiters = self._waiters
        if waiters is None:
            flusher = self.store.flusher
            assert flusher is not None  # a started store
            waiters = self._waiters = GroupCommitWaiters(flusher, self._durable)
        return waiters

    def _wait(self, result: PutResult, item: _Pending) -> int | None:
        """Wait for the group commit (SYNC_FLUSH), then for the replicas (SYNC_MASTER):
        ``None`` when the answer comes later, else its code now."""
        end = result.phys_offsets[-1] + result.sizes[-1]
        if self._sync and self._durability().wait(end, item):
            return None  # _durable goes on to the replicas
        acks = self._replication.acks
        return _SUCCESS if acks is None else acks.wait(end, item)

    def _durable(self, item: _Pending, durable: bool) -> None:
        conn, cmd, qid, result, uniq = item
        code: int | None = _TIMEOUT
        if durable:
            acks = self._replication.acks
            code = (_SUCCESS if acks is None
                    else acks.wait(result.phys_offsets[-1] + result.sizes[-1], item))
        if code is not None:  # else _replicated answers it
            conn.send_response(self._response(cmd, qid, result, self._leased(code, result),
                                              uniq))

    def _replicated(self, item: _Pending, code: int) -> None:
        conn, cmd, qid, result, uniq = item
        conn.send_response(self._response(cmd, qid, result, self._leased(code, result), uniq))

    def _leased(self, code: int, result: PutResult) -> int:
        """``code`` for a send answered after waiting, unless it is a success this master
        may no longer give: its lease lapsed meanwhile (and, when that is allowed, its
        sync-state set has not confirmed the message)."""
        if (code == _SUCCESS and self._standing is not None
                and not self._standing.acknowledges(result.phys_offsets[-1] + result.sizes[-1])):
            return _NOT_MASTER
        return code

    def _finish(self, conn: Connection, cmd: RemotingCommand, qid: int, result: PutResult,
                wait: bool, uniq: str | None = None) -> RemotingCommand | None:
        """The reply (``None``: answered at the group commit or when the replicas hold
        it); ``uniq``: its batchUniqId."""
        if wait and (self._sync or self._replication.acks is not None):
            code = self._wait(result, (conn, cmd, qid, result, uniq))
            if code is None:
                return None
            return self._response(cmd, qid, result, code, uniq)
        return self._response(cmd, qid, result, _SUCCESS, uniq)

    def _msg_id_prefix(self) -> None:
        """Keep :attr:`_id_prefix` that of the store's host: the offset id of physical
        offset p is the prefix and p as 16 upper-case hex digits."""
        host = self.store.store_host
        if host is not self._id_host:
            self._id_prefix = encode_offset_msg_id(host, 0)[:-16]
            self._id_host = host

    def _msg_id(self, result: PutResult) -> str:
        """The offset message id(s) of what ``result`` stored, joined by commas."""
        if self.store.store_host is not self._id_host:
            self._msg_id_prefix()
        prefix = self._id_prefix
        phys = result.phys_offsets
        if type(phys) is range:  # a uniform batch's records (_offset_ids without the call)
            return PlainText(offset_ids(prefix, phys.start, phys.step, len(phys)))
        if len(phys) == 1:
            return f"{prefix}{phys[0]:016X}"
        return PlainText(_offset_ids(prefix, phys))  # hex digits and commas

    def _response(self, cmd: RemotingCommand, qid: int, result: PutResult,
                  code: int, batch_uniq: str | None = None) -> RemotingCommand:
        ext = {
            "msgId": self._msg_id(result),
            "queueId": str(qid),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self._region,
            "TRACE_ON": self._trace,
        }
        if batch_uniq:
            ext["batchUniqId"] = batch_uniq
        return RemotingCommand(code, cmd.opaque, FLAG_RESPONSE, "PYTHON", TIDEMQ_VERSION,
                               None if code == _SUCCESS else _REMARKS.get(code), ext, b"", None,
                               cmd.serialize_type)  # positional: keywords cost a match each
