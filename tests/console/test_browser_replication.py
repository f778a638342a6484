"""The cluster page's replication table in a real headless Chromium: a standalone
master and a replica broker process of its group; the group shows its master, and the
replica in sync with its lag in bytes and seconds."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.child_server import SMALL_SEGMENT, free_ports
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit
from tests.crash.broker_process import BrokerProcess

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

REPLICA_ROW = '#replication tr[data-group="broker-a"][data-replica="1"]'


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[Standalone, BrokerProcess]]:
    (ha_port,) = free_ports(1)
    master = Standalone(tmp_path / "data", ha_port=ha_port)
    replica = BrokerProcess(tmp_path / "replica", master.namesrv, {
        "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": f"127.0.0.1:{ha_port}",
        "mappedFileSizeCommitLog": SMALL_SEGMENT})
    try:
        replica.start()
        yield master, replica
    finally:
        replica.stop()
        master.stop()


def test_the_cluster_page_shows_each_groups_master_replicas_and_lag(
        group: tuple[Standalone, BrokerProcess], browser: Browser) -> None:
    master, replica = group
    visit = Visit(browser, master.console)
    b = browser
    visit.page("/cluster")
    # the replica registers and connects at its own pace: the page is read again until then
    for _ in range(120):
        if b.exists(REPLICA_ROW) and b.text(f"{REPLICA_ROW} .state") == "in sync":
            break
        time.sleep(0.25)  # nothing to wait on in a page: it is read again
        visit.page("/cluster")
    assert b.text(f"{REPLICA_ROW} .state") == "in sync"
    assert b.text(f"{REPLICA_ROW} td:nth-child(4)") == replica.addr
    assert b.text('#replication tr[data-group="broker-a"] .master') == (
        f"127.0.0.1:{master.broker_port}")
    assert re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB|GiB)", b.text(f"{REPLICA_ROW} .lag-bytes"))
    assert re.fullmatch(r"\d+\.\d", b.text(f"{REPLICA_ROW} .lag-seconds"))
    assert "broker-a: 2 of 2 in sync" in b.text("#in-sync")
    visit.shot("cluster-replication")
