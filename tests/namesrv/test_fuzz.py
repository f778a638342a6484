"""Hypothesis against a LIVE name server: for every request code it registers, ext fields
from the code's header schema, mutated (dropped keys, junk numbers, overflow, wrong
types), with bodies of every JSON shape, get a response -- a failure carries a RocketMQ
code and a remark -- and never a crash; a well-behaved broker's route keeps being
served after every example."""

from __future__ import annotations

import functools
import json
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.namesrv.conftest import register_request, route_request, topic

from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import REQUEST_HEADERS
from tidemq.codec.schema import Header, Kind
from tidemq.errors import ResponseCode
from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.net import RemotingClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

PER_CODE = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
BASELINE = "Baseline"


class Live(logging.Handler):
    """The name server under test, a client of it, and the errors it logged meanwhile."""

    def __init__(self, app: NameServerApp, client: RemotingClient) -> None:
        super().__init__(logging.ERROR)
        self.app = app
        self.client = client
        self.crashes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.crashes.append(self.format(record))

    async def request(self, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.request(self.app.address, cmd, 10.0)

    async def still_serves(self) -> None:
        resp = await self.request(route_request(BASELINE))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert not self.crashes, self.crashes[0]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app() -> AsyncIterator[NameServerApp]:
    server = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient(request_timeout=10.0) as peer:
        yield peer


@pytest_asyncio.fixture(loop_scope="module")
async def live(app: NameServerApp, client: RemotingClient) -> AsyncIterator[Live]:
    live = Live(app, client)
    resp = await live.request(register_request("base", "127.0.0.1:30911",
                                               {BASELINE: topic(BASELINE)}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    logger = logging.getLogger("tidemq")
    logger.addHandler(live)
    yield live
    logger.removeHandler(live)


_junk_text = st.sampled_from(["", " ", "-", "+", "0x10", "1e3", "NaN", "true", "\uff11\uff12",
                              "9" * 25, str(2**31), str(-(2**31) - 1), str(2**63),
                              "-1", "0", "7", "\x00", "a" * 300, "{}", "[1]"])
#: Never the baseline broker or topic, which a valid unregistration or deletion may remove.
_names = st.sampled_from(["b", "", " ", "bad name", "x" * 300, "DefaultCluster",
                          "127.0.0.1:30912", "%RETRY%g"])


@functools.cache
def _valid(kind: Kind, key: str) -> st.SearchStrategy[str]:
    if kind is Kind.STR:
        return _names | st.text(max_size=12)
    if kind is Kind.BOOL:
        return st.sampled_from(["true", "false", "1", "0", "TRUE", "yes"])
    bits = 31 if kind is Kind.INT else 63
    return st.integers(-(2**bits), 2**bits - 1).map(str) | st.integers(-3, 40).map(str)


_one_in_ten = st.integers(0, 9)
_one_in_five = st.integers(0, 4)


@st.composite
def mutated_ext(draw: st.DrawFn, schema: type[Header] | None) -> dict[str, str]:
    ext: dict[str, str] = {}
    for spec in schema.__schema__ if schema is not None else ():
        if draw(_one_in_ten) == 0:
            continue
        ext[spec.key] = draw(_junk_text if draw(_one_in_five) == 0
                             else _valid(spec.kind, spec.key))
    extra = draw(st.dictionaries(st.sampled_from(["topic", "brokerName", "clusterName",
                                                  "namespace", "key", "value", "zz"]),
                                 _junk_text | _names, max_size=3))
    for key, value in extra.items():
        ext.setdefault(key, value)
    return ext


@functools.cache
def _ext_strategy(code: int) -> st.SearchStrategy[dict[str, str]]:
    return mutated_ext(REQUEST_HEADERS.get(code))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["topicConfigSerializeWrapper", "topicConfigTable", "dataVersion",
                         "filterServerList", "brokerAddrs", "topicList", "topic", "x",
                         "timestamp", "counter", "readQueueNums", "perm", "topicName"])
        | st.text(max_size=6), kids, max_size=3),
    max_leaves=10)


def _register_shaped(value: Any) -> bytes:
    return json.dumps({"topicConfigSerializeWrapper": value}).encode()


_bodies = st.one_of(st.just(b""), st.binary(max_size=64),
                    _json.map(lambda v: json.dumps(v).encode()),
                    _json.map(_register_shaped),
                    _json.map(lambda v: zlib.compress(json.dumps(v).encode())))


def _codes() -> list[int]:
    app = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    return sorted(app.server._dispatcher._processors)


@pytest.mark.parametrize("code", _codes())
@PER_CODE
@given(data=st.data())
async def test_malformed_requests_get_an_error_and_others_keep_being_served(
        live: Live, code: int, data: st.DataObject) -> None:
    ext = data.draw(_ext_strategy(code), label="ext")
    body = data.draw(_bodies, label="body")
    resp = await live.request(RemotingCommand.request(code, ext, body))
    assert resp.is_response and resp.code in ResponseCode.__members__.values()
    if resp.code != ResponseCode.SUCCESS:
        assert resp.remark, (code, resp.code)
    await live.still_serves()
