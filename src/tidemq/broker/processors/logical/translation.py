"""The logical-queue interceptor of the broker's request pipeline: a request for a mapped
topic is translated (sends, pulls, offsets); one marked ``lo=false`` is physical and only
fenced. It puts together the parts of :mod:`tidemq.broker.processors.logical`."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from tidemq.broker.codes import OFFSET_CODES, PULL_CODES, SEND_CODES
from tidemq.broker.context import BrokerContext
from tidemq.broker.logical import TopicMapping
from tidemq.broker.pipeline import Pipeline
from tidemq.broker.processors.logical.forwarding import Forwarder, Handlers, topic_key
from tidemq.broker.processors.logical.mappings import MappingAdmin
from tidemq.broker.processors.logical.offsets import LogicalOffsets
from tidemq.broker.processors.logical.pulls import LogicalPulls
from tidemq.broker.processors.logical.sends import LogicalSends
from tidemq.broker.processors.logical.sync import MappingSync
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import (
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection, Processor

__all__ = ["LogicalProcessor"]

log = logging.getLogger(__name__)


_TRANSLATED = SEND_CODES | PULL_CODES | OFFSET_CODES


class LogicalProcessor:
    """The interceptor and the admin codes; the nouns live in their own modules."""

    #: The translation changes what a request means: a held request evaluated again
    #: needs it too (:mod:`tidemq.broker.pipeline`).
    rewrites = True

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.lqs = ctx.logical
        self.fwd = Forwarder(ctx)
        self.sync_service = MappingSync(self.fwd, self.lqs, self.mapping_changed)
        self.sends = LogicalSends(self.fwd, self.lqs, self.sync_service)
        self.offsets = LogicalOffsets(self.fwd)
        self.pulls = LogicalPulls(self.fwd, self.offsets)
        self.mappings = MappingAdmin(self.fwd, self.lqs, self.sync_service, self.sends)

    def mapping_changed(self, mapping: TopicMapping | None, topic: str | None = None) -> None:
        self.mappings.mapping_changed(mapping, topic)

    def notify(self, topic: str) -> None:
        self.sends.notify(topic)

    def expire_segments(self) -> list[TopicMapping]:
        return self.mappings.expire_segments()

    async def sync(self) -> list[str]:
        return await self.sync_service.sync()

    def refresh_addresses(self) -> None:
        self.fwd.refresh_addresses()

    def register(self, pipeline: Pipeline) -> None:
        """Register the admin codes; the ordinary handlers run translated requests."""
        self.fwd.handlers = Handlers(pipeline)
        pipeline.register(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, self.mappings.update_mapping)
        pipeline.register(RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, self.mappings.query_mapping)
        pipeline.register(RequestCode.SEAL_LOGICAL_QUEUE, self.mappings.seal)
        pipeline.register(RequestCode.DELETE_LOGICAL_QUEUE_MAPPING, self.mappings.delete_mapping)

    def wrap(self, code: int, proceed: Processor) -> Processor:
        """The pipeline interceptor: requests for mapped topics of the codes logical
        topics use are translated; everything else goes on unchanged."""
        if code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
            return self._wrap_reset(proceed)
        if code not in _TRANSLATED:
            return proceed
        tkey, _ = topic_key(code)

        def process(conn: Connection, cmd: RemotingCommand) -> Any:
            mapping = self.lqs.get(cmd.ext_fields.get(tkey, ""))
            if mapping is None:
                return proceed(conn, cmd)
            if cmd.ext_fields.get("lo") == "false":
                if code in SEND_CODES:
                    self.fwd.fence(mapping, cmd)
                elif code in PULL_CODES and not self.fwd.is_open(mapping, cmd):
                    # A sealed segment never grows: holding the pull would stall the
                    # reader until its timeout instead of moving it to the next segment.
                    cmd.ext_fields["suspendTimeoutMillis"] = "0"
                return proceed(conn, cmd)
            return self._logical(code, mapping, conn, cmd)

        return process

    def clears(self, code: int, conn: Connection, template: RemotingCommand) -> bool:
        """Whether every request of ``code`` with ``template``'s header goes on unchanged
        (:meth:`Pipeline.clears <tidemq.broker.pipeline.Pipeline.clears>`): its topic is
        not a logical one."""
        if code not in _TRANSLATED:
            return False
        tkey, _ = topic_key(code)
        return self.lqs.get(template.ext_fields.get(tkey, "")) is None

    def _wrap_reset(self, orig: Processor) -> Callable[[Connection, RemotingCommand], Any]:
        def process(conn: Connection, cmd: RemotingCommand) -> Any:
            mapping = self.lqs.get(cmd.ext_fields.get("topic", ""))
            if mapping is None:
                return orig(conn, cmd)
            self.offsets.reset_offset(mapping, conn, cmd)
            return None

        return process

    def _logical(self, code: int, mapping: TopicMapping, conn: Connection,
                 cmd: RemotingCommand) -> Any:
        _, qkey = topic_key(code)
        try:
            lq = int(cmd.ext_fields.get(qkey, "-1"))
        except ValueError:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, f"bad {qkey}") from None
        if code in SEND_CODES and lq < 0:  # any writable LQ
            lq = random.choice([q for q in sorted(mapping.queues)
                                if mapping.leader(q) is not None
                                or mapping.pending(q) is not None] or sorted(mapping.queues))
        if lq not in mapping.queues:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"{mapping.topic} has logical queues 0..{mapping.total - 1}, "
                                 f"not {lq}")
        if code in SEND_CODES:
            if type(cmd.body) is memoryview:  # lent: the send may be forwarded or held
                cmd.body = bytes(cmd.body)
            return self.sends.send(mapping, lq, conn, cmd)
        if code in PULL_CODES:
            return self.pulls.pull(mapping, lq, conn, cmd)
        return self.offsets.handle(mapping, lq, conn, cmd)

    START_SYNC_TIMEOUT = 10.0  # seconds a starting broker gives its peers to answer

    async def sync_at_start(self) -> None:
        """Before the broker serves: its copies merged with the peers'. A broker that was
        down while a forced cut sealed its segment thus never appends to that segment
        again; peers that do not answer in time are left to the periodic sync."""
        if not self.lqs.mappings:
            return
        try:
            async with asyncio.timeout(self.START_SYNC_TIMEOUT):
                await self.sync()
        except (TimeoutError, TideMQError, OSError, ValueError) as exc:
            log.warning("syncing logical-queue mappings at start failed: %s", exc)

    async def run_sync(self, interval: float) -> None:
        """:meth:`sync` now and every ``interval`` seconds, until cancelled."""
        while True:
            try:
                await self.sync()
            except (TideMQError, OSError, ValueError) as exc:
                log.warning("syncing logical-queue mappings failed: %s", exc)
            await asyncio.sleep(interval)
