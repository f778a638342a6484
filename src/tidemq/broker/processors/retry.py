"""CONSUMER_SEND_MSG_BACK (36) and the retry/delay rules of the send path.

Send-back (remoting.md §2.11): the consumer names a record by its commit-log offset. The
broker stores a copy for the group to consume again: body, flag, sysFlag, born time and
host and properties kept; ``RETRY_TOPIC`` = the original topic (first hop only),
``ORIGIN_MESSAGE_ID`` = the original's offset message id (first hop only, as upstream),
``RECONSUME_TIME`` and RECONSUMETIMES = the record's count + 1. Where it goes:

=========================================================  =================================
condition                                                  target
=========================================================  =================================
reconsumeTimes >= maxReconsumeTimes (request value from    ``%DLQ%<group>`` queue 0, no delay
version 121 on, else the group's ``retryMaxTimes``), or
``delayLevel < 0``
otherwise                                                  ``%RETRY%<group>``, delay level
                                                           ``delayLevel``, or ``3 +
                                                           reconsumeTimes`` when it is 0
=========================================================  =================================

Send path (§2.7 steps 5 and 6, :func:`route_send`): a transactional half message
(``TRAN_MSG=true``) goes to the half topic (:mod:`tidemq.broker.half_queue`); a message
sent to ``%RETRY%<group>`` whose reconsumeTimes exceeds maxReconsumeTimes, or sent while
the group holds unexpired orderly locks (§2.13), is stored in ``%DLQ%<group>`` without
delay; any other message
carrying a delay is parked (:mod:`tidemq.broker.delay`). A batch cannot target a retry
topic or carry a delay (MESSAGE_ILLEGAL). The retry counters are read from the header
(``reconsumeTimes``, ``maxReconsumeTimes``) and, when a client left them there, from the
``RECONSUME_TIME`` / ``MAX_RECONSUME_TIMES`` properties.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections.abc import Awaitable
from typing import Any, NamedTuple

from tidemq.broker.acting_master import ActingMaster, Escape
from tidemq.broker.context import BrokerContext
from tidemq.broker.delay import (
    DELAY,
    REAL_QID,
    REAL_TOPIC,
    TIMER_PROPERTIES,
    DelayError,
    Diversion,
)
from tidemq.broker.half_queue import is_prepared
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.topics import DLQ_PREFIX, PERM_WRITE, RETRY_PREFIX, validate_topic
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
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
    decode_properties,
    encode_properties,
)
from tidemq.formats.record import Record, decode_record
from tidemq.net import Connection
from tidemq.store.flush import FlushStatus
from tidemq.store.message_store import MessageInput, PutResult

__all__ = ["RetryProcessor", "SendRoute", "ensure_group_topic", "route_send"]

#: Request version (V3_4_9) from which the consumer's maxReconsumeTimes is honoured.
V3_4_9 = 121
DLQ_QUEUE = 0
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
_INT_RE = re.compile(r"-?[0-9]{1,9}")
TIMER_OUT_MS = "TIMER_OUT_MS"
#: Properties a message loses when it goes to a DLQ or is parked again.
_PARKING = (DELAY, *TIMER_PROPERTIES, REAL_TOPIC, REAL_QID, TIMER_OUT_MS)


class SendRoute(NamedTuple):
    """Where a send is stored (``header.topic``, ``put_queue``) and which queue id the
    response reports (the one the producer chose)."""

    header: SendMessageRequestHeader
    put_queue: int
    reply_queue: int


def _int_prop(props: dict[str, str], name: str) -> int | None:
    value = props.get(name, "")
    return int(value) if _INT_RE.fullmatch(value) else None


def _group_int(cfg: dict[str, Any], key: str, default: int) -> int:
    value = cfg.get(key, default)
    return value if isinstance(value, int) else default


def ensure_group_topic(ctx: BrokerContext, topic: str) -> TopicConfig:
    """The config of a retry or DLQ topic, created (1 queue, perm 6) when missing;
    refused (SYSTEM_ERROR) while its deletion is under way: a message stored meanwhile
    would land above the deletion's mark, in queues the deletion removes, and be lost
    though its sender was answered (:mod:`tidemq.broker.topic_deletion`)."""
    tc = ctx.topics.get(topic)
    if tc is None:
        tc = ctx.topics.create_on_send(topic, topic, 1)
        if tc is None:  # the one refusal of a retry or DLQ topic
            raise error_for_code(ResponseCode.SYSTEM_ERROR, _being_deleted(topic))
        ctx.topics_changed()
    return tc


def _being_deleted(topic: str) -> str:
    return (f"topic {topic} is being deleted: send the message back once its deletion is "
            "answered")


def _group_config(ctx: BrokerContext, group: str) -> dict[str, Any]:
    why = "the group name is empty" if not group else validate_topic(RETRY_PREFIX + group)
    if why is not None:
        raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
    cfg = ctx.subscription_groups.ensure(group)
    if cfg is None:
        raise error_for_code(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                             f"subscription group not exist, {group}")
    return cfg


def _dlq(ctx: BrokerContext, group: str) -> str:
    topic = DLQ_PREFIX + group  # valid: the group passed _group_config
    ensure_group_topic(ctx, topic)
    return topic


# ---------------------------------------------------------------- send path (§2.7 steps 5, 6)


def route_send(ctx: BrokerContext, h: SendMessageRequestHeader, queue_id: int, version: int,
               is_batch: bool) -> SendRoute:
    """Decide where a send is stored: its topic, a DLQ, a delay queue, or the half topic
    of transactional messages (:mod:`tidemq.broker.half_queue`)."""
    if h.properties and "TRAN_MSG\x01" in h.properties:
        props = decode_properties(h.properties.encode("utf-8"))
        if is_prepared(props):
            if ctx.config.reject_transaction_message:
                raise error_for_code(ResponseCode.NO_PERMISSION,
                                     f"the broker[{ctx.config.broker_name}] sending "
                                     "transaction message is forbidden")
            if is_batch:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                     "a batch cannot be a transactional message")
            if "INNER_MULTI_DISPATCH" in props:
                raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                     "a transactional message cannot fan out to light "
                                     "message queues (INNER_MULTI_DISPATCH)")
            half = ctx.transactions.divert(h, props, queue_id)
            return SendRoute(half, half.queue_id, queue_id)
    if h.topic.startswith(RETRY_PREFIX):
        if is_batch:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"a batch cannot be sent to the retry topic {h.topic}")
        h, dead = _retry_or_dlq(ctx, h, version)
        if dead:
            return SendRoute(h, DLQ_QUEUE, DLQ_QUEUE)
    try:
        diversion = ctx.schedule.policy.divert(h.properties, h.topic, queue_id, h.sys_flag)
    except DelayError as exc:
        raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
    if diversion is None:
        return SendRoute(h, queue_id, queue_id)
    if is_batch:
        raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                             "a batch cannot carry DELAY or TIMER_* properties")
    parked = dataclasses.replace(h, topic=diversion.topic, properties=diversion.properties)
    return SendRoute(parked, diversion.queue_id, queue_id)


def _retry_or_dlq(ctx: BrokerContext, h: SendMessageRequestHeader, version: int
                  ) -> tuple[SendMessageRequestHeader, bool]:
    group = h.topic[len(RETRY_PREFIX):]
    cfg = _group_config(ctx, group)
    props = decode_properties(h.properties.encode("utf-8")) if h.properties else {}
    reconsume = h.reconsume_times
    if reconsume is None:
        reconsume = _int_prop(props, RECONSUME_TIME) or 0
    max_times = _group_int(cfg, "retryMaxTimes", ctx.config.max_reconsume_times)
    if version >= V3_4_9:
        asked = h.max_reconsume_times
        if asked is None:
            asked = _int_prop(props, MAX_RECONSUME_TIMES)
        if asked is not None:
            max_times = asked
    h = dataclasses.replace(h, reconsume_times=reconsume)
    if reconsume <= max_times and not ctx.locks.has_unexpired(group):
        return h, False
    for name in _PARKING:
        props.pop(name, None)
    text = encode_properties(props).decode("utf-8")
    return dataclasses.replace(h, topic=_dlq(ctx, group), properties=text or None), True


# ---------------------------------------------------------------- send-back (§2.11)


class RetryProcessor:
    def __init__(self, ctx: BrokerContext, acting: ActingMaster | None = None) -> None:
        self.ctx = ctx
        self.store = ctx.store
        #: ``slaveActingMaster``: a replica standing in for its master hands retries on.
        self.acting = acting if acting is not None else ActingMaster(ctx)

    def register(self, server: object) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)  # type: ignore[attr-defined]

    def _original(self, offset: int) -> Record:
        view = self.store.read_record(offset) if offset >= 0 else None
        try:
            rec = decode_record(view, expected_physical_offset=offset) if view else None
        except CorruptRecord:
            rec = None
        if not isinstance(rec, Record):
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"look message by offset failed, {offset}")
        return rec

    def _target(self, h: ConsumerSendMsgBackRequestHeader, cfg: dict[str, Any]
                ) -> tuple[str, int]:
        """The retry topic and queue a send-back goes to (creating the topic)."""
        ctx = self.ctx
        topic = RETRY_PREFIX + h.group
        if not ctx.config.broker_permission & PERM_WRITE:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the broker[{ctx.config.broker_name}] sending message is "
                                 "forbidden")
        tc = ensure_group_topic(ctx, topic)
        if not tc.perm & PERM_WRITE:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the topic[{topic}] sending message is forbidden")
        nums = min(_group_int(cfg, "retryQueueNums", 1), tc.write_queue_nums)
        return topic, random.randrange(max(nums, 1))

    def send_back(self, conn: Connection, cmd: RemotingCommand
                  ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        h = parse_header(ConsumerSendMsgBackRequestHeader, cmd)
        if self.acting.enabled and self.store.replica:
            return self._send_back_acting(conn, cmd, h)
        return self._send_back(conn, cmd, h)

    def _retried(self, cmd: RemotingCommand, h: ConsumerSendMsgBackRequestHeader,
                 cfg: dict[str, Any], rec: Record) -> tuple[dict[str, str], int, int]:
        """The retry copy's properties, the original's reconsume count and the count
        allowed."""
        props = decode_properties(rec.properties)
        props.setdefault(RETRY_TOPIC, rec.topic)
        for name in _PARKING:
            props.pop(name, None)
        reconsume = rec.reconsume_times
        props[ORIGIN_MESSAGE_ID] = props.get(ORIGIN_MESSAGE_ID) or encode_offset_msg_id(
            rec.store_host, rec.physical_offset)
        props[RECONSUME_TIME] = str(reconsume + 1)
        max_times = _group_int(cfg, "retryMaxTimes", self.ctx.config.max_reconsume_times)
        if cmd.version >= V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        return props, reconsume, max_times

    async def _send_back_acting(self, conn: Connection, cmd: RemotingCommand,
                                h: ConsumerSendMsgBackRequestHeader) -> RemotingCommand:
        """On a replica with ``slaveActingMaster``: while it acts for its master, the
        retry copy goes to another group's master (:mod:`tidemq.broker.acting_master`)."""
        cluster = await self.acting.acting()
        if cluster is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 "this broker is a replica (brokerRole SLAVE) and does not act "
                                 "for its master now (the name servers list the master, or a "
                                 "replica with a smaller brokerId): send it back to the master")
        cfg = _group_config(self.ctx, h.group)
        if _group_int(cfg, "retryQueueNums", 1) <= 0:
            return cmd.response()
        rec = self._original(h.offset)
        props, reconsume, max_times = self._retried(cmd, h, cfg, rec)
        text = encode_properties(props).decode("utf-8")
        dead = reconsume >= max_times or h.delay_level < 0
        if not dead:
            level = h.delay_level or 3 + reconsume
            text += encode_properties({DELAY: str(level)}).decode("utf-8")
        # The master taking it applies its retry rules: a count above the one allowed
        # sends it to %DLQ%<group> there.
        await self.acting.escape(cluster, Escape(
            RETRY_PREFIX + h.group, bytes(rec.body), text, rec.flag, rec.sys_flag,
            rec.born_timestamp, reconsume + 1,
            min(max_times, reconsume) if dead else max_times))
        return cmd.response()

    def _send_back(self, conn: Connection, cmd: RemotingCommand,
                   h: ConsumerSendMsgBackRequestHeader) -> RemotingCommand | None:
        ctx = self.ctx
        cfg = _group_config(ctx, h.group)
        if _group_int(cfg, "retryQueueNums", 1) <= 0:
            return cmd.response()  # upstream: a group without retry queues drops it
        retry_topic, retry_queue = self._target(h, cfg)
        rec = self._original(h.offset)
        props, reconsume, max_times = self._retried(cmd, h, cfg, rec)
        text = encode_properties(props).decode("utf-8")
        if reconsume >= max_times or h.delay_level < 0:
            target = Diversion(_dlq(ctx, h.group), DLQ_QUEUE, text)
        else:
            level = h.delay_level or 3 + reconsume
            delayed = text + encode_properties({DELAY: str(level)}).decode("utf-8")
            target = ctx.schedule.policy.divert(delayed, retry_topic, retry_queue) or Diversion(
                retry_topic, retry_queue, text)
        result = self._put(rec, target, props.get("TAGS"), reconsume + 1)
        if result.durable is None:
            return cmd.response()
        fut = asyncio.wrap_future(result.durable)
        fut.add_done_callback(lambda f: conn.send_response(
            cmd.response() if not f.cancelled() and f.result() is FlushStatus.FLUSHED
            else cmd.response(ResponseCode.SYSTEM_ERROR, "FLUSH_DISK_TIMEOUT")))
        return None

    def _put(self, rec: Record, target: Diversion, tags: str | None, reconsume: int
             ) -> PutResult:
        raw = target.properties.encode("utf-8")
        if len(raw) > MAX_PROPERTIES_BYTES:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL,
                                 f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_BYTES}")
        props = decode_properties(raw)
        keys = tuple(k for k in (props.get("UNIQ_KEY"), *props.get("KEYS", "").split(" ")) if k)
        msg = MessageInput(bytes(rec.body), raw, rec.flag, tags_code(tags), keys)
        try:
            result = self.store.put(target.topic, target.queue_id, msg, sys_flag=rec.sys_flag,
                                    born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                                    reconsume_times=reconsume)
        except MessageTooLarge as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        except StoreReadOnly as exc:
            raise error_for_code(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        except TopicRefused as exc:  # a retry, DLQ or delay topic being deleted
            raise error_for_code(ResponseCode.SYSTEM_ERROR, _being_deleted(exc.topic)) from None
        self.ctx.stats.on_put(target.topic, 1, result.sizes[0])
        return result
