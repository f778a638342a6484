"""PushConsumer: a consumer group member that pulls by itself and calls a listener
(Java ``DefaultMQPushConsumer``, clustering model).

::

    async def handle(msgs: list[MessageExt]) -> ConsumeStatus:
        ...
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("billing", "127.0.0.1:9876", listener=handle)
    consumer.subscribe("Orders", "paid || refunded")
    await consumer.start()
    ...
    await consumer.close()   # stop pulling, finish in flight, commit, leave the group

What one member does:

* **Membership and rebalancing** (:mod:`tidemq.client.rebalance`): it heartbeats its
  subscriptions -- plus ``%RETRY%<group>`` with ``*`` -- and owns the queues its
  strategy (:mod:`tidemq.client.allocate`) gives it, rebalancing at start, on
  NOTIFY_CONSUMER_IDS_CHANGED, on route changes and every ``rebalance_interval``.
* **Per owned queue** a :class:`~tidemq.client.process_queue.ProcessQueue`: it starts at
  the group's committed offset, else per ``consume_from`` (:mod:`tidemq.client.offsets`);
  a queue taken over from another member starts ``handover_delay`` after the rebalance;
  one long-polling pull at a time, paused while the buffer is over the thresholds.
* **Consumption** (:mod:`tidemq.client.consume_service`): concurrently on a bounded task
  pool, or in order per queue (``orderly=True``, with broker locks,
  :mod:`tidemq.client.locks`). Failed messages go back to the broker
  (:mod:`tidemq.client.retry`); retried messages come back through the retry topic,
  under their original topic.
* **Offsets**: every ``persist_consumer_offset_interval`` and when a queue is released,
  UPDATE_CONSUMER_OFFSET with the queue's lowest offset not processed yet, also when it
  did not move (as Java's ``persistAll``): a master that lost a commit it had answered --
  killed before it flushed it, or before its replicas copied it and one was elected --
  gets it back at the next round. Delivery is at least once; ``docs/consumer-groups.md``
  lists when a message comes twice.
* **Offset resets**: RESET_CONSUMER_CLIENT_OFFSET (220) drops the buffered messages of
  the named queues it owns and continues at the given offsets.
* **Direct consumption**: CONSUME_MESSAGE_DIRECTLY (309), an admin's "resend to this
  consumer", runs the listener on one message outside the queues
  (:mod:`tidemq.client.direct_consume`).

:class:`ThreadedPushConsumer` is the same consumer for a blocking listener, which it runs
in a thread pool of ``consume_concurrency`` threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeVar

from tidemq.client import offsets as ofs
from tidemq.client.allocate import AllocateStrategy, allocate_averagely
from tidemq.client.config import ClientConfig
from tidemq.client.consume_service import ConcurrentService, OrderlyService, pause
from tidemq.client.consumer_role import ConsumerRole
from tidemq.client.direct_consume import run_listener
from tidemq.client.errors import ClientClosedError
from tidemq.client.instance import ClientInstance
from tidemq.client.listener import AsyncListener, BlockingListener, ConsumeStatus
from tidemq.client.lock_keeper import LockKeeper
from tidemq.client.member_request import member_request
from tidemq.client.process_queue import ProcessQueue
from tidemq.client.pull import PullResult, pull_request, read_pull_response
from tidemq.client.push_options import PushOptions
from tidemq.client.rebalance import (
    QueueEvent,
    QueueState,
    RebalancePlan,
    Rebalancer,
    RebalanceStats,
)
from tidemq.client.retry import DEFAULT_MAX_RECONSUME_TIMES, restore_retry_topic, retry_topic
from tidemq.client.retry_sender import RetrySender
from tidemq.client.stamps import now_ms
from tidemq.client.subscription import SUB_ALL, Subscription
from tidemq.client.tracer import sub_after_records, sub_before_records
from tidemq.codec.bodies import (
    ConsumeFromWhere,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumeType,
    MessageModel,
)
from tidemq.codec.command import RemotingCommand
from tidemq.codec.trace import ConsumeReturn
from tidemq.errors import ResponseCode, TideMQError
from tidemq.types import MessageExt, MessageQueue, PullStatus

__all__ = ["PushConsumer", "ThreadedPushConsumer"]

log = logging.getLogger(__name__)

#: Back-off after FLOW_CONTROL, seconds (Java waits longer than after other errors).
_FLOW_CONTROL_BACKOFF = 5.0


#: How the listener is called: an :data:`AsyncListener` or a :data:`BlockingListener`.
_Listener = TypeVar("_Listener")


class _PushConsumerBase(ConsumerRole, Generic[_Listener]):
    """Everything but how the listener is called; see the module docstring."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        listener: _Listener,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        options: PushOptions | None = None,
        orderly: bool = False,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate: AllocateStrategy = allocate_averagely,
    ) -> None:
        super().__init__(group, namesrv, config, instance, consume_from=consume_from,
                         consume_timestamp=consume_timestamp)
        self._listener: _Listener = listener
        self._options = options or PushOptions()
        self.orderly = orderly
        self.allocate = allocate
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._releasing: dict[ProcessQueue, asyncio.Task[None]] = {}
        self._runners: dict[ProcessQueue, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._rebalancer: Rebalancer | None = None
        self._service: ConcurrentService | OrderlyService | None = None
        self._stats = RebalanceStats()
        self._closing = False
        self._sender: RetrySender | None = None
        self._locks: LockKeeper | None = None
        self._max_reconsume = self._options.max_reconsume(orderly)

    def __repr__(self) -> str:
        kind = "orderly " if self.orderly else ""
        return f"<{type(self).__name__} {kind}group={self._group!r} queues={len(self._queues)}>"

    @property
    def options(self) -> PushOptions:
        return self._options

    def running_queues(self) -> list[dict[str, Any]]:
        """The queues held, for GET_CONSUMER_RUNNING_INFO (:mod:`tidemq.client.running_info`)."""
        return [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                 "nextPullOffset": -1 if pq.fetch_offset is None else pq.fetch_offset,
                 "commitOffset": -1 if pq.committed is None else pq.committed,
                 "cachedMsgCount": pq.inflight, "cachedMsgSizeInMiB": pq.body_bytes / 2**20,
                 "locked": pq.locked_at is not None}
                for mq, pq in self._queues.items()]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the group: announce the subscriptions, rebalance, start consuming."""
        await super().start()

    async def _started(self, inst: ClientInstance) -> None:
        await self._start_tracing(inst)
        self._service = (OrderlyService(self, max_reconsume_times=self._max_reconsume)
                         if self.orderly else ConcurrentService(self))
        self._service.start()
        self._rebalancer = Rebalancer(self._group, inst, self, self.allocate,
                                      interval=self._options.rebalance_interval)
        self._rebalancer.stats = self._stats
        limit = self._max_reconsume if self._max_reconsume >= 0 else DEFAULT_MAX_RECONSUME_TIMES
        self._sender = RetrySender(self._group, inst, max_reconsume_times=limit)
        if self.orderly:
            self._locks = LockKeeper(self._group, inst, self._options,
                                     owned=lambda: self._queues, on_granted=self._begin)
            self._spawn(self._locks.run())
        await self._learn_routes()
        await inst.send_heartbeat()
        self._rebalancer.start()
        self._spawn(self._commit_loop())

    async def close(self) -> None:
        """Leave gracefully: stop pulling, let in-flight listener calls finish (for at
        most ``await_termination_when_shutdown``, then cancel them), commit every queue's
        offset, unlock (orderly), unregister from the brokers."""
        inst = self._instance
        if inst is None or self._closing:
            return
        self._closing = True
        try:
            await self._leave(inst)
        finally:
            self._closing = False

    async def _leave(self, inst: ClientInstance) -> None:
        await self._stop_background()
        for pq in list(self._queues.values()):
            self._revoke(pq)
        releasing = list(self._releasing.values())
        limit = self._options.await_termination_when_shutdown
        if releasing and limit is not None:
            _, late = await asyncio.wait(releasing, timeout=limit)
            if late:
                # Cancelled, the calls end: their queues drain and commit below them.
                log.warning("%r: listener calls still running after %s s are cancelled; "
                            "their messages will be delivered again", self, limit)
                await self._stop_service(abort=True)
        await asyncio.gather(*releasing, return_exceptions=True)
        await self._stop_service()
        await self._withdraw(inst)

    async def abort(self) -> None:
        """Stop at once without finishing, committing or unregistering -- what a crash
        leaves behind (for failure tests). The brokers notice when the connections of a
        consumer's own instance close; with a shared ``instance`` they keep the member
        until its heartbeats have been missing for their expiry time (120 s)."""
        inst = self._instance
        if inst is None:
            return
        self._instance = None
        tracer, self.tracer = self.tracer, None
        if tracer is not None:
            await tracer.abort()
        await self._stop_background()
        tasks = [*self._runners.values(), *self._releasing.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_service(abort=True)
        self._queues.clear()
        if self._given is None:
            await inst.abort()
        else:
            inst.forget_consumer(self._group)

    async def _stop_background(self) -> None:
        if self._rebalancer is not None:
            await self._rebalancer.stop()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._background.clear()

    async def _stop_service(self, *, abort: bool = False) -> None:
        if self._service is not None:
            await self._service.stop()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, topic: str, expression: str = SUB_ALL) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"`` or
        ``"a || b"``); the group's retry topic is subscribed as well."""
        self._subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its queues are released at the next rebalance."""
        if self._subscriptions.pop(topic, None) is not None:
            self._subscriptions_changed()

    def _subscriptions_changed(self) -> None:
        if self._instance is not None and self._rebalancer is not None:
            self._spawn(self._learn_routes(heartbeat=True))
            self._rebalancer.request()

    def _schedule_rebalance(self) -> None:
        if self._rebalancer is not None:
            self._rebalancer.request()

    def subscriptions(self) -> dict[str, Subscription]:
        """Every subscription, the retry topic's included."""
        subs = dict(self._subscriptions)
        retry = retry_topic(self._group)
        subs.setdefault(retry, Subscription.parse(retry, SUB_ALL))
        return subs

    async def _learn_routes(self, heartbeat: bool = False) -> None:
        """Fetch the subscribed topics' routes, so that heartbeats reach their brokers."""
        inst = self.instance
        for topic in self.subscriptions():
            try:
                await inst.routes.get(topic)
            except TideMQError as exc:
                log.info("%r: no route for %s yet: %s", self, topic, exc)
        if heartbeat:
            await inst.send_heartbeat()

    # ------------------------------------------------------------------ membership

    def _register(self, inst: ClientInstance) -> None:
        inst.register_consumer(self)

    async def _unregister(self, inst: ClientInstance) -> None:
        await inst.unregister_consumer(self._group)

    def consumer_data(self) -> ConsumerData:
        """This member as HEART_BEAT announces it."""
        return ConsumerData(
            group_name=self._group, consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=MessageModel.CLUSTERING, consume_from_where=self.consume_from,
            subscription_data_set=[s.to_data() for _, s in sorted(self.subscriptions().items())],
        )

    def on_reset_offset(self, offsets: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: the owned queues among ``offsets`` drop their
        buffered messages and continue at the given offset, which is committed at once."""
        for mq, offset in offsets.items():
            pq = self._queues.get(mq)
            if pq is None or offset < 0 or pq.state not in (QueueState.STARTING,
                                                             QueueState.ACTIVE):
                continue
            log.info("%r: %s reset to offset %d", self, mq, offset)
            pq.reset(offset)
            runner = self._runners.pop(pq, None)
            if runner is not None:
                runner.cancel()
            pq.fire(QueueEvent.STARTED)
            self._begin(pq)
            self._spawn(self._commit(pq))

    # ------------------------------------------------------------------ rebalancing

    @property
    def rebalance_stats(self) -> RebalanceStats:
        """Rebalance counters (runs, changes, queues added and removed)."""
        return self._stats

    @property
    def rebalance_count(self) -> int:
        """Rebalances that changed what this member owns."""
        return self._stats.changes

    async def rebalance(self) -> RebalancePlan:
        """Rebalance now (it also happens by itself); returns what changed."""
        if self._rebalancer is None or self._instance is None:
            raise ClientClosedError(repr(self))
        return await self._rebalancer.rebalance()

    def assignment(self) -> list[MessageQueue]:
        """The queues this member owns now."""
        return sorted(self._queues)

    def subscribed_topics(self) -> list[str]:
        return sorted(self.subscriptions())

    def owned_queues(self) -> set[MessageQueue]:
        return set(self._queues)

    async def apply_plan(self, plan: RebalancePlan) -> None:
        """Release ``plan.remove``, take ``plan.add`` (orderly: once locked)."""
        for mq in plan.remove:
            pq = self._queues.pop(mq, None)
            if pq is not None:
                self._revoke(pq)
        # orderly queues need no hand-over pause: the previous owner unlocks only after
        # committing, and the lock is granted only then
        delay = self._options.handover_delay > 0 and not self.orderly
        added: list[ProcessQueue] = []
        for mq in plan.add:
            if mq in self._queues:
                continue
            previous = next((p for p in self._releasing if p.mq == mq), None)
            pq = ProcessQueue(mq, self.orderly, self._options.limits,
                              handover=delay and mq.topic in plan.shared, previous=previous)
            self._queues[mq] = pq
            added.append(pq)
        if self._locks is not None:
            if added:
                await self._locks.lock(added)
        else:
            for pq in added:
                self._begin(pq)

    def _revoke(self, pq: ProcessQueue) -> None:
        self._queues.pop(pq.mq, None)
        if pq.fire(QueueEvent.REVOKED):
            task = asyncio.ensure_future(self._release(pq))
            self._releasing[pq] = task
            task.add_done_callback(lambda _t: self._releasing.pop(pq, None))

    async def _release(self, pq: ProcessQueue) -> None:
        """Stop pulling, wait for the in-flight batch, commit, unlock; then forget."""
        runner = self._runners.pop(pq, None)
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        await pq.drained.wait()
        if pq.fetch_offset is not None:
            try:
                await self._commit(pq)
            except TideMQError as exc:
                log.warning("%r: committing %s on release failed; its next owner may "
                            "see messages again: %s", self, pq.mq, exc)
        if self._locks is not None and pq.locked_at is not None and pq.mq not in self._queues:
            await self._locks.unlock([pq.mq])
        pq.fire(QueueEvent.DRAINED)
        log.info("%r: released %s at offset %s", self, pq.mq, pq.committed)

    # ------------------------------------------------------------------ one queue

    def _begin(self, pq: ProcessQueue) -> None:
        """Start the queue's runner: find its start (if not known), then pull."""
        self._runners[pq] = task = asyncio.ensure_future(self._run_queue(pq))
        task.add_done_callback(lambda t: self._runner_done(pq, t))

    def _runner_done(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._runners.get(pq) is task:
            del self._runners[pq]
        if not task.cancelled() and task.exception() is not None:
            log.error("%r: the runner of %s failed", self, pq.mq, exc_info=task.exception())

    async def _run_queue(self, pq: ProcessQueue) -> None:
        if pq.previous is not None:
            await pq.previous.released.wait()
        if pq.state is QueueState.STARTING:
            if pq.handover:
                await pause(pq, self._options.handover_delay)
            if not await self._find_start(pq) or not pq.fire(QueueEvent.STARTED):
                return
        if isinstance(self._service, OrderlyService):
            self._service.start_queue(pq)
        await self._pull_loop(pq)

    async def _find_start(self, pq: ProcessQueue) -> bool:
        """Set the queue's start offset; ``False`` if it was revoked first."""
        inst = self.instance
        mq = pq.mq
        while pq.state is QueueState.STARTING:
            try:
                # One RPC per broker for a rebalance's queues; the master's answer, or a
                # replica's while the master is down.
                answer = await member_request(
                    inst, mq, lambda: ofs.start_query_request(self._group, mq))
                committed = ofs.read_committed(answer.response, address=answer.address)
                if committed is not None and committed >= 0:
                    pq.fetch_offset = pq.committed = committed
                    return True
                start = ofs.start_offset_request(mq, self.consume_from, self.consume_timestamp)
                if not isinstance(start, int):
                    answer = await member_request(inst, mq, functools.partial(_same, start))
                    start = ofs.read_offset(answer.response, address=answer.address)
                pq.fetch_offset = start
                return True
            except TideMQError as exc:
                log.warning("%r: finding the start of %s failed: %s", self, mq, exc)
                await pause(pq, self.config.pull_error_backoff)
        return False

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        caught_up = False  # the last pull brought less than a full batch
        while pq.active:
            if pq.over_limit():
                pq.space.clear()
                await pq.space.wait()
                continue
            generation, offset = pq.generation, pq.fetch_offset
            assert offset is not None
            try:
                result = await self._pull(pq.mq, offset, alone=caught_up)
                caught_up = (result.status is not PullStatus.OFFSET_ILLEGAL and
                             result.next_offset - offset < self.config.pull_batch_size)
            except TideMQError as exc:
                flow = getattr(exc, "code", None) == ResponseCode.FLOW_CONTROL
                backoff = _FLOW_CONTROL_BACKOFF if flow else self.config.pull_error_backoff
                log.warning("%r: pulling %s failed, again in %.1f s: %s", self, pq.mq,
                            backoff, exc)
                await pause(pq, backoff)
                continue
            if pq.active and pq.generation == generation:
                self._took(pq, result)

    async def _pull(self, mq: MessageQueue, offset: int, *, alone: bool = False) -> PullResult:
        """One pull of ``mq``; ``alone``: not in a batch-protocol parent (a caught-up
        queue's long poll, woken by its own queue only)."""
        inst = self.instance
        cfg = self.config
        sub = self.subscriptions().get(mq.topic) or Subscription.parse(mq.topic)
        response, addr, _ = await member_request(
            inst, mq, lambda: pull_request(
                self._group, mq, offset, max_nums=cfg.pull_batch_size, subscription=sub,
                suspend_ms=int(cfg.long_polling_timeout * 1000)),
            broker_id=inst.suggestions.broker_id(mq), timeout=cfg.pull_rpc_timeout,
            alone=alone)
        inst.suggestions.note(mq, response)
        return read_pull_response(response, mq, sub, address=addr, offset=offset)

    def _took(self, pq: ProcessQueue, result: PullResult) -> None:
        """Apply a pull's result to its queue (decide only; no awaits)."""
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("%r: offset %s of %s is not valid; continuing at %d", self,
                        pq.fetch_offset, pq.mq, result.next_offset)
            pq.reset(result.next_offset)
            self._spawn(self._commit(pq))
            return
        pq.fetch_offset = result.next_offset
        if result.messages:
            restore_retry_topic(result.messages, self._group)
            added = pq.put(result.messages)
            assert self._service is not None
            self._service.submit(pq, added)

    # ------------------------------------------------------------------ offsets

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._options.persist_consumer_offset_interval)
            await self.commit()

    async def commit(self) -> None:
        """Commit every owned queue's lowest unprocessed offset, moved or not."""
        pqs = [pq for pq in self._queues.values() if pq.active]
        results = await asyncio.gather(*(self._commit(pq) for pq in pqs),
                                       return_exceptions=True)
        for pq, result in zip(pqs, results, strict=True):
            if isinstance(result, TideMQError):
                log.warning("%r: committing %s failed: %s", self, pq.mq, result)
            elif isinstance(result, BaseException):
                raise result

    async def _commit(self, pq: ProcessQueue) -> None:
        offset = pq.commit_offset
        if offset is None:
            return
        # One RPC per broker per commit round, every round: the master may have lost
        # what it answered. ``committed`` is what a master took (reported, not a filter);
        # a commit a replica took (the master is down) is not. A reset meanwhile commits
        # its own offset: this answer, of an offset from before it, no longer says what
        # is committed.
        generation = pq.generation
        answer = await member_request(
            self.instance, pq.mq, lambda: ofs.update_offset_request(self._group, pq.mq, offset))
        ofs.check_success(answer.response, address=answer.address)
        if answer.master and pq.generation == generation:
            pq.committed = offset

    # ------------------------------------------------------------------ consuming

    async def invoke(self, msgs: list[MessageExt]) -> ConsumeStatus:
        """Run the listener; an exception or an unexpected answer is RECONSUME_LATER.
        With a tracer, the delivery is recorded (SubBefore, SubAfter)."""
        tracer = self.tracer
        if tracer is None:
            status, _ = await self._listen(msgs)
            return status
        delivered = tuple(msgs)  # the listener may change its list
        request_id, begin = uuid.uuid4().hex.upper(), now_ms()
        tracer.record(sub_before_records(self._group, request_id, delivered, begin))
        try:
            status, code = await self._listen(msgs)
        except asyncio.CancelledError:  # a close that stopped waiting: it comes again
            end = now_ms()
            tracer.record(sub_after_records(request_id, delivered, end - begin, False,
                                            ConsumeReturn.TIME_OUT, end))
            raise
        end = now_ms()
        tracer.record(sub_after_records(request_id, delivered, end - begin,
                                        status is ConsumeStatus.CONSUME_SUCCESS, code, end))
        return status

    async def _listen(self, msgs: list[MessageExt]) -> tuple[ConsumeStatus, ConsumeReturn]:
        try:
            status = await self._call_listener(msgs)
        except Exception:
            log.exception("%r: the listener failed on %d message(s)", self, len(msgs))
            return ConsumeStatus.RECONSUME_LATER, ConsumeReturn.EXCEPTION
        if status is ConsumeStatus.CONSUME_SUCCESS:
            return status, ConsumeReturn.SUCCESS
        return ConsumeStatus.RECONSUME_LATER, ConsumeReturn.FAILED

    async def _call_listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        raise NotImplementedError

    async def consume_directly(self, msg: MessageExt, broker_name: str
                               ) -> ConsumeMessageDirectlyResult:
        """Run the listener on ``msg`` for an admin (CONSUME_MESSAGE_DIRECTLY, 309),
        outside the queues: nothing is committed or sent back."""
        if self._closing:
            raise ClientClosedError(repr(self))
        return await run_listener(self._call_listener, msg, group=self._group,
                                  broker_name=broker_name, orderly=self.orderly)

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Hand a failed message back to the broker (:mod:`tidemq.client.retry_sender`)."""
        if self._sender is None:
            return False
        return await self._sender.send_back(msg, delay_level)


def _same(cmd: RemotingCommand) -> RemotingCommand:
    return cmd


class PushConsumer(_PushConsumerBase[AsyncListener]):
    """A push consumer whose listener is ``async def listener(msgs) -> ConsumeStatus``.

    ``options`` tunes batching, concurrency, flow control, retries and timers
    (:class:`~tidemq.client.PushOptions`); ``orderly=True`` consumes each queue in order
    under a broker lock; ``allocate`` is the rebalance strategy
    (:mod:`tidemq.client.allocate`).
    """

    async def _call_listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        return await self._listener(msgs)


class ThreadedPushConsumer(_PushConsumerBase[BlockingListener]):
    """A push consumer whose listener blocks: ``def listener(msgs) -> ConsumeStatus``,
    run in a pool of ``consume_concurrency`` threads. Otherwise as :class:`PushConsumer`.
    """

    _executor: concurrent.futures.ThreadPoolExecutor | None = None  # while started

    async def start(self) -> None:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.options.consume_concurrency,
                thread_name_prefix=f"tidemq-consume-{self.group}")
        await super().start()

    async def _stop_service(self, *, abort: bool = False) -> None:
        await super()._stop_service(abort=abort)
        executor, self._executor = self._executor, None
        if executor is not None:
            if abort:
                executor.shutdown(wait=False, cancel_futures=True)
            else:
                await asyncio.to_thread(executor.shutdown, wait=True)

    async def _call_listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        if self._executor is None:
            raise ClientClosedError(repr(self))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._listener, msgs)
