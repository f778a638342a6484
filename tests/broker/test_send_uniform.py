"""Golden tests: an outer batch split column-wise (the uniform batch's array split, the
store's column encoding, the index's column hashing) against the entry-by-entry walk.

Two brokers of one cluster get the same sends: broker A through the processor as it is,
broker B with the uniform split turned off, so every batch is walked. Both must answer
alike (code, remark, offsets, the physical offsets inside the offset message ids), store
the same record bytes (but for the store time and the store host: each broker has its own
port) and find the same records by every key.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.processors.send import SendProcessor, _offset_ids
from tidemq.codec.command import PlainText, RemotingCommand
from tidemq.errors import BrokerResponseError
from tidemq.formats.batch import encode_batch
from tidemq.formats.msgid import decode_offset_msg_id, encode_offset_msg_id
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr
from tidemq.testing import Cluster

GOLDEN = settings(max_examples=150, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow])
#: STORETIMESTAMP and STOREHOST of an IPv4 record: each broker writes its own.
_STORE_FIELDS = slice(56, 72)


class _Conn:
    remote_address = "127.0.0.1:40001"

    def send_response(self, cmd: RemotingCommand) -> bool:
        return True


class Pair:
    def __init__(self, a: BrokerApp, b: BrokerApp) -> None:
        self.apps = (a, b)
        self.fast = SendProcessor(a.ctx)
        self.walker = SendProcessor(b.ctx)
        self.walker._splitter.uniform = lambda _body: None  # type: ignore[method-assign]

    def send(self, cmd: RemotingCommand) -> tuple[Any, Any]:
        out = []
        for app, proc in zip(self.apps, (self.fast, self.walker), strict=True):
            clone = RemotingCommand(code=cmd.code, opaque=cmd.opaque,
                                    ext_fields=dict(cmd.ext_fields), body=cmd.body)
            try:
                resp = proc.process(_Conn(), clone)  # type: ignore[arg-type]
            except BrokerResponseError as exc:
                out.append(("error", exc.code, exc.remark))
                continue
            assert resp is not None
            ext = dict(resp.ext_fields)
            phys = [decode_offset_msg_id(i)[1] for i in ext.pop("msgId").split(",")]
            records = []
            for p in phys:
                view = app.store.read_record(p)
                assert view is not None
                raw = bytearray(view)
                raw[_STORE_FIELDS] = bytes(16)
                records.append(bytes(raw))
            out.append(("ok", resp.code, resp.remark, ext, phys, records))
        return out[0], out[1]

    def lookups(self, topic: str, keys: set[str]) -> tuple[Any, Any]:
        out = []
        for app in self.apps:
            assert app.store.dispatcher is not None and app.store.dispatcher.drain()
            index = app.store.index
            assert index is not None
            out.append({k: index.query(topic, k, 64) for k in sorted(keys)})
        return out[0], out[1]


@pytest.fixture
async def pair(cluster: Cluster) -> AsyncIterator[Pair]:
    a, b = cluster.brokers[0], cluster.brokers[1]
    for broker in (a, b):
        async with Peer(broker.broker_addr) as peer:
            await peer.ok(wire.create_topic("Cols", 2))
    yield Pair(a, b)


_VALUES = st.sampled_from(["v", "true", "false", "TagA", "k1 k2", " k3  k4 ", "é", "x\x01y"])


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, set[str]]:
    """A producer batch of one layout (the array split's case), sometimes with one byte
    changed -- a length field, a separator, a non-ASCII key byte -- and every key in it."""
    n = draw(st.integers(16, 40))
    blen = draw(st.integers(0, 40))
    width = draw(st.integers(1, 34))
    base = {name: draw(_VALUES) for name in draw(st.lists(
        st.sampled_from(["WAIT", "TAGS", "KEYS", "CLUSTER", "X"]), unique=True, max_size=4))}
    with_uniq = draw(st.integers(0, 5)) > 0
    uniq_first = draw(st.booleans())
    entries = []
    keys = set(base.get("KEYS", "").split())
    for i in range(n):
        props = dict(base)
        if with_uniq:
            uniq = f"{i + draw(st.integers(0, 3)) * 1000:0{width}X}"[-width:]
            keys.add(uniq)
            props = {"UNIQ_KEY": uniq, **props} if uniq_first else {**props, "UNIQ_KEY": uniq}
        body = bytes([i % 251]) * blen
        entries.append((body, encode_properties(props), draw(st.integers(-2**31, 2**31 - 1))))
    data = bytearray(encode_batch(entries))
    size = len(data) // n
    for _ in range(draw(st.integers(0, 2))):
        entry = draw(st.integers(0, n - 1))
        at = draw(st.sampled_from([0, 3, 16, 19, 20 + blen, 21 + blen,
                                   draw(st.integers(0, size - 1))]))
        data[entry * size + at] = draw(st.sampled_from([0, 1, 2, 0x41, 0x80, 0xC3, 0xFF]))
    return bytes(data), keys


@GOLDEN
@given(batch=batches(), queue=st.sampled_from([0, 1]))
async def test_the_column_split_stores_and_indexes_as_the_walk(
        pair: Pair, batch: tuple[bytes, set[str]], queue: int) -> None:
    body, keys = batch
    cmd = wire.send_batch("Cols", [], queue_id=queue)
    cmd.body = body
    fast, walked = pair.send(cmd)
    assert fast == walked
    fast_keys, walked_keys = pair.lookups("Cols", keys)
    assert fast_keys == walked_keys


async def test_a_producer_batch_takes_the_column_split(pair: Pair,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def walk(*_: object) -> None:
        raise AssertionError("walked the batch")

    monkeypatch.setattr("tidemq.broker.processors.batch_split.iter_batch", walk)
    entries = [(b"body%03d" % i, f"UNIQ_KEY\x01{i:032X}\x02WAIT\x01true\x02".encode(), i)
               for i in range(100)]
    cmd = wire.send_batch("Cols", [], queue_id=0)
    cmd.body = encode_batch(entries)
    resp = pair.fast.process(_Conn(), cmd)  # type: ignore[arg-type]
    assert resp is not None and resp.code == 0
    assert len(resp.ext_fields["msgId"].split(",")) == 100
    assert type(resp.ext_fields["msgId"]) is PlainText
    fast, walked = pair.lookups("Cols", {f"{i:032X}" for i in range(100)})
    assert all(len(v) == 1 for v in fast.values()) and not any(walked.values())


@settings(max_examples=200, deadline=None)
@given(phys=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=40),
       start=st.integers(0, 2**40), step=st.integers(1, 5000), n=st.integers(1, 40))
def test_offset_ids_are_the_joined_formats(phys: list[int], start: int, step: int,
                                           n: int) -> None:
    prefix = "0A01020300009C41"
    for offsets in (phys, range(start, start + n * step, step)):
        assert _offset_ids(prefix, offsets) == ",".join(f"{prefix}{p:016X}" for p in offsets)


@settings(max_examples=200, deadline=None)
@given(ip=st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
       port=st.integers(0, 2**31 - 1),
       phys=st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=40))
def test_offset_ids_need_no_json_escape(ip: bytes, port: int, phys: list[int]) -> None:
    """What a batch's answer sends as PlainText: hex digits and commas only, whatever the
    store host."""
    prefix = encode_offset_msg_id(HostAddr(ip, port), 0)[:-16]
    for offsets in (phys, range(phys[0], phys[0] + 7 * len(phys), 7)):
        assert re.fullmatch("[0-9A-F,]+", _offset_ids(prefix, offsets))
