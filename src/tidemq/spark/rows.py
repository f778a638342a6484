"""Messages to Arrow record batches with the source's schema.

Columns are built as Python lists per column and converted once per batch, which keeps
the per-row work to appending to lists; inner batches arrive already unrolled (each
sub-message is its own row with its own offset).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from tidemq.types import MessageExt

__all__ = ["ARROW_SCHEMA", "DDL", "LMQ_ARROW_SCHEMA", "LMQ_DDL", "to_batch"]

DDL = ("topic string, queue int, broker string, offset long, msg_id string, keys string, "
       "tags string, body binary, properties map<string,string>, "
       "born_timestamp timestamp, store_timestamp timestamp")
LMQ_DDL = DDL + ", lmq string"

_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue", pa.int32()), ("broker", pa.string()),
    ("offset", pa.int64()), ("msg_id", pa.string()), ("keys", pa.string()),
    ("tags", pa.string()), ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("born_timestamp", _TS), ("store_timestamp", _TS),
])
LMQ_ARROW_SCHEMA = ARROW_SCHEMA.append(pa.field("lmq", pa.string()))


def to_batch(messages: Iterable[MessageExt], topic: str, broker: str, queue: int,
             lmq: str | None = None) -> pa.RecordBatch:
    msgs = list(messages)
    offsets = [m.queue_offset for m in msgs]
    if lmq is not None:
        offsets = [_lmq_offset(m, lmq) for m in msgs]
    n = len(msgs)
    cols: list[pa.Array] = [
        pa.array([topic if lmq is None else m.topic for m in msgs], pa.string()),
        pa.array([queue] * n, pa.int32()),
        pa.array([broker] * n, pa.string()),
        pa.array(offsets, pa.int64()),
        pa.array([m.msg_id for m in msgs], pa.string()),
        pa.array([m.properties.get("KEYS") for m in msgs], pa.string()),
        pa.array([m.properties.get("TAGS") for m in msgs], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([list(m.properties.items()) for m in msgs],
                 pa.map_(pa.string(), pa.string())),
        pa.array([m.born_timestamp * 1000 for m in msgs], pa.int64()).cast(_TS),
        pa.array([m.store_timestamp * 1000 for m in msgs], pa.int64()).cast(_TS),
    ]
    schema = ARROW_SCHEMA
    if lmq is not None:
        cols.append(pa.array([lmq] * n, pa.string()))
        schema = LMQ_ARROW_SCHEMA
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _lmq_offset(m: MessageExt, lmq: str) -> int:
    names = m.properties.get("INNER_MULTI_DISPATCH", "").split(",")
    offsets = m.properties.get("INNER_MULTI_QUEUE_OFFSET", "").split(",")
    try:
        return int(offsets[names.index(lmq)])
    except (ValueError, IndexError):
        return m.queue_offset
