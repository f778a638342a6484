"""Server-side translation of logical queues (RIP-21 phase 2) and their admin codes.

Clients -- TideMQ's and plain RocketMQ remoting clients alike -- address ``(topic,
logical queue id)`` under the placeholder broker ``__logical__``; the name server points
that placeholder at one broker of the mapping (the gateway). Whichever broker receives a
request for a mapped topic translates it:

* **send**: to the LQ's NORMAL segment; appended here if this broker holds it, else
  forwarded to the segment's broker with ``lo=false`` (already physical). The answer's
  queue offset is made logical. With no NORMAL segment but a PENDING one (a migration
  between seal and commit) the send is held until the commit arrives, then delivered;
  after ``MOVE_WAIT`` the answer is SYSTEM_BUSY "moved" -- retriable. With neither (the
  LQ was sealed by a decrease) it is NO_PERMISSION.
* **pull**: the readable segment holding the logical offset; records come back with
  QUEUEID and QUEUEOFFSET rewritten to the logical queue and offset (a copy -- the only
  place where pull bodies are not zero-copy). A sealed segment's end moves the reader to
  the next segment; long polling happens on the open one only, and pulls held on a
  segment are answered when it is sealed. A commit piggy-backed on a pull is logical.
* **offsets**: consumer offsets are stored in logical terms here and replicated oneway to
  the mapping's other brokers; min/max come from the segments, time search walks them
  oldest first, and INVOKE_BROKER_TO_RESET_OFFSET resets in logical terms.

A request carrying ``lo=false`` is physical and goes to the ordinary processors -- except
that a send to a physical queue of a sealed or pending segment is refused ("moved"), the
fence that keeps exactly one writable segment per LQ, and that a pull of one is never
held. A broker whose forward fails for a lost connection asks the name server for the
brokers' addresses again (a restarted broker may listen elsewhere).

The translation is an interceptor of the broker's request pipeline
(:mod:`tidemq.broker.pipeline`), so batch-protocol children are translated like requests;
a translated request runs on the registered handler of its code, past the interceptors
that admitted the original.

Admin codes (docs/protocol.md): 20100 UPDATE_LOGICAL_QUEUE_MAPPING (body = mapping JSON),
20101 QUERY_LOGICAL_QUEUE_MAPPING, 20102 SEAL_LOGICAL_QUEUE, 20103
DELETE_LOGICAL_QUEUE_MAPPING.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tidemq.broker.codes import OFFSET_CODES, PULL_CODES, SEND_CODES
from tidemq.broker.context import BrokerContext
from tidemq.broker.logical import LOGICAL_BROKER, Segment, SegmentState, TopicMapping
from tidemq.broker.pipeline import Pipeline
from tidemq.broker.processors.decode import parse_header
from tidemq.codec.bodies import ClusterInfo, TopicConfig, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ResetOffsetRequestHeader
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.formats.logical_migration import MappingConflict
from tidemq.formats.record import rewrite_queue
from tidemq.net import Connection, Processor

__all__ = ["LogicalProcessor"]

log = logging.getLogger(__name__)

_FLAG_COMMIT_OFFSET = 0x1  # pull sysFlag: commitOffset carries the group's position

_TRANSLATED = SEND_CODES | PULL_CODES | OFFSET_CODES


def _topic_key(code: int) -> tuple[str, str]:
    """(topic key, queue-id key) in the ext map of ``code``."""
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return "b", "e"
    return "topic", "queueId"


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


class _Capture:
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


class _FutureConn:
    """The connection end of a capture whose answer resolves a future."""

    def __init__(self, future: asyncio.Future[RemotingCommand]) -> None:
        self._future = future
        self.remote_address = "internal"
        self.is_open = True

    def send_response(self, cmd: RemotingCommand) -> bool:
        if not self._future.done():
            self._future.set_result(cmd)
        return True


class _Handlers:
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


class LogicalProcessor:
    MOVE_WAIT = 3.0  # seconds a send waits out a migration before answering "moved"
    REFRESH_INTERVAL = 1.0  # seconds between two address look-ups at the name server

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.lqs = ctx.logical
        self._orig = _Handlers(None)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._events: dict[str, asyncio.Event] = {}
        self._refresh_after = 0.0

    # ------------------------------------------------------------------ install

    #: The translation changes what a request means: a held request evaluated again
    #: needs it too (:mod:`tidemq.broker.pipeline`).
    rewrites = True

    def register(self, pipeline: Pipeline) -> None:
        """Register the admin codes; the ordinary handlers run translated requests."""
        self._orig = _Handlers(pipeline)
        pipeline.register(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, self.update_mapping)
        pipeline.register(RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, self.query_mapping)
        pipeline.register(RequestCode.SEAL_LOGICAL_QUEUE, self.seal)
        pipeline.register(RequestCode.DELETE_LOGICAL_QUEUE_MAPPING, self.delete_mapping)

    def wrap(self, code: int, proceed: Processor) -> Processor:
        """The pipeline interceptor: requests for mapped topics of the codes logical
        topics use are translated; everything else goes on unchanged."""
        if code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
            return self._wrap_reset(proceed)
        if code not in _TRANSLATED:
            return proceed
        tkey, _ = _topic_key(code)

        def process(conn: Connection, cmd: RemotingCommand) -> Any:
            mapping = self.lqs.get(cmd.ext_fields.get(tkey, ""))
            if mapping is None:
                return proceed(conn, cmd)
            if cmd.ext_fields.get("lo") == "false":
                if code in SEND_CODES:
                    self._fence(mapping, cmd)
                elif code in PULL_CODES and not self._is_open(mapping, cmd):
                    # A sealed segment never grows: holding the pull would stall the
                    # reader until its timeout instead of moving it to the next segment.
                    cmd.ext_fields["suspendTimeoutMillis"] = "0"
                return proceed(conn, cmd)
            return self._logical(code, mapping, conn, cmd)

        return process

    def _wrap_reset(self, orig: Processor) -> Callable[[Connection, RemotingCommand], Any]:
        def process(conn: Connection, cmd: RemotingCommand) -> Any:
            mapping = self.lqs.get(cmd.ext_fields.get("topic", ""))
            if mapping is None:
                return orig(conn, cmd)
            self.reset_offset(mapping, conn, cmd)
            return None

        return process

    def mapping_changed(self, mapping: TopicMapping | None, topic: str | None = None) -> None:
        """A logical-queue mapping changed: register the topic's physical queues and its
        ``logical.queues`` attribute so the name server publishes the placeholder route."""
        if mapping is not None:
            self.ctx.topics.upsert(logical_topic_config(mapping, self.ctx.config.broker_name))
            self.notify(mapping.topic)
        elif topic is not None:
            self.ctx.topics.delete(topic)
        self.ctx.topics_changed()

    # ------------------------------------------------------------------ helpers

    @property
    def me(self) -> str:
        return self.ctx.config.broker_name

    def _is_open(self, mapping: TopicMapping, cmd: RemotingCommand) -> bool:
        """Whether the physical queue ``cmd`` names holds an open (NORMAL) segment here."""
        _, qkey = _topic_key(cmd.code)
        try:
            qid = int(cmd.ext_fields.get(qkey, "-1"))
        except ValueError:
            return False
        for lq in mapping.queues:
            leader = mapping.leader(lq)
            if leader is not None and leader.broker == self.me and leader.queue_id == qid:
                return True
        return False

    def _fence(self, mapping: TopicMapping, cmd: RemotingCommand) -> None:
        if self._is_open(mapping, cmd):
            return
        _, qkey = _topic_key(cmd.code)
        qid = cmd.ext_fields.get(qkey, "-1")
        raise error_for_code(ResponseCode.SYSTEM_BUSY,
                             f"moved: {mapping.topic} queue {qid} on {self.me} is not an open "
                             f"logical-queue segment (epoch {mapping.epoch}); refresh and retry")

    def _physical(self, cmd: RemotingCommand, seg: Segment, **ext: str) -> RemotingCommand:
        _, qkey = _topic_key(cmd.code)
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

    def _address(self, broker: str) -> str:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            self.refresh_addresses()
            raise error_for_code(ResponseCode.SYSTEM_BUSY,
                                 f"broker {broker} of the logical queue is not reachable yet")
        return str(addr)

    async def _forward(self, broker: str, cmd: RemotingCommand,
                       timeout: float = 3.0) -> RemotingCommand:
        """``cmd`` to ``broker``; a lost connection makes us look its address up again."""
        try:
            return await self.ctx.client.request(self._address(broker), cmd, timeout)
        except ConnectionLost:
            self.refresh_addresses()  # the broker may have restarted elsewhere
            raise

    def refresh_addresses(self) -> None:
        """Learn the brokers' addresses from the name server (at most once a second): a
        restarted broker knows none, and a broker that restarted elsewhere has moved."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._refresh_after or not self.ctx.config.namesrv_addrs:
            return
        self._refresh_after = loop.time() + self.REFRESH_INTERVAL
        self._spawn(self.lookup_addresses())

    async def lookup_addresses(self) -> None:
        """The master addresses the first answering name server knows, taken in."""
        for namesrv in self.ctx.config.namesrv_addrs:
            try:
                resp = await self.ctx.client.request(namesrv, RemotingCommand.request(
                    RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
                info = decode_body(resp.full_body(), ClusterInfo)
            except (TideMQError, ValueError) as exc:
                log.info("asking %s for broker addresses failed: %s", namesrv, exc)
                continue
            for name, data in info.broker_addr_table.items():
                addr = data.master_addr()
                if addr is not None and name != self.me:
                    self.ctx.broker_addresses[name] = addr
            return

    def _spawn(self, coro: Awaitable[Any]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ convergence

    async def run_sync(self, interval: float) -> None:
        """:meth:`sync` now and every ``interval`` seconds, until cancelled."""
        while True:
            try:
                await self.sync()
            except (TideMQError, OSError, ValueError) as exc:
                log.warning("syncing logical-queue mappings failed: %s", exc)
            await asyncio.sleep(interval)

    async def sync(self) -> list[str]:
        """Every mapping held compared with the other brokers' copies: what this broker
        missed (a push, a seal, a commit) is merged in, a migration whose old segment is
        sealed is committed, and a peer holding less gets the result. Returns the topics
        whose mapping changed here."""
        if not self.lqs.mappings:
            return []
        if any(b not in self.ctx.broker_addresses for m in self.lqs.mappings.values()
               for b in m.brokers()):
            await self.lookup_addresses()
        changed = []
        for topic in sorted(self.lqs.mappings):
            before = self.lqs.get(topic)
            if before is None:
                continue
            peers = sorted((before.brokers() | set(self.ctx.broker_addresses)) - {self.me})
            copies = await asyncio.gather(*(self._peer_copy(b, topic) for b in peers))
            for broker, copy in zip(peers, copies, strict=True):
                if copy is not None:
                    try:
                        self.lqs.absorb(copy)
                    except MappingConflict as exc:  # only racing admin tools do that
                        log.warning("%s's copy of %s contradicts ours, not taken: %s",
                                    broker, topic, exc)
            self.lqs.absorb(before)  # commits a sealed migration even with no peer up
            held = self.lqs.get(topic)
            if held is None:
                continue
            if held != before:
                changed.append(topic)
                self.mapping_changed(held)
            for broker, copy in zip(peers, copies, strict=True):
                if copy is not None and copy != held:
                    self._spawn(self._push_to(broker, held))
        return changed

    async def exchange(self, broker: str, topic: str) -> None:
        """``broker``'s copy of ``topic`` merged in here, and ours pushed there if it
        differs: the two agree afterwards (when both are up)."""
        copy = await self._peer_copy(broker, topic)
        if copy is None:
            return
        try:
            changed = self.lqs.absorb(copy)
        except MappingConflict as exc:
            log.warning("%s's copy of %s contradicts ours, not taken: %s", broker, topic, exc)
            return
        if changed:
            held = self.lqs.get(topic)
            assert held is not None
            self.mapping_changed(held)
        held = self.lqs.get(topic)
        if held is not None and held != copy:
            await self._push_to(broker, held)

    async def _peer_copy(self, broker: str, topic: str) -> TopicMapping | None:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            return None
        try:
            resp = await self.ctx.client.request(addr, RemotingCommand.request(
                RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": topic}), 2.0)
            if resp.code != ResponseCode.SUCCESS:
                return None
            return TopicMapping.from_json(json.loads(resp.full_body()))
        except (TideMQError, ValueError, KeyError, TypeError) as exc:
            log.debug("reading %s's mapping of %s failed: %s", broker, topic, exc)
            return None

    async def _push_to(self, broker: str, mapping: TopicMapping) -> None:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            return
        cmd = RemotingCommand.request(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {},
                                      json.dumps(mapping.to_json()).encode())
        try:
            resp = await self.ctx.client.request(addr, cmd, 3.0)
        except TideMQError as exc:
            log.info("pushing the logical mapping to %s failed: %s", broker, exc)
            return
        if resp.code != ResponseCode.SUCCESS:
            log.info("%s refused the logical mapping of %s: %s", broker, mapping.topic,
                     resp.remark)

    def _run(self, conn: Connection, cmd: RemotingCommand,
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
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _execute(self, conn: Connection, cmd: RemotingCommand, seg: Segment,
                 translate: Callable[[RemotingCommand], RemotingCommand], **ext: str) -> Any:
        """Run the physical request on the segment's broker, answer translated."""
        physical = self._physical(cmd, seg, **ext)
        if seg.broker == self.me:
            resp = self._orig[cmd.code](cast(Connection, _Capture(conn, translate)), physical)
            if resp is None or not isinstance(resp, RemotingCommand):
                return resp
            return translate(resp)

        async def forward() -> RemotingCommand:
            timeout = 3.0
            if cmd.code in PULL_CODES:
                timeout += int(physical.ext_fields.get("suspendTimeoutMillis", "0")) / 1000
            resp = await self._forward(seg.broker, physical, timeout)
            if (cmd.code in SEND_CODES and resp.code == ResponseCode.SYSTEM_BUSY
                    and (resp.remark or "").startswith("moved")):
                # The segment's broker and we disagree on the mapping: agree, then
                # deliver by the result (or wait for the migration to finish).
                topic = physical.ext_fields.get(_topic_key(cmd.code)[0], "")
                await self.exchange(seg.broker, topic)
                lq = int(cmd.ext_fields.get(_topic_key(cmd.code)[1], "-1"))
                return await self._send_when_moved(topic, lq, cmd)
            resp.opaque = cmd.opaque
            resp.serialize_type = cmd.serialize_type
            return translate(resp)

        self._run(conn, cmd, forward())
        return None

    async def _call(self, cmd: RemotingCommand, seg: Segment, **ext: str) -> RemotingCommand:
        """The physical request on the segment's broker, its answer untranslated."""
        physical = self._physical(cmd, seg, **ext)
        if seg.broker != self.me:
            resp = await self._forward(seg.broker, physical)
        else:
            done: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
            answer = self._orig[cmd.code](cast(Connection, _Capture(
                cast(Connection, _FutureConn(done)), lambda r: r)), physical)
            if isinstance(answer, RemotingCommand):
                done.set_result(answer)
            resp = await done
        resp.opaque, resp.serialize_type = cmd.opaque, cmd.serialize_type
        return resp

    # ------------------------------------------------------------------ logical paths

    def _logical(self, code: int, mapping: TopicMapping, conn: Connection,
                 cmd: RemotingCommand) -> Any:
        _, qkey = _topic_key(code)
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
            return self._send(mapping, lq, conn, cmd)
        if code in PULL_CODES:
            return self._pull(mapping, lq, conn, cmd)
        return self._offsets(mapping, lq, conn, cmd)

    def _send(self, mapping: TopicMapping, lq: int, conn: Connection,
              cmd: RemotingCommand) -> Any:
        seg = mapping.leader(lq)
        if seg is None:
            if mapping.pending(lq) is None:
                raise self._sealed(mapping.topic, lq)
            # Between seal and commit of a migration: hold the send until the new segment
            # is committed (normally milliseconds) instead of bouncing it to the producer.
            self._run(conn, cmd, self._send_when_moved(mapping.topic, lq, cmd))
            return None

        def translate(resp: RemotingCommand) -> RemotingCommand:
            if resp.code == 0 and "queueOffset" in resp.ext_fields:
                resp.ext_fields["queueOffset"] = str(
                    seg.to_logical(int(resp.ext_fields["queueOffset"])))
                resp.ext_fields["queueId"] = str(lq)
            return resp

        return self._execute(conn, cmd, seg, translate)

    @staticmethod
    def _sealed(topic: str, lq: int) -> TideMQError:
        return error_for_code(ResponseCode.NO_PERMISSION,
                              f"logical queue {topic}/{lq} is sealed (the topic's logical "
                              "queue count was decreased): readable, not writable")

    async def _send_when_moved(self, topic: str, lq: int,
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
                raise self._sealed(topic, lq)  # sealed by a decrease, not migrating
            if seg is not None:
                physical = self._physical(cmd, seg)
                if seg.broker == self.me:
                    done: asyncio.Future[RemotingCommand] = loop.create_future()
                    proxy = _Capture(cast(Connection, _FutureConn(done)), lambda r: r)
                    resp = self._orig[cmd.code](cast(Connection, proxy), physical)
                    if isinstance(resp, RemotingCommand):
                        done.set_result(resp)
                    resp = await done
                else:
                    resp = await self._forward(seg.broker, physical)
                moved = (resp.code == ResponseCode.SYSTEM_BUSY
                         and (resp.remark or "").startswith("moved"))
                if moved and seg.broker != self.me and seg.broker not in exchanged:
                    exchanged.add(seg.broker)  # once: it may simply be mid-migration
                    await self.exchange(seg.broker, topic)
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
            await self._mapping_changed(topic, min(remaining, 0.05))

    async def _mapping_changed(self, topic: str, timeout: float) -> None:
        event = self._events.setdefault(topic, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def notify(self, topic: str) -> None:
        """The mapping of ``topic`` changed: wake sends waiting out a migration."""
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    def _pull(self, mapping: TopicMapping, lq: int, conn: Connection,
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
        sys_flag = _int(cmd.ext_fields.get("sysFlag"), 0)
        if sys_flag & _FLAG_COMMIT_OFFSET:
            # The piggy-backed commit is logical: store it here under the LQ, never let
            # the segment's broker store it under its physical queue id.
            commit = _int(cmd.ext_fields.get("commitOffset"), -1)
            group = cmd.ext_fields.get("consumerGroup", "")
            if commit >= 0 and self.ctx.offsets.query(group, mapping.topic, lq) != commit:
                self._commit(mapping, group, lq, commit)
            extra["sysFlag"] = str(sys_flag & ~_FLAG_COMMIT_OFFSET)
        if sealed_end >= 0:
            extra["suspendTimeoutMillis"] = "0"
            extra["maxMsgNums"] = str(max(1, min(int(cmd.ext_fields.get("maxMsgNums", "32")),
                                                 sealed_end - seg.to_physical(logical))))

        def translate(resp: RemotingCommand) -> RemotingCommand:
            ext = resp.ext_fields
            dispatched = _int(ext.get("maxOffset"), 0)  # physical, before translation
            for key in ("nextBeginOffset", "maxOffset"):
                if key in ext:
                    ext[key] = str(seg.to_logical(int(ext[key])))
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
            return resp

        if sealed_end < 0:
            return self._execute(conn, cmd, seg, translate, **extra)

        async def pull_sealed() -> RemotingCommand:
            # The reader's lag is against the logical queue, not the sealed segment.
            top = seg.logical_end
            with contextlib.suppress(TideMQError):  # the leader's broker may be down
                top = max(top, await self._max_logical(mapping, lq))
            resp = translate(await self._call(cmd, seg, **extra))
            if "maxOffset" in resp.ext_fields:
                resp.ext_fields["maxOffset"] = str(top)
            return resp

        self._run(conn, cmd, pull_sealed())
        return None

    def _offsets(self, mapping: TopicMapping, lq: int, conn: Connection,
                 cmd: RemotingCommand) -> Any:
        code = cmd.code
        ctx = self.ctx
        if code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
            group = cmd.ext_fields.get("consumerGroup", "")
            if code == RequestCode.UPDATE_CONSUMER_OFFSET:
                offset = _int(cmd.ext_fields.get("commitOffset"), -1)
                if offset < 0:
                    raise error_for_code(ResponseCode.INVALID_PARAMETER, "negative commitOffset")
                if lq not in mapping.queues:
                    raise error_for_code(
                        ResponseCode.INVALID_PARAMETER,
                        f"queueId {lq} is not a logical queue of {mapping.topic}")
                self._commit(mapping, group, lq, offset,
                             replicate=cmd.ext_fields.get("replicated") != "true")
                return cmd.response()
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
            return self._execute(conn, cmd, top, lambda r: self._offset_to_logical(r, top))
        if code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_EARLIEST_MSG_STORETIME):
            seg = mapping.segment_for(lq, 0)
            if seg is None:
                return cmd.response(ext_fields={"offset": "0"} if code == RequestCode.
                                    GET_MIN_OFFSET else {"timestamp": "0"})
            first = seg
            if code == RequestCode.GET_EARLIEST_MSG_STORETIME:
                return self._execute(conn, cmd, first, lambda r: r)
            return self._execute(conn, cmd, first, lambda r: self._offset_to_logical(r, first))
        # SEARCH_OFFSET_BY_TIMESTAMP: walks the segments, possibly on other brokers.
        timestamp = _int(cmd.ext_fields.get("timestamp"), 0)
        boundary = cmd.ext_fields.get("boundaryType", "lower")

        async def search() -> RemotingCommand:
            offset = await self._search_by_time(mapping, lq, timestamp, boundary)
            return cmd.response(ext_fields={"offset": str(offset)})

        self._run(conn, cmd, search())
        return None

    # ------------------------------------------------------------------ logical positions

    async def _ask(self, code: int, seg: Segment, ext: dict[str, str]) -> int:
        """Ask the broker of ``seg`` an offset question about its physical queue; the
        answer's ``offset`` (physical)."""
        fields = {"topic": ext["topic"], "queueId": str(seg.queue_id), "lo": "false",
                  **{k: v for k, v in ext.items() if k not in ("topic", "queueId")}}
        cmd = RemotingCommand.request(code, fields)
        if seg.broker == self.me:
            resp = self._orig[code](cast(Connection, None), cmd)
            if not isinstance(resp, RemotingCommand):
                raise error_for_code(ResponseCode.SYSTEM_ERROR, f"code {code} did not answer")
        else:
            resp = await self._forward(seg.broker, cmd)
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_code(resp.code, resp.remark or f"code {code} failed on {seg.broker}")
        return int(resp.ext_fields.get("offset", "0"))

    async def _min_logical(self, mapping: TopicMapping, lq: int) -> int:
        seg = mapping.segment_for(lq, 0)
        if seg is None:
            return 0
        phys = await self._ask(RequestCode.GET_MIN_OFFSET, seg, {"topic": mapping.topic})
        return max(seg.logical_start, seg.to_logical(phys))

    async def _max_logical(self, mapping: TopicMapping, lq: int) -> int:
        seg = mapping.leader(lq) or mapping.segment_for(lq, 1 << 62)
        if seg is None:
            return 0
        if seg.state is SegmentState.READONLY:
            return seg.logical_end
        phys = await self._ask(RequestCode.GET_MAX_OFFSET, seg, {"topic": mapping.topic})
        return max(seg.logical_start, seg.to_logical(phys))

    async def _search_by_time(self, mapping: TopicMapping, lq: int, timestamp: int,
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
            phys = await self._ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, older, ext)
            if phys < older.physical_end:  # else everything in it is older: next one
                seg, found = older, phys
                break
        upper = boundary.lower() == "upper"
        if upper:
            ext["boundaryType"] = "upper"
        phys = found if found >= 0 and not upper else await self._ask(
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
                lo, hi = await self._min_logical(mapping, lq), await self._max_logical(
                    mapping, lq)
                if h.offset is not None and h.offset != -1:
                    if not lo <= h.offset <= hi:
                        raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                             f"offset {h.offset} is outside {lo}..{hi} of "
                                             f"logical queue {lq}")
                    new = h.offset
                elif h.timestamp == -1:
                    new = hi
                else:
                    new = await self._search_by_time(mapping, lq, h.timestamp)
                current = self.ctx.offsets.query(h.group, h.topic, lq)
                if not h.is_force and current is not None and current < new:
                    new = current
                plan.append((lq, new))
            for lq, offset in plan:
                self._commit(mapping, h.group, lq, offset)
            self.ctx.offsets.persist()
            body = json.dumps({"offsetTable": [
                {"topic": h.topic, "brokerName": LOGICAL_BROKER, "queueId": lq,
                 "offset": offset} for lq, offset in plan]}, sort_keys=True).encode()
            for channel in self.ctx.consumers.channels(h.group):
                notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                                 dict(cmd.ext_fields), body, oneway=True)
                with contextlib.suppress(TideMQError):
                    await channel.conn.oneway(notice)
            return cmd.response(body=body)

        self._run(conn, cmd, reset())

    @staticmethod
    def _offset_to_logical(resp: RemotingCommand, seg: Segment) -> RemotingCommand:
        if resp.code == 0 and "offset" in resp.ext_fields:
            resp.ext_fields["offset"] = str(max(seg.logical_start, seg.to_logical(
                int(resp.ext_fields["offset"]))))
        return resp

    def _commit(self, mapping: TopicMapping, group: str, lq: int, offset: int, *,
                replicate: bool = True) -> None:
        """Store ``group``'s logical offset of ``lq`` here and (unless this is a copy)
        send it oneway to the mapping's other brokers -- best effort."""
        self.ctx.offsets.commit(group, mapping.topic, lq, offset)
        if replicate:
            self._replicate(mapping, group, lq, offset)

    def _replicate(self, mapping: TopicMapping, group: str, lq: int, offset: int) -> None:
        others = sorted(b for b in mapping.brokers() if b != self.me)
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
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ admin codes

    def update_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self._take(cmd, None)
        addrs = cmd.ext_fields.get("brokerAddrs")
        if addrs:
            with contextlib.suppress(ValueError, TypeError):
                self.ctx.broker_addresses.update({
                    str(k): str(v) for k, v in dict(json.loads(addrs)).items()
                    if k != self.me})
        return cmd.response()

    def _take(self, cmd: RemotingCommand, topic: str | None, *, older: bool = False) -> None:
        """The mapping in ``cmd``'s body, merged into the one held (replacing it when
        ``force``); the topic re-registered if it changed. ``topic``: the one it must map;
        ``older``: an older epoch is merged in rather than refused."""
        try:
            mapping = TopicMapping.from_json(json.loads(cmd.full_body()))
        except (ValueError, KeyError, TypeError) as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, f"bad mapping: {exc}") from None
        if topic is not None and mapping.topic != topic:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"the mapping is of {mapping.topic}, not {topic}")
        try:
            changed = self.lqs.update(mapping, force=cmd.ext_fields.get("force") == "true",
                                      older=older)
        except ValueError as exc:
            raise error_for_code(ResponseCode.ILLEGAL_OPERATION, str(exc)) from None
        if changed:
            held = self.lqs.get(mapping.topic)
            assert held is not None
            self.mapping_changed(held)

    def query_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        mapping = self.lqs.get(topic)
        if mapping is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                                 f"{topic} has no logical-queue mapping on {self.me}")
        return cmd.response(body=json.dumps(mapping.to_json()).encode())

    def seal(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Seal the NORMAL segment of ``lq`` held here at its exact end. Runs on the event
        loop like every append, so no send can slip in between reading the end and the
        fence going up."""
        topic = cmd.ext_fields.get("topic", "")
        lq = _int(cmd.ext_fields.get("lq"), -1)
        if cmd.full_body():  # the admin's copy: the pending segment, even if a push missed
            self._take(cmd, topic, older=True)  # merged, even below an epoch bumped here
        mapping = self.lqs.get(topic)
        if mapping is None or lq not in mapping.queues:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"no logical queue {topic}/{lq}")
        segs = mapping.queues[lq]
        idx = next((i for i in range(len(segs) - 1, -1, -1)
                    if segs[i].state is SegmentState.NORMAL), None)
        if idx is None:  # already sealed: idempotent for a resumed migration
            return cmd.response(body=json.dumps(mapping.to_json()).encode())
        seg = segs[idx]
        if seg.broker != self.me:
            raise error_for_code(ResponseCode.ILLEGAL_OPERATION,
                                 f"{topic}/{lq} is open on {seg.broker}, not {self.me}")
        with self.ctx.store.commitlog.lock:
            end = self.ctx.store.next_queue_offset(topic, seg.queue_id)
        sealed = dataclasses.replace(seg, physical_end=max(end, seg.physical_start),
                                     state=SegmentState.READONLY)
        new = mapping.replace(lq, (*segs[:idx], sealed, *segs[idx + 1:]), mapping.epoch + 1)
        self.lqs.update(new)
        self.mapping_changed(new)
        # Pulls held on the sealed queue wait for messages that will never come: answer
        # them now, so readers move on to the next segment at once.
        self.ctx.holds.notify(topic, seg.queue_id, 1 << 62)
        return cmd.response(body=json.dumps(new.to_json()).encode())

    def expire_segments(self) -> list[TopicMapping]:
        """Sealed segments hosted here whose data retention removed become EXPIRED (RIP-21
        scenario b); the new mapping is pushed to the other brokers. Returns the changes."""
        changed = []
        store = self.ctx.store
        for mapping in list(self.lqs.mappings.values()):
            new = mapping
            for lq, segs in mapping.queues.items():
                updated = tuple(
                    dataclasses.replace(s, state=SegmentState.EXPIRED)
                    if s.broker == self.me and s.state is SegmentState.READONLY
                    and store.min_offset(mapping.topic, s.queue_id) >= s.physical_end
                    and (s.physical_end == s.physical_start
                         or store.max_offset(mapping.topic, s.queue_id) >= s.physical_end)
                    else s for s in segs)
                if updated != segs:
                    new = new.replace(lq, updated, new.epoch + 1)
            if new is not mapping:
                self.lqs.update(new)
                self.mapping_changed(new)
                self._push_others(new)
                changed.append(new)
        return changed

    def _push_others(self, mapping: TopicMapping) -> None:
        for broker in sorted(mapping.brokers() - {self.me}):
            self._spawn(self._push_to(broker, mapping))

    def delete_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        if self.lqs.delete(topic):
            self.mapping_changed(None, topic)
        return cmd.response()


def logical_topic_config(mapping: TopicMapping, broker: str) -> TopicConfig:
    """The topic config a broker registers for a mapped topic: its physical queues, and
    the attributes the name server turns into the ``__logical__`` route."""
    pqs = mapping.physical_queues(broker)
    n = max(pqs) + 1 if pqs else 0
    writable = max((lq + 1 for lq in mapping.queues
                    if mapping.leader(lq) is not None or mapping.pending(lq) is not None),
                   default=0)
    return TopicConfig(topic_name=mapping.topic, read_queue_nums=n, write_queue_nums=n, perm=6,
                       attributes={"logical.queues": str(mapping.total),
                                   "logical.writable": str(writable),
                                   "logical.epoch": str(mapping.epoch)})
