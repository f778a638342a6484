"""An inner batch send read in one call: the compiled reading and its twin give the same
facts for any property text and body, and the usual send is read as the send processor's
general path reads it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.broker.processors.batch_split import inner_shape
from tidemq.errors import CorruptRecord
from tidemq.formats import properties
from tidemq.formats.batch import encode_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import (
    encode_properties,
    parse_checked_property_text,
    text_without,
    user_keys,
    wants_flush,
)
from tidemq.formats.record import inner_send
from tidemq.formats.record.inner_send import InnerFacts, py_inner_facts

_CLUSTER = b"CLUSTER\x01DefaultCluster\x02"
_USUAL_NAMES = ["INNER_NUM", "KEYS", "WAIT", "TAGS", "CLUSTER", "A", "UNIQ", "INNER_NUMBER"]
_NAMES = [*_USUAL_NAMES, "UNIQ_KEY", "INNER_BASE", "INNER_MULTI_DISPATCH"]
_USUAL_VALUES = st.one_of(
    st.text(st.sampled_from("ab1 "), min_size=1, max_size=6),
    st.sampled_from(["false", "FALSE", "False", "true", "4", "12", "012", " x  y "]),
)
_VALUES = st.one_of(
    st.text(st.sampled_from("ab1 "), min_size=1, max_size=6),
    st.sampled_from(["false", "FALSE", "False", "true", "4", "5", "12", "012", " x  y "]),
    st.text(max_size=4),  # anything: separators, non-ASCII, empty
)


def _compiled() -> Any:
    return compiled().inner_facts


def test_the_compiled_reading_is_the_one_used() -> None:
    assert inner_send.inner_facts is _compiled()


@st.composite
def _bodies(draw: st.DrawFn) -> tuple[bytes, int]:
    """A batch body and its entry count: mostly entries of one layout, some not."""
    n = draw(st.integers(4, 9) | st.integers(0, 9))
    blen = draw(st.integers(0, 20))
    first = draw(st.sampled_from([b"", b"K\x01v\x02", b"U\x01k1\x02", b"K\x01v\x02TAGS\x01t",
                                  b"K\x01v\x02INNER_MULTI_DISPATCH2\x01q",
                                  b"INNER_MULTI_DISPATCH\x01q\x02",
                                  b"K\x01v\x02INNER_MULTI_DISPATCH\x01q",
                                  b"XINNER_MULTI_DISPATCH\x01q\x02"]))
    props = [first] + [draw(st.binary(min_size=len(first), max_size=len(first)))
                       for _ in range(max(n - 1, 0))]
    if draw(st.integers(0, 5)) == 0 and n > 1:  # one entry of another layout
        props[draw(st.integers(1, n - 1))] += b"z"
    body = bytearray(encode_batch([(bytes([i]) * blen, props[i], i) for i in range(n)]))
    if body and draw(st.integers(0, 5)) == 0:  # a damaged byte
        at = draw(st.integers(0, len(body) - 1))
        body[at] ^= draw(st.integers(1, 255))
    if draw(st.integers(0, 7)) == 0:
        body += bytes(draw(st.integers(1, 30)))
    return bytes(body), n


@st.composite
def _sends(draw: st.DrawFn) -> tuple[str, bytes]:
    """A property text and a body: mostly the usual send, some not."""
    body, n = draw(_bodies())
    pool = _NAMES if draw(st.integers(0, 3)) == 0 else _USUAL_NAMES
    names = draw(st.lists(st.sampled_from(pool) | st.text(max_size=3), max_size=7,
                          unique=draw(st.integers(0, 5)) > 0))
    if draw(st.integers(0, 5)) > 0:
        names.insert(draw(st.integers(0, len(names))), "UNIQ_KEY")
    values = _VALUES if draw(st.integers(0, 3)) == 0 else _USUAL_VALUES
    pairs = [(name, str(n) if name == "INNER_NUM" and draw(st.booleans()) else draw(values))
             for name in names]
    text = "\x02".join(f"{name}\x01{value}" for name, value in pairs)
    if draw(st.booleans()):
        text += "\x02"
    if draw(st.integers(0, 9)) == 0:  # a stray separator, or many pairs
        text = draw(st.sampled_from(["\x02", "\x01", "\x02\x02", "A\x01b\x02" * 70,
                                     "".join(f"P{i}\x01v\x02" for i in range(63))])) + text
    return text, body


@settings(max_examples=800, deadline=None)
@given(send=_sends(), cluster=st.sampled_from([_CLUSTER, b""]))
def test_the_compiled_reading_gives_the_twins_facts(send: tuple[str, bytes],
                                                    cluster: bytes) -> None:
    compiled = _compiled()
    text, body = send
    expected = py_inner_facts(text, body, cluster)
    for plain in (body, bytearray(body), memoryview(body)):
        assert compiled(text, plain, cluster) == expected


def _general(text: str, plain: bytes, cluster: bytes) -> InnerFacts | None:
    """The send processor's general reading of an inner batch send, ``None`` where it
    refuses the send or takes it for an outer batch."""
    props = parse_checked_property_text(text)
    if isinstance(props, str) or (uniq := props.get("UNIQ_KEY")) is None:
        return None
    try:
        count, fans_out = inner_shape(plain)
    except CorruptRecord:
        return None
    claimed = props.get("INNER_NUM")
    if (fans_out or "INNER_MULTI_DISPATCH" in props or (claimed is not None
                                                        and claimed != str(count))
            or not 1 <= count <= 0x7FFF):
        return None
    cut = text_without(text, props, "INNER_NUM") if "INNER_BASE" not in props else None
    if cut is not None:
        raw = cut.encode() + (b"" if "CLUSTER" in props else cluster)
    else:
        stored = {k: v for k, v in props.items() if k not in ("INNER_NUM", "INNER_BASE")}
        stored.setdefault("CLUSTER", cluster[8:-1].decode())
        raw = encode_properties(stored)
    return (count, raw, uniq, (uniq, *user_keys(props)), wants_flush(props),
            tags_code(props.get("TAGS")))


@settings(max_examples=800, deadline=None)
@given(send=_sends(), cluster=st.sampled_from([_CLUSTER, b""]))
def test_the_usual_send_is_read_as_the_general_path_reads_it(send: tuple[str, bytes],
                                                             cluster: bytes) -> None:
    text, body = send
    facts = py_inner_facts(text, body, cluster)
    if facts is not None:
        assert facts == _general(text, body, cluster)


def test_a_producers_usual_batch_is_read_in_one_call() -> None:
    """What TideMQ's producer sends to a BatchCQ topic has the usual shape."""
    body = encode_batch([(b"x" * 128, b"UNIQ_KEY\x01K%03d\x02" % i, 0) for i in range(100)])
    text = "TAGS\x01t\x02KEYS\x01k1  k2\x02UNIQ_KEY\x01U1\x02INNER_NUM\x01100\x02WAIT\x01False"
    assert inner_send.inner_facts(text, body, _CLUSTER) == (
        100, b"TAGS\x01t\x02KEYS\x01k1  k2\x02UNIQ_KEY\x01U1\x02WAIT\x01False\x02" + _CLUSTER,
        "U1", ("U1", "k1", "k2"), False, tags_code("t"))


_SPACES = st.text(st.sampled_from("ab \t"), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(keys=_SPACES, wait=st.sampled_from(["false", "FALSE", "fAlSe", "true", "no", "false ",
                                           "0", "x"]) | _SPACES)
def test_keys_and_wait_are_read_by_the_rules_of_the_properties(keys: str, wait: str) -> None:
    """The twin reads the index keys and WAIT by the one definition in
    :mod:`tidemq.formats.properties`, and the compiled reading agrees with it."""
    assert inner_send.user_keys is properties.user_keys
    assert inner_send.wants_flush is properties.wants_flush
    body = encode_batch([(b"x" * 16, b"UNIQ_KEY\x01K%03d\x02" % i, 0) for i in range(4)])
    text = f"UNIQ_KEY\x01U\x02KEYS\x01{keys}\x02WAIT\x01{wait}\x02"
    props = properties.parse_property_text(text)
    expected = (("U", *properties.user_keys(props)), properties.wants_flush(props))
    facts = inner_send.inner_facts(text, body, _CLUSTER)
    assert facts is not None and facts[3:5] == expected
    twin = py_inner_facts(text, body, _CLUSTER)
    assert twin is not None and twin[3:5] == expected
