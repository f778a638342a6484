"""A topic config table (a TopicConfigSerializeWrapper, alone or in a REGISTER_BROKER
body) encoded and decoded a slice of its topics at a time.

msgspec encodes and decodes in C without letting another thread run: the table of
twenty thousand topics in one call holds the interpreter, and so the event loop, for
tens of milliseconds, however the call was moved to a thread. :func:`encode_topics`
gives the bytes of :func:`~tidemq.codec.bodies.encode_body` and :func:`decode_topics`
the value of :func:`~tidemq.codec.bodies.decode_body` (or its error), :data:`SLICE`
topics a C call.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from tidemq.codec.bodies import (
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_body,
    encode_body,
    encode_value,
)
from tidemq.errors import RemoteProtocolError

__all__ = ["SLICE", "decode_topics", "encode_topics"]

#: Topics one encoding call takes.
SLICE = 500

_Topics = TypeVar("_Topics", TopicConfigSerializeWrapper, RegisterBrokerBody)

#: The table's member as the encoding of a wrapper without topics has it: sorted
#: first among the wrapper's maps (``dataVersion`` and ``mappingDataVersion``, before it,
#: hold numbers only), so its first occurrence is the table's.
_EMPTY_TABLE = b'"topicConfigTable":{}'
_TABLE = "topicConfigTable"
_WRAPPER = "topicConfigSerializeWrapper"
#: A JSON object's members, each left undecoded.
_members = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _wrapper_of(body: TopicConfigSerializeWrapper | RegisterBrokerBody
                ) -> TopicConfigSerializeWrapper:
    if isinstance(body, RegisterBrokerBody):
        return body.topic_config_serialize_wrapper
    return body


def encode_topics(body: _Topics, *, slice_topics: int | None = None) -> bytes:
    """``encode_body(body)``, its topics encoded ``slice_topics`` (:data:`SLICE`) a
    call. ``body``'s table must not change meanwhile (give it a copy)."""
    if slice_topics is None:
        slice_topics = SLICE
    wrapper = _wrapper_of(body)
    table = wrapper.topic_config_table
    if len(table) <= slice_topics:
        return encode_body(body)
    hollow = msgspec.structs.replace(wrapper, topic_config_table={})
    outer = encode_body(hollow if body is wrapper else msgspec.structs.replace(
        body, topic_config_serialize_wrapper=hollow))
    names = sorted(table)
    parts = [encode_value({name: table[name] for name in names[start:start + slice_topics]}
                          )[1:-1]  # without the braces: the slices are joined in one map
             for start in range(0, len(names), slice_topics)]
    at = outer.index(_EMPTY_TABLE) + len(_EMPTY_TABLE) - 1
    return b"".join((outer[:at], b",".join(parts), outer[at:]))


def decode_topics(data: bytes | bytearray | memoryview, cls: type[_Topics]) -> _Topics:
    """``decode_body(data, cls)``, a topic at a time: the body is first split into its
    members undecoded (one pass in C that builds no objects), then each topic is
    decoded on its own. A body the split does not take -- one that is not JSON, or is
    only in the lenient reading's sense, or is invalid -- is decoded whole, for
    :func:`~tidemq.codec.bodies.decode_body`'s value or error."""
    raw = bytes(data)
    try:
        if cls is RegisterBrokerBody:
            members = _members.decode(raw)
            inner = members.pop(_WRAPPER, None)
            rest = decode_body(msgspec.json.encode(members), RegisterBrokerBody)
            if inner is None:
                return rest
            return msgspec.structs.replace(
                rest, topic_config_serialize_wrapper=_split_wrapper(inner))
        return _split_wrapper(raw)  # type: ignore[return-value]
    except (msgspec.MsgspecError, RemoteProtocolError, UnicodeDecodeError, RecursionError):
        return decode_body(raw, cls)


def _split_wrapper(raw: bytes | msgspec.Raw) -> TopicConfigSerializeWrapper:
    members = _members.decode(raw)
    table = members.pop(_TABLE, None)
    wrapper = decode_body(msgspec.json.encode(members), TopicConfigSerializeWrapper)
    if table is None:
        return wrapper
    topics = {name: decode_body(memoryview(one), TopicConfig)
              for name, one in _members.decode(table).items()}
    return msgspec.structs.replace(wrapper, topic_config_table=topics)
