"""decode_send_fields (the send processor's read of a header without the schema) against
the header schema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.codec.command import RequestCode
from tidemq.codec.headers import (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    decode_send_fields,
    decode_send_header,
    py_decode_send_fields,
)
from tidemq.errors import RemoteProtocolError

_NUMBERS = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["", "+1", "-0", "007", " 1", "1 ", "1_0", "\u0661", "0x1", "9" * 9, "9" * 10,
                     "9" * 18, "9" * 19, "2147483647", "2147483648", "9223372036854775807",
                     "9223372036854775808"]),
    st.text(max_size=4),
)
_FIELDS = ["producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id",
           "sys_flag", "born_timestamp", "flag", "properties", "reconsume_times",
           "max_reconsume_times", "batch"]
_STRINGS = {"producer_group", "topic", "default_topic", "properties"}


@st.composite
def exts(draw: st.DrawFn, v2: bool) -> dict[str, str]:
    schema = SendMessageRequestHeaderV2 if v2 else SendMessageRequestHeader
    keys = schema.ext_keys()
    ext: dict[str, str] = {}
    for name in _FIELDS:
        if draw(st.integers(0, 12)) == 0:
            continue
        if name in _STRINGS:
            ext[keys[name]] = draw(st.text(max_size=8))
        elif name == "batch":
            ext[keys[name]] = draw(st.sampled_from(["true", "TRUE", "1", "0", "false", "x"]))
        elif draw(st.integers(0, 2)):
            ext[keys[name]] = str(draw(st.integers(0, 2**31 - 1)))
        else:
            ext[keys[name]] = draw(_NUMBERS)
    if draw(st.booleans()):
        ext["bname"] = "broker-a"
    return ext


@settings(max_examples=500, deadline=None)
@given(data=st.data(), code=st.sampled_from([RequestCode.SEND_MESSAGE,
                                             RequestCode.SEND_MESSAGE_V2,
                                             RequestCode.SEND_BATCH_MESSAGE]))
def test_fields_are_the_schemas_or_none(data: st.DataObject, code: int) -> None:
    """SEND_BATCH_MESSAGE is read with ``batch=True``: the flag is not read, the rest is
    as for single sends."""
    batch = code == RequestCode.SEND_BATCH_MESSAGE
    ext = data.draw(exts(code != RequestCode.SEND_MESSAGE))
    fields = decode_send_fields(code, ext, batch=batch)
    try:
        h = decode_send_header(code, ext)
    except RemoteProtocolError:
        assert fields is None
        return
    if fields is None:
        return  # not the plain case: the caller takes the schema's answer
    if not batch:
        assert not h.batch
    assert fields == (h.topic, h.queue_id, h.sys_flag, h.born_timestamp, h.flag, h.properties,
                      h.reconsume_times or 0)


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
def test_a_java_style_header_is_read(code: int) -> None:
    h = SendMessageRequestHeader(
        producer_group="pg", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=3, sys_flag=0, born_timestamp=1763780000000, flag=7, properties="A\x01b\x02",
        reconsume_times=0, max_reconsume_times=16, batch=False)
    if code == RequestCode.SEND_MESSAGE_V2:
        ext = h.convert(SendMessageRequestHeaderV2).to_ext()
    else:
        ext = h.to_ext()
    assert decode_send_fields(code, ext) == ("T", 3, 0, 1763780000000, 7, "A\x01b\x02", 0)
    ext["m" if code == RequestCode.SEND_MESSAGE_V2 else "batch"] = "true"
    assert decode_send_fields(code, ext) is None


def test_a_batch_header_is_read_whatever_its_flag() -> None:
    h = SendMessageRequestHeaderV2(
        producer_group="pg", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=3, sys_flag=0, born_timestamp=1763780000000, flag=0, properties=None,
        batch=True)
    ext = h.to_ext()
    code = RequestCode.SEND_BATCH_MESSAGE
    assert decode_send_fields(code, ext) is None
    assert decode_send_fields(code, ext, batch=True) == ("T", 3, 0, 1763780000000, 0, None, 0)


def _compiled_fields() -> Any:
    return compiled().send_fields


@settings(max_examples=800, deadline=None)
@given(data=st.data(), code=st.sampled_from([RequestCode.SEND_MESSAGE,
                                             RequestCode.SEND_MESSAGE_V2,
                                             RequestCode.SEND_BATCH_MESSAGE]),
       batch=st.booleans())
def test_the_compiled_read_gives_the_twins_fields(data: st.DataObject, code: int,
                                                  batch: bool) -> None:
    """What the send processor runs (the compiled read of a dict) and the twin agree."""
    _compiled_fields()
    ext = data.draw(exts(code != RequestCode.SEND_MESSAGE))
    for name in data.draw(st.lists(st.sampled_from(sorted(ext) or ["x"]), max_size=2)):
        ext[name] = data.draw(st.sampled_from(["True", "tRUE", "\u0661", "01", "٣"]))
    assert decode_send_fields(code, ext, batch=batch) == py_decode_send_fields(
        code, ext, batch=batch)


def test_a_value_that_is_not_text_is_not_the_plain_case() -> None:
    compiled = _compiled_fields()
    h = SendMessageRequestHeaderV2(producer_group="G", topic="T", default_topic="TBW102",
                                   default_topic_queue_nums=4, queue_id=3, sys_flag=0,
                                   born_timestamp=1, flag=0)
    ext: dict[str, Any] = h.to_ext()
    names = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "m")
    assert compiled(names, ext, False) == ("T", 3, 0, 1, 0, None, 0)
    for key in ("b", "e", "i", "j", "m"):
        assert compiled(names, {**ext, key: 3}, False) is None
