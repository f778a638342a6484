"""The facts of a send read two ways: straight from the ext map, and through the header
schema, must decide and store alike.

The send processor reads a send's fields with
:func:`~tidemq.codec.headers.decode_send_fields` and decodes the header schema only when
the fields are not plain or deciding needs more of the header. Two brokers of one cluster
get the same generated sends: broker A through :meth:`SendProcessor.process`, broker B
with every send read through the header schema. Both must answer alike -- code, remark,
queue id and offset, the physical offset inside the offset message id -- and store alike:
every stored record's fields but the store time and the store host (each broker has its
own port). Generated sends cover the plain case and its neighbours: V1 and V2 keys, odd
numbers, unknown or invalid topics, retry topics, delays, batches (uniform and not),
inner-batch flags, oversized properties.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.processors.send import SendProcessor
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.errors import BrokerResponseError, CorruptRecord, MessageTooLarge, StoreReadOnly
from tidemq.formats.batch import encode_batch, iter_batch
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.testing import Cluster

GOLDEN = settings(max_examples=200, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow])

_V1 = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
       "bornTimestamp", "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch")
_V2 = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "m")


class _Conn:
    """What the processor uses of a connection."""

    remote_address = "127.0.0.1:40001"

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    def send_response(self, cmd: RemotingCommand) -> bool:
        self.sent.append(cmd)
        return True


class Pair:
    def __init__(self, a: BrokerApp, b: BrokerApp) -> None:
        self.a, self.b = a, b
        self.fast = SendProcessor(a.ctx)
        self.generic = SendProcessor(b.ctx)
        self.generic._needs_header = lambda _fields: True  # type: ignore[method-assign]

    def run(self, cmd: RemotingCommand, seed: int) -> tuple[Any, Any]:
        out = []
        for app, call in ((self.a, self.fast.process), (self.b, self.generic.process)):
            random.seed(seed)  # the same pick for queueId < 0
            clone = RemotingCommand(code=cmd.code, opaque=cmd.opaque,
                                    ext_fields=dict(cmd.ext_fields), body=cmd.body,
                                    version=cmd.version)
            try:
                resp = call(_Conn(), clone)  # type: ignore[arg-type]
            except BrokerResponseError as exc:
                out.append(("error", exc.code, exc.remark))
                continue
            assert resp is not None  # ASYNC_FLUSH answers at once
            ext = dict(resp.ext_fields)
            ids = ext.pop("msgId").split(",")
            phys = [decode_offset_msg_id(i)[1] for i in ids]
            out.append(("ok", resp.code, resp.remark, resp.opaque, ext, phys,
                        [_record(app, p) for p in phys]))
        return out[0], out[1]


def _record(app: BrokerApp, phys: int) -> tuple[Any, ...]:
    view = app.store.read_record(phys)
    assert view is not None
    rec = decode_record(view, expected_physical_offset=phys)
    assert isinstance(rec, Record)
    born = "store time" if rec.born_timestamp == rec.store_timestamp else rec.born_timestamp
    return (rec.topic, rec.queue_id, rec.queue_offset, rec.flag, rec.sys_flag, born,
            rec.born_host, rec.reconsume_times, bytes(rec.body),
            bytes(rec.properties))


@pytest.fixture
async def pair(cluster: Cluster) -> AsyncIterator[Pair]:
    a, b = cluster.brokers[0], cluster.brokers[1]
    for broker in (a, b):
        async with Peer(broker.broker_addr) as peer:
            await peer.ok(wire.create_topic("Gold", 4))
            await peer.ok(wire.create_topic("GoldRO", 2, perm=4))
            await peer.ok(wire.create_topic("GoldRead8", 2, read=8))
            await peer.ok(wire.create_topic("GoldCQ", 2, attributes="+queue.type=BatchCQ"))
    yield Pair(a, b)


_TOPICS = st.sampled_from(["Gold", "GoldCQ", "GoldRO", "GoldRead8", "Fresh", "bad topic",
                           "", "%RETRY%gg", "%LMQ%x", "SCHEDULE_TOPIC_XXXX", "T" * 128])
_NUMS = st.sampled_from(["0", "1", "2", "3", "5", "9", "-1", "007", "+1", "x", "", " 1",
                         "99999999999", "2147483648", "\u0661"])
_VALUES = st.sampled_from(["v", "true", "false", "TagA", "k1 k2", "", "x\x01y", "é"])
_NAMES = st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "CLUSTER", "DELAY", "INNER_NUM",
                          "TIMER_DELAY_SEC", "X", ""])


@st.composite
def _properties(draw: st.DrawFn) -> str | None:
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return None
    if roll == 1:
        return draw(st.text(max_size=30))
    pairs = {"UNIQ_KEY": draw(st.text("0123456789ABCDEF", min_size=1, max_size=32))}
    if draw(st.booleans()):
        pairs["WAIT"] = draw(_VALUES)
    for _ in range(draw(st.integers(0, 3))):
        pairs[draw(_NAMES)] = draw(_VALUES)
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs.items())
    if draw(st.integers(0, 20)) == 0:
        text += "BIG\x01" + "v" * 32_760 + "\x02"
    return text


@st.composite
def _batch_body(draw: st.DrawFn) -> bytes:
    n = draw(st.sampled_from([0, 1, 3, 16, 24]))
    base = draw(st.sampled_from([{"WAIT": "true"}, {"TAGS": "t", "KEYS": "a b"}, {},
                                 {"CLUSTER": "c"}, {"INNER_MULTI_DISPATCH": "%LMQ%q"}]))
    uniform = draw(st.booleans())
    entries = []
    for i in range(n):
        props = dict(base)
        if draw(st.integers(0, 5)):
            props["UNIQ_KEY"] = f"{i:032X}" if uniform else draw(
                st.text("0123456789ABCDEF\x02é", min_size=1, max_size=34))
        body = b"b" * 8 if uniform else draw(st.binary(max_size=12))
        flag = 0 if uniform else draw(st.integers(0, 3))
        entries.append((body, encode_properties(props), flag))
    data = bytearray(encode_batch(entries))
    if data and draw(st.integers(0, 6)) == 0:
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    return bytes(data)


_JUNK: dict[int, st.SearchStrategy[str | None]] = {
    1: _TOPICS,
    2: st.sampled_from(["Gold", "Nope", "GoldRO", "GoldCQ"]),
    3: _NUMS,
    4: _NUMS,
    5: st.sampled_from(["128", "1", "x", "2147483648"]),
    6: st.sampled_from(["1", "x", "99999999999999999999", "-5"]),  # not 0: the store time
    7: _NUMS,
    9: st.sampled_from(["0", "2", "x", "-1"]),
    10: st.sampled_from(["16", "-1", "x"]),
    11: st.sampled_from(["false", "true", "1", "0", "TRUE"]),
}


@st.composite
def sends(draw: st.DrawFn) -> RemotingCommand:
    """A plain send, then up to three fields changed to a neighbouring case."""
    code = draw(st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE_V2,
                                 RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE]))
    keys = _V1 if code == RequestCode.SEND_MESSAGE else _V2
    values: list[str | None] = [
        "pg", "Gold", "TBW102", "4", draw(st.sampled_from(["0", "1", "3"])), "0",
        "1763780000000", draw(st.sampled_from(["0", "7"])), draw(_properties()),
        None, None, None,
    ]
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(sorted(_JUNK)))
        values[field] = draw(_JUNK[field])
    ext = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
    if draw(st.integers(0, 30)) == 0:
        del ext[draw(st.sampled_from(sorted(ext)))]
    is_batch = code == RequestCode.SEND_BATCH_MESSAGE or ext.get(keys[-1]) in ("true", "1")
    body = draw(_batch_body()) if is_batch else draw(st.binary(max_size=16))
    return RemotingCommand.request(code, ext, body)


@GOLDEN
@given(cmd=sends(), seed=st.integers(0, 1000))
async def test_sends_read_without_the_header_schema_answer_and_store_alike(
        pair: Pair, cmd: RemotingCommand, seed: int) -> None:
    fast, generic = pair.run(cmd, seed)
    assert fast == generic
    event(f"{fast[0]} {fast[1]} {str(fast[2])[:50]}")


def _no_header(*_: object) -> None:
    raise AssertionError("decoded the header schema")


async def test_a_plain_send_is_read_without_the_header_schema(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pair.fast, "_header", _no_header)
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
        cmd = wire.send("Gold", b"x", code=code, queue_id=1,
                        properties=wire.props(tags="T", keys="a b"))
        resp = pair.fast.process(_Conn(), cmd)  # type: ignore[arg-type]
        assert resp is not None and resp.code == 0


async def test_a_plain_batch_is_read_without_the_header_schema(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outer batches on an ordinary topic and inner batches on a BatchCQ topic skip the
    header schema; a batch-level UNIQ_KEY is answered as batchUniqId."""
    monkeypatch.setattr(pair.fast, "_header", _no_header)
    body = encode_batch([(b"body", encode_properties({"UNIQ_KEY": f"{i:032X}"}), 0)
                         for i in range(20)])
    for topic, n in (("Gold", 20), ("GoldCQ", 1)):
        cmd = wire.send_batch(topic, [], queue_id=1)
        cmd.body = body
        cmd.ext_fields["i"] = encode_properties({"UNIQ_KEY": "B" * 32}).decode()
        resp = pair.fast.process(_Conn(), cmd)  # type: ignore[arg-type]
        assert resp is not None and resp.code == 0
        assert len(resp.ext_fields["msgId"].split(",")) == n
        assert resp.ext_fields.get("batchUniqId") == ("B" * 32 if n == 1 else None)


_PLAIN_VALUES = st.sampled_from(["v", "true", "false", "TagA", "k1 k2"])


@st.composite
def inner_sends(draw: st.DrawFn) -> RemotingCommand:
    """A batch to the BatchCQ topic: mostly the usual inner batch (a batch-level
    UNIQ_KEY, with or without INNER_NUM, TAGS, KEYS, WAIT, CLUSTER), and its neighbours
    that the one-call path hands to the general send or refuses as it does: no
    UNIQ_KEY, an LMQ named, a wrong INNER_NUM, a body the one call does not read (few
    entries, not uniform, corrupt), compressed bodies (some not compressed at all), a
    field out of the plain case."""
    body = draw(_batch_body())
    pairs: dict[str, str] = {}
    if draw(st.integers(0, 7)):
        pairs["UNIQ_KEY"] = draw(st.text("0123456789ABCDEF", min_size=1, max_size=32))
    for name in ("WAIT", "TAGS", "KEYS", "CLUSTER"):
        if draw(st.booleans()):
            pairs[name] = draw(_VALUES if not draw(st.integers(0, 5)) else _PLAIN_VALUES)
    if draw(st.booleans()):
        try:
            count = str(sum(1 for _ in iter_batch(body)))
        except CorruptRecord:
            count = "0"
        pairs["INNER_NUM"] = count if draw(st.integers(0, 5)) else draw(
            st.sampled_from(["1", "16", "0", "x"]))
    if not draw(st.integers(0, 7)):
        pairs["INNER_MULTI_DISPATCH"] = "%LMQ%q"
    sys_flag = 0
    if not draw(st.integers(0, 3)):
        ctype = draw(st.sampled_from(list(CompressionType)))
        if draw(st.integers(0, 5)):
            body = compress(body, ctype)
        sys_flag = sys_flag_for(ctype)
    values: list[str | None] = [
        "pg", "GoldCQ", "TBW102", "4", draw(st.sampled_from(["0", "1", "-1"])),
        str(sys_flag), "1763780000000", "0",
        "".join(f"{k}\x01{v}\x02" for k, v in pairs.items()) or None, None, None, None,
    ]
    if not draw(st.integers(0, 4)):
        field = draw(st.sampled_from(sorted(set(_JUNK) - {1, 11})))
        values[field] = draw(_JUNK[field])
    ext = {k: v for k, v in zip(_V2, values, strict=True) if v is not None}
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body)


@GOLDEN
@given(cmd=inner_sends(), seed=st.integers(0, 1000))
async def test_inner_batches_read_in_one_call_answer_and_store_as_the_general_path(
        pair: Pair, cmd: RemotingCommand, seed: int) -> None:
    fast, generic = pair.run(cmd, seed)
    assert fast == generic
    event("inner batch" if fast[0] == "ok" and "batchUniqId" in fast[4]
          else f"{fast[0]} {fast[1]} {str(fast[2])[:30]}")


def _inner_cmd(props: dict[str, str], n: int = 20) -> RemotingCommand:
    body = encode_batch([(b"body", encode_properties({"UNIQ_KEY": f"{i:032X}"}), 0)
                         for i in range(n)])
    cmd = wire.send_batch("GoldCQ", [], queue_id=1)
    cmd.body = body
    cmd.ext_fields["i"] = encode_properties(props).decode()
    return cmd


async def test_the_usual_inner_batch_skips_the_general_send(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual inner batch, and one of two entries read by the general walk, are
    stored and answered by one call; a batch without a batch-level UNIQ_KEY (split)
    and one naming an LMQ (refused) go on to the general send."""
    general: list[str] = []
    real = pair.fast._send

    def counted(*args: Any) -> Any:
        general.append(args[2][0])
        return real(*args)

    monkeypatch.setattr(pair.fast, "_send", counted)
    for props, n in (({"UNIQ_KEY": "B" * 32}, 20), ({"UNIQ_KEY": "C" * 32}, 2)):
        resp = pair.fast.process(_Conn(), _inner_cmd(props, n))  # type: ignore[arg-type]
        assert resp is not None and resp.code == 0
        assert resp.ext_fields["batchUniqId"] == props["UNIQ_KEY"]
    assert general == []
    resp = pair.fast.process(_Conn(), _inner_cmd({"TAGS": "t"}))  # type: ignore[arg-type]
    assert resp is not None and resp.code == 0
    assert len(resp.ext_fields["msgId"].split(",")) == 20
    with pytest.raises(BrokerResponseError):
        pair.fast.process(_Conn(), _inner_cmd(  # type: ignore[arg-type]
            {"UNIQ_KEY": "D" * 32, "INNER_MULTI_DISPATCH": "%LMQ%q"}))
    assert general == ["GoldCQ", "GoldCQ"]


@pytest.mark.parametrize("fault", [StoreReadOnly("WRITE_ERROR", cause="disk gone"),
                                   MessageTooLarge(10, 5), ValueError("out of range")])
async def test_a_store_refusal_of_an_inner_batch_is_answered_as_the_general_path(
        pair: Pair, monkeypatch: pytest.MonkeyPatch, fault: Exception) -> None:
    def refuse(*_args: object, **_kw: object) -> None:
        raise fault

    for app in (pair.a, pair.b):
        monkeypatch.setattr(app.store, "put_inner_batch", refuse)
    fast, generic = pair.run(_inner_cmd({"UNIQ_KEY": "E" * 32}), 0)
    assert fast == generic
    assert fast[0] == "error"
