"""Consumer-group rebalancing on the client: which queues this member owns, and the life
of each owned queue (remoting.md §2.6, §2.10, §2.13).

Every member of a group computes the split itself, as Java clients do: for each subscribed
topic it takes the topic's readable queues from the route and the group's client ids from
GET_CONSUMER_LIST_BY_GROUP (38), sorts both and applies the group's strategy
(:mod:`tidemq.client.allocate`). The members agree as long as they see the same route and
the same id list; the id list is asked of the topic's first master by broker name, so that
every member asks the same broker.

Decide, then act. :func:`plan_rebalance` is a plain function: from the views (queues and
client ids per topic) and the queues owned now it returns a :class:`RebalancePlan` --
queues to add, queues to release. Only then does the consumer apply it
(:meth:`RebalanceTarget.apply_plan`). :class:`Rebalancer` runs that cycle

* at once when asked (:meth:`Rebalancer.request`): at start, when a broker sends
  NOTIFY_CONSUMER_IDS_CHANGED (40), when a subscription changes, and when the route of a
  subscribed topic changes (a :class:`~tidemq.client.routes.RouteCache` listener);
* every ``interval`` seconds otherwise (Java: 20 s) -- but after a run that could not
  see a subscribed topic (no route yet, as for a new group's retry topic, which the
  broker creates on the group's first heartbeat and registers a moment later), again
  after :data:`INCOMPLETE_RETRY_FIRST` seconds, doubling up to ``interval``;

and counts the runs and the changes in :class:`RebalanceStats`.

The life of one owned queue is the table below (``TRANSITIONS``); the consumer keeps one
:class:`~tidemq.client.process_queue.ProcessQueue` per owned queue and changes its state
only through it.

===========  ========  ===========  ===================================================
from         event     to           what happens
===========  ========  ===========  ===================================================
LOCKING      LOCKED    STARTING     orderly only: the broker granted LOCK_BATCH_MQ (41)
STARTING     STARTED   ACTIVE       the start offset is known: committed offset, else
                                    per ``consume_from``; pulling begins
LOCKING      REVOKED   RELEASING    a rebalance (or close) took the queue away
STARTING     REVOKED   RELEASING
ACTIVE       REVOKED   RELEASING    no more pulls; buffered messages not yet handed to the
                                    listener are dropped; the in-flight ones finish
RELEASING    DRAINED   RELEASED     in-flight done, the lowest unprocessed offset
                                    committed, (orderly) UNLOCK_BATCH_MQ (42) sent
===========  ========  ===========  ===================================================

A queue is therefore given up only after what this member processed of it is committed;
the member that takes it over starts from that offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from tidemq.client.allocate import AllocateStrategy
from tidemq.client.errors import NoRouteError
from tidemq.client.instance import ClientInstance
from tidemq.client.offsets import check_success
from tidemq.client.retry import RETRY_PREFIX
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.bodies import ConsumerListBody, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetConsumerListByGroupRequestHeader
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue

__all__ = [
    "DEFAULT_REBALANCE_INTERVAL",
    "INCOMPLETE_RETRY_FIRST",
    "TRANSITIONS",
    "QueueEvent",
    "QueueState",
    "RebalancePlan",
    "RebalanceStats",
    "RebalanceTarget",
    "Rebalancer",
    "TopicView",
    "consumer_list_request",
    "initial_state",
    "next_state",
    "plan_rebalance",
    "read_consumer_list",
]

log = logging.getLogger(__name__)

#: Java ``rebalanceInterval``: the periodic check, seconds.
DEFAULT_REBALANCE_INTERVAL = 20.0
#: Seconds before a run that missed a subscribed topic is repeated (then doubled).
INCOMPLETE_RETRY_FIRST = 0.2
#: Runs in a row without a route for a subscribed topic before it is warned of (about
#: three seconds of retries): a topic created a moment ago is routed well within them.
UNROUTED_WARN_RUNS = 5


class QueueState(enum.Enum):
    LOCKING = "locking"  # orderly: waiting for the broker's lock on the queue
    STARTING = "starting"  # finding the offset to start from
    ACTIVE = "active"  # pulling and consuming
    RELEASING = "releasing"  # taken away: in-flight finishing, then commit (and unlock)
    RELEASED = "released"  # committed (and unlocked); the consumer forgets it


class QueueEvent(enum.Enum):
    LOCKED = "locked"  # LOCK_BATCH_MQ listed the queue as held by this client
    STARTED = "started"  # the start offset is known (or an offset reset gave one)
    REVOKED = "revoked"  # a rebalance or close took the queue away
    DRAINED = "drained"  # in-flight processed, offset committed, lock released


# Rule 1: every change of a ProcessQueue's QueueState goes through this table. A pair that
# is missing changes nothing (a second REVOKED, a lock answer or a start offset arriving
# after the queue was revoked) and next_state returns None for it, so the caller can tell.
TRANSITIONS: dict[tuple[QueueState, QueueEvent], QueueState] = {
    (QueueState.LOCKING, QueueEvent.LOCKED): QueueState.STARTING,
    (QueueState.LOCKING, QueueEvent.REVOKED): QueueState.RELEASING,
    (QueueState.STARTING, QueueEvent.STARTED): QueueState.ACTIVE,
    (QueueState.STARTING, QueueEvent.REVOKED): QueueState.RELEASING,
    (QueueState.ACTIVE, QueueEvent.REVOKED): QueueState.RELEASING,
    (QueueState.RELEASING, QueueEvent.DRAINED): QueueState.RELEASED,
}

#: States in which the queue counts as owned by this member.
OWNED_STATES = frozenset({QueueState.LOCKING, QueueState.STARTING, QueueState.ACTIVE})


def next_state(state: QueueState, event: QueueEvent) -> QueueState | None:
    """The state after ``event``, or ``None`` when the table has no such transition."""
    return TRANSITIONS.get((state, event))


def initial_state(orderly: bool) -> QueueState:
    """Where a newly assigned queue starts: orderly consumers lock it first."""
    return QueueState.LOCKING if orderly else QueueState.STARTING


# ---------------------------------------------------------------- deciding


class TopicView(NamedTuple):
    """What one member sees of one topic: its readable queues and the group's client ids."""

    queues: Sequence[MessageQueue]
    clients: Sequence[str]


@dataclasses.dataclass(frozen=True, slots=True)
class RebalancePlan:
    """Queues to start consuming and queues to give up, each sorted.

    ``shared`` names the topics whose view lists other members besides this one: a queue
    added there may have been someone else's a moment ago (the consumer then waits a
    little for its previous owner's commit, see ``handover_delay``).
    """

    add: tuple[MessageQueue, ...] = ()
    remove: tuple[MessageQueue, ...] = ()
    shared: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


def plan_rebalance(
    group: str,
    client_id: str,
    strategy: AllocateStrategy,
    views: Mapping[str, TopicView],
    owned: Iterable[MessageQueue],
    subscribed: Collection[str],
) -> RebalancePlan:
    """Decide, without I/O, what to add and release.

    A topic with a view is split by ``strategy`` over its sorted queues and sorted unique
    client ids; owned queues of a topic no longer in ``subscribed`` are released; a
    subscribed topic without a view (its route or id list could not be fetched) keeps
    what it has.
    """
    owned_set = set(owned)
    add: set[MessageQueue] = set()
    remove = {mq for mq in owned_set if mq.topic not in subscribed}
    shared: set[str] = set()
    for topic, view in views.items():
        if topic not in subscribed:
            continue
        queues = sorted(set(view.queues))
        clients = sorted(set(view.clients))
        target = set(strategy(group, client_id, queues, clients))
        stray = target.difference(queues)
        if stray:
            raise ValueError(f"strategy {getattr(strategy, '__name__', strategy)!r} "
                             f"returned queues outside the topic: {sorted(stray)}")
        mine = {mq for mq in owned_set if mq.topic == topic}
        add |= target - mine
        remove |= mine - target
        if any(c != client_id for c in clients):
            shared.add(topic)
    return RebalancePlan(tuple(sorted(add)), tuple(sorted(remove)), frozenset(shared))


def consumer_list_request(group: str) -> RemotingCommand:
    header = GetConsumerListByGroupRequestHeader(consumer_group=group)
    return RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header.to_ext())


def read_consumer_list(response: RemotingCommand, *, address: str) -> list[str]:
    """The client ids of a GET_CONSUMER_LIST_BY_GROUP answer, sorted."""
    check_success(response, address=address)
    return sorted(decode_body(response.full_body(), ConsumerListBody).consumer_id_list)


# ---------------------------------------------------------------- acting


class RebalanceTarget(Protocol):
    """What the :class:`Rebalancer` needs from the consumer it rebalances."""

    def subscribed_topics(self) -> list[str]: ...

    def owned_queues(self) -> set[MessageQueue]: ...

    async def apply_plan(self, plan: RebalancePlan) -> None: ...


@dataclasses.dataclass(slots=True)
class RebalanceStats:
    """Counters a test or a dashboard can read."""

    runs: int = 0  # rebalances computed
    changes: int = 0  # of those, the ones that added or released a queue
    added: int = 0  # queues taken, over all runs
    removed: int = 0  # queues given up, over all runs
    failures: int = 0  # runs where a topic's route or id list could not be fetched


class Rebalancer:
    """Runs :func:`plan_rebalance` for one group when asked and periodically; see the
    module docstring."""

    def __init__(self, group: str, instance: ClientInstance, target: RebalanceTarget,
                 strategy: AllocateStrategy, *,
                 interval: float = DEFAULT_REBALANCE_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.group = group
        self.instance = instance
        self.target = target
        self.strategy = strategy
        self.interval = interval
        self.stats = RebalanceStats()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._incomplete = False  # the last run missed a subscribed topic
        #: Subscribed topics without a route: the runs in a row that found none.
        self._unrouted: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Rebalancer group={self.group!r} runs={self.stats.runs}>"

    def start(self) -> None:
        """Run the first rebalance now and then on every request and interval."""
        if self._task is None:
            self.instance.routes.add_listener(self._route_changed)
            self._task = asyncio.ensure_future(self._run())
            self.request()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self.instance.routes.remove_listener(self._route_changed)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def request(self) -> None:
        """Rebalance as soon as the current run (if any) is over."""
        self._wake.set()

    def _route_changed(self, topic: str) -> None:
        if topic in self.target.subscribed_topics():
            self.request()

    async def _run(self) -> None:
        backoff = INCOMPLETE_RETRY_FIRST
        while True:
            wait = self.interval
            if self._incomplete:
                wait = min(backoff, self.interval)
                backoff = min(backoff * 2, self.interval)
            else:
                backoff = INCOMPLETE_RETRY_FIRST
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.rebalance()
            except TideMQError as exc:
                log.warning("%r: rebalance failed: %s", self, exc)
            except Exception:
                log.exception("%r: rebalance failed", self)

    async def rebalance(self) -> RebalancePlan:
        """One cycle now: fetch the views, decide, apply; returns the plan applied."""
        async with self._lock:
            topics = self.target.subscribed_topics()
            views = await self._views(topics)
            plan = plan_rebalance(self.group, self.instance.client_id, self.strategy, views,
                                  self.target.owned_queues(), topics)
            stats = self.stats
            stats.runs += 1
            self._incomplete = len(views) < len(topics)
            if self._incomplete:
                stats.failures += 1
            if plan:
                stats.changes += 1
                stats.added += len(plan.add)
                stats.removed += len(plan.remove)
                log.info("%r: taking %s, releasing %s", self, list(plan.add), list(plan.remove))
                await self.target.apply_plan(plan)
            return plan

    async def _views(self, topics: Sequence[str]) -> dict[str, TopicView]:
        routes: dict[str, TopicRoute] = {}
        unrouted: dict[str, int] = {}
        for topic in topics:
            try:
                routes[topic] = await self.instance.routes.get(topic)
            except TideMQError as exc:
                runs = unrouted[topic] = self._unrouted.get(topic, 0) + 1
                if runs == UNROUTED_WARN_RUNS and not topic.startswith(RETRY_PREFIX):
                    log.warning("%r: subscribed topic %s has no route, so nothing of it is "
                                "consumed until it is created (looking again every %.0f s): "
                                "%s", self, topic, self.interval, exc)
                else:
                    log.info("%r: no route for %s yet: %s", self, topic, exc)
        self._unrouted = unrouted
        await self.instance.heartbeat_new_brokers()
        asked: dict[str, list[str]] = {}
        views: dict[str, TopicView] = {}
        for topic, route in routes.items():
            try:
                clients = await self._consumer_ids(route, asked)
            except TideMQError as exc:
                log.info("%r: no consumer list for %s: %s", self, topic, exc)
                continue
            views[topic] = TopicView(route.subscribe_queues, clients)
        return views

    async def _consumer_ids(self, route: TopicRoute, asked: dict[str, list[str]]) -> list[str]:
        """The group's client ids from the topic's first broker group (by name) that
        answers: its master, or a replica while the master is down (consumers heartbeat
        to both); ``asked`` caches answers by address within one run."""
        members = {name: addr for name in route.brokers
                   if (addr := route.read_address(name)) is not None}
        last: TideMQError | None = None
        for name in sorted(members):
            addr = members[name]
            if addr in asked:
                return asked[addr]
            try:
                response = await self.instance.request(addr, consumer_list_request(self.group))
                ids = asked[addr] = read_consumer_list(response, address=addr)
                return ids
            except TideMQError as exc:
                last = exc
        if last is None:
            raise NoRouteError(route.topic, f"no broker to ask for the members of group "
                                            f"{self.group!r}")
        raise last
