"""Option parsing: Kafka's names as aliases, Kafka-only options answered with the TideMQ
name, the new options' forms and contradictions."""

from __future__ import annotations

import pytest

from tidemq.spark.options import SourceOptionError, parse_sink_options, parse_source_options

NS = {"namesrv": "127.0.0.1:9876"}


def test_kafka_aliases_mean_the_tidemq_options() -> None:
    opts = parse_source_options({**NS, "subscribe": "a, b"}, streaming=False)
    assert opts.topics == ("a", "b")
    opts = parse_source_options({**NS, "subscribePattern": "ord.*"}, streaming=True)
    assert opts.topic_pattern == "ord.*"
    opts = parse_source_options({**NS, "assign": '{"a": [0, "broker-b:1"]}'},
                                streaming=False)
    assert opts.topics == ("a",) and opts.assign == {"a": ("0", "broker-b:1")}
    opts = parse_source_options(
        {**NS, "topic": "a", "startingOffsetsByTimestamp": '{"a": {"0": 1700000000000}}',
         "endingOffsetsByTimestamp": '{"a": {"broker-a:0": -1}}',
         "maxRecordsPerPartition": "500", "schema": "kafka", "includeHeaders": "true"},
        streaming=False)
    assert opts.starting_by_timestamp == {"a": {"0": 1700000000000}}
    assert opts.ending_by_timestamp == {"a": {"broker-a:0": -1}}
    assert opts.max_records_per_partition == 500
    assert (opts.schema, opts.include_headers) == ("kafka", True)
    opts = parse_source_options({**NS, "topic": "a", "minOffsetsPerTrigger": "100",
                                 "maxTriggerDelay": "30s"}, streaming=True)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (100, 30_000)
    assert parse_source_options({**NS, "topic": "a"}, streaming=True).max_trigger_delay_ms \
        == 15 * 60_000  # Kafka's default


@pytest.mark.parametrize(("option", "hint"), [
    ("kafka.bootstrap.servers", "use namesrv"),
    ("kafka.group.id", "use group"),
    ("groupIdPrefix", "use group"),
    ("kafka.ssl.truststore.location", "use tlsTrustCertPath"),
    ("kafka.max.poll.records", "Kafka client settings have no TideMQ equivalent"),
])
def test_kafka_only_options_name_what_to_use(option: str, hint: str) -> None:
    with pytest.raises(SourceOptionError, match=f"is a Kafka option; {hint}"):
        parse_source_options({**NS, "topic": "a", option: "x"}, streaming=False)
    with pytest.raises(SourceOptionError, match="is a Kafka option"):
        parse_sink_options({**NS, option: "x"})


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "topics": "b"}, "means the same as topics"),
    ({"subscribe": "a", "topic": "b"}, "exactly one of topic"),
    ({"assign": "[0]"}, "assign"),
    ({"assign": '{"a": [true]}'}, "neither a partition number"),
    ({"topic": "a", "startingTimestamp": "5", "startingOffsetsByTimestamp": '{"a":{}}'},
     "contradicts"),
    ({"topic": "a", "minOffsetsPerTrigger": "5"}, "streaming reads only"),
    ({"topic": "a", "schema": "avro"}, "expected tidemq or kafka"),
    ({"topic": "a", "includeHeaders": "true"}, "applies to schema=kafka"),
    ({"topic": "a", "endingOffsetsByTimestamp": "soon"}, "expected JSON like"),
])
def test_bad_kafka_style_options_fail_naming_the_option(
        options: dict[str, str], message: str) -> None:
    with pytest.raises(SourceOptionError, match=message):
        parse_source_options({**NS, **options}, streaming=False)


def test_max_trigger_delay_forms() -> None:
    for text, ms in (("15m", 900_000), ("2h", 7_200_000), ("250ms", 250), ("10", 10)):
        opts = parse_source_options({**NS, "topic": "a", "maxTriggerDelay": text},
                                    streaming=True)
        assert opts.max_trigger_delay_ms == ms
    with pytest.raises(SourceOptionError, match="maxTriggerDelay"):
        parse_source_options({**NS, "topic": "a", "maxTriggerDelay": "soon"}, streaming=True)


def test_the_sink_takes_the_schema_option_of_a_shared_option_map() -> None:
    assert parse_sink_options({**NS, "topic": "t", "schema": "kafka"}).topic == "t"
    with pytest.raises(SourceOptionError, match="expected tidemq or kafka"):
        parse_sink_options({**NS, "schema": "avro"})


def test_a_misspelt_option_is_answered_with_the_closest_one() -> None:
    with pytest.raises(SourceOptionError,
                       match="'topik': unknown option; did you mean 'topic'\\? known: "
                             "accesskey, assign, "):
        parse_source_options({**NS, "topik": "Orders"}, streaming=False)
    with pytest.raises(SourceOptionError, match="unknown sink option; known: "):
        parse_sink_options({**NS, "topic": "T", "zzzzzz": "1"})
