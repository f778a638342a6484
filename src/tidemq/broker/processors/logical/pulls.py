"""Pulls from a logical queue: the readable segment holding the offset, records rewritten to
the logical queue and offset, a sealed segment crossed once dispatched to its end."""

from __future__ import annotations

import contextlib
from typing import Any

from tidemq.broker.logical import SegmentState, TopicMapping
from tidemq.broker.processors.logical.forwarding import Forwarder, to_int
from tidemq.broker.processors.logical.offsets import LogicalOffsets
from tidemq.codec.command import RemotingCommand
from tidemq.errors import (
    ResponseCode,
    TideMQError,
)
from tidemq.formats.record import rewrite_queue
from tidemq.net import Connection

__all__ = ["LogicalPulls"]


_FLAG_COMMIT_OFFSET = 0x1  # pull sysFlag: commitOffset carries the group's position


class LogicalPulls:
    def __init__(self, fwd: Forwarder, offsets: LogicalOffsets) -> None:
        self.fwd = fwd
        self.ctx = fwd.ctx
        self.offsets = offsets

    def pull(self, mapping: TopicMapping, lq: int, conn: Connection,
              cmd: RemotingCommand) -> Any:
        logical = int(cmd.ext_fields.get("queueOffset", "0"))
        seg = mapping.segment_for(lq, logical)
        if seg is None:
            return cmd.response(ResponseCode.PULL_NOT_FOUND, "no readable segment yet", {
                "nextBeginOffset": str(logical), "minOffset": "0", "maxOffset": "0",
                "suggestWhichBrokerId": "0"})
        first = mapping.segment_for(lq, 0) or seg
        if logical < seg.logical_start:
            return cmd.response(ResponseCode.PULL_OFFSET_MOVED, "below the oldest segment", {
                "nextBeginOffset": str(seg.logical_start), "minOffset": str(
                    first.logical_start), "maxOffset": str(seg.logical_start),
                "suggestWhichBrokerId": "0"})
        while seg.state is SegmentState.READONLY and logical >= seg.logical_end:
            nxt = mapping.next_segment(lq, seg)
            if nxt is None or nxt.state is SegmentState.PENDING:
                return cmd.response(ResponseCode.PULL_NOT_FOUND, "segment sealed; next pending",
                                    {"nextBeginOffset": str(logical),
                                     "minOffset": str(first.logical_start),
                                     "maxOffset": str(logical), "suggestWhichBrokerId": "0"})
            seg = nxt
        sealed_end = seg.physical_end if seg.state is SegmentState.READONLY else -1
        extra = {"queueOffset": str(seg.to_physical(logical))}
        extra_physical = seg.to_physical(logical)
        sys_flag = to_int(cmd.ext_fields.get("sysFlag"), 0)
        group = cmd.ext_fields.get("consumerGroup", "")
        unchecked = -1  # a piggy-backed commit waiting for the max this pull learns
        if sys_flag & _FLAG_COMMIT_OFFSET:
            # The piggy-backed commit is logical: store it here under the LQ, never let
            # the segment's broker store it under its physical queue id. Best effort, as
            # on a classic queue: one past the LQ's max offset is dropped, the pull served.
            commit = to_int(cmd.ext_fields.get("commitOffset"), -1)
            if commit >= 0 and self.ctx.offsets.query(group, mapping.topic, lq) != commit:
                known = self.offsets.known_max(mapping, lq)
                top_seg = self.offsets.top_segment(mapping, lq)
                floor = known if known is not None else (
                    top_seg.logical_start if top_seg is not None else 0)
                if commit <= floor:
                    self.offsets.commit(mapping, group, lq, commit)
                elif known is None:
                    unchecked = commit
            extra["sysFlag"] = str(sys_flag & ~_FLAG_COMMIT_OFFSET)
        is_top = seg == self.offsets.top_segment(mapping, lq)

        def commit_within(top: int) -> None:
            if 0 <= unchecked <= top:
                self.offsets.commit(mapping, group, lq, unchecked)
        if sealed_end >= 0:
            extra["suspendTimeoutMillis"] = "0"
            extra["maxMsgNums"] = str(max(1, min(int(cmd.ext_fields.get("maxMsgNums", "32")),
                                                 sealed_end - seg.to_physical(logical))))

        def translate(resp: RemotingCommand) -> RemotingCommand:
            ext = resp.ext_fields
            dispatched = to_int(ext.get("maxOffset"), 0)  # physical, before translation
            for key in ("nextBeginOffset", "maxOffset"):
                if key in ext:
                    ext[key] = str(seg.to_logical(int(ext[key])))
            if is_top and "maxOffset" in ext:  # the segment's max is the LQ's
                commit_within(max(seg.logical_start, int(ext["maxOffset"])))
            if "minOffset" in ext:
                ext["minOffset"] = str(first.logical_start)
            if resp.code == ResponseCode.SUCCESS:
                body = resp.full_body()
                resp.body = rewrite_queue(body, lq, seg.to_logical, sealed_end)
                resp.body_parts = None
                if sealed_end >= 0 and int(ext.get("nextBeginOffset", "0")) > seg.logical_end:
                    ext["nextBeginOffset"] = str(seg.logical_end)
            elif (resp.code == ResponseCode.PULL_NOT_FOUND and sealed_end >= 0
                  and dispatched >= sealed_end):
                # Only once the sealed tail is dispatched: the seal fixes the end from the
                # appends, and the consume queue may still be behind them.
                ext["nextBeginOffset"] = str(seg.logical_end)
            elif (resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED)
                  and seg.forced and extra_physical >= dispatched):
                # A forced cut with a margin ends past what its broker holds; that broker
                # recovered before it served and is fenced, so what it holds is final.
                ext["nextBeginOffset"] = str(seg.logical_end)
            return resp

        if sealed_end < 0:
            return self.fwd.execute(conn, cmd, seg, translate, **extra)

        async def pull_sealed() -> RemotingCommand:
            # The reader's lag is against the logical queue, not the sealed segment.
            top = seg.logical_end
            with contextlib.suppress(TideMQError):  # the leader's broker may be down
                top = max(top, await self.offsets.max_logical(mapping, lq))
                commit_within(top)
            resp = translate(await self.fwd.call(cmd, seg, **extra))
            if "maxOffset" in resp.ext_fields:
                resp.ext_fields["maxOffset"] = str(top)
            return resp

        self.fwd.run(conn, cmd, pull_sealed())
        return None
