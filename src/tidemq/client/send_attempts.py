"""The attempts of one send, decided with no I/O: shared by the asyncio producer
(:mod:`tidemq.client.producer`) and the blocking one (:mod:`tidemq.client.blocking`).

A driver asks :meth:`SendAttempts.next` for the queue of the next attempt (``None``: no
attempt or no time is left), sends there -- to :meth:`SendAttempts.address` if the
route names the queue's master, else to the master its cache finds -- and reads the
answer. After a failure it asks :meth:`SendAttempts.failed` whether to go on; if so it
fetches the route again and hands it to :meth:`SendAttempts.rerouted` (a failed refresh
keeps the old route). When the attempts run out it raises :meth:`SendAttempts.exhausted`.
A send that fails for good after a failure suggesting the route is out of date
(:attr:`SendAttempts.route_outdated`: the broker was unreachable or does not take sends
any more, as a master that died or became a replica) has the driver mark the topic's
cached route stale, so the next send asks the name servers -- an ordered sender, which
is never rerouted, then finds a newly elected master without waiting for the refresh.
Which queue each attempt takes and which failures are worth another attempt is
:class:`~tidemq.client.selector.SendPlan`'s.
"""

from __future__ import annotations

import logging

from tidemq.client.selector import SendPlan
from tidemq.client.sending import publish_queues
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.command import RequestCode
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    RequestTimeout,
    ResponseCode,
    TideMQError,
)
from tidemq.types import MessageQueue

__all__ = ["MIN_WAIT", "SendAttempts", "outdated_route"]

log = logging.getLogger(__name__)

#: The shortest wait given to an attempt that starts just before the deadline, seconds.
MIN_WAIT = 1e-3


def outdated_route(exc: TideMQError) -> bool:
    """Whether a failed send suggests that the route it used is out of date."""
    if isinstance(exc, (ConnectionLost, RequestTimeout)):
        return True
    return isinstance(exc, BrokerResponseError) and exc.code == ResponseCode.SERVICE_NOT_AVAILABLE


class SendAttempts:
    """One send's attempts against ``route`` within ``budget`` seconds from ``now``
    (times on the driver's clock); see the module docstring."""

    def __init__(self, plan: SendPlan, route: TopicRoute, *, budget: float,
                 now: float) -> None:
        self.plan = plan
        self.route = route
        self.budget = budget
        self.deadline = now + budget
        #: A failure suggested that the cached route is out of date.
        self.route_outdated = False

    def next(self, now: float) -> MessageQueue | None:
        """The queue of the next attempt, or ``None`` when no attempt or time is left."""
        mq = self.plan.next_queue(publish_queues(self.route, self.plan.fixed_queue))
        if mq is None or self.deadline - now <= 0:
            return None
        return mq

    def address(self, mq: MessageQueue) -> str | None:
        """The master of ``mq``'s broker per the current route (``None``: ask the cache)."""
        return self.route.master_address(mq.broker_name)

    def wait(self, now: float) -> float:
        """How long the attempt starting at ``now`` may wait for its answer."""
        return max(self.deadline - now, MIN_WAIT)

    def failed(self, mq: MessageQueue, address: str, exc: TideMQError) -> bool:
        """Record that the attempt on ``mq`` (at ``address``) failed with ``exc``;
        ``True`` if another attempt follows (after the route is fetched again),
        ``False`` if ``exc`` is the send's error."""
        self.route_outdated = self.route_outdated or outdated_route(exc)
        if not self.plan.failed(mq, exc):
            return False
        log.info("send to %s (%s) failed, trying again: %s", mq, address, exc)
        return True

    def rerouted(self, route: TopicRoute | TideMQError) -> None:
        """Take the route fetched again after a failure; a failed fetch (its error)
        keeps the old route."""
        if isinstance(route, TideMQError):
            log.info("route refresh of %s failed: %s", self.route.topic, route)
        else:
            self.route = route

    def exhausted(self) -> TideMQError:
        """The error of a send that ran out of attempts or time: the last failure, else a
        timeout."""
        if self.plan.errors:
            return self.plan.errors[-1]
        return RequestTimeout(self.route.topic, int(RequestCode.SEND_MESSAGE_V2), 0,
                              self.budget * 1e3)
