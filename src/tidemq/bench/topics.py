"""A benchmark's topic: created on every master, then waited for until the name server
routes all its queues (a broker registers a new topic with the name server soon after
creating it, not at once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from tidemq.bench.process import BenchError
from tidemq.client import AdminClient
from tidemq.client.topic_route import TopicRoute
from tidemq.errors import TideMQError

__all__ = ["create_routed_topic", "wait_routed"]

#: How long a benchmark waits for a new topic's route.
ROUTE_WAIT = 30.0


async def wait_routed(admin: AdminClient, topic: str, queues: int,
                      timeout: float = ROUTE_WAIT) -> TopicRoute:
    """The route of ``topic`` once it lists at least ``queues`` queues to send to;
    :class:`BenchError` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        with contextlib.suppress(TideMQError):
            route = await admin.instance.routes.get(topic, refresh=True)
            if len(route.publish_queues) >= queues:
                return route
        if loop.time() > deadline:
            raise BenchError(f"topic {topic} has no full route after {timeout:g} s")
        await asyncio.sleep(0.05)


async def create_routed_topic(admin: AdminClient, topic: str, queues: int, *,
                              attributes: Mapping[str, str | None] | None = None,
                              timeout: float = ROUTE_WAIT) -> TopicRoute:
    """Create ``topic`` with ``queues`` queues on every master, and return its route
    once it lists them all (:func:`wait_routed`)."""
    masters = await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues,
                                       attributes=attributes)
    return await wait_routed(admin, topic, queues * len(masters), timeout)
