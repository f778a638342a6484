"""Consumer offsets and positions of a logical queue: committed in logical terms here and
replicated to the mapping's other brokers; min/max from the segments; time search and
offset reset across segments."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, cast

from tidemq.broker.logical import LOGICAL_BROKER, Segment, SegmentState, TopicMapping
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.processors.groups import reset_target
from tidemq.broker.processors.logical.forwarding import Forwarder, to_int
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ResetOffsetRequestHeader
from tidemq.errors import (
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection

__all__ = ["LogicalOffsets"]

log = logging.getLogger(__name__)


class LogicalOffsets:
    def __init__(self, fwd: Forwarder) -> None:
        self.fwd = fwd
        self.ctx = fwd.ctx

    def handle(self, mapping: TopicMapping, lq: int, conn: Connection,
                 cmd: RemotingCommand) -> Any:
        code = cmd.code
        ctx = self.ctx
        if code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
            group = cmd.ext_fields.get("consumerGroup", "")
            if code == RequestCode.UPDATE_CONSUMER_OFFSET:
                offset = to_int(cmd.ext_fields.get("commitOffset"), -1)
                if offset < 0:
                    raise error_for_code(ResponseCode.INVALID_PARAMETER, "negative commitOffset")
                if lq not in mapping.queues:
                    raise error_for_code(
                        ResponseCode.INVALID_PARAMETER,
                        f"queueId {lq} is not a logical queue of {mapping.topic}")
                return self.update(mapping, lq, group, offset, conn, cmd)
            stored = ctx.offsets.query(group, mapping.topic, lq)
            if stored is None:
                return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no committed offset")
            return cmd.response(ext_fields={"offset": str(stored)})
        if code == RequestCode.GET_MAX_OFFSET:
            seg = mapping.leader(lq) or mapping.segment_for(lq, 1 << 62)
            if seg is None:
                return cmd.response(ext_fields={"offset": "0"})
            if seg.state is SegmentState.READONLY:
                return cmd.response(ext_fields={"offset": str(seg.logical_end)})
            top = seg
            return self.fwd.execute(conn, cmd, top, lambda r: self.to_logical(r, top))
        if code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_EARLIEST_MSG_STORETIME):
            seg = mapping.segment_for(lq, 0)
            if seg is None:
                return cmd.response(ext_fields={"offset": "0"} if code == RequestCode.
                                    GET_MIN_OFFSET else {"timestamp": "0"})
            first = seg
            if code == RequestCode.GET_EARLIEST_MSG_STORETIME:
                return self.fwd.execute(conn, cmd, first, lambda r: r)
            return self.fwd.execute(conn, cmd, first, lambda r: self.to_logical(r, first))
        # SEARCH_OFFSET_BY_TIMESTAMP: walks the segments, possibly on other brokers.
        timestamp = to_int(cmd.ext_fields.get("timestamp"), 0)
        boundary = cmd.ext_fields.get("boundaryType", "lower")

        async def search() -> RemotingCommand:
            offset = await self.search_by_time(mapping, lq, timestamp, boundary)
            return cmd.response(ext_fields={"offset": str(offset)})

        self.fwd.run(conn, cmd, search())
        return None

    def update(self, mapping: TopicMapping, lq: int, group: str, offset: int,
               conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """UPDATE_CONSUMER_OFFSET on ``lq``: refused past the LQ's max logical offset.
        The max is known here when the last segment is sealed or on this broker;
        otherwise its broker is asked (the answer is sent when it replies). If that
        broker cannot be reached, only offsets provably within the max (up to that
        segment's logical start) are taken; a higher one is answered SYSTEM_BUSY, and
        the consumer's next commit retries it."""
        replicate = cmd.ext_fields.get("replicated") != "true"
        top = self.known_max(mapping, lq)
        if top is not None:
            self.check_commit(mapping, lq, offset, top)
            self.commit(mapping, group, lq, offset, replicate=replicate)
            return cmd.response()
        seg = self.top_segment(mapping, lq)
        assert seg is not None  # known_max answers when there is none

        async def checked() -> RemotingCommand:
            try:
                top = await self.max_logical(mapping, lq)
            except TideMQError as exc:
                if offset > seg.logical_start:
                    raise error_for_code(
                        ResponseCode.SYSTEM_BUSY,
                        f"commitOffset {offset} of {mapping.topic}/{lq} cannot be checked "
                        f"against the max offset: {seg.broker}, which holds the last "
                        f"segment, did not answer ({exc}); retry later") from exc
            else:
                self.check_commit(mapping, lq, offset, top)
            self.commit(mapping, group, lq, offset, replicate=replicate)
            return cmd.response()

        self.fwd.run(conn, cmd, checked())
        return None

    @staticmethod
    def check_commit(mapping: TopicMapping, lq: int, offset: int, top: int) -> None:
        if offset > top:
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"commitOffset {offset} is beyond the max offset {top} of logical queue "
                f"{mapping.topic}/{lq}")

    @staticmethod
    def top_segment(mapping: TopicMapping, lq: int) -> Segment | None:
        """The segment holding the LQ's max offset: the writable one, else the last
        readable one."""
        return mapping.leader(lq) or mapping.segment_for(lq, 1 << 62)

    def known_max(self, mapping: TopicMapping, lq: int) -> int | None:
        """The LQ's max logical offset if it is known without asking another broker."""
        seg = self.top_segment(mapping, lq)
        if seg is None:
            return 0
        if seg.state is SegmentState.READONLY:
            return seg.logical_end
        if seg.broker == self.fwd.me:
            phys = self.ctx.store.max_offset(mapping.topic, seg.queue_id)
            return max(seg.logical_start, seg.to_logical(phys))
        return None

    async def ask(self, code: int, seg: Segment, ext: dict[str, str]) -> int:
        """Ask the broker of ``seg`` an offset question about its physical queue; the
        answer's ``offset`` (physical)."""
        fields = {"topic": ext["topic"], "queueId": str(seg.queue_id), "lo": "false",
                  **{k: v for k, v in ext.items() if k not in ("topic", "queueId")}}
        cmd = RemotingCommand.request(code, fields)
        if seg.broker == self.fwd.me:
            resp = self.fwd.handlers[code](cast(Connection, None), cmd)
            if not isinstance(resp, RemotingCommand):
                raise error_for_code(ResponseCode.SYSTEM_ERROR, f"code {code} did not answer")
        else:
            resp = await self.fwd.forward(seg.broker, cmd)
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark or f"code {code} failed on {seg.broker}")
        return int(resp.ext_fields.get("offset", "0"))

    async def min_logical(self, mapping: TopicMapping, lq: int) -> int:
        seg = mapping.segment_for(lq, 0)
        if seg is None:
            return 0
        phys = await self.ask(RequestCode.GET_MIN_OFFSET, seg, {"topic": mapping.topic})
        return max(seg.logical_start, seg.to_logical(phys))

    async def max_logical(self, mapping: TopicMapping, lq: int) -> int:
        seg = self.top_segment(mapping, lq)
        if seg is None:
            return 0
        if seg.state is SegmentState.READONLY:
            return seg.logical_end
        phys = await self.ask(RequestCode.GET_MAX_OFFSET, seg, {"topic": mapping.topic})
        return max(seg.logical_start, seg.to_logical(phys))

    async def search_by_time(self, mapping: TopicMapping, lq: int, timestamp: int,
                              boundary: str = "lower") -> int:
        """The logical offset of the first message stored at or after ``timestamp``
        (the LQ's max if none): the first segment, oldest first, whose own answer lies
        inside it. With ``boundary=upper`` that segment is asked for its last message
        stored at or before ``timestamp``."""
        segs = [s for s in mapping.queues.get(lq, ())
                if s.state in (SegmentState.NORMAL, SegmentState.READONLY)
                and s.logical_start >= 0]
        if not segs:
            return 0
        ext = {"topic": mapping.topic, "timestamp": str(timestamp)}
        seg, found = segs[-1], -1
        for older in segs[:-1]:
            phys = await self.ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, older, ext)
            if phys < older.physical_end:  # else everything in it is older: next one
                seg, found = older, phys
                break
        upper = boundary.lower() == "upper"
        if upper:
            ext["boundaryType"] = "upper"
        phys = found if found >= 0 and not upper else await self.ask(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, seg, ext)
        if seg.state is SegmentState.READONLY:
            phys = min(phys, seg.physical_end)
        return max(seg.logical_start, seg.to_logical(phys))

    def reset_offset(self, mapping: TopicMapping, conn: Connection,
                     cmd: RemotingCommand) -> None:
        """INVOKE_BROKER_TO_RESET_OFFSET (222) on a logical topic: the group's offsets
        reset in logical terms -- an offset or a time inside any readable segment, old
        ones included -- stored here, replicated, and pushed to the group's consumers
        under the placeholder broker."""
        h = parse_header(ResetOffsetRequestHeader, cmd)
        if h.group not in self.ctx.subscription_groups.groups:
            raise error_for_code(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                 f"Group {h.group} does not exist")
        if h.queue_id >= 0 and h.queue_id not in mapping.queues:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"queueId {h.queue_id} is not a logical queue of {h.topic}")
        lqs = [h.queue_id] if h.queue_id >= 0 else sorted(mapping.queues)

        async def reset() -> RemotingCommand:
            plan: list[tuple[int, int]] = []
            for lq in lqs:  # decide every queue first, then change anything
                lo, hi = await self.min_logical(mapping, lq), await self.max_logical(
                    mapping, lq)
                new = reset_target(h, lo, hi, f"logical queue {lq}")
                if new is None:
                    new = await self.search_by_time(mapping, lq, h.timestamp)
                current = self.ctx.offsets.query(h.group, h.topic, lq)
                if not h.is_force and current is not None and current < new:
                    new = current
                plan.append((lq, new))
            for lq, offset in plan:
                self.commit(mapping, h.group, lq, offset)
            await asyncio.to_thread(self.ctx.offsets.persist)
            body = json.dumps({"offsetTable": [
                {"topic": h.topic, "brokerName": LOGICAL_BROKER, "queueId": lq,
                 "offset": offset} for lq, offset in plan]}, sort_keys=True).encode()
            for channel in self.ctx.consumers.channels(h.group):
                notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                                 dict(cmd.ext_fields), body, oneway=True)
                with contextlib.suppress(TideMQError):
                    await channel.conn.oneway(notice)
            return cmd.response(body=body)

        self.fwd.run(conn, cmd, reset())

    @staticmethod
    def to_logical(resp: RemotingCommand, seg: Segment) -> RemotingCommand:
        if resp.code == 0 and "offset" in resp.ext_fields:
            resp.ext_fields["offset"] = str(max(seg.logical_start, seg.to_logical(
                int(resp.ext_fields["offset"]))))
        return resp

    def commit(self, mapping: TopicMapping, group: str, lq: int, offset: int, *,
                replicate: bool = True) -> None:
        """Store ``group``'s logical offset of ``lq`` here and (unless this is a copy)
        send it oneway to the mapping's other brokers -- best effort."""
        self.ctx.offsets.commit(group, mapping.topic, lq, offset)
        if replicate:
            self.replicate(mapping, group, lq, offset)

    def replicate(self, mapping: TopicMapping, group: str, lq: int, offset: int) -> None:
        others = sorted(b for b in mapping.brokers() if b != self.fwd.me)
        for broker in others:
            addr = self.ctx.broker_addresses.get(broker)
            if addr is None:
                continue
            fields = {"consumerGroup": group, "topic": mapping.topic, "queueId": str(lq),
                      "commitOffset": str(offset), "replicated": "true"}
            copy = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields,
                                           oneway=True)

            async def send(a: str = addr, c: RemotingCommand = copy) -> None:
                try:
                    await self.ctx.client.oneway(a, c)
                except TideMQError as exc:
                    log.info("replicating a logical offset to %s failed: %s", a, exc)

            task = asyncio.get_running_loop().create_task(send())
            self.fwd.tasks.add(task)
            task.add_done_callback(self.fwd.tasks.discard)
