"""A shared send parent's children read by column
(:mod:`tidemq.broker.processors.child_columns`) against the send processor's reading of
each child on its own: whenever the column reading answers, every child is put as the
child-by-child reading puts it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from tests.broker.test_send_facts import GOLDEN

from tidemq.broker.processors.child_columns import ChildPut, column_puts
from tidemq.broker.processors.send import SendProcessor
from tidemq.codec.shared_send import SendEntry
from tidemq.formats.properties import encode_properties
from tidemq.testing import Cluster

QUEUES = 8
MAX_BODY = 64
#: What makes the send processor divert a child before reading it (children()).
_DIVERTED = ("DELAY\x01", "TIMER_", "TRAN_MSG\x01", "INNER_")


def one_by_one(proc: SendProcessor, entries: list[SendEntry]) -> list[ChildPut] | None:
    """The send processor's puts of children it stores without a refusal or a detour,
    each read on its own; ``None`` when any is refused or served another way."""
    puts: list[ChildPut] = []
    for qid, sys_flag, born, flag, text, body in entries:
        if text is not None and any(s in text for s in _DIVERTED):
            return None
        if not 0 <= qid < QUEUES or sys_flag & 0x80:
            return None
        try:
            msg = proc._input(body, text, flag)[0]
        except Exception:
            return None
        puts.append((qid, msg, sys_flag, born))
    return puts


_NAMES = st.one_of(st.sampled_from(["UNIQ_KEY", "WAIT", "A", "é"]),
                   st.sampled_from(["UNIQ_KEY", "WAIT", "A", "é"]),
                   st.sampled_from(["KEYS", "TAGS", "CLUSTER", "DELAY", "INNER_X", "B\x01C", "",
                                    "A\x02"]))
_VALUES = st.one_of(st.text("0123456789ABCDEF", min_size=1, max_size=32),
                    st.sampled_from(["true", "a b", "é"]))
_ODD_VALUES = st.sampled_from(["", "x\x02y", "x\x01y", "v" * 32_700, "v" * 32_760])


@st.composite
def _parents(draw: st.DrawFn) -> list[SendEntry]:
    """Children of one shape (the usual parent), now and then one made unlike the
    others: another shape, no properties, a raw text, an odd number or body."""
    names = draw(st.lists(_NAMES, min_size=1, max_size=3))
    n = draw(st.sampled_from([1, 3]) if draw(st.integers(0, 5)) == 5 else st.integers(4, 9))
    entries = []
    for _ in range(n):
        pairs = [(name, draw(_ODD_VALUES if draw(st.integers(0, 30)) == 30 else _VALUES))
                 for name in names]
        text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
        if draw(st.integers(0, 3)) == 0:
            text = encode_properties(dict(pairs)).decode()
        entries.append(SendEntry(draw(st.integers(0, QUEUES - 1)), 0, 1, draw(st.integers(0, 9)),
                                 text, memoryview(b"b" * draw(st.integers(0, MAX_BODY)))))
    if draw(st.integers(0, 2)) == 2:
        k = draw(st.integers(0, n - 1))
        odd = draw(st.sampled_from(["text", "none", "qid", "sys", "body", "order"]))
        e = entries[k]
        entries[k] = (
            e._replace(properties=draw(st.text("AB\x01\x02", max_size=8))) if odd == "text"
            else e._replace(properties=None) if odd == "none"
            else e._replace(queue_id=draw(st.sampled_from([QUEUES, -1]))) if odd == "qid"
            else e._replace(sys_flag=draw(st.sampled_from([0x80, 0x1, 0x4]))) if odd == "sys"
            else e._replace(body=memoryview(b"b" * (MAX_BODY + 1))) if odd == "body"
            else e._replace(properties="".join(reversed(
                [f"{p}\x02" for p in (e.properties or "").split("\x02") if p]))))
    return entries


def _puts(puts: list[ChildPut] | None) -> Any:
    return None if puts is None else [(q, bytes(m.body), m.properties, m.flag, m.tags_code,
                                       m.keys, s, b) for q, m, s, b in puts]


@GOLDEN
@given(entries=_parents(), index=st.booleans())
async def test_the_column_reading_is_the_child_by_child_reading(
        cluster: Cluster, entries: list[SendEntry], index: bool) -> None:
    proc = SendProcessor(cluster.brokers[0].ctx)
    proc._max_body, proc._index = MAX_BODY, index
    got = column_puts(entries, queues=QUEUES, max_body=MAX_BODY,
                      cluster_prop=proc._cluster_prop, index=index)
    event("read by column" if got is not None else "left to the child-by-child reading")
    if got is not None:
        assert _puts(got) == _puts(one_by_one(proc, entries))


async def test_the_usual_parent_is_read_by_column(cluster: Cluster) -> None:
    proc = SendProcessor(cluster.brokers[0].ctx)
    entries = [SendEntry(q % QUEUES, 0, 1, 0, encode_properties(
        {"UNIQ_KEY": f"{q:032X}", "WAIT": "true"}).decode(), memoryview(b"body"))
        for q in range(16)]
    got = column_puts(entries, queues=QUEUES, max_body=proc._max_body,
                      cluster_prop=proc._cluster_prop, index=True)
    assert got is not None
    assert _puts(got) == _puts(one_by_one(proc, entries))
    assert [m.keys for _q, m, _s, _b in got] == [(f"{q:032X}",) for q in range(16)]


_USUAL = [f"UNIQ_KEY\x01{q:04X}\x02WAIT\x01true\x02" for q in range(5)]


@pytest.mark.parametrize("texts", [
    [*_USUAL[:4], "UNIQ_KEY\x01\x02WAIT\x01true\x02"],  # an empty UNIQ_KEY is no key
    [f"UNIQ_KEY\x01{q}\x02UNIQ_KEY\x01{q + 9}\x02" for q in range(5)],  # the last one wins
    [*_USUAL[:4], "\x01v\x02WAIT\x01true\x02"],  # an empty name
    [*_USUAL[:4], "UNIQ_KEY\x01K\x02\x02WAIT\x01true"],  # an empty segment, no last separator
    [*_USUAL[:4], "UNIQ_KEY\x01K\x01L\x02WAIT\x01true\x02"],  # a segment with two names
    *([f"UNIQ_KEY\x01{q}\x02{name}\x01a b\x02" for q in range(5)]  # read for the store
      for name in ("TAGS", "KEYS", "CLUSTER")),
])
async def test_odd_texts_read_as_one_by_one(cluster: Cluster, texts: list[str]) -> None:
    proc = SendProcessor(cluster.brokers[0].ctx)
    entries = [SendEntry(0, 0, 1, 0, t, memoryview(b"body")) for t in texts]
    got = column_puts(entries, queues=QUEUES, max_body=proc._max_body,
                      cluster_prop=proc._cluster_prop, index=True)
    assert got is None or _puts(got) == _puts(one_by_one(proc, entries))


_LMQS = st.lists(st.sampled_from(["%LMQ%a", "%LMQ%b", "%LMQ%c-1", "%LMQ%bad/x", ""]),
                 min_size=1, max_size=3)


@st.composite
def _fan_out_parents(draw: st.DrawFn) -> list[SendEntry]:
    """Children fanning out to LMQs, of one shape, now and then one made unlike the
    others: naming no LMQ, another ``INNER_`` property, an LMQ name holding ``INNER_``."""
    names = draw(st.permutations(["UNIQ_KEY", "WAIT", "INNER_MULTI_DISPATCH"]))
    n = draw(st.integers(4, 9))
    entries = [SendEntry(draw(st.integers(0, QUEUES - 1)), 0, 1, 0, "".join(
        f"{k}\x01{','.join(draw(_LMQS)) if k == 'INNER_MULTI_DISPATCH' else draw(_VALUES)}\x02"
        for k in names), memoryview(b"b" * draw(st.integers(0, MAX_BODY))))
        for _ in range(n)]
    if draw(st.booleans()):
        k = draw(st.integers(0, n - 1))
        e = entries[k]
        entries[k] = e._replace(properties=draw(st.sampled_from([
            "UNIQ_KEY\x01u\x02WAIT\x01true\x02A\x01b\x02",
            "UNIQ_KEY\x01u\x02WAIT\x01true\x02INNER_NUM\x013\x02",
            "UNIQ_KEY\x01u\x02WAIT\x01true\x02INNER_MULTI_DISPATCH\x01%LMQ%INNER_x\x02",
            (e.properties or "") + "INNER_MULTI_QUEUE_OFFSET\x011\x02"])))
    return entries


@GOLDEN
@given(entries=_fan_out_parents(), index=st.booleans())
async def test_fan_out_children_are_read_by_column_as_one_by_one(
        cluster: Cluster, entries: list[SendEntry], index: bool) -> None:
    """With ``fan_out``, children whose only ``INNER_`` property is their fan-out are
    read as the send processor reads each (their LMQ names are decided after); any
    other ``INNER_`` leaves the parent to the child-by-child reading."""
    proc = SendProcessor(cluster.brokers[0].ctx)
    proc._max_body, proc._index = MAX_BODY, index
    got = column_puts(entries, queues=QUEUES, max_body=MAX_BODY,
                      cluster_prop=proc._cluster_prop, index=index, fan_out=True)
    assert column_puts(entries, queues=QUEUES, max_body=MAX_BODY,
                       cluster_prop=proc._cluster_prop, index=index) is None
    event("read by column" if got is not None else "left to the child-by-child reading")
    if got is not None:
        assert all((e.properties or "").count("INNER_") == 1 for e in entries)
        want = [(e.queue_id, proc._input(e.body, e.properties, e.flag)[0], e.sys_flag,
                 e.born_timestamp) for e in entries]
        assert _puts(got) == _puts(want)
