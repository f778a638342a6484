"""Administration and lookups: topics (17, 215, 21, 351), runtime info (28), topic and
consume statistics (202, 208), connections (203, 204), QUERY_MESSAGE (12) and
VIEW_MESSAGE_BY_ID (33).

Statistics bodies use standard JSON lists (``{"offsetTable": [{"topic":..., "queueId":...,
"minOffset":..., ...}]}``) rather than fastjson's object-keyed maps; docs/protocol.md says so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.record_lookup import record_at
from tidemq.broker.status import runtime_info
from tidemq.broker.topic_deletion import delete_topic
from tidemq.broker.topics import QUEUE_TYPE, SYSTEM_TOPICS, validate_topic
from tidemq.codec.bodies import (
    CreateTopicListRequestBody,
    KVTable,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
    parse_attributes,
)
from tidemq.codec.topic_table import encode_topics
from tidemq.errors import RemoteProtocolError, ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["AdminProcessor"]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class AdminProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        reg(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, self.create_topics)
        reg(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        reg(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        reg(RequestCode.GET_TOPIC_CONFIG, self.topic_config)
        reg(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        reg(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        reg(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        reg(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections)
        reg(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections)
        reg(RequestCode.QUERY_MESSAGE, self.query_message)
        reg(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        reg(RequestCode.DELETE_LMQ, self.delete_lmq)

    # ------------------------------------------------------------------ topics

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Create or change a topic, and answer once topics.json holds the change and the
        name servers have its route (as RocketMQ's broker registers before it answers): a
        producer that sends right after finds the topic's own queues, not the default
        route's (:meth:`~tidemq.broker.context.BrokerContext.routes_published`)."""
        h = parse_header(CreateTopicRequestHeader, cmd)
        try:
            changes = parse_attributes(h.attributes)
        except RemoteProtocolError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        tc = self.planned_topic(TopicConfig(
            topic_name=h.topic, read_queue_nums=h.read_queue_nums,
            write_queue_nums=h.write_queue_nums, perm=h.perm,
            topic_sys_flag=h.topic_sys_flag or 0, order=h.order), changes,
            h.topic_filter_type or "SINGLE_TAG")
        with self.ctx.topics.file.deferred():  # written on a thread, awaited below
            changed = self.ctx.topics.upsert(tc)
        if changed:
            # on disk before the answer however long that takes; the name servers are
            # waited for at most ROUTE_WAIT
            await asyncio.to_thread(self.ctx.topics.file.write_pending)
            await self.ctx.routes_published(self.ctx.topics_changed())
        return cmd.response()

    def planned_topic(self, new: TopicConfig, changes: dict[str, str | None],
                      filter_type: str) -> TopicConfig:
        """The topic config a create or update of ``new.topic_name`` leaves (its
        attributes: the kept ones with ``changes``; a ``None`` value drops one); refused
        with INVALID_PARAMETER for a bad name, queue count, filter type or queue type."""
        topic = new.topic_name
        why = validate_topic(topic)
        if why is not None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, why)
        if topic in self.ctx.topics.deleting:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"topic[{topic}] is being deleted; create it again once "
                                 "its deletion is answered")
        if new.read_queue_nums < 1 or new.write_queue_nums < 1:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "queue numbers must be >= 1")
        if new.read_queue_nums > 1024 or new.write_queue_nums > 1024:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "at most 1024 queues per topic")
        try:
            filter_kind = TopicFilterType(filter_type)
        except ValueError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        old = self.ctx.topics.get(topic)
        attrs = dict(old.attributes) if old is not None else {}
        for key, value in changes.items():
            if key == QUEUE_TYPE and value not in (None, "SimpleCQ", "BatchCQ"):
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"queue.type must be SimpleCQ or BatchCQ, not {value!r}")
            if key == QUEUE_TYPE and old is not None and attrs.get(QUEUE_TYPE, "SimpleCQ") != (
                    value or "SimpleCQ"):
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     "queue.type cannot be changed after the topic is created")
            if value is None:
                attrs.pop(key, None)
            else:
                attrs[key] = value
        return TopicConfig(topic_name=topic, read_queue_nums=new.read_queue_nums,
                           write_queue_nums=new.write_queue_nums, perm=new.perm,
                           topic_filter_type=filter_kind, topic_sys_flag=new.topic_sys_flag,
                           order=new.order, attributes=attrs)

    async def create_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC_LIST (18): each topic of the body's ``topicConfigList``
        as :meth:`create_topic` makes it, all checked before any changes (a refused one
        changes nothing), written and registered once. A listed topic's ``attributes``
        are changes as upstream's: ``+key`` sets a key, ``-key`` drops one."""
        try:
            body = decode_body(cmd.body, CreateTopicListRequestBody)
        except RemoteProtocolError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        planned = []
        for new in body.topic_config_list:
            changes: dict[str, str | None] = {}
            for key, value in new.attributes.items():
                if key[:1] not in ("+", "-") or len(key) < 2:
                    raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                         f"attribute {key!r} of {new.topic_name} must start "
                                         "with + (set) or - (drop)")
                changes[key[1:]] = value if key[0] == "+" else None
            planned.append(self.planned_topic(new, changes, new.topic_filter_type.value))
        changed = False
        with self.ctx.topics.file.deferred():
            for tc in planned:
                changed = self.ctx.topics.upsert(tc) or changed
        if changed:
            await asyncio.to_thread(self.ctx.topics.file.write_pending)
            await self.ctx.routes_published(self.ctx.topics_changed())
        return cmd.response()

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Delete a topic, and answer once the deletion is on disk, whole
        (:mod:`tidemq.broker.topic_deletion`), and the name servers have the change, as
        :meth:`create_topic`."""
        h = parse_header(DeleteTopicRequestHeader, cmd)
        if h.topic in SYSTEM_TOPICS:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, f"{h.topic} is a system topic")
        if await delete_topic(self.ctx, h.topic):
            await self.ctx.routes_published(self.ctx.topics_changed())
        return cmd.response()

    async def all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The table is copied on the loop and encoded on a thread, a slice at a time:
        thousands of topics take a while, and the loop serves on meanwhile (the copy's
        configs are replaced on change, never changed in place)."""
        wrapper = self.ctx.topics.wrapper()
        return cmd.response(body=await asyncio.to_thread(encode_topics, wrapper))

    def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetTopicConfigRequestHeader, cmd)
        tc = self.ctx.topics.get(h.topic)
        if tc is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"no topic in this broker {h.topic}")
        body = encode_body(TopicConfigSerializeWrapper(topic_config_table={h.topic: tc}))
        return cmd.response(body=body)

    # ------------------------------------------------------------------ status

    async def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        lmq = self.store.lmq
        if lmq is not None and lmq.cached_stats() is None:
            # the first count of the LMQs walks them all: on a thread, the loop serving on
            await asyncio.to_thread(lmq.first_stats)
        return cmd.response(body=encode_body(KVTable(table=runtime_info(self.ctx))))

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetTopicStatsInfoRequestHeader, cmd)
        tc = self.ctx.topics.get(h.topic)
        if tc is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        rows = []
        for qid in range(tc.write_queue_nums):
            max_off = self.store.max_offset(h.topic, qid)
            last = self.store.store_time_at(h.topic, qid, max_off - 1) if max_off else 0
            rows.append({"topic": h.topic, "brokerName": self.ctx.config.broker_name,
                         "queueId": qid, "minOffset": self.store.min_offset(h.topic, qid),
                         "maxOffset": max_off, "lastUpdateTimestamp": max(last, 0)})
        meter = self.ctx.stats.topic_put.get(h.topic)
        return cmd.response(body=_json({"offsetTable": rows,
                                        "putTps": meter.rate() if meter else 0.0}))

    def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetConsumeStatsRequestHeader, cmd)
        if h.topic:
            topics = [h.topic]
        else:  # what it committed on, and what its online members subscribe to
            online = self.ctx.consumers.groups.get(h.consumer_group)
            topics = sorted(set(self.ctx.offsets.topics_of(h.consumer_group)).union(
                online.subscriptions if online is not None else ()))
        rows = []
        for topic in topics:
            tc = self.ctx.topics.get(topic)
            if tc is None:
                continue
            committed = self.ctx.offsets.offsets(h.consumer_group, topic)
            for qid in range(tc.read_queue_nums):
                broker_off = self.store.max_offset(topic, qid)
                consumer_off = committed.get(qid, 0)
                pulled = self.ctx.pulled.query(h.consumer_group, topic, qid)
                last = (self.store.store_time_at(topic, qid, consumer_off - 1)
                        if consumer_off else 0)
                rows.append({"topic": topic, "brokerName": self.ctx.config.broker_name,
                             "queueId": qid, "brokerOffset": broker_off,
                             "consumerOffset": consumer_off,
                             "pullOffset": max(consumer_off, pulled or 0),
                             "lag": max(0, broker_off - consumer_off),
                             "lastTimestamp": max(last, 0)})
        meter = self.ctx.stats.group_get.get(h.consumer_group)
        return cmd.response(body=_json({"offsetTable": rows,
                                        "consumeTps": meter.rate() if meter else 0.0}))

    def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        info = self.ctx.consumers.groups.get(group)
        if info is None:
            raise error_for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                                 f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [{"clientId": c.client_id, "clientAddr": c.conn.remote_address,
                               "language": c.language, "version": c.version}
                              for c in info.channels.values()],
            "subscriptionTable": info.subscriptions,
            "consumeType": info.consume_type, "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
        }
        return cmd.response(body=_json(body))

    def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("producerGroup", "")
        members = self.ctx.producers.groups.get(group, {})
        body = {"connectionSet": [{"clientId": c.client_id, "clientAddr": c.conn.remote_address,
                                   "language": c.language, "version": c.version}
                                  for c in members.values()]}
        return cmd.response(body=_json(body))

    def delete_lmq(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_LMQ (20200, ext ``lmq``): drop an LMQ's entries and every group's offset."""
        name = cmd.ext_fields.get("lmq", "")
        if self.store.lmq is None:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                                 "LMQ is disabled on this broker (enableLmq/enableMultiDispatch)")
        if not name.startswith("%LMQ%"):
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"{name!r} is not a light message queue")
        if not self.store.delete_lmq(name):
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND, f"no LMQ named {name}")
        self.ctx.stats.forget_topic(name)
        return cmd.response()

    # ------------------------------------------------------------------ lookups

    def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(QueryMessageRequestHeader, cmd)
        max_num = max(1, min(h.max_num, 64)) if not h.unique_key_query else 32
        records = self.store.query_by_key(h.topic, h.key, max_num, h.begin_timestamp,
                                          h.end_timestamp)
        if not records:
            raise error_for_code(ResponseCode.QUERY_NOT_FOUND,
                                 f"can not find message, maybe time range not correct: {h.key}")
        resp = cmd.response(ext_fields={
            "indexLastUpdateTimestamp": str(self.store.dispatcher.last_store_timestamp
                                            if self.store.dispatcher else 0),
            "indexLastUpdatePhyoffset": str(self.store.commitlog.max_offset),
        })
        resp.body_parts = records
        return resp

    def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(ViewMessageRequestHeader, cmd)
        record = record_at(self.store, h.offset)
        if record is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"can not find message by the offset, {h.offset}")
        resp = cmd.response()
        resp.body_parts = [record]
        return resp

