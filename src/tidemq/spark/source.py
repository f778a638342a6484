"""The ``tidemq`` PySpark data source: batch and streaming reads, batch and streaming
writes. pyspark is imported only in this package (import-linter contract).

Where things run (specs/pyspark.md §2): planning methods (``partitions``,
``latestOffset``, ``initialOffset``) run in a long-lived driver-side process per query;
``read`` runs on executors with nothing but the pickled :class:`QueueRange`, so every
range carries what it needs. The checkpoint, not ``commit``, is the record of progress;
``commit`` stores the group's offsets on the brokers (best effort) so ``consumerProgress``
shows a Spark job's lag.

Sink semantics: **at-least-once**. Each row becomes a message sent by the executor's
producer; a replayed micro-batch sends its rows again. Every message carries the key
``spark:<queryId>:<batchId>:<partition>:<row>`` (and properties ``SPARK_QUERY_ID``,
``SPARK_BATCH_ID``) so a consumer can drop replays. An honest exactly-once sink would
need the broker to keep (query id, batch id) atomically with the published messages,
which TideMQ does not yet offer.
"""

from __future__ import annotations

import dataclasses
import logging
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
    canon,
    check_loss,
    flatten,
    nest,
    prorate,
    ranges,
    resolve,
)
from tidemq.spark.rows import DDL, LMQ_DDL, to_batch
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


def _read(p: QueueRange) -> Iterator[Any]:
    access = ClusterAccess(p.options)
    q = QueueKey(p.topic, p.broker, p.queue_id)
    lmq = p.topic if p.options.is_lmq else None
    try:
        offset = p.start
        while offset < p.end:
            want = min(p.options.pull_batch_size, p.end - offset)
            result = access.pull(q, offset, want)
            msgs = result.messages
            if lmq is None:
                msgs = [m for m in msgs if m.queue_offset < p.end]
            batch = to_batch(msgs, p.topic, p.broker, p.queue_id, lmq)
            if lmq is not None:
                batch = batch.filter(_below(batch, p.end))
            if batch.num_rows:
                yield batch
            if result.next_offset <= offset:
                if result.min_offset > offset and not p.options.fail_on_data_loss:
                    offset = result.min_offset  # retention moved it; skip (failOnDataLoss)
                    continue
                raise RuntimeError(
                    f"{p.topic} {p.broker}:{p.queue_id}: no progress at offset {offset} "
                    f"(status {result.status.value}, queue {result.min_offset}.."
                    f"{result.max_offset}); data below the range end {p.end} is missing")
            offset = result.next_offset
    finally:
        access.close()


def _below(batch: Any, end: int) -> Any:
    import pyarrow.compute as pc

    return pc.less(batch.column("offset"), end)


class _Planner:
    """Driver-side helpers shared by the batch and stream readers."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._access: ClusterAccess | None = None

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
        return queues, self.access.bounds(queues)

    def start_offsets(self) -> dict[QueueKey, int]:
        queues, bounds = self.queues_and_bounds()
        ts = self.opts.starting_timestamp
        search = (lambda q: self.access.search(q, ts)) if ts is not None else None
        start = resolve(self.opts.starting, queues, bounds, search)
        return check_loss(start, bounds, fail=self.opts.fail_on_data_loss)

    def end_offsets(self) -> dict[QueueKey, int]:
        queues, bounds = self.queues_and_bounds()
        ts = self.opts.ending_timestamp
        search = (lambda q: self.access.search(q, ts)) if ts is not None else None
        return resolve(self.opts.ending if search is None else "latest", queues, bounds, search)

    def partitions(self, start: dict[QueueKey, int], end: dict[QueueKey, int]
                   ) -> list[QueueRange]:
        return [QueueRange(r.queue.topic, r.queue.broker, r.queue.queue_id, r.start, r.end,
                           self.opts)
                for r in ranges(start, end, self.opts.min_partitions)]


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
        assert isinstance(partition, QueueRange)
        return _read(partition)


class TideMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = _Planner(opts)
        self._initial: Offsets | None = None
        self._target: dict[QueueKey, int] | None = None

    def initialOffset(self) -> Offsets:  # noqa: N802 - the pyspark API
        if self._initial is None:  # called twice by Spark: memoise (pyspark.md §2)
            self._initial = nest(self.planner.start_offsets())
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        m = self.opts.max_offsets_per_trigger
        return ReadMaxRows(m) if m else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self.planner.end_offsets()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        begin = flatten(start)
        if self._target is not None:
            ends = dict(self._target)
        else:
            _queues, bounds = self.planner.queues_and_bounds()
            ends = {q: hi for q, (_lo, hi) in bounds.items()}
        for q in begin:  # a queue never goes backwards, and never disappears
            ends[q] = max(ends.get(q, begin[q]), begin[q])
        for q in ends:  # new queues start at their beginning
            begin.setdefault(q, 0)
        if isinstance(limit, ReadMaxRows):
            ends = prorate(begin, ends, limit.max_rows)
        return nest(ends)

    def reportLatestOffset(self) -> Offsets:  # noqa: N802
        _queues, bounds = self.planner.queues_and_bounds()
        return nest({q: hi for q, (_lo, hi) in bounds.items()})

    def partitions(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        begin = flatten(start)
        _queues, bounds = self.planner.queues_and_bounds()
        begin = check_loss({q: begin.get(q, 0) for q in flatten(end)},
                           {q: bounds.get(q, (0, 0)) for q in flatten(end)},
                           fail=self.opts.fail_on_data_loss)
        return self.planner.partitions(begin, flatten(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange)
        return _read(partition)

    def commit(self, end: Offsets) -> None:
        """Best effort: store the group's offsets so the job's lag is visible."""
        try:
            for q, off in flatten(end).items():
                self.planner.access.commit(q, off)
        except Exception as exc:
            log.info("storing the Spark job's offsets on the brokers failed: %s", exc)

    def stop(self) -> None:
        self.planner.close()


@dataclasses.dataclass
class SentMessage(WriterCommitMessage):
    rows: int
    partition: int


class TideMQWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, rows: Iterator[Any]) -> SentMessage:
        n, part = send_rows(self.opts, rows)
        return SentMessage(n, part)


class TideMQStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, rows: Iterator[Any]) -> SentMessage:
        n, part = send_rows(self.opts, rows)
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

    def schema(self) -> str:
        return LMQ_DDL if "lmq" in {k.lower() for k in self.options} else DDL

    def reader(self, schema: Any) -> TideMQBatchReader:
        return TideMQBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> TideMQStreamReader:  # noqa: N802
        return TideMQStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> TideMQWriter:
        return TideMQWriter(parse_sink_options(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> TideMQStreamWriter:  # noqa: N802
        return TideMQStreamWriter(parse_sink_options(self.options))


_ = canon  # re-exported helpers for tests
