"""``tidemq admin deleteExpiredCommitLog`` against a real broker whose own retention passes
never run during the test: the command alone deletes the commit-log files past
``fileReservedTime``, at an hour that is not its ``deleteWhen``."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin
from tests.cli.test_admin_groups_cli import human

from tidemq.client import Message, Producer

SEGMENT = 4096


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedCluster]:
    other_hour = f"{(datetime.datetime.now().hour + 12) % 24:02d}"
    running = ThreadedCluster(tmp_path_factory.mktemp("retention"), brokers=1, store={
        "mapped_file_size_commit_log": SEGMENT, "file_reserved_time": 0,
        "delete_when": other_hour, "clean_resource_interval": 3_600_000,
        "disk_max_used_space_ratio": 95}).start()
    try:
        yield running
    finally:
        running.stop()


def test_delete_expired_commit_log(small: ThreadedCluster) -> None:
    admin(small, "updateTopic", "-t", "RetainedTopic", "-b", small.broker_addrs[0], "-r", "1",
          "-w", "1")
    producer = Producer("RetentionProducer", small.namesrv)
    small.call(producer.start())
    try:
        for i in range(40):
            small.call(producer.send(Message("RetainedTopic", b"r" * 300 + b"%d" % i)))
    finally:
        small.call(producer.close())
    broker = small.cluster.brokers[0]
    assert broker.store.commitlog.min_offset == 0
    assert broker.store.commitlog.max_offset > 2 * SEGMENT
    addr = small.broker_addrs[0]
    out = admin(small, "deleteExpiredCommitLog", "-b", addr)
    assert out[addr] >= 2  # every closed segment: all are older than 0 hours
    assert broker.store.commitlog.min_offset == out[addr] * SEGMENT
    lines = human(small, "deleteExpiredCommitLog", "-c", "DefaultCluster")
    assert lines == [[f"{addr}:", "0", "commit", "log", "files", "deleted"], ["success"]]
