"""The executor side of the sink: rows to messages through the blocking producer.

Row columns (all optional but ``body``):

==============  =========================================================================
column          becomes
==============  =========================================================================
body            the message body (binary, or a string sent as UTF-8); required, non-empty
topic           the target topic when the sink has no ``topic`` option (the option wins,
                as in Spark's Kafka sink, so a DataFrame read from one topic can be
                written to another as it is)
keys            the message keys (space separated), before the dedup key
tags            the ``TAGS`` property
properties      map<string,string> of user properties; broker-internal ones (``UNIQ_KEY``,
                ``CLUSTER``, ``MIN_OFFSET``, ``INNER_*``, ...) are dropped
sharding_key    messages with the same key go to the same queue, in order (sent one by
                one); rows without one are sent in batches of up to ``BATCH_ROWS``
==============  =========================================================================

Every message gets a **dedup key**, appended to its keys and also stored as the
``SPARK_DEDUP_KEY`` property: ``spark:<queryId>:<batchId>:<partition>:<row>`` in a
streaming query (also inside ``foreachBatch``), else ``spark:<writeId>:<partition>:<row>``
with one random ``writeId`` per ``DataFrame.write``. A replayed micro-batch or a retried
task sends the same rows again with the same keys, so consumers can drop the copies: the
sink is **at-least-once**, with the means to deduplicate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tidemq.client.blocking import BlockingProducer
from tidemq.formats.properties import PropertyKey
from tidemq.spark.options import SinkOptions
from tidemq.types import Message

__all__ = ["BATCH_ROWS", "DEDUP_PROPERTY", "INTERNAL_PROPERTIES", "dedup_prefix", "send_rows"]

BATCH_ROWS = 256
DEDUP_PROPERTY = "SPARK_DEDUP_KEY"
#: Properties the broker or the client sets; never copied from a ``properties`` column.
INTERNAL_PROPERTIES = frozenset({
    PropertyKey.UNIQ_KEY, PropertyKey.CLUSTER, PropertyKey.MIN_OFFSET,
    PropertyKey.MAX_OFFSET, PropertyKey.INNER_NUM, PropertyKey.INNER_BASE,
    PropertyKey.INNER_MULTI_DISPATCH, PropertyKey.INNER_MULTI_QUEUE_OFFSET,
    PropertyKey.REAL_TOPIC, PropertyKey.REAL_QID, PropertyKey.WAIT, PropertyKey.KEYS,
    PropertyKey.TAGS, "SPARK_QUERY_ID", "SPARK_BATCH_ID", DEDUP_PROPERTY,
})


def dedup_prefix(write_id: str) -> tuple[str, int]:
    """``(prefix, partition)`` of this task's dedup keys (see the module docstring)."""
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
    except ImportError:  # pragma: no cover - always installed with the spark extra
        tc = None
    if tc is None:
        return f"spark:{write_id}", 0
    query = tc.getLocalProperty("sql.streaming.queryId")
    batch = tc.getLocalProperty("streaming.sql.batchId")
    if query and batch:
        return f"spark:{query}:{batch}", tc.partitionId()
    return f"spark:{write_id}", tc.partitionId()


def _message(opts: SinkOptions, data: dict[str, Any], dedup: str) -> Message:
    topic = opts.topic or data.get("topic")
    if not topic:
        raise ValueError("a row has no topic column and the sink has no topic option")
    body = data.get("body")
    if body is None:
        raise ValueError("a row has no body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    props = {str(k): str(v) for k, v in (data.get("properties") or {}).items()
             if k not in INTERNAL_PROPERTIES and v is not None}
    user_keys = str(data["keys"]) if data.get("keys") else ""
    props[PropertyKey.KEYS] = f"{user_keys} {dedup}" if user_keys else dedup
    props[DEDUP_PROPERTY] = dedup
    if data.get("tags"):
        props[PropertyKey.TAGS] = str(data["tags"])
    return Message(str(topic), bytes(body), props)


def send_rows(opts: SinkOptions, rows: Iterator[Any], write_id: str) -> tuple[int, int]:
    """Send every row; returns ``(rows sent, partition)``."""
    prefix, partition = dedup_prefix(write_id)
    n = 0
    pending: list[Message] = []
    with BlockingProducer(opts.producer_group,
                          config=opts.client_config()) as producer:
        for row in rows:
            data = row.asDict() if hasattr(row, "asDict") else dict(row)
            msg = _message(opts, data, f"{prefix}:{partition}:{n}")
            n += 1
            sharding = data.get("sharding_key")
            if sharding is not None:
                producer.send(msg, sharding_key=str(sharding))
                continue
            if pending and pending[0].topic != msg.topic:
                producer.send_batch(pending)
                pending = []
            pending.append(msg)
            if len(pending) >= BATCH_ROWS:
                producer.send_batch(pending)
                pending = []
        if pending:
            producer.send_batch(pending)
    return n, partition
