"""A request sent to the wrong kind of server is refused with upstream's remark and what
the server is; the lists of whose request is whose match what each server registers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.server_roles import (
    CONTROLLER_REQUESTS,
    NAMESRV_REQUESTS,
    refuse_unserved,
    unserved_remark,
)
from tidemq.errors import ResponseCode
from tidemq.namesrv.controller import ControllerApp, ControllerConfig
from tidemq.testing import Cluster


def test_a_name_servers_request_on_a_broker_names_both() -> None:
    remark = unserved_remark(RequestCode.GET_ROUTEINFO_BY_TOPIC, "broker", "broker-a")
    assert remark == (" request type 105 not supported: this is a broker (broker-a), and "
                      "GET_ROUTEINFO_BY_TOPIC is a name server's request: give a name "
                      "server's address (-n, namesrvAddr)")


def test_a_brokers_request_on_a_name_server_names_both() -> None:
    remark = unserved_remark(RequestCode.SEND_MESSAGE_V2, "name server")
    assert remark.startswith(" request type 310 not supported: this is a name server, and "
                             "SEND_MESSAGE_V2 is a broker's request: give a broker's address")


def test_a_controllers_request_on_a_name_server_without_one() -> None:
    remark = unserved_remark(RequestCode.CONTROLLER_ELECT_MASTER, "name server")
    assert "CONTROLLER_ELECT_MASTER is a controller's request" in remark


@pytest.mark.parametrize("code", [99999, RequestCode.SEND_MESSAGE])
def test_an_unknown_code_or_ones_own_keeps_upstreams_remark(code: int) -> None:
    assert unserved_remark(code, "broker", "broker-a") == f" request type {code} not supported"


def test_the_refusal_is_request_code_not_supported() -> None:
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    answer = refuse_unserved(request, "broker", "b")
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "GET_BROKER_CLUSTER_INFO is a name server's request" in (answer.remark or "")


async def test_the_lists_are_what_the_servers_register(tmp_path: Path) -> None:
    async with Cluster(tmp_path, brokers=1) as cluster:
        assert cluster.namesrv is not None
        assert cluster.namesrv.server.codes == NAMESRV_REQUESTS
        broker_codes = cluster.brokers[0].server.codes
        assert not broker_codes & (NAMESRV_REQUESTS | CONTROLLER_REQUESTS)
    controller = ControllerApp(ControllerConfig(
        listen_port=0, controller_raft_self_id="n0",
        controller_raft_peers="n0-127.0.0.1:1", controller_store_path="memory"))
    assert set(controller.processors()) == CONTROLLER_REQUESTS
