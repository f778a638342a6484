"""Hypothesis against a LIVE controller (a Raft group of one): for every request code
it serves, mutated header fields and bodies of any JSON shape get a code and a remark,
log no error, and the controller goes on answering a well-formed request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from tests.crash.broker_process import free_port
from tests.namesrv.test_fuzz import PER_CODE, _bodies, _ext_strategy

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.net import RemotingClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Crashes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def controller(tmp_path_factory: pytest.TempPathFactory
                     ) -> AsyncIterator[ControllerApp]:
    config = ControllerConfig(listen_port=0, controller_raft_self_id="n0",
                              controller_raft_peers=f"n0-127.0.0.1:{free_port()}",
                              controller_store_path=str(tmp_path_factory.mktemp("raft")))
    app = ControllerApp(config)
    await app.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (app.is_leader and app.leader_address()):
            assert loop.time() < deadline, "a controller alone never led"
            await asyncio.sleep(0.05)
        yield app
    finally:
        await app.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient(request_timeout=10.0) as peer:
        yield peer


@pytest_asyncio.fixture(loop_scope="module")
async def crashes() -> AsyncIterator[Crashes]:
    handler = Crashes()
    logger = logging.getLogger("tidemq")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _codes() -> list[int]:
    config = ControllerConfig(listen_port=0, controller_raft_self_id="n0",
                              controller_raft_peers="n0-127.0.0.1:1")
    return sorted(ControllerApp(config).processors())


@pytest.mark.parametrize("code", _codes())
@PER_CODE
@given(data=st.data())
async def test_malformed_requests_get_an_error_and_the_controller_goes_on(
        controller: ControllerApp, client: RemotingClient, crashes: Crashes, code: int,
        data: st.DataObject) -> None:
    ext = data.draw(_ext_strategy(code), label="ext")
    body = data.draw(_bodies, label="body")
    resp = await client.request(controller.address, RemotingCommand.request(code, ext, body))
    assert resp.is_response and resp.code in ResponseCode.__members__.values()
    if resp.code != ResponseCode.SUCCESS:
        assert resp.remark, (code, resp.code)
    meta = await client.request(controller.address, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_METADATA_INFO))
    assert meta.code == ResponseCode.SUCCESS, meta.remark
    assert not crashes.lines, crashes.lines[0]
