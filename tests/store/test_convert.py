"""Phase 2 of RIP-26: converting a topic's classic consume queues to batch consume queues
offline gives exactly the queues a BatchCQ topic would have had from the start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tidemq.broker.topics import TopicManager
from tidemq.cli.main import app
from tidemq.codec.bodies import TopicConfig
from tidemq.store.batch_consume_queue import BCQ_DTYPE, BCQ_UNIT
from tidemq.store.convert import ConversionError, convert_topic
from tidemq.store.layout import StoreLayout
from tidemq.store.message_store import MessageStore

from .conftest import FakeClock, OpenStore, msg, read_queue

TOPIC = "Conv"
BCQ_FILE = BCQ_UNIT * 8
runner = CliRunner()


def workload(store: MessageStore, clock: FakeClock) -> None:
    """Singles, outer batches and another topic in between, over several segments."""
    n = 0
    for i in range(40):
        clock.now += 1 + i % 3
        qid = i % 3
        if i % 4 == 0:
            store.put_batch(TOPIC, qid, [msg(b"b%d" % (n + k) * 9, tags=f"t{k % 2}",
                                             UNIQ_KEY=f"U{n + k}") for k in range(5)])
            n += 5
        else:
            store.put(TOPIC, qid, msg(b"s%d" % n * 13, tags="s", KEYS=f"k{n}"))
            n += 1
        if i % 5 == 0:
            store.put("Other", 0, msg(b"o" * 40))
    assert store.wait_dispatched()


def bcq_files(root: Path) -> dict[str, bytes]:
    base = root / "batchconsumequeue" / TOPIC
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("0" * 20))
            if p.is_file()}


def valid_entries(files: dict[str, bytes]) -> dict[str, list[tuple[int, ...]]]:
    out: dict[str, list[tuple[int, ...]]] = {}
    for name, data in files.items():
        arr = np.frombuffer(data, dtype=BCQ_DTYPE)
        arr = arr[arr["batch"] > 0]
        out[name] = [tuple(int(x) for x in row) for row in arr.tolist()]
    return out


def topics_json(root: Path, *queue_types: tuple[str, str | None]) -> TopicManager:
    tm = TopicManager(StoreLayout(root), broker_name="b", cluster_name="c", auto_create=True,
                      default_queue_nums=4)
    tm.load()
    for name, qtype in queue_types:
        tm.upsert(TopicConfig(topic_name=name, read_queue_nums=3, write_queue_nums=3,
                              attributes={"queue.type": qtype} if qtype else {}))
    return tm


@pytest.fixture
def pair(open_store: OpenStore, tmp_path: Path) -> tuple[Path, Path]:
    """The same workload in a BatchCQ store and a classic one, both shut down cleanly."""
    roots = tmp_path / "native", tmp_path / "classic"
    for root, batch in zip(roots, (True, False), strict=True):
        clock = FakeClock(50_000)
        store = open_store(root, clock=clock, mapper_file_size_batch_consume_queue=BCQ_FILE)
        if batch:
            store.set_batch_topic(TOPIC)
        workload(store, clock)
        store.shutdown()
    return roots


def test_converted_queues_equal_native_ones_byte_for_byte(pair: tuple[Path, Path]) -> None:
    native, classic = pair
    assert (native / "commitlog").is_dir() and not (classic / "batchconsumequeue").exists()
    assert [p.read_bytes() for p in sorted((native / "commitlog").iterdir())] == [
        p.read_bytes() for p in sorted((classic / "commitlog").iterdir())]
    report = convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    assert report.converted and not report.topic_config_updated
    assert [w for w in report.warnings if "topics.json" not in w] == []
    assert [q.queue_id for q in report.queues] == [0, 1, 2]
    assert all(q.matches for q in report.queues)
    want, got = bcq_files(native), bcq_files(classic)
    assert sorted(got) == sorted(want) and len(want) >= 3
    assert valid_entries(got) == valid_entries(want)  # field by field
    assert got == want  # and the files themselves
    assert not (classic / "consumequeue" / TOPIC).exists()
    assert (classic / "consumequeue" / "Other").is_dir()  # other topics untouched
    assert not (classic / "convert").exists()


def test_the_converted_store_serves_the_same_messages(pair: tuple[Path, Path],
                                                     open_store: OpenStore) -> None:
    _, classic = pair
    before = open_store(classic, mapper_file_size_batch_consume_queue=BCQ_FILE)
    want = {qid: [(r.queue_offset, bytes(r.body)) for r in read_queue(before, TOPIC, qid)]
            for qid in range(3)}
    before.shutdown()
    convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    after = open_store(classic, mapper_file_size_batch_consume_queue=BCQ_FILE)
    assert after.is_batch_topic(TOPIC) and not after.is_batch_topic("Other")
    assert {qid: [(r.queue_offset, bytes(r.body)) for r in read_queue(after, TOPIC, qid)]
            for qid in range(3)} == want
    first = after.put(TOPIC, 1, msg(b"after conversion"))
    assert first.queue_offset == want[1][-1][0] + 1
    assert after.wait_dispatched()
    assert after.max_offset(TOPIC, 1) == first.queue_offset + 1


def test_dry_run_changes_nothing(pair: tuple[Path, Path]) -> None:
    _, classic = pair
    topics_json(classic, (TOPIC, None))

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(classic)): p.read_bytes()
                for p in sorted(classic.rglob("*")) if p.is_file()}

    before = snapshot()
    report = convert_topic(classic, TOPIC, dry_run=True, bcq_file_size=BCQ_FILE)
    assert snapshot() == before
    assert report.dry_run and not report.converted
    assert report.classic_files == len(list((classic / "consumequeue" / TOPIC).glob("*/*")))
    assert report.bcq_files == sum(
        -(-q.entries // 8) for q in report.queues)
    assert report.messages == sum(q.classic_max - q.classic_min for q in report.queues)


def test_topic_config_is_declared_batch_cq(pair: tuple[Path, Path]) -> None:
    _, classic = pair
    topics_json(classic, (TOPIC, None), ("Other", None))
    report = convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    assert report.topic_config_updated
    tm = topics_json(classic)
    assert tm.is_batch_cq(TOPIC) and not tm.is_batch_cq("Other")
    assert tm.get(TOPIC).read_queue_nums == 3  # type: ignore[union-attr]


def test_refusals(pair: tuple[Path, Path], open_store: OpenStore) -> None:
    _, classic = pair
    with pytest.raises(ConversionError, match="no consume queues"):
        convert_topic(classic, "Nope")
    running = open_store(classic)
    with pytest.raises(ConversionError, match="stop the broker"):
        convert_topic(classic, TOPIC)
    with pytest.raises(ConversionError, match="stop the broker"):
        convert_topic(classic, TOPIC, dry_run=True)
    running.shutdown()
    (classic / "abort").touch()
    with pytest.raises(ConversionError, match="not shut down cleanly"):
        convert_topic(classic, TOPIC)
    (classic / "abort").unlink()
    with pytest.raises(ConversionError, match="multiple of 46"):
        convert_topic(classic, TOPIC, bcq_file_size=100)
    convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    with pytest.raises(ConversionError, match="already has batch consume queues"):
        convert_topic(classic, TOPIC)


def test_a_queue_that_does_not_rebuild_is_not_converted(pair: tuple[Path, Path]) -> None:
    _, classic = pair
    qfile = sorted((classic / "consumequeue" / TOPIC / "0").iterdir())[-1]
    data = bytearray(qfile.read_bytes())
    end = len(data.rstrip(b"\0"))
    end += (-end) % 20
    data[end : end + 20] = data[end - 20 : end]  # one entry the log does not have
    qfile.write_bytes(bytes(data))
    report = convert_topic(classic, TOPIC, dry_run=True, bcq_file_size=BCQ_FILE)
    assert [q.matches for q in report.queues] == [False, True, True]
    with pytest.raises(ConversionError, match="do not rebuild") as info:
        convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    assert info.value.mismatch
    assert (classic / "consumequeue" / TOPIC / "0").is_dir()
    assert convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE, force=True).converted


def test_an_interrupted_conversion_is_redone(pair: tuple[Path, Path]) -> None:
    native, classic = pair
    # as if a first run died after moving the queues into place: both kinds on disk
    stale = classic / "batchconsumequeue" / TOPIC / "0"
    stale.mkdir(parents=True)
    (stale / "00000000000000000000").write_bytes(b"\x01" * BCQ_FILE)
    (classic / "convert" / TOPIC).mkdir(parents=True)
    report = convert_topic(classic, TOPIC, bcq_file_size=BCQ_FILE)
    assert any("interrupted" in w for w in report.warnings)
    assert bcq_files(classic) == bcq_files(native)


def test_cli_dry_run_then_convert(pair: tuple[Path, Path]) -> None:
    _, classic = pair
    topics_json(classic, (TOPIC, None))
    size = f"--bcq-file-size={BCQ_FILE}"
    dry = runner.invoke(app, ["store", "convert-cq", str(classic), "--topic", TOPIC,
                              "--dry-run", size])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and "would write" in dry.output
    assert (classic / "consumequeue" / TOPIC).is_dir()
    done = runner.invoke(app, ["store", "convert-cq", str(classic), "-t", TOPIC, size,
                               "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["converted"] and report["topic_config_updated"]
    assert [q["matches"] for q in report["queues"]] == [True, True, True]
    again = runner.invoke(app, ["store", "convert-cq", str(classic), "-t", TOPIC])
    assert again.exit_code == 2 and "already" in again.output
