"""``tidemq admin resendKeptCut`` against a real two-broker cluster: the messages of a
kept cut the cluster does not hold are sent with their message ids, to the queues they
were cut from and in their order; those it holds are not, system-topic records are
skipped, and a second run sends nothing. A missing or damaged file, or a cut no broker
of the cluster stored, is refused saying so."""

from __future__ import annotations

import fcntl
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
import typer.rich_utils
from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin, create, eventually, runner

from tidemq.cli.commands import admin_kept_cuts
from tidemq.cli.main import app
from tidemq.client import Message, Producer
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr, pack_host
from tidemq.store import kept_cuts, truncation
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageInput, MessageStore

TOPIC = "KeptCutResend"
LOST = 6
BIG = b"a compressed body " * 400


def _kept_cut(root: Path, store_host: HostAddr, topic: str = TOPIC) -> Path:
    """A store at ``store_host`` that held ``lost-0..5`` of ``topic`` on queues 0 and 1
    (``lost-1`` also sent to the cluster by a retrying producer, ``lost-4`` stored with a
    zlib body), a message without UNIQ_KEY and a delayed message, all cut off and kept."""
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4096)
    with MessageStore(config, store_host=store_host) as store:
        store.put(topic, 0, MessageInput(b"agreed", encode_properties({"UNIQ_KEY": "AGREED"})))
        cut = store.commitlog.max_offset
        for i in range(LOST):
            props = encode_properties({"UNIQ_KEY": f"LOST{i:04d}", "KEYS": f"order-{i}",
                                       "TAGS": "t", "MIN_OFFSET": "0"})
            if i == 4:
                store.put(topic, 0, MessageInput(zlib.compress(BIG), props), sys_flag=0x1)
            else:
                store.put(topic, i % 2, MessageInput(f"lost-{i}".encode(), props))
        store.put(topic, 1, MessageInput(b"no-id", encode_properties({"KEYS": "plain"})))
        delayed = {"UNIQ_KEY": "DELAYED", "REAL_TOPIC": topic, "REAL_QID": "0", "DELAY": "3"}
        store.put("SCHEDULE_TOPIC_XXXX", 2, MessageInput(b"later", encode_properties(delayed)))
    truncation.request(StoreLayout(root), cut)
    with MessageStore(config):
        pass
    [kept] = kept_cuts.kept_cuts(StoreLayout(root).truncated_dir)
    return kept.path


def _by_id(cluster: ThreadedCluster, msg_id: str) -> list[Any]:
    return _by_id_in(cluster, TOPIC, msg_id)


def _by_id_in(cluster: ThreadedCluster, topic: str, msg_id: str) -> list[Any]:
    result = runner.invoke(app, ["admin", "queryMsgByUniqueKey", "-t", topic, "-i", msg_id,
                                 "-a", "-n", cluster.namesrv, "--json"])
    if result.exit_code != 0:
        return []
    found = json.loads(result.stdout)
    return found if isinstance(found, list) else [found]


@pytest.mark.usefixtures("cluster")
def test_a_kept_cut_is_resent_once_to_its_queues_in_order(cluster: ThreadedCluster,
                                                          tmp_path: Path) -> None:
    create(cluster, TOPIC)
    old_master = cluster.cluster.brokers[1]  # the cut came from this broker's group
    path = _kept_cut(tmp_path / "old-master", pack_host(old_master.broker_addr))

    async def retried() -> None:  # a producer retried lost-1 after the failover
        async with Producer("kept-cut-retry", cluster.namesrv) as producer:
            await producer.send(Message(TOPIC, b"lost-1", {"UNIQ_KEY": "LOST0001"}))

    cluster.call(retried())
    assert eventually(lambda: _by_id(cluster, "LOST0001"), bool)

    dry = admin(cluster, "resendKeptCut", "-f", str(path), "--dry-run")
    assert [(r["msgId"], r["queueId"], r["outcome"].split(":")[0]) for r in dry] == [
        ("LOST0000", 0, "would send"), ("LOST0001", 1, "already stored"),
        ("LOST0002", 0, "would send"), ("LOST0003", 1, "would send"),
        ("LOST0004", 0, "would send"), ("LOST0005", 1, "would send"),
        (dry[6]["msgId"], 1, "would send (no UNIQ_KEY"), ("DELAYED", 2, "skipped")]
    assert _by_id(cluster, "LOST0000") == []

    rows = admin(cluster, "resendKeptCut", "-f", str(path))
    assert [(r["msgId"], r["outcome"]) for r in rows][:6] == [
        ("LOST0000", "sent: SEND_OK"), ("LOST0001", "already stored"),
        ("LOST0002", "sent: SEND_OK"), ("LOST0003", "sent: SEND_OK"),
        ("LOST0004", "sent: SEND_OK"), ("LOST0005", "sent: SEND_OK")]
    assert rows[6]["outcome"] == "sent: SEND_OK (no UNIQ_KEY: not looked up)"
    assert "system topic SCHEDULE_TOPIC_XXXX for KeptCutResend" in rows[7]["outcome"]
    arrived = {}
    for i in (0, 2, 3, 4, 5):
        [found] = eventually(lambda i=i: _by_id(cluster, f"LOST{i:04d}"), bool)
        body = BIG if i == 4 else f"lost-{i}".encode()
        assert found["body"] == body.decode()  # inflated, not the stored zlib bytes
        assert found["properties"].get("KEYS") == f"order-{i}"
        assert "MIN_OFFSET" not in found["properties"]
        arrived[i] = (found["storeHost"], found["queueId"], found["queueOffset"])
    # each on its queue of the old master's group, in the order the log held them
    assert {host for host, _, _ in arrived.values()} == {old_master.broker_addr}
    assert [arrived[i][1] for i in (0, 2, 4)] == [0, 0, 0]
    assert [arrived[i][1] for i in (3, 5)] == [1, 1]
    assert arrived[0][2] < arrived[2][2] < arrived[4][2]
    assert arrived[3][2] < arrived[5][2]

    again = admin(cluster, "resendKeptCut", "-f", str(path))
    assert [r["outcome"] for r in again][:6] == ["already stored"] * 6


def test_a_cut_no_broker_stored_needs_its_group_named(cluster: ThreadedCluster,
                                                      tmp_path: Path) -> None:
    create(cluster, "KeptCutElsewhere")
    path = _kept_cut(tmp_path / "elsewhere", HostAddr(b"\x0a\x00\x00\x09", 10911),
                     "KeptCutElsewhere")
    result = admin(cluster, "resendKeptCut", "-f", str(path), "--dry-run", code=1)
    assert "10.0.0.9:10911" in result.stderr and "--brokerName" in result.stderr
    name = cluster.cluster.brokers[0].config.broker_name
    rows = admin(cluster, "resendKeptCut", "-f", str(path), "--dry-run", "-b", name)
    assert rows[0]["outcome"] == "would send"


def test_a_damaged_or_missing_kept_file_is_refused_naming_it(
        cluster: ThreadedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # typer's error box is 80 columns wide by default: where it wraps the path and the
    # sentence after it would depend on the length of the test's directory
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)
    path = tmp_path / "1-100.log"
    path.write_bytes(b"\x00\x00\x01\x00not a record")
    result = admin(cluster, "resendKeptCut", "-f", str(path), code=2)
    assert "1-100.log: not a kept cut" in result.stderr
    assert result.stdout == ""
    result = admin(cluster, "resendKeptCut", "-f", str(tmp_path / "2-7.log"), code=2)
    assert "2-7.log" in result.stderr and "does not exist" in result.stderr


@pytest.mark.usefixtures("cluster")
def test_a_long_cut_is_looked_up_a_window_at_a_time_and_a_retried_copy_sent_once(
        cluster: ThreadedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookups run ahead a window at a time while the sends keep the log's order, with
    progress on stderr; a message the old master stored twice (its producer retried
    before the cut) is sent once, though both copies were looked up before either was."""
    topic = "KeptCutWindows"
    create(cluster, topic)
    broker = cluster.cluster.brokers[0]
    root = tmp_path / "old-master"
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4096)
    ids = ["W0", "W1", "W0", "W2", "W3", "W4", "W5"]  # W0 stored twice
    with MessageStore(config, store_host=pack_host(broker.broker_addr)) as store:
        store.put(topic, 0, MessageInput(b"agreed", encode_properties({"UNIQ_KEY": "AGREED"})))
        cut = store.commitlog.max_offset
        for i, uniq in enumerate(ids):
            store.put(topic, 0, MessageInput(f"w-{i}".encode(),
                                             encode_properties({"UNIQ_KEY": uniq})))
    truncation.request(StoreLayout(root), cut)
    with MessageStore(config):
        pass
    [kept] = kept_cuts.kept_cuts(StoreLayout(root).truncated_dir)
    monkeypatch.setattr(admin_kept_cuts, "WINDOW", 3)

    result = runner.invoke(app, ["admin", "resendKeptCut", "-f", str(kept.path), "-n",
                                 cluster.namesrv, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["msgId"], r["outcome"]) for r in rows] == [
        ("W0", "sent: SEND_OK"), ("W1", "sent: SEND_OK"),
        ("W0", "already sent: an earlier copy in the cut was sent"),
        *[(f"W{i}", "sent: SEND_OK") for i in range(2, 6)]]
    assert [line for line in result.stderr.splitlines() if line.startswith("resendKeptCut")] \
        == ["resendKeptCut: 3 of 7 messages looked up, 2 sent",
            "resendKeptCut: 6 of 7 messages looked up, 5 sent",
            "resendKeptCut: 7 of 7 messages looked up, 6 sent"]
    offsets = []
    for i, uniq in enumerate(ids):
        if i == 2:
            continue
        [found] = eventually(lambda u=uniq: _by_id_in(cluster, topic, u), bool)
        assert found["body"] == f"w-{i}"
        offsets.append(found["queueOffset"])
    assert offsets == sorted(offsets)  # in the log's order on its queue


@pytest.mark.usefixtures("cluster")
def test_a_large_cut_is_resent_in_the_memory_of_a_window(
        cluster: ThreadedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut may hold up to keptCutMaxBytes (1 GiB by default): the command reads it a
    window at a time and writes each outcome as it is decided, in the memory of a window
    (windows are bounded in bytes as well as in messages), not of the file. The table it
    writes is the one the whole run would have given: columns as wide as their widest
    cell."""
    topic = "KeptCutLarge"
    create(cluster, topic)
    create(cluster, topic + "-long-name")
    broker = cluster.cluster.brokers[0]
    root = tmp_path / "old-master"
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20)
    body = bytes(range(256)) * 240  # 60 KiB, not compressible by the store
    count = 96
    with MessageStore(config, store_host=pack_host(broker.broker_addr)) as store:
        store.put(topic, 0, MessageInput(b"agreed", encode_properties({"UNIQ_KEY": "AGREED"})))
        cut = store.commitlog.max_offset
        for i in range(count):
            store.put(topic + ("-long-name" if i == count - 1 else ""), i % 4,
                      MessageInput(body, encode_properties({"UNIQ_KEY": f"L{i:05d}"})))
    truncation.request(StoreLayout(root), cut)
    with MessageStore(config):
        pass
    [kept] = kept_cuts.kept_cuts(StoreLayout(root).truncated_dir)
    assert kept.size > count * len(body)
    monkeypatch.setattr(admin_kept_cuts, "WINDOW_BYTES", 4 * len(body))
    monkeypatch.setattr(admin_kept_cuts, "CHECK_PROGRESS", 40)

    tracemalloc.start()
    try:
        result = runner.invoke(app, ["admin", "resendKeptCut", "-f", str(kept.path),
                                     "--dry-run", "-n", cluster.namesrv])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + count
    assert lines[0].split() == ["#Phys", "#Topic", "#QueueId", "#MsgId", "#Outcome"]
    assert [line.split()[3] for line in lines[1:]] == [f"L{i:05d}" for i in range(count)]
    assert {line.index("L0") for line in lines[1:]} == {lines[0].index("#MsgId")}
    assert "would send" in lines[-1]
    assert "96 of 96 messages looked up, 96 to send" in result.stderr
    assert "resendKeptCut: 80 messages checked" in result.stderr  # the first pass's progress
    assert peak < kept.size // 4, (peak, kept.size)


def test_a_cut_another_run_is_sending_is_refused_and_nothing_sent(
        cluster: ThreadedCluster, tmp_path: Path) -> None:
    """Two runs at once would each find a message missing and both send it: while one
    holds the kept file, another is refused saying so (a dry run is not), and sends
    nothing."""
    topic = "KeptCutLocked"
    create(cluster, topic)
    path = _kept_cut(tmp_path / "locked", pack_host(cluster.cluster.brokers[0].broker_addr),
                     topic)
    with path.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a run sending it holds it
        refused = admin(cluster, "resendKeptCut", "-f", str(path), code=1)
        assert "another resendKeptCut is sending this cut" in refused.stderr
        assert refused.stdout == ""
        dry = admin(cluster, "resendKeptCut", "-f", str(path), "--dry-run")
        assert dry[0]["outcome"] == "would send"
    assert _by_id_in(cluster, topic, "LOST0000") == []
    rows = admin(cluster, "resendKeptCut", "-f", str(path))  # the lock given back
    assert rows[0]["outcome"] == "sent: SEND_OK"
