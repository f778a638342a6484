"""The executor side of the source: one queue's ``[start, end)`` as Arrow record batches.

Runs in Spark's Python workers with nothing but what the partition carries (the options
and the range). Pulls go through :meth:`ClusterAccess.pull_body`; each body is decoded by
the columnar decoder (:func:`tidemq.client.records.decode_columns`, or
:func:`~tidemq.client.records.decode_entry_columns` for inner batches, then
:func:`tidemq.spark.rows.columns_to_batch`) and, when a record needs the general decoder
or the read is of an LMQ, by :func:`~tidemq.client.records.decode_messages` then
:func:`~tidemq.spark.rows.to_batch`. Rows outside the range (an inner batch starts
before it, the last pull runs past it) and rows whose tag the expression does not name
(the broker filters by tag hash only) are dropped. Consecutive pulls are joined into
batches of at least ``MIN_BATCH_ROWS`` rows: the JVM pays per batch.

Allocator: a pull response is megabytes (``pullBatchSize`` messages), received, framed and
copied by the blocking client. glibc serves such sizes with a fresh ``mmap`` each time,
and faulting those pages in costs more kernel time than everything else on this path,
many times what reusing the heap costs. :func:`tune_allocator` therefore raises the
executor process's mmap and trim thresholds once (``mallopt``; glibc only, a no-op
elsewhere). The Python workers exist to run Spark tasks, so the process-wide setting is
theirs to choose.

``failOnDataLoss``: when retention moved the queue's minimum past the read position (the
broker answers with a minimum above it), the read fails (``true``) with
:class:`DataLossError` naming the lost offsets, or skips to the minimum (``false``).
"""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from tidemq.client.records import (
    EntryColumns,
    RecordColumns,
    decode_columns,
    decode_entry_columns,
    decode_messages,
)
from tidemq.client.subscription import Subscription
from tidemq.spark.access import ClusterAccess, QueueKey
from tidemq.spark.options import SourceOptions
from tidemq.spark.plan import DataLossError
from tidemq.spark.rows import columns_to_batch, to_batch, to_kafka
from tidemq.types import PullStatus

__all__ = ["MIN_BATCH_ROWS", "read_range", "tune_allocator"]

log = logging.getLogger(__name__)

MIN_BATCH_ROWS = 32_768

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_tuned = False


def tune_allocator() -> bool:
    """Keep buffers of up to 32 MiB on the heap and up to 64 MiB of free heap mapped (see
    the module docstring); once per process. ``True`` if glibc accepted both."""
    global _tuned
    if _tuned:
        return True
    _tuned = True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 64 << 20))


def _decode(body: bytes, q: QueueKey, lmq: str | None) -> pa.RecordBatch:
    cols: RecordColumns | EntryColumns | None = None
    if lmq is None:  # an empty RecordColumns is falsy: test for None, not truth
        cols = decode_columns(body)
        if cols is None:
            cols = decode_entry_columns(body)
    if cols is not None:
        return columns_to_batch(cols, q.topic, q.broker, q.queue_id)
    return to_batch(decode_messages(body), q.topic, q.broker, q.queue_id, lmq)


def _trim(batch: pa.RecordBatch, start: int, end: int,
          tags: frozenset[str]) -> pa.RecordBatch:
    offsets = batch.column("offset")
    bounds = pc.min_max(offsets).as_py() if batch.num_rows else {"min": start, "max": start}
    keep = None
    if bounds["min"] < start or bounds["max"] >= end:
        keep = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
    if tags:
        wanted = pc.fill_null(pc.is_in(batch.column("tags"), pa.array(sorted(tags))), False)
        keep = wanted if keep is None else pc.and_(keep, wanted)
    return batch if keep is None else batch.filter(keep)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def read_range(opts: SourceOptions, q: QueueKey, start: int, end: int, partition: int = 0
               ) -> Iterator[pa.RecordBatch]:
    """Rows of ``q`` with offsets in ``[start, end)`` (see the module docstring), in
    the Kafka schema (partition number ``partition``) when the options ask for it."""
    batches = _read_range(opts, q, start, end)
    if opts.schema != "kafka":
        return batches
    return (to_kafka(b, partition, opts.include_headers) for b in batches)


def _read_range(opts: SourceOptions, q: QueueKey, start: int, end: int
                ) -> Iterator[pa.RecordBatch]:
    tune_allocator()
    lmq = q.topic if opts.is_lmq else None
    tags = Subscription.parse(q.topic, opts.tags).tags
    access = ClusterAccess(opts)
    pending: list[pa.RecordBatch] = []
    rows = 0
    try:
        offset = start
        while offset < end:
            pulled = access.pull_body(q, offset, min(opts.pull_batch_size, end - offset))
            if pulled.status is PullStatus.FOUND and pulled.body:
                batch = _trim(_decode(pulled.body, q, lmq), offset, end, tags)
                if batch.num_rows:
                    pending.append(batch)
                    rows += batch.num_rows
                if rows >= MIN_BATCH_ROWS:
                    yield _joined(pending)
                    pending, rows = [], 0
            if pulled.min_offset > offset:  # retention removed [offset, min)
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{q.topic} {q.broker}:{q.queue_id}: offsets {offset}.."
                        f"{pulled.min_offset - 1} of the range {start}..{end} are no longer "
                        f"available (retention; the queue now starts at {pulled.min_offset})."
                        " Set failOnDataLoss=false to skip lost offsets.")
                log.warning("%s %s:%d: offsets %d..%d are gone (retention); skipping them "
                            "(failOnDataLoss=false)", q.topic, q.broker, q.queue_id, offset,
                            pulled.min_offset - 1)
                offset = pulled.min_offset
                continue
            if pulled.next_offset <= offset:
                raise DataLossError(
                    f"{q.topic} {q.broker}:{q.queue_id}: no progress at offset {offset} "
                    f"(status {pulled.status.value}, queue {pulled.min_offset}.."
                    f"{pulled.max_offset}); data below the range end {end} is missing")
            offset = pulled.next_offset
        if pending:
            yield _joined(pending)
    finally:
        access.close()
