"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The processor is a plain function (no task per request): it validates, appends to the
store and answers at once under ASYNC_FLUSH. Under SYNC_FLUSH it answers from a callback
when the flush future completes. Batches are split into one record per entry on ordinary
topics (outer batch, remoting.md §3.2).
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from tidemq.broker.lmq import parse_lmq_targets
from tidemq.broker.processors.retry import route_send
from tidemq.broker.topics import PERM_WRITE, validate_topic
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compression_of, decompress
from tidemq.codec.headers import SendMessageRequestHeader, decode_send_header
from tidemq.errors import (
    CorruptRecord,
    MessageTooLarge,
    RemoteProtocolError,
    ResponseCode,
    StoreReadOnly,
    error_for_code,
)
from tidemq.formats.batch import count_entries, iter_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    decode_properties,
    encode_properties,
)
from tidemq.formats.record import HostAddr, pack_host
from tidemq.net import Connection
from tidemq.store.flush import FlushStatus
from tidemq.store.message_store import MessageInput, PutResult

if TYPE_CHECKING:
    from tidemq.broker.app import BrokerApp

__all__ = ["SendProcessor"]

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_INNER_BATCH = 0x80


class SendProcessor:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app
        self.store = app.store
        cfg = app.config
        self._cluster_prop = f"CLUSTER\x01{cfg.broker_cluster_name}\x02".encode()
        self._region = cfg.region_id
        self._trace = "true" if cfg.trace_on else "false"
        self._max_body = cfg.max_message_size
        self._index = app.store_config.message_index_enable
        self._hosts: dict[str, HostAddr] = {}
        self._max_inflated = cfg.max_inner_batch_inflated_bytes

    def register(self, server: object) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.process)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ validation

    def _header(self, cmd: RemotingCommand) -> SendMessageRequestHeader:
        try:
            return decode_send_header(cmd.code, cmd.ext_fields)
        except RemoteProtocolError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None

    def _queue(self, h: SendMessageRequestHeader) -> int:
        why = validate_topic(h.topic)
        if why is not None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
        topics = self.app.topics
        tc = topics.get(h.topic)
        if tc is None:
            tc = topics.create_on_send(h.topic, h.default_topic, h.default_topic_queue_nums)
            if tc is None:
                raise error_for_code(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please!",
                )
            self.app.topics_changed()
        if not tc.perm & PERM_WRITE or not self.app.config.broker_permission & PERM_WRITE:
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
        props = decode_properties(props_text.encode("utf-8")) if props_text else {}
        raw = props_text.encode("utf-8") if props_text else b""
        if "CLUSTER" not in props:
            raw += self._cluster_prop
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        keys: tuple[str, ...] = ()
        if self._index:
            uniq = props.get("UNIQ_KEY")
            ks = [k for k in props.get("KEYS", "").split(" ") if k]
            keys = ((uniq,) if uniq else ()) + tuple(ks)
        wait = props.get("WAIT", "true").lower() != "false"
        return MessageInput(body, raw, flag, tags_code(props.get("TAGS")), keys), wait

    def _batch(self, body: bytes | bytearray | memoryview) -> tuple[list[MessageInput], bool]:
        msgs: list[MessageInput] = []
        wait = True
        try:
            for entry in iter_batch(body):
                props = entry.properties.tobytes().decode("utf-8") if entry.properties else None
                if props and "INNER_MULTI_DISPATCH\x01" in props:
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                         "INNER_MULTI_DISPATCH (LMQ fan-out) is not supported "
                                         "in batches: send such messages one by one")
                m, w = self._message(entry.body, props, entry.flag)
                msgs.append(m)
                wait = wait and w
        except (CorruptRecord, UnicodeDecodeError) as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
        if not msgs:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        return msgs, wait

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
                                    self.app.store_config.max_lmq_targets_per_message)
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

    def _inner_batch(self, h: SendMessageRequestHeader, qid: int, body: bytes | bytearray |
                     memoryview, born: HostAddr, wait_default: bool = True) -> PutResult | None:
        """Store a batch sent to a BatchCQ topic as ONE record (RIP-26), or ``None`` when it
        is not an inner batch (no batch-level UNIQ_KEY: split it as an outer batch).

        The body is never trusted: a compressed body is inflated once with a hard output
        cap (decompression bombs stop there), the entries are counted with a structural
        walk (a uniform-size proof for the usual shape), and a claimed INNER_NUM must
        match. Only the original bytes are stored; consumers decompress.
        """
        props = decode_properties(h.properties.encode("utf-8")) if h.properties else {}
        if "UNIQ_KEY" not in props:
            return None
        plain: bytes | bytearray | memoryview = body
        if h.sys_flag & SYSFLAG_COMPRESSED:
            try:
                ctype = compression_of(h.sys_flag) or CompressionType.ZLIB
                plain = decompress(body, ctype, self._max_inflated)
            except CorruptRecord as exc:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                     f"inner batch body rejected: {exc.reason}") from None
        try:
            count = count_entries(plain)
        except CorruptRecord as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"inner batch body is malformed: {exc}") from None
        claimed = props.pop("INNER_NUM", None)
        props.pop("INNER_BASE", None)
        if claimed is not None and claimed != str(count):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"INNER_NUM says {claimed} but the batch holds {count} messages")
        if count == 0 or count > 0x7FFF:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"an inner batch holds 1..32767 messages, not {count}")
        props.setdefault("CLUSTER", self.app.config.broker_cluster_name)
        raw = encode_properties(props)
        keys = (props["UNIQ_KEY"], *(k for k in props.get("KEYS", "").split(" ") if k))
        wait = props.get("WAIT", "true").lower() != "false" and wait_default
        result = self.store.put_inner_batch(
            h.topic, qid, body, raw, count, tags_code=tags_code(props.get("TAGS")),
            keys=keys if self._index else (), sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp, born_host=born, wait_flush=wait)
        self.app.stats.on_put(h.topic, count, len(body))
        return result

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        h = self._header(cmd)
        if self.store.is_lmq(h.topic):
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"{h.topic} is a light message queue: send to its parent "
                                 "topic with INNER_MULTI_DISPATCH naming it")
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
        h, qid, reply_qid = route_send(self.app, h, qid, cmd.version, is_batch)
        try:
            inner = self._inner_batch(h, qid, cmd.body, born) if is_batch and batch_cq else None
            if inner is not None:
                return self._finish(conn, cmd, qid, inner, batch_uniq=True)
            if is_batch:
                msgs, wait = self._batch(cmd.body)
                result = self.store.put_batch(
                    h.topic, qid, msgs, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=wait)
            elif h.properties and "INNER_MULTI_DISPATCH\x01" in h.properties:
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                lmqs = self._lmq_targets(h)
                result = self.store.put_multi_dispatch(
                    h.topic, qid, msg, lmqs, sys_flag=h.sys_flag,
                    born_timestamp=h.born_timestamp, born_host=born,
                    reconsume_times=h.reconsume_times or 0, wait_flush=wait)
            else:
                msg, wait = self._message(cmd.body, h.properties, h.flag)
                result = self.store.put(
                    h.topic, qid, msg, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                    born_host=born, reconsume_times=h.reconsume_times or 0, wait_flush=wait)
        except MessageTooLarge as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        except StoreReadOnly as exc:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc)) from None
        except ValueError as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        self.app.stats.on_put(h.topic, result.count, sum(result.sizes))
        return self._finish(conn, cmd, reply_qid, result)

    def _finish(self, conn: Connection, cmd: RemotingCommand, qid: int, result: PutResult,
                batch_uniq: bool = False) -> RemotingCommand | None:
        uniq = None
        if batch_uniq:
            props = cmd.ext_fields.get("i") or cmd.ext_fields.get("properties") or ""
            uniq = decode_properties(props.encode()).get("UNIQ_KEY")
        if result.durable is None:
            return self._response(cmd, qid, result, ResponseCode.SUCCESS, uniq)
        fut = asyncio.wrap_future(result.durable)
        fut.add_done_callback(lambda f: conn.send_response(self._response(
            cmd, qid, result,
            ResponseCode.SUCCESS if not f.cancelled() and f.result() is FlushStatus.FLUSHED
            else ResponseCode.FLUSH_DISK_TIMEOUT, uniq)))
        return None

    def _response(self, cmd: RemotingCommand, qid: int, result: PutResult,
                  code: int, batch_uniq: str | None = None) -> RemotingCommand:
        host = self.store.store_host
        if result.count == 1:
            msg_id = encode_offset_msg_id(host, result.phys_offsets[0])
        else:
            msg_id = ",".join(encode_offset_msg_id(host, p) for p in result.phys_offsets)
        ext = {
            "msgId": msg_id,
            "queueId": str(qid),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self._region,
            "TRACE_ON": self._trace,
        }
        if batch_uniq:
            ext["batchUniqId"] = batch_uniq
        return cmd.response(code, None if code == ResponseCode.SUCCESS else "flush disk timeout",
                            ext)
