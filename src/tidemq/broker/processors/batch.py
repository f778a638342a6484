"""BATCH_REQUEST (20000): the broker side of the batch protocol (RocketMQ issue #5516).

Layout in :mod:`tidemq.codec.batch_protocol`; codes and differences in docs/protocol.md.
Registered only with ``batchProtocolEnable=true``; a broker without it answers 3
REQUEST_CODE_NOT_SUPPORTED, which clients read as "feature absent".

Each child runs through the processor registered for its code (looked up when this one is
registered, so whatever wraps send, pull or offsets applies to children too). The child
gets a :class:`_ChildConnection`: the real connection for everything but
``send_response``, which hands the child's late answer (a SYNC_FLUSH send) to the merge
instead of the socket. A child raising :class:`~tidemq.errors.BrokerResponseError` is
answered with that code and remark; a malformed child with INVALID_PARAMETER; its siblings
are served either way.

=========================  ==============================================================
dispatchCode               the parent is answered
=========================  ==============================================================
10, 310, 320 (send)        when every child has answered: at once under ASYNC_FLUSH,
14, 15, 30 (offsets)       when the last flush is confirmed (or times out) under SYNC_FLUSH
11, 361 (pull)             at once when any child found data, failed or must move; else,
                           if a child allows suspension, the parent is held
                           (:mod:`tidemq.broker.batch_hold`) until any child's queue gets
                           data or the longest suspend timeout passes, and then every child
                           is read again without suspension (and without committing again)
=========================  ==============================================================

Pulls share a budget: ``batchMaxBytes`` of records (capped by the frame limit), lowered
by the parent's optional ext ``maxMsgBytes`` / ``maxMsgNums`` (totals over all children).
Each child may read what is left; once it is spent, the remaining children answer
PULL_RETRY_IMMEDIATELY at their own offset (the client pulls them again at once). Reads
start at a child that moves on with every parent, so a small budget still serves every
queue in turn. Children never suspend on their own: SUSPEND is cleared before they run.
A pull child whose processor answers later (a logical-queue pull forwarded to another
broker) is waited for, and such a parent is not held. A child that never answers gets
SYSTEM_ERROR after twice the sync-flush timeout.

Found records go out as the store's memoryviews: the parent's ``body_parts`` are each
child's head followed by its body parts, never joined.

A pull child of an ordinary topic (no logical-queue mapping) whose code is served by the
broker's own pull processor skips that processor's entry: its header is parsed once
here and handed to :meth:`~tidemq.broker.processors.pull.PullProcessor.child` (same
checks, codes and remarks); its found messages are counted in the stats once per parent.
A shared-form parent (ext ``childForm=shared``, :mod:`tidemq.codec.batch_protocol`) has
its template's header parsed once for all its children and is answered with compact
child entries; a standard pull parent offering the form (ext ``childForms``) is told
that this broker reads it. A shared send parent (ext ``childForm=sharedSend``,
:mod:`tidemq.codec.shared_send`) is decoded without a header map per child; a plain send
to an ordinary topic goes to :meth:`~tidemq.broker.processors.send.SendProcessor.child`
from the entry's fields, anything else is built as its standard child and run through
the registered processor; it is answered with compact entries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from tidemq.broker.batch_hold import BatchHoldService, HeldBatch
from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.pull import PullProcessor
from tidemq.broker.processors.send import SendProcessor
from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    SEND_SHARED_CODES,
    SEND_SHARED_FORM,
    SHARED_FORM,
    BatchChild,
    BatchFormatError,
    BatchRequest,
    batch_response,
    child_error_response,
    decode_batch_request,
    dispatch_code_of,
)
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader, SendFields, decode_send_fields
from tidemq.codec.schema import parse_java_int
from tidemq.codec.shared_send import (
    PlainAnswer,
    SendEntry,
    decode_shared_send,
    shared_send_child,
    shared_send_response,
)
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    RemoteProtocolError,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection, Processor, RemotingServer

__all__ = ["MERGE_ALL_CODES", "PULL_CODES", "BatchProcessor"]

log = logging.getLogger(__name__)

#: Children answered together once every one is done.
MERGE_ALL_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
})
#: Children answered as soon as any has data.
PULL_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})

_FLAG_COMMIT_OFFSET = 0x1
_FLAG_SUSPEND = 0x2
_PULL_KEYS = PullMessageRequestHeader.ext_keys()
_SYS_FLAG, _MAX_BYTES, _MAX_NUMS = (_PULL_KEYS["sys_flag"], _PULL_KEYS["max_msg_bytes"],
                                    _PULL_KEYS["max_msg_nums"])
_QUEUE_ID, _QUEUE_OFFSET = _PULL_KEYS["queue_id"], _PULL_KEYS["queue_offset"]
_FRAME_RESERVE = 1024 * 1024  # room left in a frame for the child heads
#: Numbers the send fast path reads from text have at most 9 (18 for a timestamp) digits.
_DIGITS9, _DIGITS18 = 10**9, 10**18


def _error_response(cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """A child's answer to an exception, as the dispatcher would answer a request."""
    if isinstance(exc, BrokerResponseError):
        return cmd.response(exc.code, exc.remark)
    if not isinstance(exc, TideMQError):
        log.error("batch child with code %d raised", cmd.code, exc_info=exc)
    text = str(exc) or type(exc).__name__
    return cmd.response(ResponseCode.SYSTEM_ERROR, text)


class _Merge:
    """The child responses of one parent, filled in any order; answers the parent on the
    connection once the last one is in (when ``deferred``: the processor returned)."""

    __slots__ = ("conn", "deferred", "missing", "opaques", "parent", "respond", "slots",
                 "timer")

    def __init__(self, conn: Connection, parent: RemotingCommand,
                 children: list[BatchChild] | list[int],
                 respond: Callable[[RemotingCommand, Sequence[RemotingCommand]],
                                   RemotingCommand] = batch_response) -> None:
        self.conn = conn
        self.parent = parent
        self.opaques = [c if isinstance(c, int) else c.opaque for c in children]
        #: Child responses; a shared send child's plain success may be a PlainAnswer.
        self.slots: list[RemotingCommand | PlainAnswer | None] = [None] * len(children)
        self.missing = len(children)
        self.deferred = False
        self.timer: asyncio.TimerHandle | None = None
        self.respond = respond

    def put(self, index: int, response: RemotingCommand | PlainAnswer) -> None:
        if self.slots[index] is not None:
            return
        if isinstance(response, RemotingCommand):
            response.opaque = self.opaques[index]
            response.flag |= FLAG_RESPONSE
        self.slots[index] = response
        self.missing -= 1
        if self.missing == 0 and self.deferred:
            self._send()

    def responses(self) -> list[RemotingCommand]:
        """The child responses (as commands: only a shared send parent, whose
        :func:`~tidemq.codec.shared_send.shared_send_response` takes them, has plain
        answers among them)."""
        return cast(list[RemotingCommand], self.slots)

    def expire(self) -> None:
        """Children that never answered get SYSTEM_ERROR (as upstream's proposal)."""
        self.timer = None
        for i, slot in enumerate(self.slots):
            if slot is None:
                self.put(i, RemotingCommand(code=ResponseCode.SYSTEM_ERROR,
                                            remark="the child produced no response in time"))

    def _send(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.parent.is_oneway:
            self.conn.send_response(self.respond(self.parent, self.responses()))


class _ChildConnection:
    """What a child's processor sees as its connection: the real one, except that a late
    ``send_response`` fills the child's slot of the merge."""

    __slots__ = ("_conn", "_index", "_merge")

    def __init__(self, conn: Connection, merge: _Merge, index: int) -> None:
        self._conn = conn
        self._merge = merge
        self._index = index

    @property
    def remote_address(self) -> str:
        return self._conn.remote_address

    @property
    def is_open(self) -> bool:
        return self._conn.is_open

    def send_response(self, cmd: RemotingCommand) -> bool:
        self._merge.put(self._index, cmd)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _PullFacts(NamedTuple):
    """A pull child's parsed header and the fields the merge uses. ``header``'s own
    ``queue_id`` / ``queue_offset`` may be a shared-form template's: the child's are
    the two fields here."""

    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    suspend_timeout_millis: int
    max_msg_nums: int
    max_msg_bytes: int  # 0: not given
    header: PullMessageRequestHeader


@dataclasses.dataclass(slots=True)
class _PullChild:
    """A pull child and its facts (``None``: unreadable, the processor says why)."""

    child: BatchChild
    header: _PullFacts | None


@dataclasses.dataclass(slots=True)
class _HeldPulls:
    """What a held parent needs to be read again: the pull processor and its children."""

    processor: Processor
    kids: list[_PullChild]


@dataclasses.dataclass(slots=True)
class _Budget:
    bytes: int
    msgs: int
    #: Messages and bytes found per (topic, group), counted in the stats once per parent.
    found: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)

    @property
    def spent(self) -> bool:
        return self.bytes <= 0 or self.msgs <= 0


class BatchProcessor:
    """BATCH_REQUEST; see the module docstring."""

    def __init__(self, ctx: BrokerContext, pull: PullProcessor | None = None,
                 send: SendProcessor | None = None) -> None:
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self._max_children = cfg.batch_max_children
        self._max_bytes = min(cfg.batch_max_bytes, cfg.max_frame_size)
        self._pull_budget = max(1, min(cfg.batch_max_bytes,
                                       cfg.max_frame_size - _FRAME_RESERVE))
        self._child_timeout = 2 * ctx.store_config.sync_flush_timeout / 1000 + 1.0
        self._sync = ctx.store_config.sync_flush
        self._processors: dict[int, Processor] = {}
        self._turn = 0
        self.holds = BatchHoldService(self._answer_held)
        #: The registered pull processors (those seen by :meth:`register`), whose children
        #: of ordinary topics may skip the processor's own header parsing.
        self._fast: set[Processor] = set()
        #: The send processor whose plain sends shared-form children skip the registered
        #: processor for (``None``: every child goes through it).
        self._send = send
        self._pull_processor = pull

    def register(self, server: RemotingServer) -> None:
        """Look up the child processors, register for BATCH_REQUEST, hook into the store's
        dispatch (held pulls) and connection closes. Call after the others registered."""
        for code in MERGE_ALL_CODES | PULL_CODES:
            processor = server.processor(code)
            if processor is not None:
                self._processors[int(code)] = processor
        if self._pull_processor is not None:
            self._fast = {p for c, p in self._processors.items() if c in PULL_CODES}
        server.register(RequestCode.BATCH_REQUEST, self.process)
        server.on_connection_closed(self._connection_closed)
        self.holds.attach(asyncio.get_running_loop())
        self.store.add_dispatch_hook(self.holds.on_dispatched)

    def _connection_closed(self, conn: Connection, _error: ConnectionLost) -> None:
        self.holds.drop_connection(conn)

    # ------------------------------------------------------------------ parent

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.ext_fields.get(CHILD_FORM_KEY) == SEND_SHARED_FORM:
            return self._shared_send(conn, cmd)
        try:
            req = decode_batch_request(cmd, max_children=self._max_children,
                                       max_bytes=self._max_bytes)
        except BatchFormatError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, exc.reason) from None
        if req.dispatch_code not in self._processors:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"dispatchCode {req.dispatch_code} is not supported in a "
                                 f"batch (supported: {sorted(self._processors)})")
        if req.dispatch_code in PULL_CODES:
            return self._pull(conn, cmd, req)
        return self._merge_all(conn, cmd, req)

    # ------------------------------------------------------------------ sends, offsets

    def _merge_all(self, conn: Connection, cmd: RemotingCommand, req: BatchRequest
                   ) -> RemotingCommand | None:
        processor = self._processors[req.dispatch_code]
        merge = _Merge(conn, cmd, req.children)
        for i, child in enumerate(req.children):
            self._run(processor, conn, merge, i, child)
        if merge.missing == 0:
            return batch_response(cmd, merge.responses())
        self._defer(merge)
        return None

    def _shared_send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """A shared send parent (:mod:`tidemq.codec.shared_send`): each child served as
        the standard child it stands for; plain sends to an ordinary topic go to the send
        processor's fast path from the entry's fields, without a header map."""
        try:
            code = dispatch_code_of(cmd)
            if code not in SEND_SHARED_CODES or code not in self._processors:
                raise BatchFormatError(f"childForm {SEND_SHARED_FORM!r} is not supported for "
                                       f"dispatchCode {code}")
            size = cmd.body_length()
            if size > self._max_bytes:
                raise BatchFormatError(f"body of {size} bytes exceeds the limit of "
                                       f"{self._max_bytes}")
            body = cmd.body if cmd.body_parts is None else cmd.full_body()
            template, entries = decode_shared_send(code, body, self._max_children)
        except BatchFormatError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, exc.reason) from None
        processor = self._processors[code]
        merge = _Merge(conn, cmd, list(range(1, len(entries) + 1)), shared_send_response)
        send = self._send
        base = None
        if send is not None:
            base = decode_send_fields(code, {**template.ext_fields, "e": "0", "f": "0",
                                             "g": "0", "h": "0"})
            if base is not None and self.ctx.logical.get(base[0]) is not None:
                base = None  # a logical topic: the registered processor translates
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                merge.put(i, child_error_response(BatchChild(None, i + 1),
                                                  ResponseCode.INVALID_PARAMETER, entry))
            elif not (send is not None and base is not None
                      and self._send_fast(send, conn, merge, i, entry, base, template)):
                self._run(processor, conn, merge, i,
                          BatchChild(shared_send_child(template, i + 1, entry), i + 1))
        if merge.missing == 0:
            return shared_send_response(cmd, merge.responses())
        self._defer(merge)
        return None

    def _send_fast(self, send: SendProcessor, conn: Connection, merge: _Merge, index: int,
                   entry: SendEntry, base: SendFields, template: RemotingCommand
                   ) -> bool:
        """Whether the send processor's fast path served the child (else nothing was
        done). Its numbers must be what the fast path reads from text: plain digits."""
        qid, sys_flag, born, flag, props, body = entry
        if not (0 <= qid < _DIGITS9 and 0 <= sys_flag < _DIGITS9 and 0 <= flag < _DIGITS9
                and 0 <= born < _DIGITS18):
            return False
        sub = RemotingCommand(code=template.code, opaque=index + 1, flag=template.flag,
                              body=body, serialize_type=template.serialize_type)
        fields: SendFields = (base[0], qid, sys_flag, born, flag, props, base[6])
        # Only a SYNC_FLUSH send answers later, through the connection it was given.
        proxy = cast(Connection, _ChildConnection(conn, merge, index)) if self._sync else conn
        try:
            result = send.child(proxy, sub, fields)
        except Exception as exc:
            merge.put(index, _error_response(sub, exc))
            return True
        if result is False:
            return False
        if isinstance(result, (RemotingCommand, PlainAnswer)):
            merge.put(index, result)
        return True  # None: answered later through the proxy (SYNC_FLUSH)

    def _defer(self, merge: _Merge) -> None:
        """Answer the parent when its last child answers (or the child timeout passes)."""
        merge.deferred = True
        merge.timer = asyncio.get_running_loop().call_later(self._child_timeout, merge.expire)

    def _run(self, processor: Processor, conn: Connection, merge: _Merge, index: int,
             child: BatchChild) -> None:
        """Run one child; its answer lands in ``merge`` now or later."""
        sub = child.command
        if sub is None:
            merge.put(index, child_error_response(
                child, ResponseCode.INVALID_PARAMETER, child.error))
            return
        proxy = cast(Connection, _ChildConnection(conn, merge, index))
        try:
            result = processor(proxy, sub)
        except Exception as exc:
            merge.put(index, _error_response(sub, exc))
            return
        if isinstance(result, RemotingCommand):
            merge.put(index, result)
        elif result is not None:
            task = asyncio.ensure_future(result)
            task.add_done_callback(lambda t: self._finished(merge, index, sub, t))
        # None: the processor answers later through the proxy (SYNC_FLUSH)

    @staticmethod
    def _finished(merge: _Merge, index: int, sub: RemotingCommand,
                  task: asyncio.Task[RemotingCommand | None]) -> None:
        if task.cancelled():
            merge.put(index, sub.response(ResponseCode.SYSTEM_ERROR, "cancelled"))
        elif (exc := task.exception()) is not None:
            merge.put(index, _error_response(sub, exc))
        elif (result := task.result()) is not None:
            merge.put(index, result)

    # ------------------------------------------------------------------ pulls

    def _pull(self, conn: Connection, cmd: RemotingCommand, req: BatchRequest
              ) -> RemotingCommand | None:
        kids = _pull_children(cmd, req)
        processor = self._processors[req.dispatch_code]
        merge = self._read_all(processor, conn, cmd, kids, self._budget(cmd), first=True)
        if merge.missing:  # a child answers later (e.g. forwarded): no hold, wait for it
            self._defer(merge)
            return None
        responses = merge.responses()
        hold = self._hold_plan(kids, responses)
        if hold is None or cmd.is_oneway:
            return batch_response(cmd, responses)
        waits, timeout = hold
        self.holds.hold(conn, cmd, waits, timeout, _HeldPulls(processor, kids))
        # Close the race with a dispatch that landed between the reads and the hold.
        for (topic, queue_id), offset in waits:
            now_max = self.store.max_offset(topic, queue_id)
            if now_max > offset:
                self.holds.notify(topic, queue_id, now_max)
                break
        return None

    def _budget(self, cmd: RemotingCommand) -> _Budget:
        ext = cmd.ext_fields
        limit_bytes = parse_java_int(ext.get(_MAX_BYTES, "")) or 0
        limit_msgs = parse_java_int(ext.get(_MAX_NUMS, "")) or 0
        nbytes = self._pull_budget
        if limit_bytes > 0:
            nbytes = min(nbytes, limit_bytes)
        return _Budget(nbytes, limit_msgs if limit_msgs > 0 else 1 << 31)

    def _hold_plan(self, kids: Sequence[_PullChild], responses: Sequence[RemotingCommand]
                   ) -> tuple[list[tuple[tuple[str, int], int]], int] | None:
        """Decide without acting: the ``(queue, offset)`` waits and the timeout when the
        parent should be held (every child caught up, one may suspend), else ``None``."""
        waits: list[tuple[tuple[str, int], int]] = []
        longest = 0
        for kid, resp in zip(kids, responses, strict=True):
            h = kid.header
            if h is None or resp.code != ResponseCode.PULL_NOT_FOUND:
                return None
            if h.sys_flag & _FLAG_SUSPEND and h.suspend_timeout_millis > 0:
                longest = max(longest, h.suspend_timeout_millis)
            waits.append(((h.topic, h.queue_id), h.queue_offset))
        if longest <= 0:
            return None
        cfg = self.ctx.config
        return waits, longest if cfg.long_polling_enable else cfg.short_polling_time_mills

    def _answer_held(self, held: HeldBatch) -> None:
        if not held.conn.is_open:
            return
        payload = cast(_HeldPulls, held.payload)
        merge = self._read_all(payload.processor, held.conn, held.cmd, payload.kids,
                               self._budget(held.cmd), first=False)
        if merge.missing:
            self._defer(merge)
        else:
            held.conn.send_response(batch_response(held.cmd, merge.responses()))

    def _read_all(self, processor: Processor, conn: Connection, cmd: RemotingCommand,
                  kids: Sequence[_PullChild], budget: _Budget, *, first: bool) -> _Merge:
        """Every child read once, never suspending, starting at a rotating child; a child
        whose processor answers later leaves its slot empty for now."""
        children = [k.child for k in kids]
        merge = _Merge(conn, cmd, children)
        n = len(kids)
        start = self._turn % n if n else 0
        self._turn += 1
        for step in range(n):
            i = (start + step) % n
            self._read_one(processor, conn, merge, i, kids[i], budget, first)
        for (topic, group), (msgs, nbytes) in budget.found.items():
            self.ctx.stats.on_get(topic, group, msgs, nbytes)
        return merge

    def _read_one(self, processor: Processor, conn: Connection, merge: _Merge, index: int,
                  kid: _PullChild, budget: _Budget, first: bool) -> None:
        h = kid.header
        sub = kid.child.command
        if sub is None or h is None:
            self._run(processor, conn, merge, index, kid.child)
            return
        if budget.spent:
            merge.put(index, self._skipped(sub, h))
            return
        if processor in self._fast and self.ctx.logical.get(h.topic) is None:
            self._read_fast(merge, index, sub, h, budget, first)
            return
        # Set from the facts each time (a re-run starts from the same request).
        ext = sub.ext_fields
        clear = _FLAG_SUSPEND if first else _FLAG_SUSPEND | _FLAG_COMMIT_OFFSET
        ext[_SYS_FLAG] = str(h.sys_flag & ~clear)
        own_bytes = h.max_msg_bytes or self.ctx.config.max_pull_bytes
        ext[_MAX_BYTES] = str(min(own_bytes, budget.bytes))
        ext[_MAX_NUMS] = str(max(1, min(h.max_msg_nums, budget.msgs)))
        self._run(processor, conn, merge, index, kid.child)
        resp = merge.slots[index]  # a pull's answer: a command
        if isinstance(resp, RemotingCommand) and resp.code == ResponseCode.SUCCESS:
            budget.bytes -= resp.body_length()
            nxt = parse_java_int(resp.ext_fields.get("nextBeginOffset", ""), 64)
            budget.msgs -= max(1, (nxt or 0) - h.queue_offset)

    def _read_fast(self, merge: _Merge, index: int, sub: RemotingCommand, h: _PullFacts,
                   budget: _Budget, first: bool) -> None:
        """The pull processor's read for a child of an ordinary topic, from the parsed
        header: no ext rewritten and parsed again (a logical topic's child goes through
        the registered processor, which translates it)."""
        clear = _FLAG_SUSPEND if first else _FLAG_SUSPEND | _FLAG_COMMIT_OFFSET
        own_bytes = h.max_msg_bytes or self.ctx.config.max_pull_bytes
        assert self._pull_processor is not None  # the processor is in _fast
        try:
            resp, msgs, nbytes, nxt = self._pull_processor.child(
                sub, h.header, h.queue_id, h.queue_offset, h.sys_flag & ~clear,
                max(1, min(h.max_msg_nums, budget.msgs)), min(own_bytes, budget.bytes),
                first=first)
        except Exception as exc:
            merge.put(index, _error_response(sub, exc))
            return
        merge.put(index, resp)
        if resp.code == ResponseCode.SUCCESS:
            budget.bytes -= nbytes
            budget.msgs -= max(1, nxt - h.queue_offset)
            key = (h.topic, h.header.consumer_group)
            tally = budget.found.get(key)
            if tally is None:
                budget.found[key] = [msgs, nbytes]
            else:
                tally[0] += msgs
                tally[1] += nbytes

    def _skipped(self, sub: RemotingCommand, h: _PullFacts) -> RemotingCommand:
        """A child not read because the parent's budget is spent: pull again at once."""
        ext = {
            "nextBeginOffset": str(h.queue_offset),
            "minOffset": str(self.store.min_offset(h.topic, h.queue_id)),
            "maxOffset": str(self.store.max_offset(h.topic, h.queue_id)),
            "suggestWhichBrokerId": "0",
        }
        return sub.response(ResponseCode.PULL_RETRY_IMMEDIATELY,
                            "the batch's byte or message budget is spent", ext)

    def release_all(self) -> None:
        """Answer every held parent now (shutdown)."""
        self.holds.release_all()


def _pull_children(cmd: RemotingCommand, req: BatchRequest) -> list[_PullChild]:
    """Every child with its facts. A shared-form parent's children differ only in their
    position, so the template's header is parsed once for all of them."""
    children = req.children
    if (cmd.ext_fields.get(CHILD_FORM_KEY) == SHARED_FORM and children
            and req.positions is not None):
        first = children[0].command
        shared = _pull_header(first.ext_fields) if first is not None else None
        if shared is not None:
            replace = shared._replace
            return [_PullChild(child, replace(queue_id=q, queue_offset=o))
                    for child, (q, o) in zip(children, req.positions, strict=True)]
    return [_PullChild(c, None if c.command is None else _pull_header(c.command.ext_fields))
            for c in children]


def _pull_header(ext: dict[str, str]) -> _PullFacts | None:
    """The child's facts; ``None`` when its header does not parse (the pull processor
    then answers the child with the reason)."""
    try:
        h = PullMessageRequestHeader.from_ext(ext)
    except RemoteProtocolError:
        return None
    return _PullFacts(h.topic, h.queue_id, h.queue_offset, h.sys_flag,
                      h.suspend_timeout_millis, h.max_msg_nums, max(h.max_msg_bytes or 0, 0),
                      h)

