"""Hypothesis against a LIVE broker (DESIGN.md "Failure and bad input").

* Garbage frames on one connection get error responses or a closed connection -- never a
  crash -- and a second, well-behaved client keeps being served after every example.
* For every request code the broker registers, ext fields generated from the code's header
  schema and then mutated (dropped keys, junk numbers, overflow, unknown keys, random
  bodies) get a response; a failure carries a RocketMQ code and a remark, and a rejected
  request leaves the store as it was.

One cluster serves all the module's tests and all their examples (``function_scoped_fixture``
is intended): the properties hold whatever earlier requests did to the broker, and each test
starts from its own ``live`` (the fuzzed topics created again, a fresh crash log).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.frame import FrameDecoder
from tidemq.codec.headers import REQUEST_HEADERS
from tidemq.codec.message import decode_messages
from tidemq.codec.schema import Header, Kind
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
#: Each request code's test drives one handler of the live broker, and there are 63 of them:
#: 50 examples a code make 3,150 requests a run.
PER_CODE = settings(FUZZ, max_examples=50)

BASELINE = "Baseline"  # never named by generated requests
SEND_CODES = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
              RequestCode.SEND_BATCH_MESSAGE}


class Live(logging.Handler):
    """The broker under test, a well-behaved client of it, and the processor crashes
    logged meanwhile (bad input must be answered as such, never by an exception)."""

    def __init__(self, broker: BrokerApp, peer: Peer) -> None:
        super().__init__(logging.ERROR)
        self.broker = broker
        self.peer = peer
        self.crashes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.crashes.append(self.format(record))

    async def still_serves(self) -> None:
        resp = await self.peer.ok(wire.send(BASELINE, b"still here"), timeout=10)
        assert resp.ext_fields["msgId"]
        assert not self.crashes, self.crashes[0]

    def store_mark(self) -> tuple[int, int]:
        store = self.broker.store
        return store.put_messages, store.commitlog.max_offset


pytestmark = pytest.mark.asyncio(loop_scope="module")


#: No write of the broker's own while the module runs, which a test would take for a write of
#: a request it rejected: no transaction check-back (it renews a half message in the log)
#: and no delivery of a message sent back for a retry (it is put again when due).
QUIET = {"transaction_check_interval": 3_600_000, "message_delay_level": " ".join(["2h"] * 18)}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path_factory.mktemp("fuzz"), brokers=2, broker=QUIET) as c:
        yield c


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def peer(cluster: Cluster) -> AsyncIterator[Peer]:
    async with Peer(cluster.brokers[0].broker_addr) as p:
        yield p


@pytest_asyncio.fixture(loop_scope="module")
async def live(cluster: Cluster, peer: Peer) -> AsyncIterator[Live]:
    await peer.ok(wire.create_topic(BASELINE, 2))
    await peer.ok(wire.create_topic("Fz", 2))
    await peer.ok(wire.send("Fz", b"seed", properties=wire.props(tags="a", keys="k")))
    live = Live(cluster.brokers[0], peer)
    logger = logging.getLogger("tidemq")
    logger.addHandler(live)
    yield live
    logger.removeHandler(live)


# ---------------------------------------------------------------- garbage frames

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                               max_size=3),
    max_leaves=8)


_header_objects = st.dictionaries(
    st.sampled_from(["code", "flag", "opaque", "language", "version", "remark", "extFields",
                     "x"]), _json_values, max_size=6)
_header_codes = st.sampled_from([10, 11, 14, 17, 33, 34, 310, 320, 9999, -1, 2**40])


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    """A JSON header that may or may not look like a command."""
    obj: dict[str, Any] = draw(_header_objects)
    if draw(st.booleans()):
        obj["code"] = draw(_header_codes)
    text = json.dumps(obj).encode()
    if draw(st.booleans()):  # truncate or corrupt it
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.binary(max_size=4))
    return text


_frame_headers = json_headers() | st.binary(max_size=40)
_type_bytes = st.sampled_from([0, 0, 1, 2, 255])


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Framed garbage: length and header word consistent, lying, or absurd."""
    header = draw(_frame_headers)
    body = draw(st.binary(max_size=40))
    type_byte = draw(_type_bytes)
    header_len = draw(st.sampled_from([len(header), len(header) + 7, 0, 0xFFFFFF]))
    length = draw(st.sampled_from([4 + len(header) + len(body), 3, 0, -1, 2**31 - 1,
                                   64 * 1024 * 1024]))
    return (struct.pack(">i", length) + struct.pack(">I", (type_byte << 24) | header_len)
            + header + body)


garbage = st.lists(frames() | st.binary(min_size=1, max_size=64), min_size=1, max_size=3).map(
    b"".join)


async def _exchange(addr: str, data: bytes) -> bytes:
    """Write ``data``, half-close, and read everything until the broker closes."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@FUZZ
@given(data=garbage)
async def test_garbage_frames_never_hurt_other_connections(live: Live, data: bytes) -> None:
    received = await _exchange(live.broker.broker_addr, data)
    decoder = FrameDecoder()
    decoder.receive_data(received)
    while (cmd := decoder.next_command()) is not None:
        assert cmd.is_response
        if cmd.code != ResponseCode.SUCCESS:
            assert cmd.remark
    await live.still_serves()


# ---------------------------------------------------------------- malformed ext values


#: Every code the broker registers; test_the_code_list_is_complete keeps it honest.
REGISTERED = sorted({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE,
    RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.CHECK_CLIENT_CONFIG,
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_CONSUME_STATS, RequestCode.GET_CONSUMER_CONNECTION_LIST,
    RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.QUERY_MESSAGE,
    RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.DELETE_LMQ, RequestCode.GET_LMQ_METADATA,
    RequestCode.GET_DELETED_TOPICS,
    RequestCode.CONSUME_MESSAGE_DIRECTLY,
    RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.DELETE_SUBSCRIPTIONGROUP, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
    RequestCode.BATCH_REQUEST,
    RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, RequestCode.QUERY_LOGICAL_QUEUE_MAPPING,
    RequestCode.SEAL_LOGICAL_QUEUE, RequestCode.DELETE_LOGICAL_QUEUE_MAPPING,
    RequestCode.GET_BROKER_EPOCH_CACHE,
    RequestCode.AUTH_CREATE_USER, RequestCode.AUTH_UPDATE_USER, RequestCode.AUTH_DELETE_USER,
    RequestCode.AUTH_GET_USER, RequestCode.AUTH_LIST_USER, RequestCode.AUTH_CREATE_ACL,
    RequestCode.AUTH_UPDATE_ACL, RequestCode.AUTH_DELETE_ACL, RequestCode.AUTH_GET_ACL,
    RequestCode.AUTH_LIST_ACL, RequestCode.GET_AUTH_METADATA,
    RequestCode.UPDATE_BROKER_CONFIG, RequestCode.GET_BROKER_CONFIG,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
    RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.VIEW_BROKER_STATS_DATA,
    RequestCode.CLEAN_UNUSED_TOPIC, RequestCode.END_TRANSACTION,
    RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
    RequestCode.QUERY_CONSUME_QUEUE, RequestCode.GET_ALL_PRODUCER_INFO,
    RequestCode.DELETE_EXPIRED_COMMITLOG, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_BROKER_HA_STATUS,
})


async def test_the_code_list_is_complete(live: Live) -> None:
    assert sorted(live.broker.server._dispatcher._processors) == REGISTERED


_junk_text = st.sampled_from(["", " ", "-", "+", "0x10", "1e3", "NaN", "true", "\uff11\uff12",
                              "9" * 25, str(2**31), str(-(2**31) - 1), str(2**63),
                              "-1", "0", "7", "\x00", "%RETRY%", "a" * 300])
_topics = st.sampled_from(["Fz", "TBW102", "%RETRY%g", "Nope", "", "bad topic",
                           "SCHEDULE_TOPIC_XXXX", "x" * 200])


@functools.cache
def _valid(kind: Kind, key: str) -> st.SearchStrategy[str]:
    if key in ("topic", "b"):
        return _topics
    if key in ("offset", "queueOffset"):  # near real records: mid-record offsets too
        return st.integers(-5, 2000).map(str)
    if kind is Kind.STR:
        return st.sampled_from(["g", "", "Fz", "a || b", "*", "+queue.type=BatchCQ",
                                "SINGLE_TAG", "UPPER"]) | st.text(max_size=12)
    if kind is Kind.BOOL:
        return st.sampled_from(["true", "false", "1", "0", "TRUE", "yes"])
    bits = 31 if kind is Kind.INT else 63
    return st.integers(-(2**bits), 2**bits - 1).map(str) | st.integers(-3, 40).map(str)


_one_in_ten = st.integers(0, 9)
_one_in_five = st.integers(0, 4)
_extra = st.dictionaries(
    st.sampled_from(["topic", "consumerGroup", "producerGroup", "clientID", "group",
                     "offset", "queueId", "zz"]), _junk_text | _topics, max_size=3)


@st.composite
def mutated_ext(draw: st.DrawFn, schema: type[Header] | None) -> dict[str, str]:
    ext: dict[str, str] = {}
    for spec in schema.__schema__ if schema is not None else ():
        if draw(_one_in_ten) == 0:
            continue  # dropped
        if draw(_one_in_five) == 0:
            ext[spec.key] = draw(_junk_text)
        else:
            ext[spec.key] = draw(_valid(spec.kind, spec.key))
    for key, value in draw(_extra).items():
        ext.setdefault(key, value)
    return ext


@functools.cache
def _ext_strategy(code: int) -> st.SearchStrategy[dict[str, str]]:
    """The code's ext strategy, built once: a strategy is validated when first drawn from,
    and building one per example spent more than the broker's answer took."""
    return mutated_ext(REQUEST_HEADERS.get(code))


def _tame(code: int, ext: dict[str, str]) -> None:
    """Keep examples bounded: a generated long-poll waits at most 100 ms, and nothing
    touches the baseline topic."""
    if code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        timeout = ext.get("suspendTimeoutMillis", "")
        if timeout.lstrip("+-").isdigit() and timeout.isascii() and int(timeout) > 100:
            ext["suspendTimeoutMillis"] = "100"
    for key in ("topic", "b"):
        if ext.get(key) == BASELINE:
            ext[key] = "Fz"


_bodies = st.one_of(st.just(b""), st.binary(max_size=64),
                    _json_values.map(lambda v: json.dumps(v).encode()),
                    st.just(b'{"clientID":"c","consumerDataSet":[{"groupName":"g",'
                            b'"consumeType":1,"messageModel":9,"consumeFromWhere":0}]}\n'))


@pytest.mark.parametrize("code", REGISTERED)
@PER_CODE
@given(data=st.data())
async def test_malformed_ext_values_get_an_error_and_leave_the_store_alone(
        live: Live, code: int, data: st.DataObject) -> None:
    ext = data.draw(_ext_strategy(code), label="ext")
    _tame(code, ext)
    body = data.draw(_bodies, label="body")
    before = live.store_mark()
    resp = await live.peer(RemotingCommand.request(code, ext, body), timeout=10)
    assert resp.is_response and resp.code in ResponseCode.__members__.values()
    if resp.code != ResponseCode.SUCCESS:
        assert resp.remark, (code, resp.code)
        assert live.store_mark() == before
    elif code not in SEND_CODES and code != RequestCode.CONSUMER_SEND_MSG_BACK:
        assert live.store_mark() == before
    if code == RequestCode.VIEW_MESSAGE_BY_ID and resp.code == ResponseCode.SUCCESS:
        [msg] = decode_messages(resp.full_body())
        assert msg.commit_log_offset == int(ext["offset"])
    await live.still_serves()
