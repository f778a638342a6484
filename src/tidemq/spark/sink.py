"""The executor side of the sink: rows to messages through the blocking producer.

Row columns (all optional but ``body``):

==============  =========================================================================
column          becomes
==============  =========================================================================
body / value    the message body (binary, or a string sent as UTF-8); required, non-empty
topic           the target topic when the sink has no ``topic`` option (the option wins,
                as in Spark's Kafka sink, so a DataFrame read from one topic can be
                written to another as it is)
keys            the message keys (space separated)
key             Kafka's key (UTF-8 bytes or a string): the message keys, and also the
                sharding key, so rows with one key keep their order in one queue
tags            the ``TAGS`` property
properties      map<string,string> of user properties; broker-internal ones (``UNIQ_KEY``,
/ headers       ``CLUSTER``, ``MIN_OFFSET``, ``INNER_*``, ...) are dropped; Kafka's
                headers (``array<struct<key,value>>``, UTF-8 values) likewise
sharding_key    messages with the same key go to the same queue, in order (sent one by
/ partition     one); rows without one are sent in batches of up to ``BATCH_ROWS``;
                Kafka's ``partition`` is a sharding key (the same number, the same queue)
==============  =========================================================================

The column types are checked when the write is planned
(:func:`tidemq.spark.schemas.check_sink_schema`); other columns are ignored.

Every message gets a **dedup key** in a property of its own, ``SPARK_DEDUP_KEY``
(the message keys stay the user's): ``spark:<queryId>:<batchId>:<partition>:<row>`` in a
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

__all__ = ["BATCH_ROWS", "DEDUP_PROPERTY", "INTERNAL_PROPERTIES", "dedup_prefix", "send_rows",
           "sharding_key"]

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


def _text(name: str, value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"a row's {name} is not UTF-8") from None
    return str(value)


def _user_properties(data: dict[str, Any]) -> dict[str, str]:
    pairs: list[tuple[Any, Any]] = list((data.get("properties") or {}).items())
    for header in data.get("headers") or ():
        item = header.asDict() if hasattr(header, "asDict") else dict(header)
        pairs.append((item.get("key"), item.get("value")))
    return {str(k): _text(f"header {k}", v) for k, v in pairs
            if k and k not in INTERNAL_PROPERTIES and v is not None}


def sharding_key(data: dict[str, Any]) -> str | None:
    """The row's sharding key: ``sharding_key``, Kafka's ``partition``, else its ``key``."""
    if data.get("sharding_key") is not None:
        return str(data["sharding_key"])
    if data.get("partition") is not None:
        return f"partition:{data['partition']}"
    if data.get("key") is not None:
        return _text("key", data["key"])
    return None


def _message(opts: SinkOptions, data: dict[str, Any], dedup: str) -> Message:
    topic = opts.topic or data.get("topic")
    if not topic:
        raise ValueError("a row has no topic column and the sink has no topic option")
    body = data.get("body", data.get("value"))
    if body is None:
        raise ValueError("a row's body (value) is null")
    if isinstance(body, str):
        body = body.encode("utf-8")
    props = _user_properties(data)
    keys = data.get("keys", data.get("key"))
    if keys:
        props[PropertyKey.KEYS] = _text("key", keys)
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
            sharding = sharding_key(data)
            if sharding is not None:
                producer.send(msg, sharding_key=sharding)
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
