"""Running a translated request where its segment lives: on this broker through the
registered handler of its code, or forwarded to the segment's broker (``lo=false``, already
physical), and the brokers' addresses that takes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tidemq.broker.cluster_info import ask_cluster
from tidemq.broker.codes import PULL_CODES
from tidemq.broker.context import BrokerContext
from tidemq.broker.logical import Segment, TopicMapping
from tidemq.broker.pipeline import Pipeline
from tidemq.broker.processors.logical.ends import KnownEnds
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection, Processor

__all__ = ["Capture", "Forwarder", "FutureConn", "Handlers", "to_int", "topic_key"]

log = logging.getLogger(__name__)


def topic_key(code: int) -> tuple[str, str]:
    """(topic key, queue-id key) in the ext map of ``code``."""
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return "b", "e"
    return "topic", "queueId"


def to_int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


class Capture:
    """A stand-in connection: collects the answer a processor sends later (long polls,
    SYNC_FLUSH sends) and hands it, translated, to the real connection."""

    def __init__(self, conn: Connection, translate: Callable[[RemotingCommand],
                                                              RemotingCommand]) -> None:
        self._conn = conn
        self._translate = translate
        self.remote_address = conn.remote_address

    @property
    def is_open(self) -> bool:
        return self._conn.is_open

    def send_response(self, cmd: RemotingCommand) -> bool:
        return self._conn.send_response(self._translate(cmd))

    async def oneway(self, cmd: RemotingCommand) -> None:
        await self._conn.oneway(cmd)


class FutureConn:
    """The connection end of a capture whose answer resolves a future."""

    def __init__(self, future: asyncio.Future[RemotingCommand]) -> None:
        self._future = future
        self.remote_address = "internal"
        self.is_open = True

    def send_response(self, cmd: RemotingCommand) -> bool:
        if not self._future.done():
            self._future.set_result(cmd)
        return True


class Handlers:
    """The pipeline's handlers by code: what a translated request runs on, past the
    interceptors that admitted the original."""

    def __init__(self, pipeline: Pipeline | None) -> None:
        self._pipeline = pipeline

    def __getitem__(self, code: int) -> Processor:
        handler = None if self._pipeline is None else self._pipeline.handler(code)
        if handler is None:
            raise error_for_code(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f"request code {code} is not served here")
        return handler


class Forwarder:
    """Where requests go: this broker's handlers or a peer; the background tasks of the
    logical-queue processors."""

    REFRESH_INTERVAL = 1.0  # seconds between two address look-ups at the name server

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers = Handlers(None)
        self.tasks: set[asyncio.Task[Any]] = set()
        self._refresh_after = 0.0
        #: how far other brokers' segments are known to reach (for a forced cut)
        self.ends = KnownEnds()

    @property
    def me(self) -> str:
        return self.ctx.config.broker_name

    def is_open(self, mapping: TopicMapping, cmd: RemotingCommand) -> bool:
        """Whether the physical queue ``cmd`` names holds an open (NORMAL) segment here."""
        _, qkey = topic_key(cmd.code)
        try:
            qid = int(cmd.ext_fields.get(qkey, "-1"))
        except ValueError:
            return False
        for lq in mapping.queues:
            leader = mapping.leader(lq)
            if leader is not None and leader.broker == self.me and leader.queue_id == qid:
                return True
        return False

    def fence(self, mapping: TopicMapping, cmd: RemotingCommand) -> None:
        if self.is_open(mapping, cmd):
            return
        _, qkey = topic_key(cmd.code)
        qid = cmd.ext_fields.get(qkey, "-1")
        raise error_for_code(ResponseCode.SYSTEM_BUSY,
                             f"moved: {mapping.topic} queue {qid} on {self.me} is not an open "
                             f"logical-queue segment (epoch {mapping.epoch}); refresh and retry")

    def physical(self, cmd: RemotingCommand, seg: Segment, **ext: str) -> RemotingCommand:
        _, qkey = topic_key(cmd.code)
        fields = dict(cmd.ext_fields)
        fields[qkey] = str(seg.queue_id)
        fields["lo"] = "false"
        fields.update(ext)
        fields.pop("bname", None)
        out = RemotingCommand(code=cmd.code, opaque=cmd.opaque, flag=cmd.flag,
                              language=cmd.language, version=cmd.version,
                              ext_fields=fields, body=cmd.body,
                              serialize_type=cmd.serialize_type)
        return out

    def address(self, broker: str) -> str:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            self.refresh_addresses()
            raise error_for_code(ResponseCode.SYSTEM_BUSY,
                                 f"broker {broker} of the logical queue is not reachable yet")
        return str(addr)

    async def forward(self, broker: str, cmd: RemotingCommand,
                       timeout: float = 3.0) -> RemotingCommand:
        """``cmd`` to ``broker``; a lost connection makes us look its address up again. A
        stored send raises the end known of its queue before anyone hears of it."""
        try:
            resp = await self.ctx.client.request(self.address(broker), cmd, timeout)
        except ConnectionLost:
            self.refresh_addresses()  # the broker may have restarted elsewhere
            raise
        self.ends.saw_send(broker, cmd, resp)
        return resp

    def refresh_addresses(self) -> None:
        """Learn the brokers' addresses from the name server (at most once a second): a
        restarted broker knows none, and a broker that restarted elsewhere has moved."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._refresh_after or not self.ctx.config.namesrv_addrs:
            return
        self._refresh_after = loop.time() + self.REFRESH_INTERVAL
        self.spawn(self.lookup_addresses())

    async def lookup_addresses(self) -> None:
        """The master addresses the first answering name server knows, taken in."""
        info = await ask_cluster(self.ctx, "broker addresses")
        if info is None:
            return
        for name, data in info.broker_addr_table.items():
            addr = data.master_addr()
            if addr is not None and name != self.me:
                self.ctx.broker_addresses[name] = addr

    def spawn(self, coro: Awaitable[Any]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def run(self, conn: Connection, cmd: RemotingCommand,
             coro: Awaitable[RemotingCommand]) -> None:
        async def go() -> None:
            try:
                resp = await coro
            except BrokerResponseError as exc:
                resp = cmd.response(exc.code if exc.code >= 0 else ResponseCode.SYSTEM_BUSY,
                                    exc.remark)
            except TideMQError as exc:  # the segment's broker is unreachable: retriable
                resp = cmd.response(ResponseCode.SYSTEM_BUSY, str(exc))
            if not cmd.is_oneway:
                conn.send_response(resp)

        task = asyncio.get_running_loop().create_task(go())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def execute(self, conn: Connection, cmd: RemotingCommand, seg: Segment,
                translate: Callable[[RemotingCommand], RemotingCommand],
                on_moved: Callable[[Segment], Awaitable[RemotingCommand]] | None = None, /,
                **ext: str) -> Any:
        """Run the physical request on the segment's broker, answer translated; a remote
        "moved" answer goes to ``on_moved`` when given (sends)."""
        physical = self.physical(cmd, seg, **ext)
        if seg.broker == self.me:
            resp = self.handlers[cmd.code](cast(Connection, Capture(conn, translate)), physical)
            if resp is None or not isinstance(resp, RemotingCommand):
                return resp
            return translate(resp)

        async def forward() -> RemotingCommand:
            timeout = 3.0
            if cmd.code in PULL_CODES:
                timeout += int(physical.ext_fields.get("suspendTimeoutMillis", "0")) / 1000
            resp = await self.forward(seg.broker, physical, timeout)
            if (on_moved is not None and resp.code == ResponseCode.SYSTEM_BUSY
                    and (resp.remark or "").startswith("moved")):
                return await on_moved(seg)
            resp.opaque = cmd.opaque
            resp.serialize_type = cmd.serialize_type
            return translate(resp)

        self.run(conn, cmd, forward())
        return None

    async def call(self, cmd: RemotingCommand, seg: Segment, **ext: str) -> RemotingCommand:
        """The physical request on the segment's broker, its answer untranslated."""
        physical = self.physical(cmd, seg, **ext)
        if seg.broker != self.me:
            resp = await self.forward(seg.broker, physical)
        else:
            done: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
            answer = self.handlers[cmd.code](cast(Connection, Capture(
                cast(Connection, FutureConn(done)), lambda r: r)), physical)
            if isinstance(answer, RemotingCommand):
                done.set_result(answer)
            resp = await done
        resp.opaque, resp.serialize_type = cmd.opaque, cmd.serialize_type
        return resp
