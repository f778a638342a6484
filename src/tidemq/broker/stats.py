"""Broker counters: messages and bytes put and got, per topic and in total, with TPS
computed over the last few seconds from per-second buckets (no background task), and the
totals as they stood at the start of today and of yesterday (local time; upstream's
``msgPutTotalTodayMorning`` and the like, which mqadmin's ``clusterList -m`` and the
Dashboard read)."""

from __future__ import annotations

import datetime
import time
from collections import deque

__all__ = ["BrokerStats", "RateMeter"]


#: Per-minute counts a meter keeps (the last hour) and per-hour counts (the last day):
#: 84 small buckets at most per meter, however long the broker runs.
HOUR_MINUTES = 60
DAY_HOURS = 24


class RateMeter:
    """Count per whole second; ``rate()`` is the average over the last full seconds.
    Counts are also kept per minute for an hour and per hour for a day (``sum_since``).

    Every request adds to a few meters, so :meth:`add` only adds to the count of the
    second it is in; that count joins the buckets (and :attr:`total`) when a later
    second begins or a reader asks."""

    __slots__ = ("_buckets", "_held", "_hours", "_minutes", "_sec", "_settled", "_window")

    def __init__(self, window: int = 10) -> None:
        self._settled = 0  # counted before the second ``_held`` counts
        self._window = window
        self._buckets: deque[list[int]] = deque()
        self._minutes: deque[list[int]] = deque()
        self._hours: deque[list[int]] = deque()
        self._sec = -1  # the second ``_held`` counts (-1: none yet)
        self._held = 0

    @property
    def total(self) -> int:
        """Everything counted so far."""
        return self._settled + self._held

    def add(self, n: int, now: float | None = None) -> None:
        sec = int(time.monotonic() if now is None else now)
        if sec == self._sec:
            self._held += n
            return
        self._settle()
        self._sec = sec
        self._held = n

    def _settle(self) -> None:
        """Move the held count into the second's, minute's and hour's buckets."""
        sec, n = self._sec, self._held
        if sec < 0:
            return
        self._held = 0
        self._settled += n
        buckets = self._buckets
        if buckets and buckets[-1][0] == sec:
            buckets[-1][1] += n
            self._minutes[-1][1] += n  # the second's minute and hour are the last counted
            self._hours[-1][1] += n
            return
        buckets.append([sec, n])
        while len(buckets) > self._window + 1:
            buckets.popleft()
        _count(self._minutes, sec // 60, n, HOUR_MINUTES)
        _count(self._hours, sec // 3600, n, DAY_HOURS)

    def sum_since(self, seconds: int, now: float | None = None) -> int:
        """How many were counted in the last ``seconds``: whole minutes up to an hour,
        whole hours beyond (up to a day)."""
        self._settle()
        sec = int(time.monotonic() if now is None else now)
        if seconds <= 3600:
            first = sec // 60 - max(1, seconds // 60) + 1
            return sum(n for m, n in self._minutes if m >= first)
        first = sec // 3600 - min(DAY_HOURS, max(1, seconds // 3600)) + 1
        return sum(n for h, n in self._hours if h >= first)

    def rate(self, now: float | None = None) -> float:
        self._settle()
        sec = int(time.monotonic() if now is None else now)
        full = [n for s, n in self._buckets if sec - self._window <= s < sec]
        return sum(full) / self._window if full else 0.0


def _count(buckets: deque[list[int]], slot: int, n: int, keep: int) -> None:
    """Add ``n`` to ``slot``'s bucket (appended when new); drop buckets ``keep`` slots old."""
    if buckets and buckets[-1][0] == slot:
        buckets[-1][1] += n
        return
    buckets.append([slot, n])
    while buckets[0][0] <= slot - keep:
        buckets.popleft()


class BrokerStats:
    def __init__(self, today: datetime.date | None = None) -> None:
        self.started = time.time()
        #: The local day the morning totals below are of (the start counts as its morning).
        self.today = today if today is not None else datetime.date.today()
        #: Messages put and got in all, as at the start of today and of yesterday.
        self.put_today_morning = self.get_today_morning = 0
        self.put_yesterday_morning = self.get_yesterday_morning = 0
        self.put_msgs = RateMeter()
        self.put_bytes = RateMeter()
        self.get_msgs = RateMeter()
        self.get_bytes = RateMeter()
        self.topic_put: dict[str, RateMeter] = {}
        self.group_get: dict[str, RateMeter] = {}
        #: ``topic@group`` -> what the group got of the topic (upstream's GROUP_GET_NUMS key)
        self.topic_group_get: dict[str, RateMeter] = {}

    def on_put(self, topic: str, count: int, nbytes: int) -> None:
        now = time.monotonic()  # one clock read for the three meters
        msgs, size = self.put_msgs, self.put_bytes
        meter = self.topic_put.get(topic)
        if meter is None:
            meter = self.topic_put[topic] = RateMeter()
        sec = int(now)
        if sec == msgs._sec == size._sec == meter._sec:  # every send but a second's first
            msgs._held += count
            size._held += nbytes
            meter._held += count
            return
        msgs.add(count, now)
        size.add(nbytes, now)
        meter.add(count, now)

    def on_get(self, topic: str, group: str, count: int, nbytes: int) -> None:
        now = time.monotonic()  # one clock read for the four meters
        msgs, size = self.get_msgs, self.get_bytes
        by_group = self.group_get.get(group)
        if by_group is None:
            by_group = self.group_get[group] = RateMeter()
        key = f"{topic}@{group}"
        by_pair = self.topic_group_get.get(key)
        if by_pair is None:
            by_pair = self.topic_group_get[key] = RateMeter()
        sec = int(now)
        if sec == msgs._sec == size._sec == by_group._sec == by_pair._sec:
            msgs._held += count  # every pull but a second's first, as in on_put
            size._held += nbytes
            by_group._held += count
            by_pair._held += count
            return
        msgs.add(count, now)
        size.add(nbytes, now)
        by_group.add(count, now)
        by_pair.add(count, now)

    def roll_day(self, today: datetime.date) -> None:
        """Called now and then (the housekeeping's few seconds): on the first call of a
        new day, the totals now become this morning's and this morning's yesterday's."""
        if today == self.today:
            return
        self.today = today
        self.put_yesterday_morning = self.put_today_morning
        self.get_yesterday_morning = self.get_today_morning
        self.put_today_morning = self.put_msgs.total
        self.get_today_morning = self.get_msgs.total

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's (or LMQ's) meters, so that topic churn does not grow them."""
        self.topic_put.pop(topic, None)
        for key in [k for k in self.topic_group_get if k.rpartition("@")[0] == topic]:
            del self.topic_group_get[key]

    def forget_group(self, group: str) -> None:
        """Drop a deleted subscription group's meters."""
        self.group_get.pop(group, None)
        for key in [k for k in self.topic_group_get if k.rpartition("@")[2] == group]:
            del self.topic_group_get[key]
