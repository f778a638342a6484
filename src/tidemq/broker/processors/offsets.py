"""Offsets: QUERY/UPDATE_CONSUMER_OFFSET (14/15), GET_MAX/MIN_OFFSET (30/31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32) -- remoting.md §2.9.

A commit of a group with a consumer online here is answered at once and written with the
next offset flush (``flushConsumerOffsetInterval``): its consumers commit it again. A
commit of a group with no consumer online here (an admin tool's, as ``cloneGroupOffset``
writes the destination group's offsets) is the only copy, so it is answered once the
offsets file holds it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.young_queue import YoungQueues
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection
from tidemq.store.lmq_store import LMQ_PREFIX

__all__ = ["OffsetProcessor", "parse_header"]



class OffsetProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self._young = YoungQueues(ctx)

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.QUERY_CONSUMER_OFFSET, self.query)
        reg(RequestCode.UPDATE_CONSUMER_OFFSET, self.update)
        reg(RequestCode.GET_MAX_OFFSET, self.max_offset)
        reg(RequestCode.GET_MIN_OFFSET, self.min_offset)
        reg(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search)
        reg(RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest)

    def query(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(QueryConsumerOffsetRequestHeader, cmd)
        offset = self.ctx.committed_offset(h.consumer_group, h.topic, h.queue_id)
        if offset is not None:
            return cmd.response(ext_fields={"offset": str(offset)})
        # Upstream quirk (remoting.md §2.9): a young queue answers 0, unless the asker
        # says setZeroIfNotFound=false.
        if h.set_zero_if_not_found is not False and self._young(h.topic, h.queue_id):
            return cmd.response(ext_fields={"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this"
                            " group consumer boot first")

    def update(self, conn: Connection, cmd: RemotingCommand
               ) -> RemotingCommand | Awaitable[RemotingCommand]:
        h = parse_header(UpdateConsumerOffsetRequestHeader, cmd)
        self.check_commit(h.topic, h.queue_id, h.commit_offset)
        ctx = self.ctx
        ctx.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if ctx.consumers.channels(h.consumer_group):
            return cmd.response()
        return self._written(cmd.response())

    async def _written(self, response: RemotingCommand) -> RemotingCommand:
        """``response`` once the offsets file holds every commit made so far."""
        await asyncio.to_thread(self.ctx.offsets.persist)  # the loop serves on meanwhile
        return response

    def check_commit(self, topic: str, queue_id: int, offset: int) -> None:
        """Refuse a committed offset no consumer could have reached: negative, past the
        queue's max offset, or on a topic or queue this broker does not have. An offset
        equal to the max offset is the usual "consumed everything"."""
        if offset < 0:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"commitOffset {offset} is negative")
        if not topic.startswith(LMQ_PREFIX):  # an LMQ has no topic config, one queue
            tc = self.ctx.topics.get(topic)
            if tc is None:
                raise error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                                     f"topic {topic} does not exist on this broker")
            queues = max(tc.read_queue_nums, tc.write_queue_nums)
            if not 0 <= queue_id < queues:
                raise error_for_code(
                    ResponseCode.INVALID_PARAMETER,
                    f"queueId {queue_id} is out of range: topic {topic} has {queues} queues")
        top = self.store.max_offset(topic, queue_id)
        if offset > top:
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"commitOffset {offset} is beyond the max offset {top} of {topic}/{queue_id}")

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetMaxOffsetRequestHeader, cmd)
        return cmd.response(ext_fields={"offset": str(self.store.max_offset(h.topic, h.queue_id))})

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetMinOffsetRequestHeader, cmd)
        return cmd.response(ext_fields={"offset": str(self.store.min_offset(h.topic, h.queue_id))})

    def search(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(SearchOffsetRequestHeader, cmd)
        offset = self.store.offset_by_time(h.topic, h.queue_id, h.timestamp)
        if (h.boundary_type or "lower").lower() == "upper":
            # Last offset whose store time is <= the timestamp.
            max_off = self.store.max_offset(h.topic, h.queue_id)
            while offset < max_off and self.store.store_time_at(
                    h.topic, h.queue_id, offset) == h.timestamp:
                offset += 1
            offset = max(offset - 1, self.store.min_offset(h.topic, h.queue_id))
        return cmd.response(ext_fields={"offset": str(offset)})

    def earliest(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(GetEarliestMsgStoretimeRequestHeader, cmd)
        ts = self.store.earliest_store_time(h.topic, h.queue_id)
        if ts < 0:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"no message in {h.topic}/{h.queue_id}")
        return cmd.response(ext_fields={"timestamp": str(ts)})
