"""Broker counters: messages and bytes put and got, per topic and in total, with TPS
computed over the last few seconds from per-second buckets (no background task)."""

from __future__ import annotations

import time
from collections import deque

__all__ = ["BrokerStats", "RateMeter"]


#: Minutes of counts a meter keeps for :meth:`RateMeter.sum_since` (a day).
DAY_MINUTES = 24 * 60


class RateMeter:
    """Count per whole second; ``rate()`` is the average over the last full seconds.
    Counts are also kept per minute for a day (``sum_since``)."""

    def __init__(self, window: int = 10) -> None:
        self.total = 0
        self._window = window
        self._buckets: deque[list[int]] = deque()
        self._minutes: deque[list[int]] = deque()

    def add(self, n: int, now: float | None = None) -> None:
        self.total += n
        sec = int(time.monotonic() if now is None else now)
        buckets = self._buckets
        if buckets and buckets[-1][0] == sec:
            buckets[-1][1] += n
            self._minutes[-1][1] += n  # the second's minute is the last one counted
            return
        buckets.append([sec, n])
        while len(buckets) > self._window + 1:
            buckets.popleft()
        self._count_minute(sec // 60, n)

    def _count_minute(self, minute: int, n: int) -> None:
        minutes = self._minutes
        if minutes and minutes[-1][0] == minute:
            minutes[-1][1] += n
            return
        minutes.append([minute, n])
        while minutes and minutes[0][0] <= minute - DAY_MINUTES:
            minutes.popleft()

    def sum_since(self, seconds: int, now: float | None = None) -> int:
        """How many were counted in the last ``seconds`` (whole minutes, up to a day)."""
        minute = int(time.monotonic() if now is None else now) // 60
        first = minute - max(1, seconds // 60) + 1
        return sum(n for m, n in self._minutes if m >= first)

    def rate(self, now: float | None = None) -> float:
        sec = int(time.monotonic() if now is None else now)
        full = [n for s, n in self._buckets if sec - self._window <= s < sec]
        return sum(full) / self._window if full else 0.0


class BrokerStats:
    def __init__(self) -> None:
        self.started = time.time()
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
        self.put_msgs.add(count, now)
        self.put_bytes.add(nbytes, now)
        meter = self.topic_put.get(topic)
        if meter is None:
            meter = self.topic_put[topic] = RateMeter()
        meter.add(count, now)

    def on_get(self, topic: str, group: str, count: int, nbytes: int) -> None:
        now = time.monotonic()
        self.get_msgs.add(count, now)
        self.get_bytes.add(nbytes, now)
        meter = self.group_get.get(group)
        if meter is None:
            meter = self.group_get[group] = RateMeter()
        meter.add(count, now)
        key = f"{topic}@{group}"
        meter = self.topic_group_get.get(key)
        if meter is None:
            meter = self.topic_group_get[key] = RateMeter()
        meter.add(count, now)
