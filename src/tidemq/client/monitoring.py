"""One round of mqadmin's ``startMonitoring`` (upstream's ``MonitorService``): for each
group that has consumed (it has a ``%RETRY%`` topic), what it has not consumed yet per
topic, and whether its online consumers subscribe alike.

Every operation takes a started :class:`~tidemq.client.admin.AdminClient`; a group whose
figures cannot be read (no offsets, nobody online) is skipped, as upstream skips it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import TYPE_CHECKING

from tidemq.client import group_admin as ga
from tidemq.client import monitor
from tidemq.errors import TideMQError
from tidemq.types import MessageQueue

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["MonitorRound", "UndoneMsgs", "monitor_round"]

RETRY_PREFIX = "%RETRY%"


@dataclasses.dataclass(frozen=True, slots=True)
class UndoneMsgs:
    """A group's backlog on one topic: in all, on its worst queue, and how much older
    than each queue's newest message the group's last consumed one is (at most)."""

    group: str
    topic: str
    total: int
    single_mq: int
    delay_ms: int

    def __str__(self) -> str:  # upstream's UndoneMsgs.toString
        return (f"UndoneMsgs [consumerGroup={self.group}, topic={self.topic}, "
                f"undoneMsgsTotal={self.total}, undoneMsgsSingleMQ={self.single_mq}, "
                f"undoneMsgsDelayTimeMills={self.delay_ms}]")


@dataclasses.dataclass(frozen=True, slots=True)
class MonitorRound:
    undone: list[UndoneMsgs]
    #: Groups whose online consumers subscribe differently.
    subscription_different: list[str]


async def _delay(admin: AdminClient, lag: monitor.QueueLag) -> int:
    """Store time of the queue's newest message less the group's last consumed one's."""
    if lag.last_timestamp <= 0 or lag.broker_offset <= 0:
        return 0
    queue = MessageQueue(lag.topic, lag.broker_name, lag.queue_id)
    try:
        newest = await admin.message_at(queue, lag.broker_offset - 1)
    except TideMQError:
        return 0
    return max(0, newest.store_timestamp - lag.last_timestamp)


async def undone_msgs(admin: AdminClient, group: str) -> list[UndoneMsgs]:
    """``group``'s backlog per topic."""
    stats = await monitor.consume_stats(admin, group)
    by_topic: dict[str, list[monitor.QueueLag]] = {}
    for lag in stats.queues:
        by_topic.setdefault(lag.topic, []).append(lag)
    out = []
    for topic, lags in sorted(by_topic.items()):
        diffs = [lag.broker_offset - lag.consumer_offset for lag in lags]
        delays = [await _delay(admin, lag) for lag in lags]
        out.append(UndoneMsgs(group, topic, sum(d for d in diffs if d > 0),
                              max([0, *diffs]), max([0, *delays])))
    return out


async def subscriptions_differ(admin: AdminClient, group: str) -> bool:
    """Whether the online consumers of ``group`` report different subscriptions."""
    conns = await ga.consumer_connection(admin, group)
    seen = set()
    for client in conns.clients:
        info = await ga.running_info(admin, group, str(client["clientId"]))
        seen.add(json.dumps(info.get("subscriptionSet", []), sort_keys=True))
    return len(seen) > 1


async def monitor_round(admin: AdminClient) -> MonitorRound:
    groups = sorted(t[len(RETRY_PREFIX):] for t in await admin.topic_list()
                    if t.startswith(RETRY_PREFIX))
    undone: list[UndoneMsgs] = []
    different: list[str] = []
    for group in groups:
        with contextlib.suppress(TideMQError):
            undone.extend(await undone_msgs(admin, group))
        with contextlib.suppress(TideMQError):
            if await subscriptions_differ(admin, group):
                different.append(group)
    return MonitorRound(undone, different)
