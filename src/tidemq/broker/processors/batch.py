"""BATCH_REQUEST (20000): the broker side of the batch protocol (RocketMQ issue #5516).

Layout in :mod:`tidemq.codec.batch_protocol`; codes and differences in docs/protocol.md.
Registered only with ``batchProtocolEnable=true``; a broker without it answers 3
REQUEST_CODE_NOT_SUPPORTED, which clients read as "feature absent".

Each child runs through the broker's request pipeline (:mod:`tidemq.broker.pipeline`): the
chain of its code, so every interceptor -- the logical-queue translation, metrics, any
gate -- sees it exactly as a request of its own, and may refuse it alone. The child gets
a :class:`_ChildConnection`: the real connection for everything but ``send_response``,
which hands the child's late answer (a SYNC_FLUSH send) to the merge instead of the
socket. A child raising :class:`~tidemq.errors.BrokerResponseError` is answered with that
code and remark; a malformed child with INVALID_PARAMETER; its siblings are served either
way.

=========================  ==============================================================
dispatchCode               the parent is answered
=========================  ==============================================================
10, 310, 320 (send)        when every child has answered: at once under ASYNC_FLUSH,
14, 15, 30 (offsets)       when the last flush is confirmed (or times out) under SYNC_FLUSH
11, 361 (pull)             at once when any child found data, failed or must move; else,
                           if a child allows suspension, the parent is held
                           (:mod:`tidemq.broker.holds`) until any child's queue gets
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

A pull child of an ordinary topic (no logical-queue mapping) is served from its header
parsed once here: the pipeline's interceptors of its code run around
:meth:`~tidemq.broker.processors.pull.PullProcessor.child` (same checks, codes and
remarks) instead of around the registered handler; its found messages are counted in the
stats once per parent. A held parent read again is no new request: only the interceptors
that rewrite requests run again. A shared-form parent (ext ``childForm=shared``,
:mod:`tidemq.codec.batch_protocol`) has its template's header parsed once for all its
children and is answered with compact child entries; a standard pull parent offering the
form (ext ``childForms``) is told that this broker reads it. A shared send parent (ext
``childForm=sharedSend``, :mod:`tidemq.codec.shared_send`) is decoded without a header
map per child; a plain send to an ordinary topic runs the interceptors of its code
around :meth:`~tidemq.broker.processors.send.SendProcessor.child` from the entry's fields
(the child's ext is the template's: topic and producer group), anything else is built as
its standard child and runs its code's chain; it is answered with compact entries. Where
successes are answered at once (ASYNC_FLUSH, no replicas waited for), the plain children
the interceptors let through (all of them, without running the chain one by one, when
every interceptor of their code clears the parent's children at once:
:meth:`~tidemq.broker.pipeline.Pipeline.clears`) are only noted, then stored together by
:meth:`~tidemq.broker.processors.send.SendProcessor.children` (one
:meth:`~tidemq.store.message_store.MessageStore.put_many`, fan-outs to LMQs included); a
child served otherwise is served after every child before it is stored, so each queue
keeps the children's order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from tidemq.broker.codes import PULL_CODES
from tidemq.broker.context import BrokerContext
from tidemq.broker.holds import Held
from tidemq.broker.pipeline import Pipeline
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
    RemoteProtocolError,
    ResponseCode,
    TideMQError,
    error_for_code,
)
from tidemq.net import Connection, Processor

__all__ = ["MERGE_ALL_CODES", "BatchProcessor"]

log = logging.getLogger(__name__)

#: Children answered together once every one is done.
MERGE_ALL_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
})

_FLAG_COMMIT_OFFSET = 0x1
_FLAG_SUSPEND = 0x2
_PULL_KEYS = PullMessageRequestHeader.ext_keys()
_SYS_FLAG, _MAX_BYTES, _MAX_NUMS = (_PULL_KEYS["sys_flag"], _PULL_KEYS["max_msg_bytes"],
                                    _PULL_KEYS["max_msg_nums"])
_QUEUE_ID, _QUEUE_OFFSET = _PULL_KEYS["queue_id"], _PULL_KEYS["queue_offset"]
_FRAME_RESERVE = 1024 * 1024  # room left in a frame for the child heads
#: Codes a child may have.
_CHILD_CODES = MERGE_ALL_CODES | PULL_CODES
#: Numbers the send processor reads without the header schema: at most 9 (18 for a
#: timestamp) digits.
_DIGITS9, _DIGITS18 = 10**9, 10**18
_ENTRY_ONLY = frozenset({SendEntry})
_PLAIN_ONLY = frozenset({PlainAnswer})


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
        self.opaques = (children if children and type(children[0]) is int
                        else [c if isinstance(c, int) else c.opaque for c in children])
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

    def fill(self, indices: list[int], answers: list[Any]) -> bool:
        """Put every answer, each in the slot of its index, at once when they are all
        plain answers to every child, none answered yet (the usual shared send parent);
        else put nothing and say so (``False``)."""
        slots = self.slots
        if (len(indices) != len(slots) or self.missing != len(slots)
                or set(map(type, answers)) != _PLAIN_ONLY):
            return False
        slots[:] = answers  # indices: 0..n-1, in order (every child, noted in order)
        self.missing = 0
        if self.deferred:
            self._send()
        return True

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


class _FastPull(_ChildConnection):
    """A pull child's connection that also carries what its fast handler reads from:
    the request it was made for, its parsed facts and the parent's budget."""

    __slots__ = ("budget", "facts", "first", "request")

    def __init__(self, conn: Connection, merge: _Merge, index: int, request: RemotingCommand,
                 facts: _PullFacts, budget: _Budget, first: bool) -> None:
        super().__init__(conn, merge, index)
        self.request = request
        self.facts = facts
        self.budget = budget
        self.first = first


class _FastSend(_ChildConnection):
    """A shared send child's connection that also carries its entry, the header fields
    shared by its siblings and the parent's template."""

    __slots__ = ("entry", "fields", "request", "template")

    def __init__(self, conn: Connection, merge: _Merge, index: int, request: RemotingCommand,
                 entry: SendEntry, fields: SendFields, template: RemotingCommand) -> None:
        super().__init__(conn, merge, index)
        self.request = request
        self.entry = entry
        self.fields = fields
        self.template = template


class _Gathered(_ChildConnection):
    """The connection of every plain child of one shared send parent whose successes
    are answered at once: while ``open`` (the parent's loop), the send handler past the
    interceptors only notes the child in ``kids``, and the parent stores the children
    noted together (:meth:`SendProcessor.children
    <tidemq.broker.processors.send.SendProcessor.children>`). A late answer lands in
    the slot of its opaque (child ``i``'s is ``i + 1``)."""

    __slots__ = ("base", "entries", "kids", "open", "subs", "template")

    def __init__(self, conn: Connection, merge: _Merge, template: RemotingCommand,
                 base: SendFields, entries: list[SendEntry | str]) -> None:
        super().__init__(conn, merge, -1)
        self.template = template
        self.base = base
        self.entries = entries
        self.subs: list[RemotingCommand | None] = [None] * len(entries)
        self.kids: list[int] = []
        self.open = True

    def send_response(self, cmd: RemotingCommand) -> bool:
        index = cmd.opaque - 1
        if 0 <= index < len(self.subs):
            self._merge.put(index, cmd)
        return True

    def request(self, kids: list[int], k: int) -> RemotingCommand:
        """The request of child ``kids[k]``: the one its interceptors saw, else made now
        (a child cleared with its siblings has none until something needs it)."""
        index = kids[k]
        sub = self.subs[index]
        if sub is None:
            template = self.template
            sub = self.subs[index] = RemotingCommand(
                code=template.code, opaque=index + 1, flag=template.flag,
                ext_fields=template.ext_fields, body=cast(SendEntry, self.entries[index])[5],
                serialize_type=template.serialize_type)
        return sub

    def fields(self, index: int) -> SendFields:
        """Child ``index``'s fields: the template's, with its entry's."""
        qid, sys_flag, born, flag, props, _body = cast(SendEntry, self.entries[index])
        base = self.base
        return (base[0], qid, sys_flag, born, flag, props, base[6])


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
    """What a held parent needs to be read again: its dispatch code and its children."""

    code: int
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

    def __init__(self, ctx: BrokerContext, pipeline: Pipeline,
                 pull: PullProcessor | None = None, send: SendProcessor | None = None
                 ) -> None:
        self.ctx = ctx
        self._pipeline = pipeline
        self.store = ctx.store
        cfg = ctx.config
        self._max_children = cfg.batch_max_children
        self._max_bytes = min(cfg.batch_max_bytes, cfg.max_frame_size)
        self._pull_budget = max(1, min(cfg.batch_max_bytes,
                                       cfg.max_frame_size - _FRAME_RESERVE))
        self._child_timeout = 2 * (ctx.store_config.sync_flush_timeout
                                   + cfg.slave_timeout) / 1000 + 1.0
        self._sync = ctx.store_config.sync_flush
        self._turn = 0
        self.holds = ctx.holds
        #: The send processor whose plain sends shared-form children are served from the
        #: entry's fields (``None``: every child is built and runs its code's chain).
        self._send = send
        #: The pull processor whose children of ordinary topics are served from the
        #: header parsed here (``None``: every child runs its code's chain).
        self._pull_processor = pull
        #: Chains by (code, handler kind, re-run), composed on first use.
        self._composed: dict[tuple[int, str, bool], Processor] = {}

    def register(self, pipeline: Pipeline) -> None:
        pipeline.register(RequestCode.BATCH_REQUEST, self.process)

    # ------------------------------------------------------------------ chains

    def _chain(self, code: int) -> Processor | None:
        """What a child with ``code`` runs through: the pipeline's chain of the code."""
        return self._pipeline.chain(code) if code in _CHILD_CODES else None

    def _supported(self) -> list[int]:
        return sorted(c for c in _CHILD_CODES if self._pipeline.chain(c) is not None)

    def _composed_chain(self, code: int, kind: str, rerun: bool) -> Processor:
        """The pipeline's interceptors of ``code`` around one of this processor's fast
        handlers (``kind``), or around the registered handler (``"handler"``) for a held
        parent's re-run."""
        key = (code, kind, rerun)
        chain = self._composed.get(key)
        if chain is None:
            handler: Processor
            if kind == "pull":
                handler = self._fast_pull
            elif kind == "send":
                handler = self._fast_send
            elif kind == "gather":
                handler = self._gather_send
            else:
                registered = self._pipeline.handler(code)
                assert registered is not None  # a child code with a chain has a handler
                handler = registered
            chain = self._composed[key] = self._pipeline.compose(code, handler, rerun=rerun)
        return chain

    # ------------------------------------------------------------------ parent

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.ext_fields.get(CHILD_FORM_KEY) == SEND_SHARED_FORM:
            return self._shared_send(conn, cmd)
        try:
            req = decode_batch_request(cmd, max_children=self._max_children,
                                       max_bytes=self._max_bytes)
        except BatchFormatError as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, exc.reason) from None
        if self._chain(req.dispatch_code) is None:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"dispatchCode {req.dispatch_code} is not supported in a "
                                 f"batch (supported: {self._supported()})")
        if req.dispatch_code in PULL_CODES:
            return self._pull(conn, cmd, req)
        return self._merge_all(conn, cmd, req)

    # ------------------------------------------------------------------ sends, offsets

    def _merge_all(self, conn: Connection, cmd: RemotingCommand, req: BatchRequest
                   ) -> RemotingCommand | None:
        processor = self._chain(req.dispatch_code)
        assert processor is not None  # checked by process
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
            if code not in SEND_SHARED_CODES or self._chain(code) is None:
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
        processor = self._chain(code)
        assert processor is not None  # checked above
        merge = _Merge(conn, cmd, list(range(1, len(entries) + 1)), shared_send_response)
        send = self._send
        base = None
        if send is not None:
            base = decode_send_fields(code, {**template.ext_fields, "e": "0", "f": "0",
                                             "g": "0", "h": "0"})
            if base is not None and self.ctx.logical.get(base[0]) is not None:
                base = None  # a logical topic: the registered processor translates
        if base is not None and not (self._sync or self.ctx.replication.acks is not None):
            self._gather(conn, cmd, code, template, base, entries, merge, processor)
            if merge.missing == 0:
                return shared_send_response(cmd, merge.responses())
            self._defer(merge)
            return None
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                merge.put(i, child_error_response(BatchChild(None, i + 1),
                                                  ResponseCode.INVALID_PARAMETER, entry))
            elif base is not None and _plain_numbers(entry):
                qid, sys_flag, born, flag, props, body = entry
                sub = RemotingCommand(code=template.code, opaque=i + 1, flag=template.flag,
                                      ext_fields=template.ext_fields, body=body,
                                      serialize_type=template.serialize_type)
                fields: SendFields = (base[0], qid, sys_flag, born, flag, props, base[6])
                self._run(self._composed_chain(code, "send", False), conn, merge, i,
                          BatchChild(sub, i + 1),
                          _FastSend(conn, merge, i, sub, entry, fields, template))
            else:
                self._run(processor, conn, merge, i,
                          BatchChild(shared_send_child(template, i + 1, entry), i + 1))
        if merge.missing == 0:
            return shared_send_response(cmd, merge.responses())
        self._defer(merge)
        return None

    def _gather(self, conn: Connection, cmd: RemotingCommand, code: int,
                template: RemotingCommand, base: SendFields, entries: list[SendEntry | str],
                merge: _Merge, processor: Processor) -> None:
        """The children of a shared send parent to an ordinary topic whose successes are
        answered at once: each plain child passes the interceptors of its code (which
        may refuse it alone) -- or, when every one of them clears the parent's children
        at once (:meth:`Pipeline.clears <tidemq.broker.pipeline.Pipeline.clears>`), goes
        straight on -- and the children let through are stored together; any other
        child is served as its standard child, after every child before it is stored,
        so the log keeps their order."""
        job = _Gathered(conn, merge, template, base, entries)
        proxy = cast(Connection, job)
        cleared = self._pipeline.clears(code, proxy, template)
        if cleared and _all_plain(entries):  # the usual parent: every child noted at once
            job.kids = list(range(len(entries)))
            self._store_gathered(job)
            job.open = False
            return
        chain = None if cleared else self._composed_chain(code, "gather", False)
        subs = job.subs
        command = RemotingCommand
        t_code, t_flag, t_ext = template.code, template.flag, template.ext_fields
        t_serialize = template.serialize_type
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                merge.put(i, child_error_response(BatchChild(None, i + 1),
                                                  ResponseCode.INVALID_PARAMETER, entry))
                continue
            qid, sys_flag, born, flag, _props, body = entry
            if not (0 <= qid < _DIGITS9 and 0 <= sys_flag < _DIGITS9 and 0 <= flag < _DIGITS9
                    and 0 <= born < _DIGITS18):  # _plain_numbers, inline: once a child
                self._store_gathered(job)
                self._run(processor, conn, merge, i,
                          BatchChild(shared_send_child(template, i + 1, entry), i + 1))
                continue
            if chain is None:  # cleared: made a request only if one is needed
                job.kids.append(i)
                continue
            sub = subs[i] = command(code=t_code, opaque=i + 1, flag=t_flag, ext_fields=t_ext,
                                    body=body, serialize_type=t_serialize)
            try:
                result = chain(proxy, sub)
            except Exception as exc:
                merge.put(i, _error_response(sub, exc))
                continue
            if isinstance(result, RemotingCommand):
                merge.put(i, result)
            elif result is not None:  # an interceptor answers later
                task = asyncio.ensure_future(result)
                task.add_done_callback(functools.partial(self._finished, merge, i, sub))
        self._store_gathered(job)
        job.open = False

    def _store_gathered(self, job: _Gathered) -> None:
        """Store the children noted so far, each answered in its slot."""
        kids = job.kids
        if not kids:
            return
        send = self._send
        assert send is not None  # a gathering parent exists only with a send processor
        merge, entries = job._merge, job.entries
        chosen = cast("list[SendEntry]", entries if len(kids) == len(entries)
                      else [entries[i] for i in kids])

        def standard(k: int) -> None:
            index = kids[k]
            handler = self._pipeline.handler(job.template.code)
            assert handler is not None
            self._run(handler, job._conn, merge, index, BatchChild(
                shared_send_child(job.template, index + 1, chosen[k]), index + 1))

        answers = send.children(job._conn, job.base, chosen,
                                functools.partial(job.request, kids), standard)
        job.kids = []
        if merge.fill(kids, answers):
            return
        for k, (index, answer) in enumerate(zip(kids, answers, strict=True)):
            if isinstance(answer, PlainAnswer | RemotingCommand):
                merge.put(index, answer)
            elif answer is not None:
                merge.put(index, _error_response(job.request(kids, k), answer))

    def _gather_send(self, conn: Connection, request: RemotingCommand
                     ) -> RemotingCommand | None:
        """The handler of a gathered child past the pipeline's interceptors: noted for
        the parent to store while its loop runs; let through later (by an interceptor
        answering later), served on its own as :meth:`_fast_send` serves it."""
        job: object = conn
        index = request.opaque - 1
        if (not isinstance(job, _Gathered) or not 0 <= index < len(job.subs)
                or request is not job.subs[index]):
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 "a shared send child was replaced on its way")
        if job.open:
            job.kids.append(index)
            return None
        send = self._send
        assert send is not None  # a gathering parent exists only with a send processor
        result = send.child(job._conn, request, job.fields(index))
        if isinstance(result, bool):  # not the plain case: nothing was done
            handler = self._pipeline.handler(request.code)
            assert handler is not None
            standard = shared_send_child(job.template, index + 1,
                                         cast(SendEntry, job.entries[index]))
            return cast("RemotingCommand | None", handler(conn, standard))
        if isinstance(result, PlainAnswer):
            job._merge.put(index, result)
            return None
        return result

    def _fast_send(self, conn: Connection, request: RemotingCommand
                   ) -> RemotingCommand | None:
        """The handler of a shared send child of an ordinary topic, past the pipeline's
        interceptors: the send processor's one path from the entry's fields (its ext is
        the template's: topic and producer group, what interceptors look at), else the
        standard child it stands for through the registered handler."""
        job: object = conn
        if not isinstance(job, _FastSend) or request is not job.request:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 "a shared send child was replaced on its way")
        send = self._send
        assert send is not None  # fast children exist only with a send processor
        # Only a SYNC_FLUSH or SYNC_MASTER send answers later, through the connection it
        # was given.
        later = self._sync or self.ctx.replication.acks is not None
        result = send.child(conn if later else job._conn, request, job.fields)
        if isinstance(result, bool):  # not the plain case: nothing was done
            handler = self._pipeline.handler(request.code)
            assert handler is not None
            standard = shared_send_child(job.template, job._index + 1, job.entry)
            return cast("RemotingCommand | None", handler(conn, standard))
        if isinstance(result, PlainAnswer):
            job._merge.put(job._index, result)
            return None
        return result

    def _defer(self, merge: _Merge) -> None:
        """Answer the parent when its last child answers (or the child timeout passes)."""
        merge.deferred = True
        merge.timer = asyncio.get_running_loop().call_later(self._child_timeout, merge.expire)

    def _run(self, processor: Processor, conn: Connection, merge: _Merge, index: int,
             child: BatchChild, proxy: _ChildConnection | None = None) -> None:
        """Run one child through ``processor`` (a chain); its answer lands in ``merge``
        now or later. ``proxy``: the child's connection, when it carries facts."""
        sub = child.command
        if sub is None:
            merge.put(index, child_error_response(
                child, ResponseCode.INVALID_PARAMETER, child.error))
            return
        if proxy is None:
            proxy = _ChildConnection(conn, merge, index)
        try:
            result = processor(cast(Connection, proxy), sub)
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
        code = req.dispatch_code
        merge = self._read_all(code, conn, cmd, kids, self._budget(cmd), first=True)
        if merge.missing:  # a child answers later (e.g. forwarded): no hold, wait for it
            self._defer(merge)
            return None
        responses = merge.responses()
        hold = self._hold_plan(kids, responses)
        if hold is None or cmd.is_oneway:
            return batch_response(cmd, responses)
        waits, timeout = hold
        self.holds.hold(conn, cmd, waits, timeout, self._answer_held, _HeldPulls(code, kids))
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

    def _answer_held(self, held: Held) -> None:
        if not held.conn.is_open:
            return
        payload = cast(_HeldPulls, held.payload)
        merge = self._read_all(payload.code, held.conn, held.cmd, payload.kids,
                               self._budget(held.cmd), first=False)
        if merge.missing:
            self._defer(merge)
        else:
            held.conn.send_response(batch_response(held.cmd, merge.responses()))

    def _read_all(self, code: int, conn: Connection, cmd: RemotingCommand,
                  kids: Sequence[_PullChild], budget: _Budget, *, first: bool) -> _Merge:
        """Every child read once, never suspending, starting at a rotating child; a child
        whose processor answers later leaves its slot empty for now. A held parent's
        re-run (``first`` false) is no new request: only the interceptors that rewrite
        requests run again (:mod:`tidemq.broker.pipeline`)."""
        if first:
            processor = self._chain(code)
            assert processor is not None  # checked by process
        else:
            processor = self._composed_chain(code, "handler", True)
        fast = (None if self._pull_processor is None
                else self._composed_chain(code, "pull", not first))
        children = [k.child for k in kids]
        merge = _Merge(conn, cmd, children)
        n = len(kids)
        start = self._turn % n if n else 0
        self._turn += 1
        for step in range(n):
            i = (start + step) % n
            self._read_one(processor, fast, conn, merge, i, kids[i], budget, first)
        for (topic, group), (msgs, nbytes) in budget.found.items():
            self.ctx.stats.on_get(topic, group, msgs, nbytes)
        return merge

    def _read_one(self, processor: Processor, fast: Processor | None, conn: Connection,
                  merge: _Merge, index: int, kid: _PullChild, budget: _Budget, first: bool
                  ) -> None:
        h = kid.header
        sub = kid.child.command
        if sub is None or h is None:
            self._run(processor, conn, merge, index, kid.child)
            return
        if budget.spent:
            merge.put(index, self._skipped(sub, h))
            return
        if fast is not None and self.ctx.logical.get(h.topic) is None:
            self._run(fast, conn, merge, index, kid.child,
                      _FastPull(conn, merge, index, sub, h, budget, first))
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

    def _fast_pull(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The handler of a pull child of an ordinary topic, past the pipeline's
        interceptors: the pull processor's read from the header parsed here -- no ext
        rewritten and parsed again (a logical topic's child runs the chain of its code,
        whose translation needs the ext)."""
        job: object = conn
        if not isinstance(job, _FastPull) or request is not job.request:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 "a pull child was replaced on its way")
        pull = self._pull_processor
        assert pull is not None  # fast children exist only with a pull processor
        h, budget, first = job.facts, job.budget, job.first
        clear = _FLAG_SUSPEND if first else _FLAG_SUSPEND | _FLAG_COMMIT_OFFSET
        own_bytes = h.max_msg_bytes or self.ctx.config.max_pull_bytes
        resp, msgs, nbytes, nxt = pull.child(
            request, h.header, h.queue_id, h.queue_offset, h.sys_flag & ~clear,
            max(1, min(h.max_msg_nums, budget.msgs)), min(own_bytes, budget.bytes),
            first=first)
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
        return resp

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


def _all_plain(entries: list[SendEntry | str]) -> bool:
    """Whether every entry is readable and has :func:`_plain_numbers`: checked by
    column, without a Python step per entry."""
    if not entries or set(map(type, entries)) != _ENTRY_ONLY:
        return False
    qids, sys_flags, borns, flags, _props, _bodies = zip(*entries, strict=True)
    return bool(min(qids) >= 0 and max(qids) < _DIGITS9 and min(sys_flags) >= 0
                and max(sys_flags) < _DIGITS9 and min(flags) >= 0 and max(flags) < _DIGITS9
                and min(borns) >= 0 and max(borns) < _DIGITS18)


def _plain_numbers(entry: SendEntry) -> bool:
    """Whether a shared send entry's numbers are what the send processor reads without
    the header schema from text: plain digits."""
    qid, sys_flag, born, flag, _props, _body = entry
    return (0 <= qid < _DIGITS9 and 0 <= sys_flag < _DIGITS9 and 0 <= flag < _DIGITS9
            and 0 <= born < _DIGITS18)
