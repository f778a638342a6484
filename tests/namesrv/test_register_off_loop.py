"""A registration of thousands of topics takes a while to decode; the name server decodes
a large one on a thread, its event loop answering others meanwhile, and applies the
registrations in the order they came all the same. Each test holds the decoding: on the
loop, nothing would answer meanwhile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.broker.held import Held

import tidemq.namesrv.app as app_module
import tidemq.namesrv.routes as routes_module
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import UnRegisterBrokerRequestHeader
from tidemq.errors import ResponseCode
from tidemq.namesrv import NameServerApp
from tidemq.net import RemotingClient

from .conftest import CLUSTER, register_request, route_request, topic

A = "10.0.0.1:10911"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """Every registration decoded on a thread, the first decoding held."""
    h = Held()
    decode = app_module.decode_topics

    def slow(data: Any, cls: Any) -> Any:
        h.hold()
        return decode(data, cls)

    monkeypatch.setattr(app_module, "THREAD_DECODE_BYTES", 0)
    monkeypatch.setattr(app_module, "decode_topics", slow)
    yield h
    h.release.set()


async def _registering(client: RemotingClient, app: NameServerApp, held: Held,
                       cmd: RemotingCommand) -> asyncio.Task[RemotingCommand]:
    task = asyncio.create_task(client.request(app.address, cmd))
    await held.entered_soon()
    return task


async def test_a_registration_is_decoded_off_the_loop(
        app: NameServerApp, client: RemotingClient, held: Held) -> None:
    task = await _registering(client, app, held,
                              register_request("broker-a", A, {"Big": topic("Big")}))
    async with RemotingClient(request_timeout=5.0) as other:
        meanwhile = await asyncio.wait_for(other.request(app.address, route_request("Big")), 5)
    assert meanwhile.code == ResponseCode.TOPIC_NOT_EXIST  # not applied before it is decoded
    held.release.set()
    assert (await task).code == ResponseCode.SUCCESS
    assert held.gave_up == [False]
    assert (await client.request(app.address, route_request("Big"))).code == 0


async def test_registrations_are_applied_in_the_order_they_came(
        app: NameServerApp, client: RemotingClient, held: Held) -> None:
    first = await _registering(client, app, held, register_request(
        "broker-a", A, {"Old": topic("Old")}, counter=1))
    second = asyncio.create_task(client.request(app.address, register_request(
        "broker-a", A, {"New": topic("New")}, counter=2)))
    unregister = asyncio.create_task(client.request(app.address, RemotingCommand.request(
        RequestCode.UNREGISTER_BROKER, UnRegisterBrokerRequestHeader(
            broker_name="broker-a", broker_addr=A, cluster_name=CLUSTER,
            broker_id=0).to_ext())))
    # a request after them on the same connection answered: the server has read both
    await asyncio.create_task(client.request(app.address, route_request("Old")))
    assert app.routes.pick_route("New") is None  # neither overtook the held one
    held.release.set()
    assert [r.code for r in await asyncio.gather(first, second, unregister)] == [0, 0, 0]
    assert app.routes.pick_route("New") is None  # registered last, then unregistered
    assert app.routes.pick_route("Old") is None


async def test_a_bad_body_decoded_off_the_loop_is_refused(
        app: NameServerApp, client: RemotingClient, held: Held) -> None:
    held.release.set()
    cmd = register_request("broker-a", A, {"X": topic("X")}, crc=False)
    cmd.body = b"{not json"
    response = await client.request(app.address, cmd)
    assert response.code == ResponseCode.INVALID_PARAMETER
    assert "REGISTER_BROKER" in (response.remark or "")


async def test_the_topics_are_compared_with_the_last_table_off_the_loop(
        app: NameServerApp, client: RemotingClient, held: Held,
        monkeypatch: pytest.MonkeyPatch) -> None:
    held.release.set()
    on_loop: list[bool] = []
    compare = app_module.diff_topics

    def recorded(base: Any, table: Any) -> Any:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return compare(base, table)

    monkeypatch.setattr(app_module, "diff_topics", recorded)
    monkeypatch.setattr(routes_module, "diff_topics", recorded)
    for counter in (1, 2):
        topics = {"T": topic("T"), f"U{counter}": topic(f"U{counter}")}
        response = await client.request(app.address, register_request(
            "broker-a", A, topics, counter=counter))
        assert response.code == ResponseCode.SUCCESS
    assert on_loop == [False, False]
    route = app.routes.pick_route("U2")
    assert route is not None and route.queue_datas[0].broker_name == "broker-a"


async def test_a_large_body_is_summed_off_the_loop_and_refused_when_it_does_not_match(
        app: NameServerApp, client: RemotingClient, held: Held,
        monkeypatch: pytest.MonkeyPatch) -> None:
    held.release.set()
    on_loop: list[bool] = []
    matches = app_module._crc_matches

    def recorded(data: Any, header: Any) -> bool:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return matches(data, header)

    monkeypatch.setattr(app_module, "_crc_matches", recorded)
    cmd = register_request("broker-a", A, {"Big": topic("Big")})
    assert (await client.request(app.address, cmd)).code == ResponseCode.SUCCESS
    cmd = register_request("broker-a", A, {"Bad": topic("Bad")}, counter=2)
    cmd.ext_fields["bodyCrc32"] = str(int(cmd.ext_fields["bodyCrc32"]) ^ 1)
    response = await client.request(app.address, cmd)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert on_loop == [False, False]
    assert app.routes.pick_route("Bad") is None
