"""Read schemas and the sink's input check, without a JVM."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tidemq.spark.options import SourceOptionError
from tidemq.spark.rows import ARROW_SCHEMA, KAFKA_ARROW_SCHEMA
from tidemq.spark.schemas import (
    KAFKA_FIELDS,
    TIDEMQ_FIELDS,
    check_read_schema,
    check_sink_schema,
    read_fields,
)

SPARK_OF_ARROW = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint",
                  pa.binary(): "binary", pa.timestamp("us", tz="UTC"): "timestamp",
                  pa.map_(pa.string(), pa.string()): "map<string,string>"}


def test_the_declared_columns_are_the_arrow_batches_columns() -> None:
    for fields, schema in ((TIDEMQ_FIELDS, ARROW_SCHEMA), (KAFKA_FIELDS, KAFKA_ARROW_SCHEMA)):
        assert [(f.name, SPARK_OF_ARROW[f.type]) for f in schema] == list(fields)


def test_a_read_schema_other_than_the_served_one_is_refused() -> None:
    check_read_schema(TIDEMQ_FIELDS, read_fields("tidemq"))
    with pytest.raises(SourceOptionError, match=r"'schema'.*select or cast columns"):
        check_read_schema([("body", "string")], read_fields("tidemq"))
    with pytest.raises(SourceOptionError, match=r"serves exactly"):
        check_read_schema(TIDEMQ_FIELDS, read_fields("kafka", headers=True))


@pytest.mark.parametrize(("fields", "topic", "message"), [
    ([("keys", "string")], True, "exactly one of the columns body"),
    ([("body", "binary"), ("value", "binary")], True, "exactly one of the columns body"),
    ([("body", "int")], True, "sink column body is int; expected binary or string"),
    ([("body", "binary"), ("properties", "map<string,int>")], True, "properties"),
    ([("body", "binary")], False, "no topic option and the input no topic column"),
    ([("value", "binary"), ("key", "binary"), ("keys", "string")], True, "not both"),
])
def test_sink_input_problems_are_named(fields: list[tuple[str, str]], topic: bool,
                                       message: str) -> None:
    with pytest.raises(SourceOptionError, match=message):
        check_sink_schema(fields, topic_option=topic)


def test_sink_accepts_either_family_and_ignores_other_columns() -> None:
    cols = check_sink_schema(TIDEMQ_FIELDS, topic_option=False)
    assert cols.body == "body"
    kafka = (*KAFKA_FIELDS, ("headers", "array<struct<key:string,value:binary>>"))
    assert check_sink_schema(kafka, topic_option=False).body == "value"
