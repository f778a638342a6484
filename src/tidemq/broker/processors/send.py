"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The processor is a plain function (no task per request): it validates, appends to the
store and answers at once under ASYNC_FLUSH. Batches are split into one record per entry
on ordinary topics (outer batch, remoting.md §3.2).

Fast path: a plain single send (SEND_MESSAGE_V2 / SEND_MESSAGE to an existing, writable,
ordinary topic; no batch, delay, timer, LMQ, inner-batch or retry-topic features; numbers
as plain digits) is read straight from the ext map (:func:`decode_send_fields`), checked,
appended and answered without the header schema object. Anything else -- every error
included -- goes the generic way, so codes and remarks are the generic path's. Batch
bodies are split by :mod:`tidemq.broker.processors.batch_split` (columns for the usual
uniform batch); the offset message ids of the reply are one hex conversion.

SYNC_FLUSH: sends waiting for durability wait for their group commit
(:mod:`tidemq.broker.group_commit`) and are answered then.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal, overload

from tidemq.broker.context import BrokerContext
from tidemq.broker.group_commit import GroupCommitWaiters
from tidemq.broker.lmq import parent_refusal, parse_lmq_targets
from tidemq.broker.processors.batch_split import (
    NO_BATCH_FAN_OUT,
    UNIFORM_SMALL,
    BatchSplitter,
    first_fans_out,
    inner_count,
    new_input,
)
from tidemq.broker.processors.decode import decoded
from tidemq.broker.processors.message_facts import index_keys, user_keys, wants_flush
from tidemq.broker.processors.retry import route_send
from tidemq.broker.topics import PERM_WRITE, RETRY_PREFIX, validate_topic
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compression_of, decompress
from tidemq.codec.headers import (
    SendFields,
    SendMessageRequestHeader,
    decode_send_fields,
    decode_send_header,
)
from tidemq.codec.shared_send import PlainAnswer
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    ResponseCode,
    StoreReadOnly,
    error_for_code,
)
from tidemq.formats.crecords import joined_offset_ids, offset_ids
from tidemq.formats.hashing import tags_code
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    decode_properties,
    encode_properties,
    parse_property_text,
    property_text_error,
)
from tidemq.formats.record import HostAddr, pack_host
from tidemq.net import Connection
from tidemq.store.lmq_store import LMQ_PREFIX
from tidemq.store.message_store import MessageInput, PutResult

__all__ = ["SendProcessor"]

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_INNER_BATCH = 0x80
_SEND = RequestCode.SEND_MESSAGE
_SEND_V2 = RequestCode.SEND_MESSAGE_V2
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_SUCCESS = int(ResponseCode.SUCCESS)
_TIMEOUT = int(ResponseCode.FLUSH_DISK_TIMEOUT)
#: Returned by the fast path for "not the plain case: take the generic path".
_GENERIC = RemotingCommand(code=-1)
#: A durable-wait entry: connection, request, reply queue id, put result, batchUniqId.
_Pending = tuple[Connection, RemotingCommand, int, PutResult, str | None]
def _store_refusal(exc: MessageTooLarge | StoreReadOnly | ValueError) -> Exception:
    """The response error for a put the store refused: a read-only store is
    SERVICE_NOT_AVAILABLE, anything about the message itself MESSAGE_ILLEGAL."""
    code = (ResponseCode.SERVICE_NOT_AVAILABLE if isinstance(exc, StoreReadOnly)
            else ResponseCode.MESSAGE_ILLEGAL)
    return error_for_code(code, str(exc))


def _offset_ids(prefix: str, phys: Sequence[int]) -> str:
    """The offset message ids of a batch's records at ``phys`` joined by commas: each is
    ``prefix`` and the offset as 16 upper-case hex digits. Records of one size (``phys``
    a range) are one :func:`~tidemq.formats.crecords.offset_ids` call; beyond a few
    records, :func:`~tidemq.formats.crecords.joined_offset_ids` instead of a format per
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
        self._region = cfg.region_id
        self._trace = "true" if cfg.trace_on else "false"
        self._max_body = cfg.max_message_size
        self._index = ctx.store_config.message_index_enable
        self._hosts: dict[str, HostAddr] = {}
        self._max_inflated = cfg.max_inner_batch_inflated_bytes
        self._topics = ctx.topics
        self._plain_topics: set[str] = set()
        self._sync = ctx.store_config.sync_flush
        self._waiters: GroupCommitWaiters | None = None
        self._id_host: HostAddr | None = None
        self._id_prefix = ""
        self._splitter = BatchSplitter(max_body=self._max_body, cluster_prop=self._cluster_prop,
                                       index=self._index, message=self._message)

    def register(self, server: object) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.process)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ validation

    def _header(self, cmd: RemotingCommand) -> SendMessageRequestHeader:
        return decoded(lambda: decode_send_header(cmd.code, cmd.ext_fields))

    def _queue(self, h: SendMessageRequestHeader) -> int:
        why = validate_topic(h.topic)
        if why is not None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
        topics = self.ctx.topics
        tc = topics.get(h.topic)
        if tc is None:
            tc = topics.create_on_send(h.topic, h.default_topic, h.default_topic_queue_nums)
            if tc is None:
                raise error_for_code(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please!",
                )
            self.ctx.topics_changed()
        if not tc.perm & PERM_WRITE or not self.ctx.config.broker_permission & PERM_WRITE:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the topic[{h.topic}] sending is forbidden")
        qid = h.queue_id
        if qid < 0:
            return random.randrange(tc.write_queue_nums)
        if qid >= max(tc.read_queue_nums, tc.write_queue_nums):
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{qid}] is illegal, topic:[{h.topic}] topicConfig.writeQueueNums:"
                f"[{tc.write_queue_nums}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        return qid

    def _message(self, body: bytes | bytearray | memoryview, props_text: str | None,
                 flag: int) -> tuple[MessageInput, bool]:
        """The store input for one message, and whether the producer waits for the flush."""
        if len(body) > self._max_body:
            raise MessageTooLarge(len(body), self._max_body)
        raw = props_text.encode("utf-8") if props_text else b""
        problem = property_text_error(props_text) if props_text else None
        if problem is not None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, problem)
        props = parse_property_text(props_text) if props_text else {}
        if "CLUSTER" not in props:
            raw += self._cluster_prop
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        keys = index_keys(props) if self._index else ()
        return MessageInput(body, raw, flag, tags_code(props.get("TAGS")), keys), wants_flush(
            props)

    def _lmq_targets(self, h: SendMessageRequestHeader) -> list[str]:
        if self.store.lmq is None:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_DISPATCH needs enableLmq=true and "
                                 "enableMultiDispatch=true on this broker")
        props = decode_properties((h.properties or "").encode("utf-8"))
        if "INNER_MULTI_QUEUE_OFFSET" in props:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 "INNER_MULTI_QUEUE_OFFSET is assigned by the broker")
        targets = parse_lmq_targets(props.get("INNER_MULTI_DISPATCH", ""), h.topic,
                                    self.ctx.store_config.max_lmq_targets_per_message)
        if isinstance(targets, str):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, targets)
        return targets

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
        """
        problem = property_text_error(text) if text else None
        if problem is not None:  # stored as the record's properties
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, problem)
        props = decode_properties(text.encode("utf-8")) if text else {}
        uniq = props.get("UNIQ_KEY")
        if uniq is None:
            return None
        plain: bytes | bytearray | memoryview = body
        if sys_flag & SYSFLAG_COMPRESSED:
            try:
                ctype = compression_of(sys_flag) or CompressionType.ZLIB
                plain = decompress(body, ctype, self._max_inflated)
            except CorruptRecord as exc:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                     f"inner batch body rejected: {exc.reason}") from None
        try:
            count = inner_count(plain)
        except CorruptRecord as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"inner batch body is malformed: {exc}") from None
        if "INNER_MULTI_DISPATCH" in props or first_fans_out(plain):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, NO_BATCH_FAN_OUT)
        claimed = props.pop("INNER_NUM", None)
        props.pop("INNER_BASE", None)
        if claimed is not None and claimed != str(count):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM says {claimed} but the batch holds {count} messages")
        if count == 0 or count > 0x7FFF:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"an inner batch holds 1..32767 messages, not {count}")
        props.setdefault("CLUSTER", self.ctx.config.broker_cluster_name)
        raw = encode_properties(props)
        keys = (uniq, *user_keys(props))  # the batch-level UNIQ_KEY, even an empty one
        wait = wants_flush(props)
        result = self.store.put_inner_batch(
            topic, qid, body, raw, count, tags_code=tags_code(props.get("TAGS")),
            keys=keys if self._index else (), sys_flag=sys_flag,
            born_timestamp=born_timestamp, born_host=born, wait_flush=False)
        self.ctx.stats.on_put(topic, count, len(body))
        return result, wait, uniq

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code in (_SEND_V2, _SEND):
            fields = decode_send_fields(code, cmd.ext_fields)
            if fields is not None:
                response = self._fast(conn, cmd, fields)
                if response is not _GENERIC:
                    return response
        elif code == _SEND_BATCH:
            fields = decode_send_fields(code, cmd.ext_fields, batch=True)
            if fields is not None:
                response = self._fast_batch(conn, cmd, fields)
                if response is not _GENERIC:
                    return response
        return self._process(conn, cmd)

    def child(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
              ) -> RemotingCommand | PlainAnswer | bool | None:
        """A shared send parent's child from ``fields`` already read (its ext may be
        empty): the fast path's answer -- a success answered at once as a
        :class:`~tidemq.codec.shared_send.PlainAnswer` (no command made for it),
        ``None`` when answered later (SYNC_FLUSH) -- or ``False`` when it is not the
        plain case: nothing was done, and the caller runs the registered processor on
        the standard child."""
        response = self._fast(conn, cmd, fields, plain=True)
        return False if response is _GENERIC else response

    def _plain_topic(self, topic: str) -> bool:
        """Whether sends to ``topic`` may take the fast path as far as its name goes."""
        if validate_topic(topic) is not None or topic.startswith((RETRY_PREFIX, LMQ_PREFIX)):
            return False
        if len(self._plain_topics) > 65536:
            self._plain_topics.clear()
        self._plain_topics.add(topic)
        return True

    def _writable(self, topic: str, qid: int) -> bool:
        """The fast paths' checks of the topic before the body: it exists, its name
        needs no special handling, topic and broker are writable, the queue exists."""
        tc = self._topics.get(topic)
        return (tc is not None and (topic in self._plain_topics or self._plain_topic(topic))
                and bool(tc.perm & PERM_WRITE)
                and bool(self.ctx.config.broker_permission & PERM_WRITE)
                and (qid < tc.read_queue_nums or qid < tc.write_queue_nums))

    @overload
    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: Literal[False] = False) -> RemotingCommand | None: ...
    @overload
    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: Literal[True]) -> RemotingCommand | PlainAnswer | None: ...

    def _fast(self, conn: Connection, cmd: RemotingCommand, fields: SendFields,
              plain: bool = False) -> RemotingCommand | PlainAnswer | None:
        """A plain single send, or :data:`_GENERIC` when it is not one (see the module
        docstring); ``plain``: a success answered at once is a
        :class:`~tidemq.codec.shared_send.PlainAnswer`. Nothing is changed before the
        append, so falling back is safe."""
        topic, qid, sys_flag, born_timestamp, flag, text, reconsume = fields
        body = cmd.body
        if (sys_flag & SYSFLAG_INNER_BATCH or not self._writable(topic, qid)
                or self.store.is_batch_topic(topic) or len(body) > self._max_body):
            return _GENERIC
        if text:
            if ("INNER_" in text or "DELAY\x01" in text or "TIMER_" in text
                    or property_text_error(text) is not None):
                return _GENERIC
            try:
                raw = text.encode("utf-8")
            except UnicodeEncodeError:
                return _GENERIC
            props = parse_property_text(text)
            if "CLUSTER" not in props:
                raw += self._cluster_prop
            if len(raw) > MAX_PROPERTIES_BYTES:
                return _GENERIC
            keys = index_keys(props) if self._index else ()
            wait = wants_flush(props)
            msg = new_input((body, raw, flag, tags_code(props.get("TAGS")), keys))
        else:
            wait = True
            msg = new_input((body, self._cluster_prop, flag, 0, ()))
        try:
            result = self.store.put(
                topic, qid, msg, sys_flag=sys_flag, born_timestamp=born_timestamp,
                born_host=self._born_host(conn.remote_address), reconsume_times=reconsume,
                wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(topic, 1, result.sizes[0])
        if wait and self._sync and self._durability().wait(
                result.phys_offsets[0] + result.sizes[0], (conn, cmd, qid, result, None)):
            return None
        if plain:
            return PlainAnswer(self._msg_id(result), qid, result.queue_offset, self._region,
                               self._trace)
        return self._response(cmd, qid, result, _SUCCESS)

    def _fast_batch(self, conn: Connection, cmd: RemotingCommand, fields: SendFields
                    ) -> RemotingCommand | None:
        """A SEND_BATCH_MESSAGE without the header schema object, or :data:`_GENERIC`.

        Taken when every check the generic path makes before it reads the body passes
        (topic name, existing topic, permissions, queue id, INNER_* only on a BatchCQ
        topic, no retry topic, no DELAY/TIMER_ property); the body is then handled by the
        generic path's own code, so its errors are the generic path's."""
        topic, qid, sys_flag, born_timestamp, _flag, text, reconsume = fields
        if (not self._writable(topic, qid)
                or (text and ("DELAY\x01" in text or "TIMER_" in text))):
            return _GENERIC
        batch_cq = self.store.is_batch_topic(topic)
        if not batch_cq and (sys_flag & SYSFLAG_INNER_BATCH
                             or (text and "INNER_NUM\x01" in text)):
            return _GENERIC
        born = self._born_host(conn.remote_address)
        try:
            inner = (self._inner_batch(topic, qid, text, sys_flag, born_timestamp, cmd.body,
                                       born) if batch_cq else None)
            if inner is not None:
                return self._finish(conn, cmd, qid, inner[0], inner[1], inner[2])
            msgs, wait = self._splitter.split(cmd.body)
            result = self.store.put_batch(
                topic, qid, msgs, sys_flag=sys_flag, born_timestamp=born_timestamp,
                born_host=born, reconsume_times=reconsume, wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(topic, result.count, sum(result.sizes))
        return self._finish(conn, cmd, qid, result, wait)

    def _process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """The generic path: every feature and every error."""
        h = self._header(cmd)
        if self.store.is_lmq(h.topic):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"{h.topic} is a light message queue: send to its parent "
                                 "topic with INNER_MULTI_DISPATCH naming it")
        if h.properties and "INNER_MULTI_DISPATCH\x01" in h.properties:
            refusal = parent_refusal(h.topic)
            if refusal is not None:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, refusal)
        qid = self._queue(h)
        born = self._born_host(conn.remote_address)
        batch_cq = self.store.is_batch_topic(h.topic)
        if h.sys_flag & SYSFLAG_INNER_BATCH and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_BATCH flag on {h.topic}, which is not a BatchCQ topic")
        if h.properties and "INNER_NUM\x01" in h.properties and not batch_cq:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM on {h.topic}, which is not a BatchCQ topic")
        is_batch = h.batch or cmd.code == RequestCode.SEND_BATCH_MESSAGE
        # remoting.md §2.7 steps 5-6: a retry may go to the DLQ, a delay to its parking queue.
        named = h.topic
        h, qid, reply_qid = route_send(self.ctx, h, qid, cmd.version, is_batch)
        try:
            inner = (self._inner_batch(h.topic, qid, h.properties, h.sys_flag,
                                       h.born_timestamp, cmd.body, born)
                     if is_batch and batch_cq else None)
            if inner is not None:
                props = cmd.ext_fields.get("i") or cmd.ext_fields.get("properties") or ""
                uniq = decode_properties(props.encode()).get("UNIQ_KEY")
                return self._finish(conn, cmd, qid, inner[0], inner[1], uniq)
            if is_batch:
                msgs, wait = self._splitter.split(cmd.body)
                result = self.store.put_batch(
                    h.topic, qid, msgs, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=False)
            elif h.properties and "INNER_MULTI_DISPATCH\x01" in h.properties:
                if h.topic != named:  # parked (only a delay diverts a fan-out's parent)
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                         "INNER_MULTI_DISPATCH cannot be combined with "
                                         "DELAY or TIMER_* properties")
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                lmqs = self._lmq_targets(h)
                result = self.store.put_multi_dispatch(
                    h.topic, qid, msg, lmqs, sys_flag=h.sys_flag,
                    born_timestamp=h.born_timestamp, born_host=born,
                    reconsume_times=h.reconsume_times or 0, wait_flush=False)
            else:
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                result = self.store.put(
                    h.topic, qid, msg, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=False)
        except (MessageTooLarge, StoreReadOnly, ValueError) as exc:
            raise _store_refusal(exc) from None
        self.ctx.stats.on_put(h.topic, result.count, sum(result.sizes))
        return self._finish(conn, cmd, reply_qid, result, wait)

    def _durability(self) -> GroupCommitWaiters:
        waiters = self._waiters
        if waiters is None:
            flusher = self.store.flusher
            assert flusher is not None  # a started store
            waiters = self._waiters = GroupCommitWaiters(flusher, self._durable)
        return waiters

    def _durable(self, item: _Pending, durable: bool) -> None:
        conn, cmd, qid, result, uniq = item
        conn.send_response(self._response(cmd, qid, result,
                                          _SUCCESS if durable else _TIMEOUT, uniq))

    def _finish(self, conn: Connection, cmd: RemotingCommand, qid: int, result: PutResult,
                wait: bool, uniq: str | None = None) -> RemotingCommand | None:
        """The reply (``None``: answered at the group commit); ``uniq``: its batchUniqId."""
        if wait and self._sync and self._durability().wait(
                result.phys_offsets[-1] + result.sizes[-1], (conn, cmd, qid, result, uniq)):
            return None
        return self._response(cmd, qid, result, _SUCCESS, uniq)

    def _msg_id(self, result: PutResult) -> str:
        """The offset message id(s) of what ``result`` stored, joined by commas."""
        host = self.store.store_host
        if host is not self._id_host:  # the offset id of physical offset p is prefix + %016X
            self._id_prefix = encode_offset_msg_id(host, 0)[:-16]
            self._id_host = host
        prefix = self._id_prefix
        phys = result.phys_offsets
        return f"{prefix}{phys[0]:016X}" if len(phys) == 1 else _offset_ids(prefix, phys)

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
        return RemotingCommand(
            code=code, opaque=cmd.opaque, flag=FLAG_RESPONSE,
            remark=None if code == _SUCCESS else "flush disk timeout", ext_fields=ext,
            serialize_type=cmd.serialize_type)
