"""A broker's configuration page against a real cluster: every key read from the broker,
a change confirmed first and applied by the broker, a key the broker will not change at
run time refused with its answer shown, and nothing changed by a viewer."""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.console.conftest import Http
from tests.console.test_app import flash

from tidemq.client import config_admin
from tidemq.console import ConsoleServer
from tidemq.console.config import ConsoleConfig
from tidemq.console.users import Role, edit_users_file
from tidemq.testing import Cluster


async def _address(web: ConsoleServer) -> str:
    return (await web.console.admin.cluster_list())[0].address


def _path(addr: str) -> str:
    return f"/brokers/{urllib.parse.quote(addr, safe='')}/config"


async def test_a_run_time_key_changes_after_confirmation(http: Http, web: ConsoleServer,
                                                          cluster: Cluster) -> None:
    addr = await _address(web)
    page = await http.get(_path(addr))
    assert page.status == 200
    assert 'data-key="autoCreateTopicEnable"' in page.text
    assert 'data-key="brokerName"' in page.text

    confirm = await http.post(_path(addr), {"key": "autoCreateTopicEnable", "value": "false"})
    assert 'id="confirm-form"' in confirm.text
    assert "autoCreateTopicEnable is 'true'" in html.unescape(confirm.text)
    assert cluster.brokers[0].config.auto_create_topic_enable is True  # not yet

    done = await http.post(_path(addr), {"key": "autoCreateTopicEnable", "value": "false",
                                         "confirm": "yes"})
    assert "autoCreateTopicEnable is now 'false'" in flash(done.text)
    answer = await config_admin.broker_config(web.console.admin, addr)
    assert answer["autoCreateTopicEnable"] == "false"


async def test_a_key_the_broker_keeps_is_refused_with_its_answer(
        http: Http, web: ConsoleServer) -> None:
    addr = await _address(web)
    before = await config_admin.broker_config(web.console.admin, addr)
    page = await http.post(_path(addr), {"key": "brokerName", "value": "renamed",
                                         "confirm": "yes"})
    text = html.unescape(page.text)
    assert page.status == 400 and f"The broker at {addr} refused to set brokerName" in text
    assert "brokerName" in text.split("refused to set brokerName:", 1)[1]  # its remark
    assert await config_admin.broker_config(web.console.admin, addr) == before

    bad = await http.post(_path(addr), {"key": "a=b", "value": "1", "confirm": "yes"})
    assert bad.status == 400 and "one configuration key" in bad.text
    unknown = await http.get("/brokers/10.255.255.1:1/config")
    assert unknown.status == 404


@pytest.fixture
async def guarded(cluster: Cluster, tmp_path: Path) -> AsyncIterator[ConsoleServer]:
    path = tmp_path / "console-users.yml"
    edit_users_file(path, "victor", role=Role.VIEWER, password="victor-pw", cost=(10, 1, 1))
    async with ConsoleServer(cluster.namesrv_addr, port=0,
                             config=ConsoleConfig(users_file=str(path))) as server:
        yield server


async def test_a_viewer_reads_the_configuration_and_changes_nothing(
        guarded: ConsoleServer, cluster: Cluster) -> None:
    http = Http(guarded.url)
    await http.login("victor", "victor-pw")
    addr = await _address(guarded)
    page = await http.get(_path(addr))
    assert 'data-key="autoCreateTopicEnable"' in page.text
    assert '<fieldset class="controls" disabled>' in page.text and "change…" not in page.text
    refused = await http.post(_path(addr), {"key": "autoCreateTopicEnable", "value": "false",
                                            "confirm": "yes"})
    assert refused.status == 403
    assert cluster.brokers[0].config.auto_create_topic_enable is True
