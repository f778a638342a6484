"""Offset ranges for the Spark source: resolving start and end offsets, admission
control, splitting into partitions. Pure logic over plain dicts; no pyspark, no I/O.

Offsets travel through Spark as JSON ``{"topic": {"broker:queueId": offset}}``; Spark
compares offsets as serialised text, so :func:`canon` always produces the same key order
(topics, then brokers, then queue ids numerically).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import NamedTuple

from tidemq.spark.access import QueueKey, queue_key, split_key
from tidemq.spark.options import SourceOptionError

__all__ = ["DataLossError", "Offsets", "Range", "canon", "check_ending", "check_loss",
           "delay_batch", "flatten", "named_queues", "nest", "partition_numbers", "prorate",
           "ranges", "resolve"]

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]
EARLIEST = -2
LATEST = -1


class DataLossError(RuntimeError):
    """Offsets fell below a queue's minimum (retention removed them)."""


class Range(NamedTuple):
    queue: QueueKey
    start: int
    end: int  # exclusive


def _order(item: tuple[QueueKey, int]) -> tuple[str, str, int]:
    q = item[0]
    return q.topic, q.broker, q.queue_id


def nest(flat: Mapping[QueueKey, int]) -> Offsets:
    out: Offsets = {}
    for q, off in sorted(flat.items(), key=_order):
        out.setdefault(q.topic, {})[queue_key(q)] = int(off)
    return out


def flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[QueueKey, int]:
    return {split_key(topic, key): int(off)
            for topic, queues in offsets.items() for key, off in queues.items()}


def canon(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return nest(flatten(offsets))


def partition_numbers(queues: list[QueueKey]) -> dict[QueueKey, int]:
    """Kafka's partition number of each queue: its place among its topic's queues in
    (broker, queue id) order; on a single broker, the queue id."""
    out: dict[QueueKey, int] = {}
    seen: dict[str, int] = {}
    for q in sorted(queues, key=lambda q: (q.topic, q.broker, q.queue_id)):
        out[q] = seen.get(q.topic, 0)
        seen[q.topic] = out[q] + 1
    return out


def _listing(topic: str, queues: list[QueueKey]) -> str:
    keys = [queue_key(q) for q in queues if q.topic == topic]
    return f"{topic} has {len(keys)} queues: {', '.join(keys) or 'none'}"


def _queue_named(option: str, topic: str, key: str, queues: list[QueueKey],
                 numbers: Mapping[QueueKey, int]) -> QueueKey:
    """The queue ``key`` (``"broker:queueId"`` or a Kafka partition number) of ``topic``."""
    mine = [q for q in queues if q.topic == topic]
    if ":" not in key:
        try:
            number = int(key)
        except ValueError:
            raise SourceOptionError(option, f"{topic}: {key!r} is neither a broker:queueId "
                                    "key nor a partition number") from None
        for q in mine:
            if numbers[q] == number:
                return q
        raise SourceOptionError(option, f"{topic} has no partition {number}; its partitions "
                                f"are 0..{len(mine) - 1}")
    try:
        q = split_key(topic, key)
    except ValueError:
        raise SourceOptionError(option, f"{topic}: {key!r} is not a broker:queueId key; "
                                + _listing(topic, queues)) from None
    if q not in mine:
        brokers = sorted({m.broker for m in mine})
        what = (f"queue {key}" if q.broker in brokers
                else f"broker {q.broker!r} (brokers: {', '.join(brokers) or 'none'})")
        raise SourceOptionError(option, f"{topic} has no {what}; " + _listing(topic, queues))
    return q


def named_queues(option: str, spec: Mapping[str, Mapping[str, int]],
                 queues: list[QueueKey]) -> dict[QueueKey, int]:
    """``spec``'s values by queue; a topic, broker or queue that ``queues`` lacks fails,
    naming those that exist."""
    topics = sorted({q.topic for q in queues})
    numbers = partition_numbers(queues)
    out: dict[QueueKey, int] = {}
    for topic, entries in spec.items():
        if topic not in topics:
            raise SourceOptionError(option, f"names topic {topic!r}, which this read does not "
                                    f"cover; its topics: {', '.join(topics) or 'none'}")
        for key, value in entries.items():
            out[_queue_named(option, topic, key, queues, numbers)] = value
    return out


def check_ending(option: str, given: Mapping[QueueKey, int],
                 bounds: Mapping[QueueKey, tuple[int, int]]) -> None:
    """Refuse an explicit end beyond a queue's end: those rows do not exist yet."""
    for q, off in given.items():
        hi = bounds[q][1]
        if off > hi:
            raise SourceOptionError(
                option, f"{q.topic} {queue_key(q)}: {off} is beyond the queue's end {hi} "
                "(the next offset to be written); use -1 for the latest offset")


def resolve(spec: str | Offsets, queues: list[QueueKey], bounds: Mapping[QueueKey, tuple[int, int]],
            search: Callable[[QueueKey], int] | None = None, *,
            option: str = "startingOffsets") -> dict[QueueKey, int]:
    """Concrete offsets for ``spec`` (earliest, latest, JSON with -2/-1, or a timestamp
    search) over ``queues``; queues the JSON does not name start at their minimum, and
    a queue it names that is not in ``queues`` fails (:func:`named_queues`)."""
    given = named_queues(option, spec, queues) if isinstance(spec, dict) else {}
    out: dict[QueueKey, int] = {}
    for q in queues:
        lo, hi = bounds[q]
        if search is not None:
            out[q] = search(q)
        elif spec == "latest":
            out[q] = hi
        elif spec == "earliest":
            out[q] = lo
        else:
            off = given.get(q, EARLIEST)
            out[q] = lo if off == EARLIEST else hi if off == LATEST else off
    return out


def check_loss(start: dict[QueueKey, int], bounds: Mapping[QueueKey, tuple[int, int]], *,
               fail: bool) -> dict[QueueKey, int]:
    """Raise (``failOnDataLoss``) or move forward when a start is below the queue minimum."""
    out = dict(start)
    for q, off in start.items():
        lo = bounds[q][0]
        if off < lo:
            msg = (f"{q.topic} {queue_key(q)}: offsets {off}..{lo - 1} are no longer "
                   f"available (retention); the queue now starts at {lo}")
            if fail:
                raise DataLossError(msg + ". Set failOnDataLoss=false to skip them.")
            log.warning("%s; skipping them (failOnDataLoss=false)", msg)
            out[q] = lo
    return out


def prorate(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int],
            max_rows: int) -> dict[QueueKey, int]:
    """Kafka-style admission control: split ``max_rows`` over queues in proportion to
    what each has available; every queue with data moves by at least one row."""
    avail = {q: max(0, e - start.get(q, e)) for q, e in end.items()}
    total = sum(avail.values())
    if total <= max_rows:
        return dict(end)
    out = {}
    for q, e in end.items():
        s = start.get(q, e)
        if avail[q] == 0:
            out[q] = max(s, e) if q not in start else s
            continue
        share = max(1, int(avail[q] * max_rows / total))
        out[q] = min(e, s + share)
    return out


def delay_batch(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int],
                min_rows: int | None, waited_ms: int, max_delay_ms: int) -> bool:
    """``minOffsetsPerTrigger``: hold the next batch back while fewer than ``min_rows``
    rows wait, until ``max_delay_ms`` (``maxTriggerDelay``) passed since the last one."""
    if not min_rows or waited_ms >= max_delay_ms:
        return False
    return sum(max(0, e - start.get(q, e)) for q, e in end.items()) < min_rows


def ranges(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int],
           min_partitions: int | None = None,
           max_rows: int | None = None) -> list[Range]:
    """One range per queue with data, split into more when ``min_partitions`` asks, and
    into pieces of at most ``max_rows`` rows (``maxRecordsPerPartition``)."""
    out = [Range(q, start.get(q, e), e) for q, e in sorted(end.items(), key=_order)
           if e > start.get(q, e)]
    if max_rows:
        out = [Range(r.queue, s, min(r.end, s + max_rows))
               for r in out for s in range(r.start, r.end, max_rows)]
    if not min_partitions or len(out) >= min_partitions or not out:
        return out
    total = sum(r.end - r.start for r in out)
    split: list[Range] = []
    for r in out:
        pieces = max(1, round(min_partitions * (r.end - r.start) / total))
        step = -(-(r.end - r.start) // pieces)
        for s in range(r.start, r.end, step):
            split.append(Range(r.queue, s, min(r.end, s + step)))
    return split
