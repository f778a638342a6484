"""The batch protocol on the client: requests to one broker coalesced into one RPC.

Layout in :mod:`tidemq.codec.batch_protocol`; the broker side in docs/protocol.md.

:class:`BatchRequester` (one per :class:`~tidemq.client.instance.ClientInstance`, from
:func:`batch_requester`) stands where a client would call ``instance.request``: sends,
pulls and offset requests issued in the same event-loop iteration for the same broker and
code become the children of one BATCH_REQUEST (20000). The producer's sends, the pull
and push consumers' pulls and their offset commits go through it, so a consumer of 64
queues on a broker pulls those with a backlog with one RPC, and a producer with data for
several queues sends it with one. (The pull and push consumers send the long-poll pull of
a caught-up queue on its own, ``request(..., alone=True)``: held alone, it is woken by its
own queue only.
:meth:`~tidemq.client.producer.Producer.send_batch` and the
:class:`~tidemq.client.batching.AutoBatchProducer` send their batches as requests of
their own: in a parent, every queue's batch would wait for the slowest, and concurrent
senders would take turns with the broker.)

* A lone request is sent as it is: no parent, nothing changes on the wire. The
  coalescing step sends it itself, written at once, so waiting for the end of the
  iteration costs it no loop iteration beyond what a plain request's write costs.
* Each caller gets its own child's response, as if it had sent its request alone;
  a parent that fails (timeout, lost connection, an error code) fails each child with
  that error. A parent waits up to the longest timeout among its children.
* Children split into several parents above ``max_children`` or ``max_bytes``; once
  ``flush_at`` requests (``pull_flush_at`` pulls) wait for one (broker, code), they
  leave as a parent at once (pipelining: a producer of many concurrent sends keeps the
  broker busy with one parent while it builds the next, instead of the two taking
  turns).

Negotiation, per broker address (:class:`BatchSupport`; decisions are plain methods, the
awaits follow):

=========  ==========================================================================
state      what happens
=========  ==========================================================================
UNKNOWN    not asked yet: the next parent asks; a merged answer makes it PRESENT
PRESENT    coalesced requests go out as parents
ABSENT     the broker answered 3 REQUEST_CODE_NOT_SUPPORTED (a RocketMQ broker, or
           ``batchProtocolEnable=false``): every request goes out on its own -- the
           children of the parent that learnt it too, unchanged -- and after
           ``recheck`` seconds the broker is asked again
=========  ==========================================================================

``ClientConfig.batch_protocol_enable=false`` keeps every broker ABSENT.

Pulls: a standard pull parent offers the shared-header form (ext ``childForms=shared``);
once a broker's merged answer accepts it, pulls to that broker that differ only in
``queueId`` / ``queueOffset`` go as shared-form parents (one header for all of them,
12 bytes per child, compact child answers; :mod:`tidemq.codec.batch_protocol`). A
shared-form parent the broker refuses, or answers without ``childForm=shared``, turns
the form off for that broker and its children go alone. The FOUND answers of a pull
parent whose bodies are small come back as :class:`~tidemq.client.pull.PullChild`,
sharing one :class:`~tidemq.client.message_batch.ParentColumns`: ``poll_batches`` reads
all of them as columns in one pass, ``poll`` ignores it.

Sends: a standard parent of SEND_MESSAGE_V2 offers the shared send form (ext
``childForms=sharedSend``, :mod:`tidemq.codec.shared_send`); once the broker accepts it,
coalesced sends that share a header but for their queue, timestamps, flag, properties
and body go as shared send parents (and :mod:`tidemq.client.shared_send` sends
``Producer.send_multi`` that way directly). A refused shared send parent turns the form
off for that broker for good (it is not offered again) and its children go alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import cast

from tidemq.client.instance import ClientInstance
from tidemq.client.message_batch import ParentColumns
from tidemq.client.pull import PullChild
from tidemq.codec.batch_protocol import (
    CHILD_FORM_KEY,
    CHILD_FORMS_KEY,
    DEFAULT_MAX_CHILDREN,
    SEND_SHARED_CODES,
    SEND_SHARED_FORM,
    SHARED_CODES,
    SHARED_FORM,
    BatchFormatError,
    decode_batch_response,
    encode_batch_request,
    encode_batch_requests,
    encode_shared_request,
    shared_position,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.shared_send import (
    RawEntry,
    decode_send_answers,
    encode_shared_send,
    send_answer_command,
    shared_send_entry,
    shared_send_key,
)
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.types import LOGICAL_BROKER

__all__ = [
    "BATCHABLE_CODES",
    "BatchRequester",
    "BatchStats",
    "BatchSupport",
    "Support",
    "batch_requester",
    "copy_error",
]

log = logging.getLogger(__name__)

#: Request codes a TideMQ broker accepts as children (docs/protocol.md).
BATCHABLE_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
})

_QUEUE_ID, _QUEUE_OFFSET = "queueId", "queueOffset"
#: Bytes of child frames per parent: half the broker's default ``batchMaxBytes``.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
#: Requests for one (broker, code) that make a parent leave at once, without waiting for
#: the end of the loop iteration (so the sender never holds a broker's work back). Each
#: parent costs both sides a write and a read (system calls are dear): 64 sends to 64
#: queues go as one parent; rounds in flight still overlap with the broker's work.
DEFAULT_FLUSH_AT = 64
#: The same for pulls: 32 halves the parents of a 64-queue consumer against 16 and
#: still leaves two to overlap with the client's decoding.
DEFAULT_PULL_FLUSH_AT = 32


class Support(enum.Enum):
    UNKNOWN = "unknown"
    PRESENT = "present"
    ABSENT = "absent"


# The members read once: an attribute of an enum class goes through the enum type's
# ``__getattr__`` hook (Python 3.11), several times slower than a global.
_UNKNOWN, _PRESENT, _ABSENT = Support.UNKNOWN, Support.PRESENT, Support.ABSENT


class BatchSupport:
    """What each broker address said about BATCH_REQUEST (table in the module docstring)."""

    def __init__(self, *, enabled: bool = True, recheck: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.recheck = recheck
        self._clock = clock
        self._present: set[str] = set()
        self._absent_since: dict[str, float] = {}
        self._shared: set[str] = set()  # brokers that read the shared pull form
        self._send_shared: set[str] = set()  # ... and the shared send form
        self._send_refused: set[str] = set()  # ... said so, then refused it: not offered

    def state(self, address: str) -> Support:
        if not self.enabled:
            return _ABSENT
        if address in self._present:
            return _PRESENT
        since = self._absent_since.get(address)
        if since is None:
            return _UNKNOWN
        if self._clock() - since >= self.recheck:
            del self._absent_since[address]
            return _UNKNOWN
        return _ABSENT

    def mark(self, address: str, present: bool) -> None:
        if present:
            self._present.add(address)
            self._absent_since.pop(address, None)
        else:
            self._present.discard(address)
            self._shared.discard(address)
            self._send_shared.discard(address)
            self._absent_since[address] = self._clock()

    def shares(self, address: str) -> bool:
        """Whether ``address`` said it reads the shared-header pull form."""
        return address in self._shared

    def mark_shared(self, address: str, shared: bool) -> None:
        if shared:
            self._shared.add(address)
        else:
            self._shared.discard(address)

    def shares_send(self, address: str) -> bool:
        """Whether ``address`` said it reads the shared-header send form
        (:mod:`tidemq.client.shared_send`)."""
        return address in self._send_shared and self.state(address) is _PRESENT

    def offers_send(self, address: str) -> bool:
        """Whether a standard send parent to ``address`` offers the shared send form:
        not once a shared parent was refused there (no flapping between the forms)."""
        return address not in self._send_shared and address not in self._send_refused

    def mark_send_shared(self, address: str, shared: bool) -> None:
        if shared:
            self._send_shared.add(address)
        else:
            self._send_shared.discard(address)
            self._send_refused.add(address)


@dataclasses.dataclass(slots=True)
class BatchStats:
    """Counts since the requester was made: RPCs sent (parents and lone requests),
    children carried by parents, parents sent."""

    rpcs: int = 0
    parents: int = 0
    children: int = 0


class _Child:
    __slots__ = ("cmd", "future", "timeout")

    def __init__(self, cmd: RemotingCommand, future: asyncio.Future[RemotingCommand | None],
                 timeout: float) -> None:
        self.cmd = cmd
        self.future = future
        self.timeout = timeout

    def settle(self, result: RemotingCommand | BaseException | None) -> None:
        """The child's response, its error, or ``None``: "send yourself on your own"."""
        if self.future.done():
            return
        if isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)


class BatchRequester:
    """Coalesces requests per (broker, code); see the module docstring."""

    def __init__(self, instance: ClientInstance, *, enabled: bool = True,
                 recheck: float = 300.0, max_children: int = DEFAULT_MAX_CHILDREN,
                 max_bytes: int = DEFAULT_MAX_BYTES, flush_at: int = DEFAULT_FLUSH_AT,
                 pull_flush_at: int = DEFAULT_PULL_FLUSH_AT) -> None:
        self._instance = instance
        self.flush_at = max(2, min(flush_at, max_children))
        self.pull_flush_at = max(2, min(pull_flush_at, max_children))
        self.support = BatchSupport(enabled=enabled, recheck=recheck)
        self.max_children = max_children
        self.max_bytes = max_bytes
        self.stats = BatchStats()
        self._pending: dict[tuple[str, int], list[_Child]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: The loop of the instance's connections, kept from the first batchable request.
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(self, address: str, cmd: RemotingCommand,
                      timeout: float | None = None, *, alone: bool = False) -> RemotingCommand:
        """``cmd``'s response from ``address``, sent in a parent with the other requests
        for that broker and code of this loop iteration when it has the feature -- unless
        ``alone``: the long-poll pull of a caught-up queue, which the broker should hold
        until that queue has news (in a parent, news on any queue answers every held
        child, and the others wait on nothing until they are pulled again)."""
        inst = self._instance
        wait = inst.config.request_timeout if timeout is None else timeout
        if (alone or cmd.code not in BATCHABLE_CODES or cmd.is_oneway
                or cmd.ext_fields.get("bname") == LOGICAL_BROKER  # translated one by one
                or self.support.state(address) is _ABSENT):
            self.stats.rpcs += 1
            return await inst.request(address, cmd, wait)
        loop = self._loop
        if loop is None:  # kept: each call asks the kernel for our pid (Python 3.11)
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[RemotingCommand | None] = loop.create_future()
        key = (address, cmd.code)
        queued = self._pending.get(key)
        if queued is None:
            queued = self._pending[key] = []
            loop.call_soon(self._flush, key)
        queued.append(_Child(cmd, future, wait))
        if len(queued) >= (self.pull_flush_at if cmd.code in SHARED_CODES else self.flush_at):
            # A full parent goes out now: the broker works on it while this loop
            # iteration builds the next one, instead of the two taking turns.
            self._flush(key)
        response = await future
        if response is None:  # alone, or the broker lacks the feature
            self.stats.rpcs += 1
            return await inst.request(address, cmd, wait)
        return response

    # ------------------------------------------------------------------ internals

    def _flush(self, key: tuple[str, int]) -> None:
        """Decide, without awaiting: who goes alone, which parents to send."""
        address, code = key
        children = [c for c in self._pending.pop(key, ()) if not c.future.done()]
        if len(children) < 2 or self.support.state(address) is _ABSENT:
            for child in children:
                self._alone(address, child)
            return
        offer = ""
        if code in SHARED_CODES:
            if self.support.shares(address):
                children = self._flush_shared(address, code, children)
            else:
                offer = SHARED_FORM
        elif code in SEND_SHARED_CODES:
            if self.support.shares_send(address):
                children = self._flush_send_shared(address, children)
            elif self.support.offers_send(address):
                offer = SEND_SHARED_FORM
        for parent, members in encode_batch_requests(
                code, [c.cmd for c in children], max_children=self.max_children,
                max_bytes=self.max_bytes):
            group = children[:len(members)]
            children = children[len(members):]
            if len(group) == 1:
                self._alone(address, group[0])
                continue
            if offer:
                parent.ext_fields[CHILD_FORMS_KEY] = offer
            self._start(address, parent, group)

    def _alone(self, address: str, child: _Child) -> None:
        """Send a child that goes on its own now, its answer settling its future, or
        have its caller send it (``None``) when the connection is not open or is
        paused: the caller then waits for it, or dials."""
        try:
            started = self._instance.start_request(
                address, child.cmd, cast("asyncio.Future[RemotingCommand]", child.future),
                child.timeout)
        except Exception as exc:  # refused before anything was sent: the caller's error
            child.settle(exc)
            return
        if started:
            self.stats.rpcs += 1
        else:
            child.settle(None)

    def _flush_shared(self, address: str, code: int, children: list[_Child]) -> list[_Child]:
        """Send the pulls that differ only in their position as shared-form parents;
        returns the others (they go as standard children)."""
        groups: dict[tuple[object, ...], list[tuple[_Child, tuple[int, int]]]] = {}
        rest: list[_Child] = []
        for child in children:
            cmd = child.cmd
            pos = shared_position(cmd)
            if pos is None:
                rest.append(child)
                continue
            shared = cmd.ext_fields.copy()
            del shared[_QUEUE_ID], shared[_QUEUE_OFFSET]
            key = (cmd.serialize_type, cmd.flag, *shared.items())
            groups.setdefault(key, []).append((child, pos))
        step = self.max_children
        for members in groups.values():
            if len(members) < 2:
                rest.extend(c for c, _ in members)
                continue
            for i in range(0, len(members), step):
                part = members[i:i + step]
                if len(part) < 2:
                    rest.extend(c for c, _ in part)
                    continue
                parent = encode_shared_request(code, part[0][0].cmd, [p for _, p in part])
                self._start(address, parent, [c for c, _ in part])
        return rest

    def count_parent(self, children: int) -> None:
        """Count a parent sent by another module (the shared send form)."""
        self.stats.rpcs += 1
        self.stats.parents += 1
        self.stats.children += children

    def _flush_send_shared(self, address: str, children: list[_Child]) -> list[_Child]:
        """Send the sends that share a template as shared send parents; returns the
        others (they go as standard children)."""
        groups: dict[tuple[object, ...], list[tuple[_Child, RawEntry]]] = {}
        rest: list[_Child] = []
        for child in children:
            entry = shared_send_entry(child.cmd)
            if entry is None:
                rest.append(child)
            else:
                groups.setdefault(shared_send_key(child.cmd), []).append((child, entry))
        for members in groups.values():
            if len(members) < 2:
                rest.extend(c for c, _ in members)
                continue
            start, size = 0, 0
            for i, (_, entry) in enumerate(members):
                weight = 26 + len(entry[4]) + len(entry[5])
                if i > start and (i - start >= self.max_children
                                  or size + weight > self.max_bytes):
                    self._send_part(address, members[start:i], rest)
                    start, size = i, 0
                size += weight
            self._send_part(address, members[start:], rest)
        return rest

    def _send_part(self, address: str, part: list[tuple[_Child, RawEntry]],
                   rest: list[_Child]) -> None:
        if len(part) < 2:
            rest.extend(c for c, _ in part)
            return
        parent = encode_shared_send(part[0][0].cmd, [e for _, e in part])
        self._start(address, parent, [c for c, _ in part])

    def _start(self, address: str, parent: RemotingCommand, group: list[_Child]) -> None:
        task = asyncio.ensure_future(self._send(address, parent, group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, address: str, parent: RemotingCommand,
                    group: Sequence[_Child]) -> None:
        try:
            answers = await self._exchange(address, parent, len(group),
                                           max(c.timeout for c in group),
                                           pulls=group[0].cmd.code in SHARED_CODES)
        except BatchFormatError as exc:
            for child in group:
                child.settle(BatchFormatError(exc.reason))
            return
        except TideMQError as exc:
            for child in group:
                child.settle(copy_error(exc))
            return
        except asyncio.CancelledError:
            for child in group:
                child.future.cancel()
            raise
        if answers is None:
            for child in group:
                child.settle(None)
            return
        for child, answer in zip(group, answers, strict=True):
            child.settle(answer)

    async def pull_shared(self, address: str, template: RemotingCommand,
                          positions: Sequence[tuple[int, int]],
                          timeout: float) -> list[RemotingCommand] | None:
        """The answers, in order, to pulls that are ``template`` but for their
        ``(queueId, queueOffset)`` -- one shared-form parent for all of them, which the
        caller knows ``address`` reads (:meth:`BatchSupport.shares`) -- or ``None`` when
        it did not read it after all: pull them one by one. A failed parent raises its
        error (every child failed with it)."""
        parent = encode_shared_request(template.code, template, positions)
        return await self._exchange(address, parent, len(positions), timeout, pulls=True)

    async def _exchange(self, address: str, parent: RemotingCommand, count: int,
                        timeout: float, *, pulls: bool) -> list[RemotingCommand] | None:
        """The ``count`` children's answers to ``parent`` (FOUND ``pulls`` sharing their
        columns, :func:`_share_columns`); ``None``: the broker does not speak the
        protocol or did not read the parent's form (learnt here), so each child goes
        alone. A parent answered with an error code raises that error."""
        self.stats.rpcs += 1
        self.stats.parents += 1
        self.stats.children += count
        response = await self._instance.request(address, parent, timeout)
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            log.info("%s does not speak the batch protocol; sending one by one", address)
            self.support.mark(address, False)
            return None
        form = parent.ext_fields.get(CHILD_FORM_KEY)
        if form is not None and (response.code != ResponseCode.SUCCESS
                                 or response.ext_fields.get(CHILD_FORM_KEY) != form):
            # Not read as the shared form: stop using it; each child goes alone.
            log.info("%s did not read a %s parent (%d %s); not using the form",
                     address, form, response.code, response.remark)
            if form == SEND_SHARED_FORM:
                self.support.mark_send_shared(address, False)
            else:
                self.support.mark_shared(address, False)
            return None
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark or "", address=address)
        self.support.mark(address, True)
        forms = response.ext_fields.get(CHILD_FORMS_KEY, "").split(",")
        if SHARED_FORM in forms:
            self.support.mark_shared(address, True)
        if SEND_SHARED_FORM in forms and parent.ext_fields.get(
                CHILD_FORMS_KEY) == SEND_SHARED_FORM:
            self.support.mark_send_shared(address, True)
        if form == SEND_SHARED_FORM:
            body = response.body if response.body_parts is None else response.full_body()
            ext = response.ext_fields
            return [send_answer_command(a, i, ext) for i, a in
                    enumerate(decode_send_answers(body, count), 1)]
        answers = decode_batch_response(response, range(1, count + 1))
        return _share_columns(answers) if pulls else answers

    async def probe(self, address: str, timeout: float | None = None) -> bool:
        """Ask ``address`` now with an empty parent; remembers and returns the answer."""
        if not self.support.enabled:
            return False
        parent = encode_batch_request(RequestCode.GET_MAX_OFFSET, [])
        wait = self._instance.config.request_timeout if timeout is None else timeout
        response = await self._instance.request(address, parent, wait)
        self.stats.rpcs += 1
        present = response.code == ResponseCode.SUCCESS
        if present or response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            self.support.mark(address, present)
        return present


def _share_columns(answers: list[RemotingCommand]) -> list[RemotingCommand]:
    """The answers of a pull parent, those whose bodies are worth reading as one
    (:meth:`~tidemq.client.message_batch.ParentColumns.pick`) as
    :class:`~tidemq.client.pull.PullChild` of one
    :class:`~tidemq.client.message_batch.ParentColumns`; nothing is decoded here."""
    bodies = [a.body if a.code == ResponseCode.SUCCESS and a.body_parts is None else None
              for a in answers]
    picked = ParentColumns.pick(bodies)
    if not picked:
        return answers
    shared = ParentColumns([answers[i].body for i in picked])
    out = list(answers)
    for k, i in enumerate(picked):
        out[i] = PullChild.of(answers[i], shared, k)
    return out


def copy_error(exc: TideMQError) -> TideMQError:
    """A fresh instance of ``exc`` per child (one exception object is raised once)."""
    clone = exc.__class__.__new__(exc.__class__)
    clone.__dict__.update(exc.__dict__)
    clone.args = exc.args
    clone.__cause__ = exc
    return clone


_requesters: weakref.WeakKeyDictionary[ClientInstance, BatchRequester] = (
    weakref.WeakKeyDictionary())


def batch_requester(instance: ClientInstance) -> BatchRequester:
    """The instance's requester (made on first use, shared by its clients)."""
    requester = _requesters.get(instance)
    if requester is None:
        requester = _requesters[instance] = BatchRequester(
            instance, enabled=instance.config.batch_protocol_enable)
    return requester
