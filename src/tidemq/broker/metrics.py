"""Prometheus metrics of one broker, served at ``/metrics`` when ``metricsPort`` > 0.

Each :class:`BrokerContext` owns a :class:`CollectorRegistry` of its own (tests run several
brokers in one process). Most figures are read from the broker's state when Prometheus
scrapes (a custom collector, nothing kept twice); only the send and pull latencies are
observed as they happen, by the broker's request pipeline (:meth:`BrokerMetrics.wrap`
is one of its interceptors), for requests and batch-protocol children alike, with every
request's answer counted. The latency is the time the processor ran: a SYNC_FLUSH send is
measured up to its hand-off to the flusher, a long-polled pull up to its hold.

=============================================  =======  ====================================
metric                                         type     labels
=============================================  =======  ====================================
tidemq_broker_info                             gauge    broker, cluster, addr, version
tidemq_broker_put_messages_total / _bytes      counter
tidemq_broker_get_messages_total / _bytes      counter
tidemq_broker_topic_put_messages_total         counter  topic (bounded)
tidemq_broker_group_get_messages_total         counter  group (bounded)
tidemq_broker_requests_total                   counter  request, response (names)
tidemq_broker_send_latency_seconds             hist.    request, response (names)
tidemq_broker_pull_latency_seconds             hist.    request, response (names)
tidemq_broker_dispatch_behind_bytes            gauge
tidemq_broker_dispatch_lag_seconds             gauge
tidemq_broker_queue_max_offset / min_offset    gauge    topic, queue_id (bounded)
tidemq_broker_consumer_lag_messages            gauge    group, topic (bounded; sum of queues)
tidemq_broker_consumer_lag_seconds             gauge    group, topic (bounded; oldest queue)
tidemq_broker_consumer_queue_lag_messages      gauge    group, topic, queue_id (metricsQueueLag)
tidemq_broker_consumer_queue_lag_seconds       gauge    group, topic, queue_id (metricsQueueLag)
tidemq_broker_flush_last_seconds               gauge
tidemq_broker_flushes_total                    counter
tidemq_broker_damaged_records_skipped_total    counter  (damaged records reads skipped)
tidemq_broker_retention_lost_messages_total    counter  (forced retention, unconsumed)
tidemq_broker_transactions_open                gauge    (half messages not ended yet)
tidemq_broker_transactions_ended_total         counter  outcome (commit, rollback, discard)
tidemq_broker_commitlog_bytes                  gauge    (max - min physical offset)
tidemq_broker_disk_used_ratio                  gauge
tidemq_broker_connections / pull_held          gauge
tidemq_broker_topics                           gauge
tidemq_broker_store_healthy                    gauge    status (1 while RUNNING)
tidemq_broker_lmq_queues / lmq_entries         gauge    (only with enableLmq)
tidemq_broker_role                             gauge    role (1 for the role held), epoch
tidemq_broker_replication_lag_bytes            gauge    replica (a master: bytes it lacks)
tidemq_broker_replication_lag_seconds          gauge    replica (age of the oldest it lacks)
tidemq_broker_replicas_in_sync                 gauge    (a master)
tidemq_broker_replica_frame_age_seconds        gauge    (a replica: since its last frame)
tidemq_broker_series_dropped                   gauge    family (series past the bound)
=============================================  =======  ====================================

Rates are counters only: ``rate(tidemq_broker_put_messages_total[1m])`` is the put rate.
Request and response labels are names (``SEND_MESSAGE_V2``, ``SUCCESS``; a number when
the code has no name); ``DEFERRED`` is a request answered later (a SYNC_FLUSH send waiting
for the flush, a held pull), whose time is the processor's up to that hand-off. A group's
lag in seconds is how long ago its oldest unconsumed message was stored (the RocketMQ
exporter's ``rocketmq_group_get_latency_by_storetime``); 0 when it is caught up.

Label cardinality is bounded: at most ``max_series`` series per labelled family (system
topics and retry topics count like any other); what is left out is counted in
``tidemq_broker_series_dropped`` so a truncated scrape is visible.

A scrape over HTTP (:meth:`BrokerMetrics.render_async`) chooses the queues and offset-table
keys it reports on a thread (from a copy of the queues' keys, and the offset-table keys
read there a slice at a time), reads their figures
:data:`LAG_SLICE` at a time on the event loop, which serves others in between, and writes
the text on a thread: a broker with thousands of groups and topics spent a large
fraction of a second on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from enum import IntEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidemq.broker.codes import PULL_CODES, SEND_CODES
from tidemq.broker.context import BrokerContext
from tidemq.broker.offsets import OffsetManager
from tidemq.broker.status import VERSION, disk_usage_ratio
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.net import Connection

__all__ = ["LATENCY_BUCKETS", "BrokerCollector", "BrokerMetrics"]

#: Seconds: 50 us .. 5 s (a processor returns in microseconds; a slow disk shows above).
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                   0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

_Processor = Callable[[Connection, RemotingCommand], Any]
#: Queues or offset-table keys a scrape reads the figures of between two turns of the
#: event loop.
LAG_SLICE = 100


def _first(count: int, offsets: OffsetManager, pairs: list[tuple[str, int]]
           ) -> tuple[list[str], int, list[tuple[str, int]]]:
    """The first ``count`` offset-table keys, how many keys the table has, and the first
    ``count`` of ``pairs``, in order (on a thread: loops in Python over slices, so the
    event loop takes turns)."""
    keys, total = offsets.first_keys(count)
    return keys, total, heapq.nsmallest(count, pairs)


@dataclasses.dataclass
class _LagRow:
    group: str
    topic: str
    total: int
    oldest_ms: float
    #: Queue id, messages behind, when the oldest of them was stored (ms).
    queues: list[tuple[int, int, float]]


@dataclasses.dataclass
class _Gathered:
    """What a scrape read before it rendered (:meth:`BrokerCollector.gather`)."""

    now_ms: float
    queues: list[tuple[str, int, int, int]]  # topic, queue id, max offset, min offset
    queues_dropped: int
    lag: list[_LagRow]
    lag_dropped: int


def _name(enum_type: type[IntEnum], code: int) -> str:
    try:
        return enum_type(code).name
    except ValueError:
        return str(code)


class _Meter:
    """One request code's series: its answers counted (and timed, with a histogram) by
    response code, each label child made once."""

    def __init__(self, code: int, requests: Counter, histogram: Histogram | None) -> None:
        self.request = _name(RequestCode, code)
        self.requests, self.histogram = requests, histogram
        self.children: dict[int | None, tuple[Any, Any]] = {}

    def child(self, response: int | None) -> tuple[Any, Any]:
        found = self.children.get(response)
        if found is None:
            label = "DEFERRED" if response is None else _name(ResponseCode, response)
            found = self.children[response] = (
                self.requests.labels(request=self.request, response=label),
                None if self.histogram is None else self.histogram.labels(
                    request=self.request, response=label))
        return found

    def done(self, response: int | None, t0: float) -> None:
        count, timed = self.child(response)
        count.inc()
        if timed is not None:
            timed.observe(time.perf_counter() - t0)


def _refusal(exc: Exception) -> int:
    """The response code a processor's exception is answered with (net/dispatcher)."""
    return exc.code if isinstance(exc, BrokerResponseError) else ResponseCode.SYSTEM_ERROR


def _answered(result: object) -> int | None:
    """A processor's response code, ``None`` when it answers later."""
    return result.code if isinstance(result, RemotingCommand) else None


def _metered(processor: _Processor, meter: _Meter) -> _Processor:
    clock = time.perf_counter
    done = meter.done

    def run(conn: Connection, cmd: RemotingCommand) -> Any:
        t0 = clock()
        try:
            result = processor(conn, cmd)
        except Exception as exc:
            done(_refusal(exc), t0)
            raise
        if result is None or isinstance(result, RemotingCommand):
            done(_answered(result), t0)
            return result
        return _finish(result, t0)

    async def _finish(pending: Awaitable[Any], t0: float) -> Any:
        try:
            result = await pending
        except Exception as exc:
            done(_refusal(exc), t0)
            raise
        done(_answered(result), t0)
        return result

    return run


class BrokerMetrics:
    """The registry of one broker; see the module docstring."""

    def __init__(self, ctx: BrokerContext, *, max_series: int = 2000) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "tidemq_broker_requests", "Requests answered, by request and response.",
            ["request", "response"], registry=self.registry)
        self.send_latency = Histogram(
            "tidemq_broker_send_latency_seconds", "Time a send processor ran.",
            ["request", "response"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self.pull_latency = Histogram(
            "tidemq_broker_pull_latency_seconds", "Time a pull processor ran.",
            ["request", "response"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self.collector = BrokerCollector(ctx, max_series=max_series)
        self.registry.register(self.collector)
        self._scraping = asyncio.Lock()

    #: A meter: held requests evaluated again are not timed again.
    rewrites = False

    def wrap(self, code: int, proceed: _Processor) -> _Processor:
        """The pipeline interceptor (:mod:`tidemq.broker.pipeline`): every request --
        batch-protocol children included -- counted by its answer; sends and pulls
        timed."""
        histogram = (self.send_latency if code in SEND_CODES
                     else self.pull_latency if code in PULL_CODES else None)
        return _metered(proceed, _Meter(code, self.requests, histogram))

    def render(self) -> bytes:
        """Everything read now, on the caller's thread."""
        return generate_latest(self.registry)

    async def render_async(self) -> bytes:
        """What the HTTP endpoint serves: :meth:`render` but for the queues' and the
        groups' figures, gathered first as the module docstring says, and for the text,
        written on a thread from the figures collected."""
        async with self._scraping:
            self.collector.gathered = await self.collector.gather()
            try:
                families = list(self.registry.collect())
            finally:
                self.collector.gathered = None
        collected = CollectorRegistry(auto_describe=False)
        collected.register(_Collected(families))
        return await asyncio.to_thread(generate_latest, collected)


class _Collected(Collector):
    """Families collected already."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class BrokerCollector(Collector):
    """Reads the broker's state at scrape time."""

    def __init__(self, ctx: BrokerContext, *, max_series: int) -> None:
        self.ctx = ctx
        self.max_series = max_series
        #: Figures :meth:`gather` read for the next :meth:`collect` (else read then).
        self.gathered: _Gathered | None = None

    async def gather(self) -> _Gathered:
        """The queues' and the groups' figures: which of them a scrape reports is
        chosen on a thread, from a copy of the queues' keys (one C call) and the offsets
        table's keys read there a slice at a time
        (:meth:`~tidemq.broker.offsets.OffsetManager.first_keys`), and their figures
        read :data:`LAG_SLICE` at a time on the loop. A key deleted meanwhile is left
        out."""
        pairs = self.ctx.store.queues.queue_keys()
        first = await asyncio.to_thread(_first, self.max_series, self.ctx.offsets, pairs)
        reading = self._read(pairs, *first)
        while (gathered := next(reading)) is None:
            await asyncio.sleep(0)
        return gathered

    def _gather_now(self) -> _Gathered:
        """:meth:`gather` at once, on the caller's thread."""
        pairs = self.ctx.store.queues.queue_keys()
        reading = self._read(pairs, *_first(self.max_series, self.ctx.offsets, pairs))
        while (gathered := next(reading)) is None:
            pass
        return gathered

    def _read(self, pairs: list[tuple[str, int]], first_keys: list[str], keys: int,
              first_pairs: list[tuple[str, int]]) -> Iterator[_Gathered | None]:
        """The figures of the chosen queues and offset-table keys (of ``keys`` in the
        table), ``None`` after every
        :data:`LAG_SLICE` of them (a turn for the loop), then what was read."""
        now_ms = time.time() * 1000
        queues = []
        for i, (topic, qid) in enumerate(first_pairs):
            if i and not i % LAG_SLICE:
                yield None
            queues.append(self._queue_row(topic, qid))
        lag = []
        table = self.ctx.offsets.table
        for i, key in enumerate(first_keys):
            if i and not i % LAG_SLICE:
                yield None
            committed = table.get(key)
            if committed is not None:
                lag.append(self._lag_row(key, committed, now_ms))
        yield _Gathered(now_ms, queues, max(0, len(pairs) - self.max_series), lag,
                        max(0, keys - self.max_series))

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        dropped = GaugeMetricFamily("tidemq_broker_series_dropped",
                                    "Series left out of a labelled family (cardinality bound).",
                                    labels=["family"])
        gathered = self.gathered if self.gathered is not None else self._gather_now()
        yield from self._throughput(dropped)
        yield from self._store()
        yield from self._queues(gathered, dropped)
        yield from self._lag(gathered, dropped)
        yield from self._replication()
        yield _gauge("tidemq_broker_connections", "Open remoting connections.",
                     len(ctx.server.connections))
        yield _gauge("tidemq_broker_pull_held", "Pull requests held by long polling.",
                     ctx.holds.held_count)
        yield _gauge("tidemq_broker_topics", "Topics configured on this broker.",
                     len(ctx.topics.topics))
        yield dropped

    def _throughput(self, dropped: GaugeMetricFamily) -> Iterator[Metric]:
        ctx, stats = self.ctx, self.ctx.stats
        info = GaugeMetricFamily("tidemq_broker_info", "The broker (value 1).",
                                 labels=["broker", "cluster", "addr", "version"])
        info.add_metric([ctx.config.broker_name, ctx.config.broker_cluster_name,
                         ctx.broker_addr, VERSION], 1)
        yield info
        yield _counter("tidemq_broker_put_messages", "Messages stored.", stats.put_msgs.total)
        yield _counter("tidemq_broker_put_bytes", "Message bytes stored.", stats.put_bytes.total)
        yield _counter("tidemq_broker_get_messages", "Messages served to pulls.",
                       stats.get_msgs.total)
        yield _counter("tidemq_broker_get_bytes", "Message bytes served to pulls.",
                       stats.get_bytes.total)
        topic_put = CounterMetricFamily("tidemq_broker_topic_put_messages",
                                        "Messages stored, by topic.", labels=["topic"])
        for topic, meter in self._bounded(sorted(stats.topic_put.items()), "topic_put", dropped):
            topic_put.add_metric([topic], meter.total)
        yield topic_put
        group_get = CounterMetricFamily("tidemq_broker_group_get_messages",
                                        "Messages served to pulls, by consumer group.",
                                        labels=["group"])
        for group, meter in self._bounded(sorted(stats.group_get.items()), "group_get", dropped):
            group_get.add_metric([group], meter.total)
        yield group_get

    def _replication(self) -> Iterator[Metric]:
        replication = self.ctx.replication
        state = replication.role.state
        role = GaugeMetricFamily("tidemq_broker_role", "The broker's role (value 1).",
                                 labels=["role", "epoch"])
        role.add_metric([state.role.value, str(state.epoch)], 1)
        yield role
        refused = CounterMetricFamily("tidemq_broker_ha_refused",
                                      "HA connections refused before a byte of the log was "
                                      "sent, by reason.", labels=["reason"])
        for reason, count in sorted(replication.auth.refused.items()):
            refused.add_metric([reason], count)
        yield refused
        if replication.server is not None:
            lag = GaugeMetricFamily("tidemq_broker_replication_lag_bytes",
                                    "Commit-log bytes a replica does not hold yet.",
                                    labels=["replica"])
            age = GaugeMetricFamily("tidemq_broker_replication_lag_seconds",
                                    "Age of the oldest record a replica does not hold yet "
                                    "(0 when it holds them all).", labels=["replica"])
            rows = replication.server.replica_status(int(time.time() * 1000))
            for row in sorted(rows, key=lambda r: str(r["address"])):
                lag.add_metric([row["address"]], row["lagBytes"])
                if row["lagMs"] >= 0:  # -1: the record could not be read
                    age.add_metric([row["address"]], row["lagMs"] / 1000)
            yield lag
            yield age
            yield _gauge("tidemq_broker_replicas_in_sync",
                         "Replicas within haMaxGapNotInSync of the log's end.",
                         replication.server.in_sync())
        client = replication.client
        if client is not None and client.last_frame:
            yield _gauge("tidemq_broker_replica_frame_age_seconds",
                         "Seconds since this replica last heard from its master.",
                         time.monotonic() - client.last_frame)

    def _store(self) -> Iterator[Metric]:
        ctx, store = self.ctx, self.ctx.store
        behind, lag_ms = store.dispatch_lag()
        yield _gauge("tidemq_broker_dispatch_behind_bytes",
                     "Commit-log bytes not yet in the consume queues.", behind)
        yield _gauge("tidemq_broker_dispatch_lag_seconds",
                     "Age of the oldest record not yet dispatched (on a replica: since "
                     "it arrived).", lag_ms / 1000)
        flusher = store.flusher
        yield _gauge("tidemq_broker_flush_last_seconds", "Duration of the last commit-log flush.",
                     flusher.last_flush_ms / 1000 if flusher is not None else 0.0)
        yield _counter("tidemq_broker_flushes", "Commit-log flushes.",
                       flusher.flush_count if flusher is not None else 0)
        yield _counter("tidemq_broker_damaged_records_skipped",
                       "Damaged commit-log records a read skipped instead of serving.",
                       store.reader.damaged.skipped)
        yield _counter("tidemq_broker_retention_lost_messages",
                       "Messages forced retention deleted before any group consumed them.",
                       store.retention.unconsumed_deleted)
        half = ctx.transactions
        yield _gauge("tidemq_broker_transactions_open",
                     "Transactions prepared and not ended yet.", len(half.table))
        ended = CounterMetricFamily("tidemq_broker_transactions_ended",
                                    "Transactions ended: committed, rolled back, or "
                                    "discarded after transactionCheckMax check-backs.",
                                    labels=["outcome"])
        for outcome, count in (("commit", half.committed), ("rollback", half.rolled_back),
                               ("discard", half.discarded)):
            ended.add_metric([outcome], count)
        yield ended
        yield _gauge("tidemq_broker_commitlog_bytes", "Commit-log bytes retained.",
                     store.commitlog.max_offset - store.commitlog.min_offset)
        yield _gauge("tidemq_broker_disk_used_ratio", "Used fraction of the store's disk.",
                     disk_usage_ratio(str(ctx.layout.root)))
        healthy = GaugeMetricFamily("tidemq_broker_store_healthy",
                                    "1 while the store is RUNNING, else 0.", labels=["status"])
        healthy.add_metric([store.status], 1 if store.status == "RUNNING" else 0)
        yield healthy
        lmq = store.lmq
        figures = None if lmq is None else lmq.cached_stats()
        if figures is not None:
            queues, entries = figures
            yield _gauge("tidemq_broker_lmq_queues", "Light message queues.", queues)
            yield _gauge("tidemq_broker_lmq_entries", "Entries in light message queues.", entries)

    def _queues(self, gathered: _Gathered, dropped: GaugeMetricFamily) -> Iterator[Metric]:
        hi = GaugeMetricFamily("tidemq_broker_queue_max_offset",
                               "Next offset of a consume queue (its depth from 0).",
                               labels=["topic", "queue_id"])
        lo = GaugeMetricFamily("tidemq_broker_queue_min_offset",
                               "First offset still stored in a consume queue.",
                               labels=["topic", "queue_id"])
        if gathered.queues_dropped:
            dropped.add_metric(["queue_offset"], gathered.queues_dropped)
        for topic, qid, max_offset, min_offset in gathered.queues:
            hi.add_metric([topic, str(qid)], max_offset)
            lo.add_metric([topic, str(qid)], min_offset)
        yield hi
        yield lo

    def _queue_row(self, topic: str, qid: int) -> tuple[str, int, int, int]:
        store = self.ctx.store
        return topic, qid, store.max_offset(topic, qid), store.min_offset(topic, qid)

    def _lag(self, gathered: _Gathered, dropped: GaugeMetricFamily) -> Iterator[Metric]:
        labels = ["group", "topic"]
        lag = GaugeMetricFamily("tidemq_broker_consumer_lag_messages",
                                "Messages stored but not yet committed by a group "
                                "(sum over the topic's queues on this broker).", labels=labels)
        age = GaugeMetricFamily("tidemq_broker_consumer_lag_seconds",
                                "Seconds since the oldest message a group has not committed "
                                "was stored (0: caught up).", labels=labels)
        per_queue = self.ctx.config.metrics_queue_lag
        q_labels = [*labels, "queue_id"]
        q_lag = GaugeMetricFamily("tidemq_broker_consumer_queue_lag_messages",
                                  "A group's lag on one queue, in messages.", labels=q_labels)
        q_age = GaugeMetricFamily("tidemq_broker_consumer_queue_lag_seconds",
                                  "A group's lag on one queue, in seconds.", labels=q_labels)
        now_ms = gathered.now_ms
        if gathered.lag_dropped:
            dropped.add_metric(["consumer_lag"], gathered.lag_dropped)
        for row in gathered.lag:
            if per_queue:
                for qid, behind, stored in row.queues:
                    q_lag.add_metric([row.group, row.topic, str(qid)], behind)
                    q_age.add_metric([row.group, row.topic, str(qid)],
                                     max(0.0, now_ms - stored) / 1000)
            lag.add_metric([row.group, row.topic], row.total)
            age.add_metric([row.group, row.topic], max(0.0, now_ms - row.oldest_ms) / 1000)
        yield lag
        yield age
        if per_queue:
            yield q_lag
            yield q_age

    def _lag_row(self, key: str, queues: Mapping[int, int], now_ms: float) -> _LagRow:
        """One group's lag on one topic: summed over the queues it committed on and the
        topic's read queues."""
        topic, _, group = key.partition("@")
        tc = self.ctx.topics.get(topic)
        qids = set(queues) | (set(range(tc.read_queue_nums)) if tc is not None else set())
        total, oldest = 0, now_ms
        per_queue = []
        for qid in sorted(qids):
            behind, stored = self._queue_lag(topic, qid, queues.get(qid, 0), now_ms)
            total += behind
            oldest = min(oldest, stored)
            per_queue.append((qid, behind, stored))
        return _LagRow(group, topic, total, oldest, per_queue)

    def _queue_lag(self, topic: str, qid: int, committed: int, now_ms: float
                   ) -> tuple[int, float]:
        """Messages of one queue past ``committed``, and when the first of them was stored
        (``now_ms`` when there are none, or its record is gone)."""
        store = self.ctx.store
        behind = max(0, store.max_offset(topic, qid) - committed)
        if not behind:
            return 0, now_ms
        stored = store.store_time_at(topic, qid, max(committed, store.min_offset(topic, qid)))
        return behind, stored if stored > 0 else now_ms

    def _bounded(self, items: list[Any], family: str, dropped: GaugeMetricFamily) -> list[Any]:
        if len(items) > self.max_series:
            dropped.add_metric([family], len(items) - self.max_series)
            return items[: self.max_series]
        return items


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
