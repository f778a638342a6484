"""PullConsumer: the application polls messages from queues it owns (remoting.md §2.8-2.9).

::

    consumer = PullConsumer("billing", "127.0.0.1:9876")
    consumer.subscribe("Orders", "paid || refunded")
    await consumer.start()
    async for msg in consumer:
        handle(msg)
        ...
    await consumer.close()          # commits the positions reached

Queues come from :meth:`~PullConsumer.assign` (exactly those) or
:meth:`~PullConsumer.subscribe` (every readable queue of the topic; group rebalancing
is not done here, so every member of a group reads everything).

Per queue the consumer keeps (:class:`~tidemq.client.queue_state.QueueState`) a *fetch
offset* (where the next pull starts), a buffer of pulled messages not yet returned, and
at most one pull in flight. A pull that brings a full batch (``pull_batch_size``
offsets: the queue has a backlog) starts the queue's next pull as soon as its answer
arrives, before its records are decoded, unless the buffer already holds a batch: the
broker reads the next batch while this side decodes. A queue's *position*
-- what :meth:`~PullConsumer.commit` stores -- is the offset of its first buffered
message, or the fetch offset when the buffer is empty. A queue without a position finds
one first, in a task of its own: the group's committed offset (QUERY_CONSUMER_OFFSET), else
per ``consume_from``: the queue's max offset (LAST), min offset (FIRST) or the offset at
``consume_timestamp`` (TIMESTAMP).

:meth:`~PullConsumer.poll` returns buffered messages at once; otherwise it starts a
pull (SUSPEND set: the broker holds it up to ``long_polling_timeout`` when there is
nothing new) on every queue that has none in flight and waits for the first that brings
messages, until its timeout. Pulls still in flight when it returns stay in flight for the
next poll; each reports to the consumer when it finishes (a done callback: no wait set
up over every queue's pull per poll), and finished pulls are applied in the order they
finished. The pulls, commits and offset queries of one round to one broker go out as
one RPC where the broker speaks the batch protocol (:mod:`tidemq.client.batch_rpc`),
except the pull of a *caught-up* queue (its last pull brought less than a full batch):
the broker likely holds it, and a held parent is answered whole as soon as any one of
its queues has news, leaving every other queue unwatched until it is pulled again. Alone,
a caught-up queue's pull is held and woken for its own queue only.

Once a broker has said it reads shared-form pull parents, its queues (per topic) that
have a backlog are pulled in *rounds* instead of a task each: one task sends their pulls
as one shared-form parent
(:meth:`~tidemq.client.batch_rpc.BatchRequester.pull_shared`), starts the next round of
the queues whose answers were full before it reads these, then settles each queue's
place in the round (a future) as the queue's own task would have finished. Everything
above holds for them (order of application, pull-ahead, seeks dropping a queue's place,
errors per queue); a round costs one task and one parent whatever the number of queues.
Status handling and reading follow :mod:`tidemq.client.pull` (one decoding pass that sets
the queue id, broker name and ``MIN_OFFSET``/``MAX_OFFSET``, properties undecoded until
read), and a queue's buffer is handed out in slices. OFFSET_MOVED moves the
fetch offset to the broker's corrected one. A failing queue is pulled again after
``pull_error_backoff`` seconds; the others go on. ``seek*`` drops a queue's buffer and
its pull in flight.

:meth:`~PullConsumer.poll_batches` is ``poll`` with the messages as columns
(:class:`~tidemq.client.MessageBatch`, docs/client.md): the same state machine, with a
queue's buffer holding batches instead of messages. The last of the two calls decides how
the pulls that finish next are read (:func:`~tidemq.client.pull.read_pull_response` or
:func:`~tidemq.client.pull.read_pull_batch`); a buffer left in the other form is turned
into this one when it is taken or added to, so the two can be mixed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tidemq.client import offsets as ofs
from tidemq.client.batch_rpc import batch_requester, copy_error
from tidemq.client.config import ClientConfig
from tidemq.client.consumer_role import ConsumerRole
from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance
from tidemq.client.member_request import member_request
from tidemq.client.message_batch import MessageBatch
from tidemq.client.poll_trace import PollTrace
from tidemq.client.pull import (
    PullBatch,
    PullResult,
    pull_request,
    read_pull_batch,
    read_pull_response,
)
from tidemq.client.queue_state import Fetched, QueueState, discard
from tidemq.client.stamps import now_ms
from tidemq.client.subscription import SUB_ALL, Subscription
from tidemq.codec.bodies import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from tidemq.codec.command import RemotingCommand
from tidemq.errors import ResponseCode, TideMQError
from tidemq.types import LOGICAL_BROKER, MessageExt, MessageQueue, PullStatus

__all__ = ["PullConsumer"]

log = logging.getLogger(__name__)

_OffsetBuild = Callable[[MessageQueue], RemotingCommand]
_T = TypeVar("_T", MessageExt, MessageBatch)

#: Back-off after FLOW_CONTROL, seconds (Java waits longer than after other errors).
_FLOW_CONTROL_BACKOFF = 5.0
# Two members read once: an attribute of an enum class goes through the enum type's
# ``__getattr__`` hook (Python 3.11), several times slower than a global.
_OFFSET_ILLEGAL = PullStatus.OFFSET_ILLEGAL
_SUCCESS = ResponseCode.SUCCESS


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PullConsumer(ConsumerRole):
    """An asyncio pull consumer for one consumer group; see the module docstring.

    One task at a time may call :meth:`poll` (or iterate the consumer).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
    ) -> None:
        super().__init__(group, namesrv, config, instance, consume_from=consume_from,
                         consume_timestamp=consume_timestamp)
        self._manual: bool | None = None  # True: assign(), False: subscribe()
        self._states: dict[MessageQueue, QueueState] = {}
        self._reresolve = False
        self._turn = 0
        #: Queues whose buffers a pull filled since :meth:`_in_turn` last looked.
        self._stocked: set[MessageQueue] = set()
        #: Pull tasks that finished, in the order they did, not applied yet; a poll
        #: waiting for one waits on ``_waiter`` (set by the first that finishes).
        self._finished: list[tuple[MessageQueue, asyncio.Future[Fetched]]] = []
        #: The rounds in flight (:meth:`_round`).
        self._rounds: set[asyncio.Task[None]] = set()
        self._waiter: asyncio.Future[None] | None = None
        #: The event loop the consumer polls on, kept from the first poll: asking for the
        #: running loop costs a ``getpid`` system call a time on Python 3.11.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Pulls are read as columns (the last poll was :meth:`poll_batches`).
        self._columns = False
        #: The trace of polled messages until a commit covers them (``enable_msg_trace``).
        self._poll_trace: PollTrace | None = None

    def __repr__(self) -> str:
        return f"<PullConsumer group={self._group!r} queues={len(self._states)}>"

    # ------------------------------------------------------------------ lifecycle

    async def _started(self, inst: ClientInstance) -> None:
        self._loop = asyncio.get_running_loop()  # a consumer started again may be on another
        await self._start_tracing(inst)
        if self.tracer is not None:
            self._poll_trace = PollTrace(self.tracer, self._group, self.config.trace_queue_size)

    async def close(self, *, commit: bool = True) -> None:
        """Commit the positions reached (unless ``commit=False``), stop pulling, leave."""
        await self._close_reading(self.commit if commit else None, self._stop_pulls)

    async def _stop_pulls(self) -> None:
        tasks: list[asyncio.Future[Any]] = [
            t for s in self._states.values() for t in (s.task, s.next) if t is not None]
        for state in self._states.values():
            state.reset(state.position)
        for round_ in self._rounds:
            round_.cancel()
        tasks += self._rounds
        await asyncio.gather(*tasks, return_exceptions=True)
        self._finished = []

    # ------------------------------------------------------------------ membership

    def _register(self, inst: ClientInstance) -> None:
        inst.register_consumer(self)

    async def _unregister(self, inst: ClientInstance) -> None:
        await inst.unregister_consumer(self._group)

    def consumer_data(self) -> ConsumerData:
        """This consumer as HEART_BEAT announces it."""
        subs = dict(self._subscriptions)
        for mq in self._states:
            subs.setdefault(mq.topic, Subscription.parse(mq.topic, SUB_ALL))
        return ConsumerData(
            group_name=self._group, consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=MessageModel.CLUSTERING, consume_from_where=self.consume_from,
            subscription_data_set=[s.to_data() for _, s in sorted(subs.items())],
        )

    def _schedule_rebalance(self) -> None:
        """Look at the subscribed topics' routes again at the next poll."""
        self._reresolve = True

    def on_reset_offset(self, offsets: Mapping[MessageQueue, int]) -> None:
        """A broker reset the group's offsets (RESET_CONSUMER_CLIENT_OFFSET): the assigned
        queues among ``offsets`` continue there."""
        for mq, offset in offsets.items():
            if mq in self._states and offset >= 0:
                self.seek(mq, offset)

    # ------------------------------------------------------------------ assignment

    def assign(self, queues: Iterable[MessageQueue], expression: str = SUB_ALL) -> None:
        """Read exactly ``queues`` (replacing an earlier assignment), filtered by the tag
        ``expression``. Cannot be combined with :meth:`subscribe`."""
        if self._manual is False:
            raise ValueError("this consumer subscribes to topics; it cannot also assign queues")
        wanted = list(dict.fromkeys(queues))
        self._manual = True
        version = now_ms()
        self._subscriptions = {
            mq.topic: Subscription.parse(mq.topic, expression, version=version)
            for mq in wanted
        }
        self._reconcile(wanted)

    def subscribe(self, topic: str, expression: str = SUB_ALL) -> None:
        """Read every readable queue of ``topic``, filtered by the tag ``expression``
        (``"*"`` or ``"a || b"``). Cannot be combined with :meth:`assign`."""
        if self._manual is True:
            raise ValueError("this consumer has assigned queues; it cannot also subscribe")
        self._subscribe(topic, expression)
        self._manual = False

    def unsubscribe(self) -> None:
        """Drop every subscription and assignment."""
        self._subscriptions.clear()
        self._manual = None
        self._reconcile([])

    def assignment(self) -> list[MessageQueue]:
        return sorted(self._states)

    def _reconcile(self, wanted: Iterable[MessageQueue]) -> None:
        keep = set(wanted)
        for mq in [q for q in self._states if q not in keep]:
            self._states.pop(mq).reset(None)
        for mq in keep:
            self._states.setdefault(mq, QueueState())

    async def _refresh_subscriptions(self) -> None:
        if self._manual is not False:
            return
        refresh, self._reresolve = self._reresolve, False
        wanted: list[MessageQueue] = []
        for topic in self._subscriptions:
            try:
                route = await self.instance.routes.get(topic, refresh=refresh)
            except TideMQError as exc:
                log.warning("%r: no route for subscribed topic %s: %s", self, topic, exc)
                wanted.extend(mq for mq in self._states if mq.topic == topic)
                continue
            wanted.extend(route.subscribe_queues)
        self._reconcile(wanted)

    # ------------------------------------------------------------------ positions

    def position(self, queue: MessageQueue) -> int | None:
        """The offset of the next message :meth:`poll` returns from ``queue``."""
        return self._state(queue).position

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue ``queue`` at ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._state(queue).reset(offset)

    async def seek_to_beginning(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Continue at the min offset of ``queues`` (default: all assigned)."""
        await self._seek_each(queues, ofs.min_offset_request)

    async def seek_to_end(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Continue at the max offset (where the next message will be written)."""
        await self._seek_each(queues, ofs.max_offset_request)

    async def seek_by_timestamp(self, timestamp_ms: int,
                                queues: Iterable[MessageQueue] | None = None) -> None:
        """Continue at the first message stored at or after ``timestamp_ms``."""
        await self._seek_each(queues, lambda mq: ofs.search_offset_request(mq, timestamp_ms))

    async def _seek_each(self, queues: Iterable[MessageQueue] | None,
                         build: _OffsetBuild) -> None:
        if queues is None:
            await self._refresh_subscriptions()
        targets = list(self._states) if queues is None else list(queues)
        found = await asyncio.gather(*(self._ask_offset(mq, build) for mq in targets))
        for mq, offset in zip(targets, found, strict=True):
            self.seek(mq, offset)

    async def _ask_offset(self, queue: MessageQueue, build: _OffsetBuild) -> int:
        answer = await member_request(self.instance, queue, lambda: build(queue))
        return ofs.read_offset(answer.response, address=answer.address)

    async def _initial_offset(self, queue: MessageQueue) -> tuple[int, bool]:
        """Where ``queue`` starts, and whether that is the group's offset (its committed
        one, or the broker's 0 for a young queue)."""
        answer = await member_request(
            self.instance, queue, lambda: ofs.start_query_request(self._group, queue))
        committed = ofs.read_committed(answer.response, address=answer.address)
        if committed is not None and committed >= 0:
            return committed, True
        plan = ofs.start_offset_request(queue, self.consume_from, self.consume_timestamp)
        if isinstance(plan, int):
            return plan, False
        return await self._ask_offset(queue, lambda _mq: plan), False

    def running_queues(self) -> list[dict[str, Any]]:
        """The queues held, for GET_CONSUMER_RUNNING_INFO (:mod:`tidemq.client.running_info`)."""
        return [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                 "nextPullOffset": -1 if st.fetch_offset is None else st.fetch_offset,
                 "commitOffset": -1 if st.committed is None else st.committed,
                 "cachedMsgCount": len(st.buffer) - st.head + sum(
                     len(b) for b in st.batches)}
                for mq, st in self._states.items()]

    # ------------------------------------------------------------------ committing

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Store ``offsets`` (default: every assigned queue's position that changed since
        it was last committed) as the group's consumed offsets."""
        if offsets is None:
            offsets = {mq: s.position for mq, s in self._states.items()
                       if s.position is not None and s.position != s.committed}
        await asyncio.gather(*(self._commit_one(mq, off) for mq, off in offsets.items()))

    async def _commit_one(self, queue: MessageQueue, offset: int) -> None:
        # One RPC per broker (batch protocol). With the master down a replica takes the
        # commit; the queue then stays "not committed", so that the next commit sends
        # its position again -- to the master once the name servers list one. A seek or
        # an offset reset meanwhile (or the queue given up, which resets it) makes the
        # answer stale: a commit sent after it may have been answered first.
        state = self._states.get(queue)
        generation = -1 if state is None else state.generation
        answer = await member_request(
            self.instance, queue, lambda: ofs.update_offset_request(self._group, queue, offset))
        ofs.check_success(answer.response, address=answer.address)
        if state is not None and answer.master and state.generation == generation:
            state.committed = offset
        if self._poll_trace is not None:
            self._poll_trace.committed(queue, offset)

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's stored offset for ``queue`` (``None`` if it has none)."""
        answer = await member_request(
            self.instance, queue, lambda: ofs.query_offset_request(self._group, queue))
        return ofs.read_committed(answer.response, address=answer.address)

    # ------------------------------------------------------------------ polling

    async def poll(self, timeout: float = 1.0,
                   max_messages: int | None = None) -> list[MessageExt]:
        """Up to ``max_messages`` (default ``pull_batch_size``) messages, waiting at most
        ``timeout`` seconds for some; ``[]`` if none came."""
        self._columns = False
        msgs = await self._poll(timeout, max_messages, self._drain)
        if self._poll_trace is not None:
            self._poll_trace.polled(msgs)
        return msgs

    async def poll_batches(self, timeout: float = 1.0,
                           max_messages: int | None = None) -> list[MessageBatch]:
        """:meth:`poll` with the messages as columns
        (:class:`~tidemq.client.MessageBatch`, one per pull of a queue): batches of up to
        ``max_messages`` (default ``pull_batch_size``) messages in all -- a pull's batch
        may be cut in two by the limit -- or ``[]`` if none came. Positions, filtering,
        pulls and commits are :meth:`poll`'s; the two may be mixed."""
        self._columns = True
        batches = await self._poll(timeout, max_messages, self._drain_batches)
        if self._poll_trace is not None:
            self._poll_trace.polled_batches(batches)
        return batches

    async def _poll(self, timeout: float, max_messages: int | None,
                    drain: Callable[[int], list[_T]]) -> list[_T]:
        inst = self.instance
        limit = max_messages or self.config.pull_batch_size
        loop = self._running_loop()
        deadline = loop.time() + timeout
        if self._manual is False:  # subscribed: routes may have changed (assigned: no)
            await self._refresh_subscriptions()
        if inst.unannounced_brokers():  # decided without awaiting, as it usually is empty
            await inst.heartbeat_new_brokers()
        while True:
            self._apply_finished()
            out = drain(limit)
            if out:
                return out
            self._start_pulls()
            remaining = deadline - loop.time()
            if remaining <= 0 or all(s.task is None for s in self._states.values()):
                if remaining > 0:
                    await asyncio.sleep(remaining)  # nothing assigned yet
                return []
            # Until a pull finishes (its done callback) or the time is up. No await since
            # the finished ones were applied: a callback still to come runs in this wait.
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(remaining, _settle, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the consumer polls on (the running one, kept from the first call)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _spawn(self, queue: MessageQueue, pull: Coroutine[Any, Any, Fetched]
               ) -> asyncio.Task[Fetched]:
        """A task for ``pull``, reported to :meth:`_finished_one` when it finishes."""
        task = self._running_loop().create_task(pull)
        task.add_done_callback(functools.partial(self._finished_one, queue))
        return task

    def _finished_one(self, queue: MessageQueue, task: asyncio.Future[Fetched]) -> None:
        self._finished.append((queue, task))
        if self._waiter is not None:
            _settle(self._waiter)

    def _apply_finished(self) -> None:
        """Apply the finished pulls in the order they finished; a pull started ahead
        (:meth:`_ahead_offset`) that finished before the pull it follows waits for it."""
        pending, self._finished = self._finished, []
        while pending:
            later: list[tuple[MessageQueue, asyncio.Future[Fetched]]] = []
            for i, (queue, task) in enumerate(pending):
                state = self._states.get(queue)
                if state is None:
                    discard(task)
                elif state.next is task:
                    later.append((queue, task))
                else:
                    try:
                        self._apply(state, task)
                        if state.head < len(state.buffer) or state.batches:
                            self._stocked.add(queue)
                    except BaseException:
                        self._finished = later + pending[i + 1:] + self._finished
                        raise
            if len(later) == len(pending):  # their predecessors are still running
                break
            pending = later
        self._finished = pending + self._finished

    async def __aiter__(self) -> AsyncIterator[MessageExt]:
        """Messages as they come, until the consumer is closed."""
        while self._instance is not None:
            try:
                batch = await self.poll(timeout=self.config.long_polling_timeout)
            except ClientClosedError:
                return
            for msg in batch:
                yield msg

    def _in_turn(self) -> list[tuple[MessageQueue, QueueState]]:
        """The queues with buffered messages, starting one queue later each time there
        are any. Only the queues a pull filled since the last look are looked at
        (``_stocked``): a poll that waits for its pulls looks at none."""
        stocked = self._stocked
        if not stocked:
            return []
        states = self._states
        if len(stocked) == 1:  # no order to choose (the turn moves on when there is)
            (mq,) = stocked
            only = states.get(mq)
            if only is not None and (only.head < len(only.buffer) or only.batches):
                return [(mq, only)]
            stocked.clear()
            return []
        queues = sorted(states)
        if not queues:
            stocked.clear()
            return []
        self._turn = (self._turn + 1) % len(queues)
        ready = [(mq, state) for mq in queues[self._turn:] + queues[:self._turn]
                 if mq in stocked
                 and ((state := states[mq]).head < len(state.buffer) or state.batches)]
        # what is taken now may leave some behind: they are looked at again next time
        self._stocked = {mq for mq, _ in ready}
        return ready

    def _drain(self, limit: int) -> list[MessageExt]:
        """Take buffered messages, queue by queue (:meth:`_in_turn`)."""
        out: list[MessageExt] = []
        for _mq, state in self._in_turn():
            if out:
                out.extend(state.take(limit - len(out)))
            else:
                out = state.take(limit)
            if len(out) >= limit:
                break
        return out

    def _drain_batches(self, limit: int) -> list[MessageBatch]:
        """:meth:`_drain` taking batches."""
        out: list[MessageBatch] = []
        for mq, state in self._in_turn():
            taken = state.take_batches(mq, limit)
            out += taken
            limit -= sum(len(b) for b in taken)
            if limit <= 0:
                break
        return out

    def _start_pulls(self) -> None:
        """Decide, then start, for each queue with an empty buffer and nothing in flight:
        finding its start (a queue without a position) or a pull -- in a task of its
        own, or with the other queues of its broker and topic in one round
        (:meth:`_rounds_of`)."""
        idle = [(mq, state) for mq, state in self._states.items()
                if state.task is None and not state.buffered]
        if not idle:
            return
        for address, members in self._rounds_of(idle):
            self._start_round(address, members, ahead=False)
        for mq, state in idle:
            if state.task is None:  # not in a round
                sub = self._subscriptions.get(mq.topic) or Subscription.parse(mq.topic)
                state.task = self._spawn(
                    mq, self._pull(mq, state.fetch_offset, sub, state.backoff, state.caught_up))

    def _rounds_of(self, idle: list[tuple[MessageQueue, QueueState]]
                   ) -> list[tuple[str, list[tuple[MessageQueue, int]]]]:
        """The pulls to start that go as rounds: of the ``idle`` queues (nothing in
        flight, nothing buffered), those with a position, no back-off and a backlog (not
        caught up) with a :meth:`_round_address`, grouped by broker (its address and
        name: a pull names its broker) and topic, in parts of ``pull_flush_at`` (so one
        part's answer is decoded while the broker reads the next). The others are left
        to :meth:`_start_pulls`."""
        groups: dict[tuple[str, str, str], list[tuple[MessageQueue, int]]] = {}
        for mq, state in idle:
            offset = state.fetch_offset
            if offset is None or state.backoff or state.caught_up:
                continue
            address = self._round_address(mq)
            if address is not None:
                groups.setdefault((address, mq.topic, mq.broker_name), []).append((mq, offset))
        step = batch_requester(self.instance).pull_flush_at
        return [(address, members[i:i + step])
                for (address, _topic, _broker), members in groups.items()
                for i in range(0, len(members), step)]

    def _round_address(self, queue: MessageQueue) -> str | None:
        """The address of ``queue``'s master when a pull of the queue with a backlog goes
        in a round: the broker reads shared-form parents (and the queue is not a logical
        one, translated one by one); ``None`` otherwise."""
        inst = self.instance
        if queue.broker_name == LOGICAL_BROKER:
            return None
        address = inst.cached_read_address(queue, inst.suggestions.broker_id(queue))
        if address is None or not batch_requester(inst).support.shares(address):
            return None
        return address

    def _start_round(self, address: str, members: list[tuple[MessageQueue, int]], *,
                     ahead: bool) -> None:
        """Start one round pulling ``members`` (queue, offset) from ``address``: each
        queue's pull in flight (``ahead``: the pull that follows it) is its place in
        the round, a future the round settles."""
        loop = self._running_loop()
        slots: list[tuple[MessageQueue, int, asyncio.Future[Fetched]]] = []
        for mq, offset in members:
            state = self._states[mq]
            slot: asyncio.Future[Fetched] = loop.create_future()
            if ahead:
                state.next, state.next_offset = slot, offset
            else:
                state.task = slot
            slots.append((mq, offset, slot))
        task = loop.create_task(self._round(address, slots))
        self._rounds.add(task)
        task.add_done_callback(self._rounds.discard)

    async def _round(self, address: str,
                     slots: list[tuple[MessageQueue, int, asyncio.Future[Fetched]]]) -> None:
        """Pull queues of one broker and topic with one shared-form parent
        (:meth:`~tidemq.client.batch_rpc.BatchRequester.pull_shared`), one by one if the
        broker does not read it after all; start the next round of the queues that
        still have a backlog before reading this one's answers, and settle each queue's
        slot as a task of its own would have finished. A slot already settled (its queue
        was reset) is skipped."""
        try:
            requester = batch_requester(self.instance)
            timeout = self.config.pull_rpc_timeout
            topic = slots[0][0].topic
            sub = self._subscriptions.get(topic) or Subscription.parse(topic)
            answers: Sequence[RemotingCommand | BaseException] | None
            answers = await requester.pull_shared(
                address, self._pull_command(slots[0][0], 0, sub),
                [(mq.queue_id, off) for mq, off, _ in slots], timeout)
            if answers is None:
                answers = await asyncio.gather(
                    *(requester.request(address, self._pull_command(mq, off, sub), timeout)
                      for mq, off, _ in slots), return_exceptions=True)
        except asyncio.CancelledError:
            for _mq, _off, slot in slots:
                slot.cancel()
            raise
        except Exception as exc:  # the parent failed: so did every pull in it
            for mq, _off, slot in slots:
                self._settle_slot(mq, slot, copy_error(exc) if isinstance(exc, TideMQError)
                                  else exc)
            return
        ahead = [(mq, nxt) for (mq, off, slot), answer in zip(slots, answers, strict=True)
                 if isinstance(answer, RemotingCommand)
                 and (nxt := self._ahead_offset(mq, off, answer, slot)) is not None]
        if ahead:
            if requester.support.shares(address):
                self._start_round(address, ahead, ahead=True)
            else:  # not after all (answers): each queue's next pull goes on its own
                for mq, nxt in ahead:
                    self._follow(mq, nxt, sub)
            # As in _pull: the next pulls leave before these answers are read.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        for (mq, off, slot), answer in zip(slots, answers, strict=True):
            if slot.done():
                continue
            if isinstance(answer, BaseException):
                self._settle_slot(mq, slot, answer)
                continue
            try:
                result = self._read(answer, mq, sub, address, off)
            except Exception as exc:
                self._settle_slot(mq, slot, exc)
            else:
                self._settle_slot(mq, slot, Fetched(off, False, result))

    def _settle_slot(self, queue: MessageQueue, slot: asyncio.Future[Fetched],
                     outcome: Fetched | BaseException) -> None:
        """Settle a queue's place in a round and report it, as :meth:`_finished_one`
        reports a finished task (unless the queue was reset meanwhile)."""
        if slot.done():
            return
        if isinstance(outcome, BaseException):
            slot.set_exception(outcome)
        else:
            slot.set_result(outcome)
        self._finished_one(queue, slot)

    async def _pull(self, queue: MessageQueue, offset: int | None, sub: Subscription,
                    delay: float, alone: bool = False) -> Fetched:
        if delay > 0:
            await asyncio.sleep(delay)
        if offset is None:
            start, from_group = await self._initial_offset(queue)
            return Fetched(start, from_group, None)
        inst = self.instance
        # The pulls of one poll round to one broker go out as one RPC (batch protocol),
        # but a caught-up queue's long poll goes alone (see BatchRequester.request). The
        # member pulled is the one the last answer suggested; with the master gone, its
        # group's replica (docs/replication.md).
        response, addr, _ = await member_request(
            inst, queue, lambda: self._pull_command(queue, offset, sub),
            broker_id=inst.suggestions.broker_id(queue), timeout=self.config.pull_rpc_timeout,
            alone=alone)
        task = asyncio.current_task(self._loop)
        nxt = None if task is None else self._ahead_offset(queue, offset, response, task)
        if nxt is not None and self._round_address(queue) is not None:
            nxt = None  # the next pull goes in a round, which the next poll starts
        if nxt is not None:
            self._follow(queue, nxt, sub)
            # Let the next pull leave before this one is decoded: it is queued in the next
            # loop iteration (with the other queues' next pulls) and sent in the one after.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return Fetched(offset, False, self._read(response, queue, sub, addr, offset))

    def _pull_command(self, queue: MessageQueue, offset: int, sub: Subscription
                      ) -> RemotingCommand:
        """A pull of ``queue`` from ``offset``: a batch of ``pull_batch_size``, held by
        the broker up to ``long_polling_timeout`` when there is nothing yet."""
        cfg = self.config
        return pull_request(self._group, queue, offset, max_nums=cfg.pull_batch_size,
                            subscription=sub, suspend_ms=int(cfg.long_polling_timeout * 1000))

    def _read(self, response: RemotingCommand, queue: MessageQueue, sub: Subscription,
              address: str, offset: int) -> PullResult | PullBatch:
        """A pull's answer read as the last poll asks: objects (``poll``) or columns
        (``poll_batches``)."""
        read = read_pull_batch if self._columns else read_pull_response
        self.instance.suggestions.note(queue, response)
        return read(response, queue, sub, address=address, offset=offset)

    def _follow(self, queue: MessageQueue, offset: int, sub: Subscription) -> None:
        """Start the pull from ``offset`` that follows ``queue``'s pull in flight."""
        state = self._states[queue]
        state.next = self._spawn(queue, self._pull(queue, offset, sub, 0.0))
        state.next_offset = offset

    def _ahead_offset(self, queue: MessageQueue, offset: int, response: RemotingCommand,
                      pull: asyncio.Future[Fetched]) -> int | None:
        """Where the next pull of ``queue`` starts when it should start now, before
        ``response`` (to the pull ``pull`` from ``offset``) is decoded: the answer is a
        full batch (the queue has a backlog), so the broker reads the next batch while
        this side decodes -- unless the queue's buffer already holds a batch, or the
        queue was reset meanwhile. ``None``: not now."""
        state = self._states.get(queue)
        batch = self.config.pull_batch_size
        if (state is None or state.next is not None or self._instance is None
                or state.task is not pull or state.buffered >= batch
                or response.code != _SUCCESS):
            return None
        try:
            nxt = int(response.ext_fields["nextBeginOffset"])
        except (KeyError, ValueError):
            return None  # reading the response reports it
        if nxt - offset < batch:
            return None  # caught up: the next pull would only wait at the broker
        return nxt

    def _apply(self, state: QueueState, task: asyncio.Future[Fetched]) -> None:
        if state.task is not task:  # dropped by a seek meanwhile
            discard(task)
            return
        state.task = None
        successor, state.next = state.next, None
        if successor is not None and (task.cancelled() or task.exception() is not None
                                      or task.result().result is None):
            discard(successor)  # only a pull that brought messages is followed
            successor = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, TideMQError):
                raise exc
            flow = getattr(exc, "code", None) == ResponseCode.FLOW_CONTROL
            state.backoff = _FLOW_CONTROL_BACKOFF if flow else self.config.pull_error_backoff
            log.warning("%r: pull failed, retrying in %.1f s: %s", self, state.backoff, exc)
            return
        fetched = task.result()
        result = fetched.result
        state.backoff = 0.0
        if result is None:  # the queue's start was found; the pull follows
            state.fetch_offset = fetched.offset
            state.committed = fetched.offset if fetched.from_group else None
            return
        state.caught_up = (result.status is not _OFFSET_ILLEGAL and
                           result.next_offset - fetched.offset < self.config.pull_batch_size)
        if result.status is _OFFSET_ILLEGAL:
            log.warning("%r: offset %s moved; continuing at %d", self, fetched.offset,
                        result.next_offset)
        if isinstance(result, PullResult):
            state.add(result.messages)
        elif result.batch is not None:
            state.add_batch(result.batch)
        state.fetch_offset = result.next_offset
        if successor is not None:
            if state.next_offset == result.next_offset:
                state.task = successor  # already on its way
            else:
                discard(successor)

    def _state(self, queue: MessageQueue) -> QueueState:
        state = self._states.get(queue)
        if state is None:
            raise ValueError(f"{queue} is not assigned to this consumer")
        return state

