"""The executor side of the sink: rows to messages through the blocking producer.

Row columns used (all optional but ``body``): ``topic`` (else the ``topic`` option),
``body`` (binary or string), ``keys``, ``tags``, ``properties`` (map), ``queue`` (queue id),
``sharding_key``. Rows go out in batches of one topic and queue where possible.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tidemq.client.blocking import BlockingProducer
from tidemq.spark.options import SinkOptions
from tidemq.types import Message

__all__ = ["send_rows"]


def _context() -> tuple[str, str, int]:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
    except ImportError:  # pragma: no cover - always installed with the spark extra
        tc = None
    if tc is None:
        return "batch", "0", 0
    qid = tc.getLocalProperty("sql.streaming.queryId") or "batch"
    bid = tc.getLocalProperty("streaming.sql.batchId") or "0"
    return qid, bid, tc.partitionId()


def _message(opts: SinkOptions, row: Any, dedup: str) -> Message:
    data = row.asDict() if hasattr(row, "asDict") else dict(row)
    topic = data.get("topic") or opts.topic
    if not topic:
        raise ValueError("a row has no topic column and the sink has no topic option")
    body = data.get("body")
    if body is None:
        raise ValueError("a row has no body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    props = {str(k): str(v) for k, v in (data.get("properties") or {}).items()}
    keys = " ".join(k for k in (str(data["keys"]) if data.get("keys") else "", dedup) if k)
    props["KEYS"] = keys
    if data.get("tags"):
        props["TAGS"] = str(data["tags"])
    return Message(topic, bytes(body), props)


def send_rows(opts: SinkOptions, rows: Iterator[Any]) -> tuple[int, int]:
    query_id, batch_id, partition = _context()
    n = 0
    with BlockingProducer(opts.producer_group, opts.namesrv) as producer:
        for row in rows:
            dedup = f"spark:{query_id}:{batch_id}:{partition}:{n}"
            msg = _message(opts, row, dedup)
            msg.properties["SPARK_QUERY_ID"] = query_id
            msg.properties["SPARK_BATCH_ID"] = batch_id
            data = row.asDict() if hasattr(row, "asDict") else {}
            producer.send(msg, sharding_key=data.get("sharding_key"))
            n += 1
    return n, partition
