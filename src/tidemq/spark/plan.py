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

__all__ = ["DataLossError", "Offsets", "Range", "canon", "check_loss", "flatten", "nest",
           "prorate", "ranges"]

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


def resolve(spec: str | Offsets, queues: list[QueueKey], bounds: Mapping[QueueKey, tuple[int, int]],
            search: Callable[[QueueKey], int] | None = None) -> dict[QueueKey, int]:
    """Concrete offsets for ``spec`` (earliest, latest, JSON with -2/-1, or a timestamp
    search) over ``queues``; queues the JSON does not name start at their minimum."""
    given = flatten(spec) if isinstance(spec, dict) else {}
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


def ranges(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int],
           min_partitions: int | None = None) -> list[Range]:
    """One range per queue with data, split into more when ``min_partitions`` asks."""
    out = [Range(q, start.get(q, e), e) for q, e in sorted(end.items(), key=_order)
           if e > start.get(q, e)]
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
