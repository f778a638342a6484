"""The batch splitter (:mod:`tidemq.broker.processors.batch_split`): the inner-batch entry
count against the batch format's own count, the uniform (column) split against the
entry-by-entry walk."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker.test_send_facts import GOLDEN, Pair, pair

from tidemq.broker.processors.batch_split import first_fans_out, inner_count, inner_shape
from tidemq.broker.processors.send import SendProcessor
from tidemq.errors import BrokerResponseError, CorruptRecord
from tidemq.formats.batch import count_entries, encode_batch, iter_batch
from tidemq.formats.properties import encode_properties
from tidemq.store.append import UniformBatch

__all__ = ["pair"]


@st.composite
def _inner_bodies(draw: st.DrawFn) -> bytes:
    """Batches of one layout, sometimes with a byte changed or cut short."""
    n = draw(st.sampled_from([0, 1, 3, 4, 5, 16, 40]))
    blen = draw(st.integers(0, 40))
    props = encode_properties({"UNIQ_KEY": "A" * draw(st.integers(1, 20))})
    data = bytearray(encode_batch([(b"b" * blen, props, i) for i in range(n)]))
    for _ in range(draw(st.integers(0, 2))):
        if data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from([0, 1, 2, 0x16, 0x80, 0xFF]))
    if data and draw(st.integers(0, 5)) == 0:
        del data[draw(st.integers(0, len(data) - 1)):]
    return bytes(data)


def _count(count: Any, body: Any) -> Any:
    try:
        return count(body)
    except CorruptRecord as exc:
        return ("error", str(exc))


@settings(max_examples=200, deadline=None)
@given(body=_inner_bodies(), view=st.booleans())
def test_the_inner_count_is_count_entries(body: bytes, view: bool) -> None:
    arg: Any = memoryview(bytearray(b"xx" + body))[2:] if view else body
    assert _count(inner_count, arg) == _count(count_entries, body)


def _shape(body: Any) -> Any:
    """inner_count and, for a body it counts, first_fans_out: what inner_shape says."""
    count = _count(inner_count, body)
    return count if isinstance(count, tuple) else (count, first_fans_out(body))


@st.composite
def _fan_out_bodies(draw: st.DrawFn) -> bytes:
    """Batches of one layout whose entries name a property that may be the fan-out one,
    first or after another pair."""
    name = draw(st.sampled_from(["INNER_MULTI_DISPATCH", "MY_INNER_MULTI_DISPATCH", "KEYS"]))
    props = {name: "%LMQ%a"} if draw(st.booleans()) else {"UNIQ_KEY": "K", name: "%LMQ%a"}
    n = draw(st.sampled_from([1, 4, 5, 16]))
    return encode_batch([(b"b" * draw(st.integers(0, 9)), encode_properties(props), i)
                         for i in range(n)])


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(_inner_bodies(), _fan_out_bodies()), view=st.booleans())
def test_the_inner_shape_is_the_count_and_the_fan_out_check(body: bytes, view: bool) -> None:
    arg: Any = memoryview(bytearray(b"xx" + body))[2:] if view else body
    assert _count(inner_shape, arg) == _shape(body)


def _split(proc: SendProcessor, body: bytes) -> Any:
    try:
        msgs, wait = proc._splitter.split(body)
    except BrokerResponseError as exc:
        return ("error", exc.code, exc.remark)
    return wait, [(bytes(m.body), m.properties, m.flag, m.tags_code, m.keys) for m in msgs]


@st.composite
def _uniform_bodies(draw: st.DrawFn) -> bytes:
    """Batches of one layout (UNIQ_KEYs of one length), sometimes with a byte changed;
    mostly large enough for the array split."""
    n = draw(st.sampled_from([1, 3, 4, 5, 15, 16, 17, 40]))
    width = draw(st.integers(1, 34))
    base = draw(st.sampled_from([{"WAIT": "true"}, {"TAGS": "t", "KEYS": "a b"}, {},
                                 {"CLUSTER": "c", "WAIT": "false"}, {"KEYS": "k"}]))
    with_uniq = draw(st.integers(0, 5)) > 0
    order = sorted([*base, *(["UNIQ_KEY"] if with_uniq else [])], reverse=draw(st.booleans()))
    entries = []
    for i in range(n):
        props = dict(base)
        if with_uniq:
            props["UNIQ_KEY"] = f"{i:0{width}X}"[-width:]
        entries.append((b"body", encode_properties({k: props[k] for k in order}), i % 3))
    data = bytearray(encode_batch(entries))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.sampled_from([0, 1, 2, 0x41, 0x80, 0xC3, 0xFF]))
    return bytes(data)


@GOLDEN
@given(body=_uniform_bodies())
async def test_the_uniform_split_is_the_walk(pair: Pair, body: bytes) -> None:
    walker = SendProcessor(pair.a.ctx)
    walker._splitter.uniform = lambda _body: None  # type: ignore[method-assign]
    assert _split(pair.fast, body) == _split(walker, body)


@st.composite
def _batches_of_one_template(draw: st.DrawFn) -> list[bytes]:
    """Batches whose properties differ only in their UNIQ_KEY values, which are of few
    lengths and sometimes hold a separator, a non-ASCII character or nothing: the first
    batch of a template leaves its property shape to the next ones."""
    base = draw(st.sampled_from([{"WAIT": "true"}, {"TAGS": "t", "KEYS": "a b"}, {},
                                 {"CLUSTER": "c", "WAIT": "false"}, {"XUNIQ_KEY": "q"}]))
    order = sorted([*base, "UNIQ_KEY"], reverse=draw(st.booleans()))
    value = st.text(st.sampled_from("AZ09\x01\x02\xe9"), max_size=3)
    batches = []
    for _ in range(draw(st.integers(1, 6))):
        values = draw(st.lists(value, min_size=1, max_size=5))
        batches.append(encode_batch([(b"body", encode_properties(
            {k: base.get(k, v) for k in order}), 0) for v in values]))
    return batches


@GOLDEN
@given(batches=_batches_of_one_template())
async def test_a_kept_property_shape_splits_as_the_walk(pair: Pair,
                                                        batches: list[bytes]) -> None:
    fast = SendProcessor(pair.a.ctx)  # its shapes kept from batch to batch
    walker = SendProcessor(pair.a.ctx)
    walker._splitter.uniform = lambda _body: None  # type: ignore[method-assign]
    for body in batches:
        assert _split(fast, body) == _split(walker, body)


async def test_property_shapes_kept_are_few_and_short(pair: Pair) -> None:
    """Kept shapes stay small whatever producers send: long property strings are read
    each time, and past the limit of shapes all are forgotten."""
    from tidemq.broker.processors import batch_split

    proc = SendProcessor(pair.a.ctx)
    shapes = proc._splitter._shapes
    long_value = "v" * batch_split._SHAPE_MAX_BYTES
    body = encode_batch([(b"body", encode_properties({"KEYS": long_value, "UNIQ_KEY": f"{i:04X}"}),
                          0) for i in range(5)])
    assert _split(proc, body)[0] is True and not shapes
    for k in range(batch_split._SHAPES_KEPT + 1):
        body = encode_batch([(b"body", encode_properties({"TAGS": f"t{k}", "UNIQ_KEY": f"{i:04X}"}),
                              0) for i in range(5)])
        _split(proc, body)
        assert 1 <= len(shapes) <= batch_split._SHAPES_KEPT
    assert len(shapes) == 1


async def test_a_uniform_batch_is_split_without_the_walk(pair: Pair) -> None:
    body = encode_batch([(b"body", encode_properties({"UNIQ_KEY": f"{i:032X}", "WAIT": "true"}),
                          i) for i in range(20)])
    split = pair.fast._splitter.uniform(body)
    assert split is not None
    msgs, wait = split
    assert wait and [m.keys for m in msgs] == [(f"{i:032X}",) for i in range(20)]
    assert [m.flag for m in msgs] == list(range(20))


@pytest.mark.parametrize("n", [1, 2, 3, 5])
async def test_a_small_uniform_batch_is_split_as_columns(pair: Pair, n: int) -> None:
    """An auto-batcher's batch of a few messages goes to the store as columns, as a large
    one, and stores what the walk stores."""
    body = encode_batch([(b"body%d" % i, encode_properties(
        {"UNIQ_KEY": f"{i:032X}", "WAIT": "true", "KEYS": "a b"}), i) for i in range(n)])
    split = pair.fast._splitter.uniform(body)
    assert split is not None
    assert isinstance(split[0], UniformBatch)
    walker = SendProcessor(pair.a.ctx)
    walker._splitter.uniform = lambda _body: None  # type: ignore[method-assign]
    assert _split(pair.fast, body) == _split(walker, body)
    assert [m.keys for m in split[0]] == [(f"{i:032X}", "a", "b") for i in range(n)]


_FAN_OUT = "INNER_MULTI_DISPATCH"


@given(st.lists(st.tuples(st.binary(max_size=30), st.dictionaries(
    st.sampled_from(["UNIQ_KEY", "KEYS", _FAN_OUT, "TAGS", "MY_" + _FAN_OUT, "X" + _FAN_OUT]),
    st.sampled_from(["v", "%LMQ%a", "INNER_MULTI_DISPATCH"]), max_size=3)), min_size=1,
    max_size=5), st.booleans())
def test_the_fan_out_check_reads_the_first_entrys_properties(
        entries: list[tuple[bytes, dict[str, str]]], as_view: bool) -> None:
    """The check reads the first entry's properties through its length fields, as the
    entry-by-entry reader does; a body naming the key does not count, nor does a longer
    property name ending in it."""
    body = encode_batch([(b + _FAN_OUT.encode() + b"\x01", encode_properties(p), 0)
                         for b, p in entries])
    first = next(iter_batch(body))
    names = [pair.partition(b"\x01")[0] for pair in bytes(first.properties).split(b"\x02")]
    expected = _FAN_OUT.encode() in names
    assert first_fans_out(memoryview(body) if as_view else body) is expected
