"""Consumer-group administration: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), its list
form UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201), DELETE_SUBSCRIPTIONGROUP (207) and
INVOKE_BROKER_TO_RESET_OFFSET (222).

Reset by time (``mqadmin resetOffsetByTime``): for each read queue of the topic (or the one
``queueId``), the new offset is the first message stored at or after ``timestamp`` (-1: the
max offset; an explicit ``offset`` wins), kept only if ``isForce`` or it moves the group
back. The broker commits the new offsets itself -- so a group that is offline is reset too --
and then sends RESET_CONSUMER_CLIENT_OFFSET (220, oneway; ext ``topic``, ``group``,
``timestamp``, ``isForce``) to every connected consumer of the group, so running consumers
drop what they hold and continue from there instead of committing their old positions.
The 220 body and the 222 response body are ``{"offsetTable": [{"topic", "brokerName",
"queueId", "offset"}, ...]}``: standard JSON rows instead of fastjson's map keyed by
``MessageQueue`` objects (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.broker.groups import validate_group_config
from tidemq.broker.processors.decode import parse_header
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import DeleteSubscriptionGroupRequestHeader, ResetOffsetRequestHeader
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.net import Connection

__all__ = ["GroupProcessor"]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def reset_target(h: ResetOffsetRequestHeader, lo: int, hi: int, queue: str) -> int | None:
    """Where a reset moves ``queue`` (offsets ``lo``..``hi``) without a search by time:
    the requested offset, refused outside ``lo..hi``, or the end for timestamp -1;
    ``None``: the caller searches by ``h.timestamp``."""
    if h.offset is not None and h.offset != -1:
        if not lo <= h.offset <= hi:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"offset {h.offset} is outside {lo}..{hi} of {queue}")
        return h.offset
    if h.timestamp == -1:
        return hi
    return None


class GroupProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group)
        reg(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, self.update_groups)
        reg(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups)
        reg(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        reg(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)

    # ------------------------------------------------------------------ group configs

    async def update_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Create or replace a group's config; answered once the file holds it (written
        on a thread: thousands of groups take a while to encode)."""
        try:
            raw = json.loads(bytes(cmd.body))
        except (ValueError, RecursionError) as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"SubscriptionGroupConfig body is not JSON: {exc}") from None
        groups = self.ctx.subscription_groups
        cfg = validate_group_config(raw, groups.defaults(""))
        if isinstance(cfg, str):
            raise error_for_code(ResponseCode.INVALID_PARAMETER, cfg)
        with groups.file.deferred():
            groups.put(cfg)
        await asyncio.to_thread(groups.file.write_pending)
        return cmd.response()

    async def update_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225): each config of the body's
        ``groupConfigList`` as :meth:`update_group` takes it, all checked before any is
        kept (a refused one changes nothing), the file written once."""
        try:
            raw = json.loads(bytes(cmd.body))
        except (ValueError, RecursionError) as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"SubscriptionGroupList body is not JSON: {exc}") from None
        listed = raw.get("groupConfigList") if isinstance(raw, dict) else None
        if not isinstance(listed, list):
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 "SubscriptionGroupList body has no groupConfigList")
        groups = self.ctx.subscription_groups
        configs = []
        for item in listed:
            cfg = validate_group_config(item, groups.defaults(""))
            if isinstance(cfg, str):
                raise error_for_code(ResponseCode.INVALID_PARAMETER, cfg)
            configs.append(cfg)
        with groups.file.deferred():
            for cfg in configs:
                groups.put(cfg)
        await asyncio.to_thread(groups.file.write_pending)
        return cmd.response()

    async def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The table encoded on a thread, a slice of groups at a time."""
        return cmd.response(body=await asyncio.to_thread(self.ctx.subscription_groups.encode))

    async def delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Delete a group's config (and with ``cleanOffset`` its offsets); answered once
        the files no longer hold them."""
        h = parse_header(DeleteSubscriptionGroupRequestHeader, cmd)
        groups = self.ctx.subscription_groups
        with groups.file.deferred():
            groups.delete(h.group_name)
        await asyncio.to_thread(groups.file.write_pending)
        self.ctx.stats.forget_group(h.group_name)
        if h.clean_offset:
            self.ctx.offsets.delete_group(h.group_name)
            self.ctx.pulled.forget(group=h.group_name)
            await asyncio.to_thread(self.ctx.offsets.persist)  # the loop serves on meanwhile
        return cmd.response()

    # ------------------------------------------------------------------ reset offsets

    def plan_reset(self, h: ResetOffsetRequestHeader, tc: TopicConfig) -> list[tuple[int, int]]:
        """``(queue id, new offset)`` for each queue the reset covers; changes nothing."""
        if h.queue_id >= 0:
            if h.queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     f"queueId {h.queue_id} is not a queue of {h.topic}")
            queues: range | list[int] = [h.queue_id]
        else:
            queues = range(tc.read_queue_nums)
        plan = []
        for qid in queues:
            lo = self.store.min_offset(h.topic, qid)
            hi = self.store.max_offset(h.topic, qid)
            new = reset_target(h, lo, hi, f"queue {qid}")
            if new is None:
                new = self.store.offset_by_time(h.topic, qid, h.timestamp)
            current = self.ctx.committed_offset(h.group, h.topic, qid)
            if not h.is_force and current is not None and current < new:
                new = current
            plan.append((qid, new))
        return plan

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(ResetOffsetRequestHeader, cmd)
        ctx = self.ctx
        tc = ctx.topics.get(h.topic)
        if tc is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"Topic {h.topic} does not exist")
        if h.group not in ctx.subscription_groups.groups:
            raise error_for_code(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                 f"Group {h.group} does not exist")
        plan = self.plan_reset(h, tc)
        for qid, offset in plan:
            ctx.commit_offset(h.group, h.topic, qid, offset)
        ctx.pulled.forget(group=h.group, topic=h.topic)
        await asyncio.to_thread(ctx.offsets.persist)  # the loop serves on meanwhile
        broker = ctx.config.broker_name
        body = _json({"offsetTable": [
            {"topic": h.topic, "brokerName": broker, "queueId": qid, "offset": offset}
            for qid, offset in plan]})
        ext = ResetOffsetRequestHeader(topic=h.topic, group=h.group, timestamp=h.timestamp,
                                       is_force=h.is_force).to_ext()
        for channel in ctx.consumers.channels(h.group):
            notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                             dict(ext), body, oneway=True)
            with contextlib.suppress(TideMQError):
                await channel.conn.oneway(notice)
        return cmd.response(body=body)
