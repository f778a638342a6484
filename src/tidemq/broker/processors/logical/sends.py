"""Sends to a logical queue: to its NORMAL segment (here or forwarded); held through a
migration's seal-to-commit window; "moved" only when that outlasts ``MOVE_WAIT``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any, cast

from tidemq.broker.logical import LogicalQueues, Segment, TopicMapping
from tidemq.broker.processors.logical.forwarding import (
    Capture,
    Forwarder,
    FutureConn,
    topic_key,
)
from tidemq.broker.processors.logical.sync import MappingSync
from tidemq.codec.command import RemotingCommand
from tidemq.errors import (
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection

__all__ = ["LogicalSends"]


class LogicalSends:
    MOVE_WAIT = 3.0  # seconds a send waits out a migration before answering "moved"

    def __init__(self, fwd: Forwarder, lqs: LogicalQueues, sync: MappingSync) -> None:
        self.fwd = fwd
        self.lqs = lqs
        self.sync = sync
        self._events: dict[str, asyncio.Event] = {}

    def send(self, mapping: TopicMapping, lq: int, conn: Connection,
              cmd: RemotingCommand) -> Any:
        seg = mapping.leader(lq)
        if seg is None:
            if mapping.pending(lq) is None:
                raise self.sealed(mapping.topic, lq)
            # Between seal and commit of a migration: hold the send until the new segment
            # is committed (normally milliseconds) instead of bouncing it to the producer.
            self.fwd.run(conn, cmd, self.send_when_moved(mapping.topic, lq, cmd))
            return None

        def translate(resp: RemotingCommand) -> RemotingCommand:
            if resp.code == 0 and "queueOffset" in resp.ext_fields:
                resp.ext_fields["queueOffset"] = str(
                    seg.to_logical(int(resp.ext_fields["queueOffset"])))
                resp.ext_fields["queueId"] = str(lq)
            return resp

        return self.fwd.execute(conn, cmd, seg, translate, functools.partial(self._moved, cmd))

    async def _moved(self, cmd: RemotingCommand, seg: Segment) -> RemotingCommand:
        """The segment's broker answered "moved": it and we disagree on the mapping. Agree,
        then deliver by the result (or wait for the migration to finish)."""
        tkey, qkey = topic_key(cmd.code)
        topic = cmd.ext_fields.get(tkey, "")
        await self.sync.exchange(seg.broker, topic)
        return await self.send_when_moved(topic, int(cmd.ext_fields.get(qkey, "-1")), cmd)

    @staticmethod
    def sealed(topic: str, lq: int) -> TideMQError:
        return error_for_code(ResponseCode.NO_PERMISSION,
                              f"logical queue {topic}/{lq} is sealed (the topic's logical "
                              "queue count was decreased): readable, not writable")

    async def send_when_moved(self, topic: str, lq: int,
                               cmd: RemotingCommand) -> RemotingCommand:
        """A send that met a migration: wait for the mapping to change, then deliver it to
        the committed segment (forwarding when it is remote); "moved" only on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.MOVE_WAIT
        exchanged: set[str] = set()
        while True:
            mapping = self.lqs.get(topic)
            seg = mapping.leader(lq) if mapping is not None else None
            if mapping is not None and seg is None and mapping.pending(lq) is None:
                raise self.sealed(topic, lq)  # sealed by a decrease, not migrating
            if seg is not None:
                physical = self.fwd.physical(cmd, seg)
                if seg.broker == self.fwd.me:
                    done: asyncio.Future[RemotingCommand] = loop.create_future()
                    proxy = Capture(cast(Connection, FutureConn(done)), lambda r: r)
                    resp = self.fwd.handlers[cmd.code](cast(Connection, proxy), physical)
                    if isinstance(resp, RemotingCommand):
                        done.set_result(resp)
                    resp = await done
                else:
                    resp = await self.fwd.forward(seg.broker, physical)
                moved = (resp.code == ResponseCode.SYSTEM_BUSY
                         and (resp.remark or "").startswith("moved"))
                if moved and seg.broker != self.fwd.me and seg.broker not in exchanged:
                    exchanged.add(seg.broker)  # once: it may simply be mid-migration
                    await self.sync.exchange(seg.broker, topic)
                    continue
                if not moved:
                    resp.opaque, resp.serialize_type = cmd.opaque, cmd.serialize_type
                    if resp.code == 0 and "queueOffset" in resp.ext_fields:
                        resp.ext_fields["queueOffset"] = str(
                            seg.to_logical(int(resp.ext_fields["queueOffset"])))
                        resp.ext_fields["queueId"] = str(lq)
                    return resp
            remaining = deadline - loop.time()
            if remaining <= 0:
                return cmd.response(ResponseCode.SYSTEM_BUSY,
                                    f"moved: logical queue {topic}/{lq} is migrating; retry")
            await self.wait_changed(topic, min(remaining, 0.05))

    async def wait_changed(self, topic: str, timeout: float) -> None:
        event = self._events.setdefault(topic, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    def notify(self, topic: str) -> None:
        """The mapping of ``topic`` changed: wake sends waiting out a migration."""
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()
