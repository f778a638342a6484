"""The topic table encoded and decoded a slice at a time: the bytes of one
``encode_body`` and the value (or the error) of one ``decode_body``, whatever the
slices."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec import topic_table
from tidemq.codec.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    decode_body,
    encode_body,
)
from tidemq.codec.topic_table import decode_topics, encode_topics
from tidemq.errors import RemoteProtocolError

names = st.text(min_size=1, max_size=10)
configs = st.builds(
    lambda name, r, w, perm, tag, flag, order, attrs: TopicConfig(
        topic_name=name, read_queue_nums=r, write_queue_nums=w, perm=perm,
        topic_filter_type=tag, topic_sys_flag=flag, order=order, attributes=attrs),
    names, st.integers(0, 1024), st.integers(0, 1024), st.integers(0, 15),
    st.sampled_from(TopicFilterType), st.integers(0, 2**31 - 1), st.booleans(),
    st.dictionaries(names, st.text(max_size=8), max_size=3))
versions = st.builds(DataVersion, state_version=st.integers(0, 2**63 - 1),
                     timestamp=st.integers(0, 2**63 - 1), counter=st.integers(0, 2**63 - 1))
mapping = st.dictionaries(names, st.dictionaries(names, st.integers() | st.text(max_size=20),
                                                 max_size=2), max_size=2)
wrappers = st.builds(
    lambda table, version, info, detail, mapping_version: TopicConfigSerializeWrapper(
        topic_config_table={tc.topic_name: tc for tc in table}, data_version=version,
        topic_queue_mapping_info_map=info, topic_queue_mapping_detail_map=detail,
        mapping_data_version=mapping_version),
    st.lists(configs, max_size=30), versions, mapping, mapping, versions)
registrations = st.builds(
    lambda wrapper, filters: RegisterBrokerBody(topic_config_serialize_wrapper=wrapper,
                                                filter_server_list=filters),
    wrappers, st.lists(st.text(max_size=12), max_size=3))
bodies = wrappers | registrations


@given(body=bodies, slice_topics=st.integers(1, 40))
def test_the_slices_make_the_bytes_of_one_encoding(body: Any, slice_topics: int) -> None:
    assert encode_topics(body, slice_topics=slice_topics) == encode_body(body)


@given(body=bodies)
def test_the_split_decodes_what_one_decoding_does(body: Any) -> None:
    data = encode_body(body)
    assert decode_topics(data, type(body)) == decode_body(data, type(body)) == body


def _lenient(data: Any) -> Any:
    """What a Java or C++ writer may send instead: enum ordinals, numbers as text."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key == "topicFilterType":
                out[key] = list(TopicFilterType).index(TopicFilterType(value))
            elif key in ("readQueueNums", "perm"):
                out[key] = str(value)
            else:
                out[key] = _lenient(value)
        return out
    return data


@given(body=bodies, newline=st.booleans())
def test_a_lenient_body_decodes_as_one_decoding_does(body: Any, newline: bool) -> None:
    data = json.dumps(_lenient(json.loads(encode_body(body)))).encode() + b"\n" * newline
    assert decode_topics(data, type(body)) == decode_body(data, type(body)) == body


def _outcome(data: bytes, cls: Any) -> Any:
    try:
        return decode_body(data, cls)
    except RemoteProtocolError as exc:
        return str(exc)


def _split_outcome(data: bytes, cls: Any) -> Any:
    try:
        return decode_topics(data, cls)
    except RemoteProtocolError as exc:
        return str(exc)


@given(data=st.binary(max_size=60) | st.sampled_from([
    b'{"topicConfigTable":{"a":null}}', b'{"topicConfigTable":null}',
    b'{"topicConfigTable":{"a":{"readQueueNums":1}}}', b'{"topicConfigTable":[]}',
    b'{"topicConfigTable":{"a":{"topicName":"a","perm":"x"}}}', b'[]', b'{"dataVersion":1}',
    b'{"topicConfigTable":{"a":{"topicName":"a"}},"dataVersion":{"counter":"z"}}',
    b'{"topicConfigSerializeWrapper":null}', b'{"topicConfigSerializeWrapper":{'
    b'"topicConfigTable":{"a":{"topicName":"a","topicFilterType":7}}}}',
    b'{"topicConfigTable":{"a":{"topicName":"a","attributes":{1:"x"}}}}',
]), cls=st.sampled_from([TopicConfigSerializeWrapper, RegisterBrokerBody]))
def test_a_bad_body_fails_as_one_decoding_does(data: bytes, cls: Any) -> None:
    assert _split_outcome(data, cls) == _outcome(data, cls)


def slices_of_three(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Encodings of three topics a call; the topics of each call, in order."""
    seen: list[int] = []
    encode = topic_table.encode_value

    def counted(value: Any) -> bytes:
        seen.append(len(value))
        data: bytes = encode(value)
        return data

    monkeypatch.setattr(topic_table, "encode_value", counted)
    monkeypatch.setattr(topic_table, "SLICE", 3)
    return seen


def test_no_call_encodes_more_than_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {f"t{i}": TopicConfig(topic_name=f"t{i}") for i in range(7)}
    seen = slices_of_three(monkeypatch)
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(topic_config_table=table))
    assert encode_topics(body) == encode_body(body)
    assert seen == [3, 3, 1]


def test_each_topic_is_decoded_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {f"t{i}": TopicConfig(topic_name=f"t{i}") for i in range(4)}
    data = encode_body(TopicConfigSerializeWrapper(topic_config_table=table))
    sizes: list[int] = []
    decode = topic_table.decode_body

    def counted(raw: Any, cls: Any) -> Any:
        sizes.append(len(bytes(raw)))
        return decode(raw, cls)

    monkeypatch.setattr(topic_table, "decode_body", counted)
    assert decode_topics(data, TopicConfigSerializeWrapper).topic_config_table == table
    assert len(sizes) == 1 + len(table)  # the wrapper without its table, then each topic
    assert max(sizes) < len(data) / 2
    assert msgspec.json.decode(data)["topicConfigTable"].keys() == table.keys()
