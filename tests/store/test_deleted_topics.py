"""The store's record of deleted topics (:mod:`tidemq.store.deleted_topics`): its file
format, and that a deleted topic's records stay out of its queues when recovery or
``store verify --repair`` dispatch the log again -- while their LMQ entries are written --
and a topic created again under the name starts over."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.errors import MetadataUnreadable
from tidemq.formats.properties import encode_properties
from tidemq.store import deleted_topics
from tidemq.store.config import StoreConfig
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.deleted_topics import DeletedTopic, DeletedTopics, decode, encode
from tidemq.store.inspect import verify
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.queues import ConsumeQueueSet
from tidemq.store.repair import repair

from .conftest import CQ_FILE, SEGMENT, crash_copy, msg, read_queue, small_config

entries = st.dictionaries(
    st.text(min_size=1, max_size=20),
    st.builds(DeletedTopic, st.integers(0, 2**63 - 1), st.booleans(), st.booleans()),
    max_size=8)


@given(entries)
def test_the_file_reads_back_what_was_written(table: dict[str, DeletedTopic]) -> None:
    assert decode(encode(table)) == table


@given(entries.filter(bool), st.data())
def test_a_file_cut_short_does_not_read(table: dict[str, DeletedTopic],
                                        data: st.DataObject) -> None:
    raw = encode(table)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ValueError):
        decode(raw[:cut])


@pytest.mark.parametrize("raw", [b"", b"\0" * 16, b"[]", b'{"topics": []}',
                                 b'{"topics": {"T": {"before": -1, "pending": false}}}',
                                 b'{"topics": {"T": {"before": 1, "pending": 0}}}',
                                 b'{"topics": {"T": {"before": "1", "pending": true}}}',
                                 b'{"topics": {"T": {"before": 1, "pending": true, '
                                 b'"adopted": 1}}}'])
def test_a_garbled_file_stops_the_start_naming_itself(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "deletedTopics.json"
    path.write_bytes(raw)
    with pytest.raises(MetadataUnreadable) as caught:
        DeletedTopics(path).load()
    assert caught.value.path == str(path)


def test_an_entry_is_kept_while_the_log_holds_its_records(tmp_path: Path) -> None:
    table = DeletedTopics(tmp_path / "deletedTopics.json")
    table.begin(["A"], 100)
    table.begin(["B"], 300)
    table.finish(["A"])
    assert table.pending() == ["B"]
    table.forget_before(99)  # the log holds A's record at 99
    assert table.before == {"A": 100, "B": 300}
    table.forget_before(400)  # B's deletion is pending: it stays until finished
    assert table.before == {"B": 300}
    again = DeletedTopics(table.path)
    again.load()
    assert (again.before, again.pending()) == ({"B": 300}, ["B"])
    assert again.hides("B", 299) and not again.hides("B", 300) and not again.hides("A", 0)


def test_a_masters_mark_is_told_from_a_deletion_of_its_own(tmp_path: Path) -> None:
    """What a start that finishes them needs to know: an adopted mark keeps the copied
    topic table, a deletion of the store's own deletes the topic from it."""
    table = DeletedTopics(tmp_path / "deletedTopics.json")
    table.begin(["Own"], 100)
    table.adopt({"Copied": 200})
    assert (table.pending(), table.adopted()) == (["Copied", "Own"], ["Copied"])
    assert b'"adopted"' not in encode({"Own": DeletedTopic(100, True)})  # files as before
    again = DeletedTopics(table.path)
    again.load()
    assert again.adopted() == ["Copied"]
    again.finish(["Copied"])
    assert (again.pending(), again.adopted()) == (["Own"], [])


def _fill(store: MessageStore) -> None:
    """Six messages of Gone, each fanned out to LMQ a as well, three of Kept; then Gone
    deleted."""
    for i in range(6):
        props = encode_properties({"INNER_MULTI_DISPATCH": "%LMQ%a"})
        store.put_multi_dispatch("Gone", 0, MessageInput(b"old%d" % i, props), ["%LMQ%a"])
        if i < 3:
            store.put("Kept", 0, msg(b"kept%d" % i))
    assert store.wait_dispatched()
    store.delete_topic("Gone")
    assert not (store.layout.consumequeue_dir / "Gone").exists()


def _check(store: MessageStore) -> None:
    """Gone stayed deleted, and starts over when created again."""
    assert store.max_offset("Gone", 0) == 0
    assert not (store.layout.consumequeue_dir / "Gone").exists()
    assert [bytes(r.body) for r in read_queue(store, "Kept", 0)] == [b"kept0", b"kept1",
                                                                      b"kept2"]
    assert [bytes(r.body) for r in read_queue(store, "%LMQ%a", 0)] == [
        b"old%d" % i for i in range(6)]
    for i in range(2):
        store.put("Gone", 0, msg(b"new%d" % i))
    assert [bytes(r.body) for r in read_queue(store, "Gone", 0)] == [b"new0", b"new1"]


def config(root: Path) -> StoreConfig:
    return small_config(root, enable_lmq=True, enable_multi_dispatch=True,
                        flush_interval_consume_queue=3_600_000)


def test_recovery_leaves_a_deleted_topics_records_out(tmp_path: Path) -> None:
    """The checkpoint was never written: recovery dispatches the whole log again."""
    with MessageStore(config(tmp_path / "store")) as store:
        _fill(store)
        crashed = crash_copy(store, tmp_path / "crashed")
    with MessageStore(config(crashed)) as store:
        assert not store.recovery_report.clean
        _check(store)


def test_repair_leaves_a_deleted_topics_records_out(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(config(root)) as store:
        _fill(store)
        bcq_file_size = store.config.mapper_file_size_batch_consume_queue
    repair(root, segment_size=SEGMENT, cq_file_size=CQ_FILE, bcq_file_size=bcq_file_size)
    with MessageStore(config(root)) as store:
        _check(store)


@contextlib.contextmanager
def _lagging_store(tmp_path: Path, concurrent: bool, topic: str) -> Iterator[MessageStore]:
    """A store whose dispatch is paused after 300 records of ``topic``: enough for a round
    of the concurrent dispatcher's prepare-and-commit path."""
    cfg = small_config(tmp_path / "store", enable_build_consume_queue_concurrently=concurrent,
                       dispatch_on_append_records=0, mapped_file_size_commit_log=1 << 20)
    with MessageStore(cfg) as store:
        assert store.dispatcher is not None
        store.dispatcher.pause()
        for i in range(300):
            store.put(topic, 0, msg(b"old%d" % i))
        yield store


@pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])
def test_records_dispatched_after_their_topic_was_deleted_get_no_queue(
        tmp_path: Path, concurrent: bool) -> None:
    """Records of a topic stored before its deletion and dispatched after it (in flight
    while it was deleted) do not bring its queue back; enough of them for a round of the
    concurrent dispatcher's prepare-and-commit path."""
    with _lagging_store(tmp_path, concurrent, "Gone") as store:
        store.put("Kept", 0, msg(b"kept"))
        store.delete_topic("Gone")
        store.dispatcher.resume()
        assert [bytes(r.body) for r in read_queue(store, "Kept", 0)] == [b"kept"]
        assert store.max_offset("Gone", 0) == 0
        assert not (store.layout.consumequeue_dir / "Gone").exists()
        store.put("Gone", 0, msg(b"new"))
        assert [bytes(r.body) for r in read_queue(store, "Gone", 0)] == [b"new"]


@pytest.mark.parametrize("again", [False, True], ids=["deleted", "created again"])
def test_verify_expects_no_queue_entry_for_a_deleted_topics_records(
        tmp_path: Path, again: bool) -> None:
    """No topic table here (a store without a broker's): every queue is expected."""
    root = tmp_path / "store"
    with MessageStore(small_config(root)) as store:
        for i in range(5):
            store.put("Gone", 0, msg(b"old%d" % i))
            store.put("Kept", 0, msg(b"kept%d" % i))
        assert store.wait_dispatched()
        store.delete_topic("Gone")
        if again:
            store.put("Gone", 0, msg(b"new"))
            assert store.wait_dispatched()
    assert verify(root).problems == []


@pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])
def test_a_round_that_holds_a_deleted_topics_records_and_the_new_ones_queues_the_new(
        tmp_path: Path, concurrent: bool) -> None:
    """The topic deleted and sent to again while dispatch lags: one round holds records of
    the old topic (no queue) and of the new one (its queue, from offset 0)."""
    with _lagging_store(tmp_path, concurrent, "Again") as store:
        store.delete_topic("Again")
        new = [b"new%d" % i for i in range(5)]
        for body in new:
            store.put("Again", 0, msg(body))
        store.dispatcher.resume()
        got = read_queue(store, "Again", 0)
        assert [bytes(r.body) for r in got] == new
        assert store.max_offset("Again", 0) == len(new)


def test_topics_deleted_together_are_recorded_in_two_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica copying a master that deleted many topics deletes them in one call: the
    record is written when their deletion begins and when it is done, not per topic."""
    writes: list[bytes] = []
    write = deleted_topics.atomic_write

    def counted(path: Path, data: bytes) -> None:
        writes.append(data)
        write(path, data)

    with MessageStore(small_config(tmp_path / "store")) as store:
        for topic in ("A", "B", "C"):
            store.put(topic, 0, msg(b"m"))
        assert store.wait_dispatched()
        monkeypatch.setattr(deleted_topics, "atomic_write", counted)
        store.delete_topics(["A", "B"])
        assert len(writes) == 2
        assert sorted(t for t, _ in store.queues.queue_keys()) == ["C"]
        assert store.pending_topic_deletions() == []
        assert set(store.queues.deleted.before) == {"A", "B"}


@pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])
def test_a_deletion_waits_for_the_round_that_writes_the_topics_queues(
        tmp_path: Path, concurrent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round taken before the deletion's mark, still writing the topic's queue: the
    queue is removed once the round has ended, not under it (where the round would make
    the queue's file again and the topic's next put fail to, stopping dispatch)."""
    cfg = small_config(tmp_path / "store", enable_build_consume_queue_concurrently=concurrent,
                       dispatch_on_append_records=0, mapped_file_size_commit_log=1 << 20)
    in_round, removed = threading.Event(), threading.Event()
    removed_during_round: list[bool] = []
    append_one, append = ConsumeQueue.append_one, ConsumeQueue.append

    def wait_in_round(cq: ConsumeQueue) -> None:
        if cq.topic == "Gone" and not in_round.is_set():
            in_round.set()
            # a removal now pulls the queue from under the round; none may come
            removed_during_round.append(removed.wait(1.0))

    def slow_append_one(cq: ConsumeQueue, *args: Any) -> int:
        wait_in_round(cq)
        return append_one(cq, *args)

    def slow_append(cq: ConsumeQueue, *args: Any) -> int:
        wait_in_round(cq)
        return append(cq, *args)

    remove = ConsumeQueueSet.remove

    def noted_remove(queues: ConsumeQueueSet, topic: str, queue_id: int) -> None:
        remove(queues, topic, queue_id)
        removed.set()

    monkeypatch.setattr(ConsumeQueue, "append_one", slow_append_one)
    monkeypatch.setattr(ConsumeQueue, "append", slow_append)
    monkeypatch.setattr(ConsumeQueueSet, "remove", noted_remove)
    with MessageStore(cfg) as store:
        store.put("Gone", 0, msg(b"old"))
        assert in_round.wait(10)
        deleter = threading.Thread(target=store.delete_topic, args=("Gone",))
        deleter.start()
        deleter.join(30)
        assert not deleter.is_alive()
        assert removed_during_round == [False]
        assert removed.is_set()
        store.put("Gone", 0, msg(b"new"))
        assert store.wait_dispatched()
        assert store.dispatcher is not None and store.dispatcher.error is None
        assert [bytes(r.body) for r in read_queue(store, "Gone", 0)] == [b"new"]
