"""The ``tidemq`` PySpark data source: batch and streaming reads, batch and streaming
writes. pyspark is imported only in this package (import-linter contract).

Where things run: planning methods (``partitions``,
``latestOffset``, ``initialOffset``) run in a long-lived driver-side process per query;
``read`` runs on executors with nothing but the pickled :class:`QueueRange`, so every
range carries what it needs (:mod:`tidemq.spark.ranges`).

Progress: the checkpoint, not the broker, is the record of what a query has read. As a
courtesy to monitoring, the stream reader also stores the consumer group's offsets on
the brokers (best effort, only queues that moved): in ``latestOffset`` for ``start``,
which Spark passes only once the batch ending there has run and been committed to the
checkpoint, and in ``commit``. So ``consumerProgress`` / the console's consumer view shows
a Spark job's lag with at most one trigger of delay.

Sink semantics: **at-least-once** (:mod:`tidemq.spark.sink`). Each row becomes a message
sent by the executor's producer; a replayed micro-batch sends its rows again, with the
same dedup key, so a consumer can drop replays. Exactly-once would need the broker to
keep (query id, batch id) atomically with the published messages, which TideMQ does not
offer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from tidemq.spark.access import ClusterAccess, QueueKey
from tidemq.spark.options import (
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from tidemq.spark.plan import (
    Offsets,
    check_ending,
    check_loss,
    delay_batch,
    flatten,
    named_queues,
    nest,
    partition_numbers,
    prorate,
    ranges,
    resolve,
)
from tidemq.spark.ranges import read_range
from tidemq.spark.schemas import (
    Field,
    check_read_schema,
    check_sink_schema,
    ddl,
    read_fields,
)
from tidemq.spark.sink import send_rows

__all__ = ["QueueRange", "TideMQDataSource"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class QueueRange(InputPartition):
    """One task: ``[start, end)`` of one queue, plus the options to reach it."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    options: SourceOptions
    partition: int = 0  # Kafka's partition number (schema=kafka)


def _read(p: InputPartition) -> Iterator[Any]:
    if not isinstance(p, QueueRange):  # Spark's stand-in when there is nothing to read
        return iter(())
    return read_range(p.options, QueueKey(p.topic, p.broker, p.queue_id), p.start, p.end,
                      p.partition)


def _fields(schema: Any) -> list[Field]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


class _Planner:
    """Driver-side helpers shared by the batch and stream readers."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._access: ClusterAccess | None = None
        self._numbers: dict[QueueKey, int] = {}

    @property
    def access(self) -> ClusterAccess:
        if self._access is None:
            self._access = ClusterAccess(self.opts)
        return self._access

    def close(self) -> None:
        if self._access is not None:
            self._access.close()
            self._access = None

    def queues_and_bounds(self) -> tuple[list[QueueKey], dict[QueueKey, tuple[int, int]]]:
        queues = self.access.queues()
        self._numbers = partition_numbers(queues)
        if self.opts.assign is not None:
            spec = {t: dict.fromkeys(keys, 0) for t, keys in self.opts.assign.items()}
            queues = sorted(named_queues("assign", spec, queues))
        return queues, self.access.bounds(queues)

    def _by_timestamp(self, option: str, stamps: dict[str, dict[str, int]],
                      queues: list[QueueKey], bounds: dict[QueueKey, tuple[int, int]],
                      default: str) -> dict[QueueKey, int]:
        """Kafka's ``*OffsetsByTimestamp``: a time per queue (-2/-1: earliest/latest);
        queues left out take ``default``."""
        given = named_queues(option, stamps, queues)
        out = resolve(default, queues, bounds)
        for q, ts in given.items():
            lo, hi = bounds[q]
            out[q] = lo if ts == -2 else hi if ts == -1 else self.access.search(q, ts)
        return out

    def start_offsets(self) -> dict[QueueKey, int]:
        queues, bounds = self.queues_and_bounds()
        if self.opts.starting_by_timestamp is not None:
            start = self._by_timestamp("startingOffsetsByTimestamp",
                                       self.opts.starting_by_timestamp, queues, bounds,
                                       "earliest")
        else:
            ts = self.opts.starting_timestamp
            search = (lambda q: self.access.search(q, ts)) if ts is not None else None
            start = resolve(self.opts.starting, queues, bounds, search)
        return check_loss(start, bounds, fail=self.opts.fail_on_data_loss)

    def end_offsets(self) -> dict[QueueKey, int]:
        queues, bounds = self.queues_and_bounds()
        if self.opts.ending_by_timestamp is not None:
            return self._by_timestamp("endingOffsetsByTimestamp",
                                      self.opts.ending_by_timestamp, queues, bounds, "latest")
        ts = self.opts.ending_timestamp
        if ts is not None:
            return resolve("latest", queues, bounds, lambda q: self.access.search(q, ts))
        if isinstance(self.opts.ending, dict):
            given = named_queues("endingOffsets", self.opts.ending, queues)
            check_ending("endingOffsets", {q: o for q, o in given.items() if o >= 0}, bounds)
        return resolve(self.opts.ending, queues, bounds, option="endingOffsets")

    def partitions(self, start: dict[QueueKey, int], end: dict[QueueKey, int]
                   ) -> list[QueueRange]:
        return [QueueRange(r.queue.topic, r.queue.broker, r.queue.queue_id, r.start, r.end,
                           self.opts, self._numbers.get(r.queue, r.queue.queue_id))
                for r in ranges(start, end, self.opts.min_partitions,
                                self.opts.max_records_per_partition)]


class TideMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRange]:
        planner = _Planner(self.opts)
        try:
            start = planner.start_offsets()
            end = planner.end_offsets()
            return planner.partitions(start, {q: max(e, start.get(q, e))
                                              for q, e in end.items()})
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class TideMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = _Planner(opts)
        self._initial: Offsets | None = None
        self._target: dict[QueueKey, int] | None = None
        self._stored: dict[QueueKey, int] = {}
        self._last_batch_ms = 0  # when latestOffset last let a batch through

    def initialOffset(self) -> Offsets:  # noqa: N802 - the pyspark API
        if self._initial is None:  # called twice by Spark: memoise
            self._initial = nest(self.planner.start_offsets())
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        m = self.opts.max_offsets_per_trigger
        return ReadMaxRows(m) if m else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self.planner.end_offsets()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        begin = flatten(start)
        self._store_progress(begin)  # start: the end of a batch that ran and was committed
        if self._target is not None:
            ends = dict(self._target)
        else:
            _queues, bounds = self.planner.queues_and_bounds()
            ends = {q: hi for q, (_lo, hi) in bounds.items()}
        for q in begin:  # a queue never goes backwards, and never disappears
            ends[q] = max(ends.get(q, begin[q]), begin[q])
        for q in ends:  # new queues start at their beginning
            begin.setdefault(q, 0)
        now = int(time.time() * 1000)
        if self._target is None and delay_batch(
                begin, ends, self.opts.min_offsets_per_trigger, now - self._last_batch_ms,
                self.opts.max_trigger_delay_ms):
            return start
        self._last_batch_ms = now
        if isinstance(limit, ReadMaxRows):
            ends = prorate(begin, ends, limit.max_rows)
        return nest(ends)

    def reportLatestOffset(self) -> Offsets:  # noqa: N802
        _queues, bounds = self.planner.queues_and_bounds()
        return nest({q: hi for q, (_lo, hi) in bounds.items()})

    def partitions(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        begin, ends = flatten(start), flatten(end)
        _queues, bounds = self.planner.queues_and_bounds()
        known = {q: bounds.get(q, (0, 0)) for q in ends}
        # A queue new since the start (a new topic of topicPattern) starts at its earliest.
        begin = check_loss({q: begin.get(q, known[q][0]) for q in ends}, known,
                           fail=self.opts.fail_on_data_loss)
        return self.planner.partitions(begin, ends)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: Offsets) -> None:
        """Best effort: store the group's offsets so the job's lag is visible."""
        self._store_progress(flatten(end))

    def _store_progress(self, offsets: dict[QueueKey, int]) -> None:
        """Store the group's offsets of the queues that moved (best effort, logged)."""
        if self.opts.is_lmq:
            return
        moved = {q: off for q, off in offsets.items() if self._stored.get(q) != off}
        if not moved:
            return
        try:
            self.planner.access.commit(moved)
            self._stored.update(moved)
        except Exception as exc:
            log.info("storing the Spark job's offsets on the brokers failed: %s", exc)

    def stop(self) -> None:
        self.planner.close()


@dataclasses.dataclass
class SentMessage(WriterCommitMessage):
    rows: int
    partition: int


class TideMQWriter(DataSourceWriter):
    """``DataFrame.write.format("tidemq")``; ``write_id`` is made on the driver, so every
    task (and every retry) of one write shares it (the dedup keys of the sink)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, rows: Iterator[Any]) -> SentMessage:
        n, part = send_rows(self.opts, rows, self.write_id)
        return SentMessage(n, part)


class TideMQStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("tidemq")``: at-least-once; see the module docstring."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, rows: Iterator[Any]) -> SentMessage:
        n, part = send_rows(self.opts, rows, self.write_id)
        return SentMessage(n, part)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        log.info("tidemq sink: batch %d published %d rows", batchId,
                 sum(m.rows for m in messages if m))

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        log.warning("tidemq sink: batch %d aborted; rows already sent stay (at-least-once)",
                    batchId)


class TideMQDataSource(DataSource):
    """``spark.read.format("tidemq")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "tidemq"

    def _served(self, opts: SourceOptions | None = None) -> tuple[Field, ...]:
        if opts is not None:
            return read_fields(opts.schema, lmq=opts.is_lmq, headers=opts.include_headers)
        raw = {k.lower(): str(v).strip().lower() for k, v in self.options.items()}
        return read_fields(raw.get("schema", "tidemq"), lmq="lmq" in raw,
                           headers=raw.get("includeheaders") == "true")

    def schema(self) -> str:
        return ddl(self._served())

    def _source(self, schema: Any, *, streaming: bool) -> SourceOptions:
        opts = parse_source_options(self.options, streaming=streaming)
        check_read_schema(_fields(schema), self._served(opts))
        return opts

    def _sink(self, schema: Any) -> SinkOptions:
        opts = parse_sink_options(self.options)
        check_sink_schema(_fields(schema), topic_option=opts.topic is not None)
        return opts

    def reader(self, schema: Any) -> TideMQBatchReader:
        return TideMQBatchReader(self._source(schema, streaming=False))

    def streamReader(self, schema: Any) -> TideMQStreamReader:  # noqa: N802
        return TideMQStreamReader(self._source(schema, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> TideMQWriter:
        return TideMQWriter(self._sink(schema))

    def streamWriter(self, schema: Any, overwrite: bool) -> TideMQStreamWriter:  # noqa: N802
        return TideMQStreamWriter(self._sink(schema))

