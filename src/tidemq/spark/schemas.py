"""The columns the ``tidemq`` data source reads and writes, and their checks at planning.

Two read schemas: ``tidemq`` (the default, every field of a message) and ``kafka``
(Spark's Kafka source columns, so a Kafka job's downstream code runs unchanged). A
user-given read schema must be one of them; anything else is refused before a task runs.
The sink accepts either family of columns and checks their types before a task runs.
Pure: fields are ``(name, Spark simpleString type)`` pairs, so this is tested without
a JVM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tidemq.spark.options import SourceOptionError

__all__ = ["KAFKA_FIELDS", "KAFKA_HEADERS", "LMQ_FIELDS", "TIDEMQ_FIELDS", "Field",
           "SinkColumns", "check_read_schema", "check_sink_schema", "ddl", "read_fields"]

Field = tuple[str, str]

TIDEMQ_FIELDS: tuple[Field, ...] = (
    ("topic", "string"), ("queue", "int"), ("broker", "string"), ("offset", "bigint"),
    ("msg_id", "string"), ("keys", "string"), ("tags", "string"), ("body", "binary"),
    ("properties", "map<string,string>"), ("born_timestamp", "timestamp"),
    ("store_timestamp", "timestamp"),
)
LMQ_FIELDS = (*TIDEMQ_FIELDS, ("lmq", "string"))
KAFKA_FIELDS: tuple[Field, ...] = (
    ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
    ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
)
KAFKA_HEADERS: Field = ("headers", "array<struct<key:string,value:binary>>")


def read_fields(kind: str, *, lmq: bool = False, headers: bool = False) -> tuple[Field, ...]:
    """The read schema ``kind`` (``tidemq`` or ``kafka``)."""
    if kind == "kafka":
        return (*KAFKA_FIELDS, KAFKA_HEADERS) if headers else KAFKA_FIELDS
    return LMQ_FIELDS if lmq else TIDEMQ_FIELDS


def ddl(fields: Sequence[Field]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in fields)


def _show(fields: Sequence[Field]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in fields)


def check_read_schema(given: Sequence[Field], served: Sequence[Field]) -> None:
    """Refuse a user-given read schema that differs from the one the options serve."""
    if list(given) == list(served):
        return
    raise SourceOptionError(
        "schema", f"the source serves exactly ({_show(served)}), not the given "
        f"({_show(given)}); select or cast columns after load(), or choose the column "
        "set with option schema=tidemq|kafka")


#: Accepted types of each sink column; columns not named here are ignored.
SINK_TYPES: dict[str, tuple[str, ...]] = {
    "body": ("binary", "string"),
    "value": ("binary", "string"),
    "topic": ("string",),
    "keys": ("string",),
    "key": ("binary", "string"),
    "tags": ("string",),
    "properties": ("map<string,string>",),
    "headers": ("array<struct<key:string,value:binary>>",
                "array<struct<key:string,value:string>>"),
    "sharding_key": ("string", "int", "bigint"),
    "partition": ("int",),
}


@dataclasses.dataclass(frozen=True)
class SinkColumns:
    """Which columns a sink's input has: ``body`` is ``body`` or Kafka's ``value``."""

    body: str
    names: frozenset[str]


def check_sink_schema(fields: Sequence[Field], *, topic_option: bool) -> SinkColumns:
    """The sink's input columns, or :class:`SourceOptionError` saying what is wrong."""
    types = dict(fields)
    for name, kind in fields:
        allowed = SINK_TYPES.get(name)
        if allowed is not None and kind not in allowed:
            raise SourceOptionError(
                name, f"sink column {name} is {kind}; expected {' or '.join(allowed)}")
    bodies = [name for name in ("body", "value") if name in types]
    if len(bodies) != 1:
        raise SourceOptionError(
            "body", "the sink needs exactly one of the columns body (tidemq) or value "
            f"(Kafka); the input has {_show(fields) or 'no columns'}")
    if "keys" in types and "key" in types:
        raise SourceOptionError("key", "give keys (tidemq) or key (Kafka), not both")
    if "properties" in types and "headers" in types:
        raise SourceOptionError("headers", "give properties (tidemq) or headers (Kafka), "
                                "not both")
    if "sharding_key" in types and "partition" in types:
        raise SourceOptionError("partition", "give sharding_key or partition, not both")
    if not topic_option and "topic" not in types:
        raise SourceOptionError("topic", "the sink has no topic option and the input no "
                                "topic column")
    return SinkColumns(bodies[0], frozenset(types))
