"""A broker table file that is there but does not read stops the start, naming the file,
and is left as it was: never a broker serving -- and then writing -- an empty table in its
place. Each file a broker reads at start is cut short and emptied in turn, on a copy of
the files a real broker wrote."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.config import BrokerConfig
from tidemq.broker.table_json import read_table
from tidemq.codec.command import RequestCode
from tidemq.errors import MetadataUnreadable
from tidemq.store.config import StoreConfig

FILES = ("topics.json", "subscriptionGroup.json", "consumerOffset.json",
         "logicalQueues.json", "deletedTopics.json", "delayOffset.json",
         "timerCheckpoint.json")


def _app(root: Path) -> BrokerApp:
    return BrokerApp(BrokerConfig(listen_port=0, namesrv_addr=""),
                     StoreConfig(store_path_root_dir=str(root),
                                 mapped_file_size_commit_log=1024 * 1024))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose broker wrote every file of :data:`FILES` and stopped."""
    root = tmp_path_factory.mktemp("written") / "store"

    async def run() -> None:
        app = _app(root)
        await app.start()
        try:
            async with Peer(app.broker_addr) as peer:
                await peer.ok(wire.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                           json.dumps({"groupName": "cg"}).encode()))
                for topic in ("Kept", "Gone"):
                    await peer.ok(wire.create_topic(topic, 2))
                    await peer.ok(wire.send(topic, b"m"))
                await peer.ok(wire.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                           topic="Kept", group="cg", timestamp=-1))
                await peer.ok(wire.request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="Gone"))
                for delay in ({"DELAY": "1"}, {"TIMER_DELAY_SEC": "3600"}):
                    await peer.ok(wire.send("Kept", b"later", properties=wire.props(**delay)))
                # delivered a second later at offset 1, the level's progress to be kept
                await peer.messages("Kept", 0, 1, sys_flag=wire.PULL_SUSPEND, suspend_ms=5000)
            app.logical.persist()
        finally:
            await app.stop()

    asyncio.run(run())
    for name in FILES:
        assert (root / "config" / name).stat().st_size > 0, name
    return root


@pytest.mark.parametrize("damage", ["empty", "cut", "not an object"])
@pytest.mark.parametrize("name", FILES)
async def test_a_table_file_that_does_not_read_stops_the_start(
        written: Path, tmp_path: Path, name: str, damage: str) -> None:
    root = tmp_path / "store"
    shutil.copytree(written, root)
    path = root / "config" / name
    whole = path.read_bytes()
    bad = {"empty": b"", "cut": whole[:len(whole) // 2], "not an object": b"[]"}[damage]
    path.write_bytes(bad)
    app = _app(root)
    with pytest.raises(MetadataUnreadable) as caught:
        await app.start()
    assert caught.value.path == str(path)
    assert name in str(caught.value)
    assert not app.store.running, "the failed start left the store running"
    assert path.read_bytes() == bad, "the start wrote over the file"
    path.write_bytes(whole)  # the file restored: a broker starts on the store again
    again = _app(root)
    await again.start()
    await again.stop()


def test_read_table(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    assert read_table(path, dict) is None
    path.write_bytes(b'{"a": {"0": 1}}')
    assert read_table(path, lambda d: {k: {int(q): o for q, o in v.items()}
                                       for k, v in d.items()}) == {"a": {0: 1}}
    path.write_bytes(b'{"a": 1}')
    with pytest.raises(MetadataUnreadable) as caught:
        read_table(path, lambda d: d["b"])
    assert "KeyError" in caught.value.reason
    path.write_bytes(b" \n")
    with pytest.raises(MetadataUnreadable) as caught:
        read_table(path, dict)
    assert caught.value.reason == "empty"
