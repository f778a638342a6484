"""The fastjson-tolerant reader: standard JSON as json reads it, object keys as rows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.fastjson import MAX_DEPTH, loads

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(json_values, st.booleans())
def test_standard_json_reads_as_json_reads_it(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    assert loads(text) == json.loads(text)
    assert loads(text.encode()) == json.loads(text)


queue_keys = st.fixed_dictionaries({"brokerName": st.text(max_size=5),
                                    "queueId": st.integers(0, 64), "topic": st.text(max_size=5)})
queue_infos = st.fixed_dictionaries({"commitOffset": st.integers(-1, 10**12),
                                     "cachedMsgCount": st.integers(0, 1000)})


@given(st.lists(st.tuples(queue_keys, queue_infos), max_size=5))
def test_a_map_keyed_by_objects_becomes_rows(entries: list[tuple[dict[str, Any],
                                                                 dict[str, Any]]]) -> None:
    table = ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in entries)
    body = '{"jstack":"","mqTable":{' + table + '},"properties":{"a":"1"}}'
    read = loads(body)
    expected: Any = [{**k, **v} for k, v in entries] if entries else {}
    assert read["mqTable"] == expected and read["properties"] == {"a": "1"}


def test_a_java_consumers_running_info() -> None:
    body = ('{"jstack":"","mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
            '{"cachedMsgCount":3,"commitOffset":17,"locked":false}},'
            '"properties":{"consumeType":"CONSUME_PASSIVELY"},'
            '"statusTable":{"T":{"pullRT":1.5,"consumeOKTPS":0.0}},'
            '"subscriptionSet":[{"topic":"T","subString":"*"}]}')
    read = loads(body)
    assert read["mqTable"] == [{"brokerName": "broker-a", "queueId": 0, "topic": "T",
                                "cachedMsgCount": 3, "commitOffset": 17, "locked": False}]
    assert read["statusTable"]["T"]["pullRT"] == 1.5


def test_bare_and_odd_keys() -> None:
    assert loads('{"brokerAddrs":{0:"10.0.0.1:10911",1:"x"}}') == {
        "brokerAddrs": {"0": "10.0.0.1:10911", "1": "x"}}
    assert loads('{[1,2]:"a"}') == [{"key": [1, 2], "value": "a"}]
    with pytest.raises(ValueError, match="map key"):
        loads('{true:1}')


@pytest.mark.parametrize(("text", "where"), [
    ('{"a":1', "position 6"), ('{"a" 1}', "position 5"), ("[1,]", "position 3"),
    ('{"a":1} x', "extra data at position 8"), ("nul", "position 0"), ("", "position 0"),
])
def test_what_is_not_json_says_where(text: str, where: str) -> None:
    with pytest.raises(ValueError, match=where):
        loads(text)


def test_nesting_is_bounded() -> None:
    loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(ValueError, match="nested deeper"):
        loads("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))


@pytest.mark.parametrize("body", ["[NaN]", '{"a": Infinity}', "-Infinity"])
def test_what_json_reads_beyond_the_standard_is_still_refused(body: str) -> None:
    with pytest.raises(ValueError):
        loads(body)


def test_nesting_just_within_the_reader_bound_reads() -> None:
    """Standard JSON nested deeper than the fast path checks goes to the reader, which
    takes one level more, as before."""
    assert loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)) is not None
