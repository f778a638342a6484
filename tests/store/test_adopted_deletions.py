"""A replica takes its master's topic deletions at the master's commit-log offsets
(:meth:`MessageStore.adopt_topic_deletions`): the deleted topic's records below the mark
have no queue entry, dispatched before the mark arrived or after; the records of the
topic created again above it keep theirs, from offset 0 as on the master -- also after
a stop half-way, and once the replica becomes master."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store import message_store
from tidemq.store.message_store import MessageStore

from .conftest import crash_copy, msg, read_queue, records, small_config

SEGMENT = 64 * 1024


def master_log(root: Path, old: int, new: int, queues: int = 2
               ) -> tuple[bytes, int]:
    """A master's log: ``old`` messages of topic T, T deleted, ``new`` of T created again
    (and of topic K all along); the log and T's deletion mark."""
    runs: list[bytes] = []
    with MessageStore(small_config(root, mapped_file_size_commit_log=SEGMENT)) as store:
        store.add_append_hook(lambda _start, view: runs.append(bytes(view)))
        for i in range(old):
            store.put("T", i % queues, msg(b"old%d" % i * 20))
            store.put("K", 0, msg(b"k%d" % i))
        store.delete_topic("T")
        mark = store.queues.deleted.before["T"]
        for i in range(new):
            store.put("T", i % queues, msg(b"new%d" % i * 20))
            store.put("K", 0, msg(b"k-%d" % i))
        assert store.wait_dispatched()
    return b"".join(runs), mark


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    return [bytes(r.body) for r in read_queue(store, topic, queue_id)]


def expect_new_only(store: MessageStore, new: int, queues: int = 2) -> None:
    for q in range(queues):
        want = [b"new%d" % i * 20 for i in range(new) if i % queues == q]
        assert store.min_offset("T", q) == 0
        assert bodies(store, "T", q) == want


def replica_store(root: Path) -> MessageStore:
    store = MessageStore(small_config(root, mapped_file_size_commit_log=SEGMENT))
    store.start()
    store.replica = True
    return store


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.integers(1, 40), new=st.integers(0, 40), cut=st.floats(0, 1))
def test_a_mark_taken_at_any_point_of_the_copy_leaves_the_new_topic_s_messages(
        tmp_path_factory: pytest.TempPathFactory, old: int, new: int, cut: float) -> None:
    """The replica holds any prefix of its master's log when the mark arrives -- ahead of
    the mark (the topic deleted and created again within one copy interval) or behind it
    (a lagging replica) -- and the rest arrives after: its queues of T are the master's."""
    tmp = tmp_path_factory.mktemp("adopt")
    wire, mark = master_log(tmp / "master", old, new)
    # a record boundary near the cut: the replica copies whole frames of records
    at = int(len(wire) * cut)
    store = replica_store(tmp / "replica")
    try:
        store.append_replicated(0, wire[:at])
        assert store.wait_dispatched()
        assert store.adopt_topic_deletions({"T": mark}) == ["T"]
        assert store.adopt_topic_deletions({"T": mark}) == []  # held already
        store.append_replicated(store.commitlog.max_offset, wire[store.commitlog.max_offset:])
        expect_new_only(store, new)
        assert len(bodies(store, "K", 0)) == old + new
        assert store.queues.deleted.pending() == []
    finally:
        store.shutdown()


@pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])
def test_a_replica_ahead_of_the_mark_keeps_the_new_topic_from_offset_0(
        tmp_path: Path, concurrent: bool) -> None:
    """Dispatched before the mark arrived, the new topic's first records were skipped as
    present (their slots held old messages) and the rest went into the old queue; the
    mark leaves the new messages at the master's offsets."""
    wire, mark = master_log(tmp_path / "master", 30, 10)
    with MessageStore(small_config(
            tmp_path / "replica", mapped_file_size_commit_log=SEGMENT,
            enable_build_consume_queue_concurrently=concurrent)) as store:
        store.replica = True
        store.append_replicated(0, wire)
        assert store.wait_dispatched()
        # the defect the mark repairs (which new records went into the old queue, and
        # which were skipped as present, depends on the dispatch rounds: not asserted)
        assert bytes(records(store.get("T", 0, 0, max_count=1))[0].body) == b"old0" * 20
        store.adopt_topic_deletions({"T": mark})
        expect_new_only(store, 10)
        store.replica = False  # elected master: puts continue the master's queues
        store.put("T", 0, msg(b"after"))
        assert bodies(store, "T", 0)[-1] == b"after"
        assert store.max_offset("T", 0) == 6


def test_a_lagging_replica_elected_master_holds_no_old_message(tmp_path: Path) -> None:
    """The mark lies beyond the replica's log when it arrives: the old records that
    arrive after it get no queue, and a replica elected master before the mark's offset
    reached it starts the topic created again at 0, its own puts above the mark."""
    wire, mark = master_log(tmp_path / "master", 30, 10)
    with MessageStore(small_config(tmp_path / "replica",
                                   mapped_file_size_commit_log=SEGMENT)) as store:
        store.replica = True
        half = len(wire) // 4
        store.append_replicated(0, wire[:half])
        assert store.wait_dispatched()
        store.adopt_topic_deletions({"T": mark})
        assert store.max_offset("T", 0) == 0
        end = store.append_replicated(half, wire[half:mark - 200])
        assert end < mark
        assert store.wait_dispatched()
        assert store.max_offset("T", 0) == store.max_offset("T", 1) == 0
        store.replica = False
        assert store.queues.deleted.before["T"] == store.commitlog.max_offset
        store.put("T", 1, msg(b"again"))
        assert bodies(store, "T", 1) == [b"again"]
        assert store.max_offset("T", 0) == 0


def test_a_stop_half_way_is_finished_by_the_next_start(tmp_path: Path) -> None:
    """Killed with the mark written and the queues not cut yet: the start finishes it,
    keeping the new topic's messages."""
    wire, mark = master_log(tmp_path / "master", 30, 10)
    with MessageStore(small_config(tmp_path / "replica",
                                   mapped_file_size_commit_log=SEGMENT)) as store:
        store.replica = True
        store.append_replicated(0, wire)
        assert store.wait_dispatched()
        store.queues.deleted.adopt({"T": mark})  # the first step, then the kill
        crashed = crash_copy(store, tmp_path / "crashed")
    with MessageStore(small_config(crashed, mapped_file_size_commit_log=SEGMENT)) as store:
        assert store.pending_topic_deletions() == ["T"]
        store.delete_topics(["T"], requeue=True)
        assert store.pending_topic_deletions() == []
        expect_new_only(store, 10)


def test_a_mark_left_pending_is_taken_again_with_the_next_copy(tmp_path: Path) -> None:
    """A cut that did not happen (the dispatcher did not settle in time) leaves the mark
    pending: the next copy of the same mark makes it, rather than taking it as held."""
    wire, mark = master_log(tmp_path / "master", 30, 10)
    with MessageStore(small_config(tmp_path / "replica",
                                   mapped_file_size_commit_log=SEGMENT)) as store:
        store.replica = True
        store.append_replicated(0, wire)
        assert store.wait_dispatched()
        store.queues.deleted.adopt({"T": mark})  # written, the queues not cut
        assert store.adopt_topic_deletions({"T": mark}) == ["T"]
        assert store.pending_topic_deletions() == []
        expect_new_only(store, 10)


def test_the_copy_appends_on_while_a_mark_is_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking a mark reads the log below the dispatched position without the append
    lock: the replica's copy appends on meanwhile, and its records (waiting for
    dispatch) continue the queues started again."""
    wire, mark = master_log(tmp_path / "master", 30, 10)
    half = mark + (len(wire) - mark) // 2
    reading, go = threading.Event(), threading.Event()
    requeue = message_store.requeue_above_marks

    def slow(*args: Any) -> set[tuple[str, int]]:
        reading.set()
        assert go.wait(20)
        return requeue(*args)

    monkeypatch.setattr(message_store, "requeue_above_marks", slow)
    with MessageStore(small_config(tmp_path / "replica",
                                   mapped_file_size_commit_log=SEGMENT)) as store:
        store.replica = True
        store.append_replicated(0, wire[:half])
        assert store.wait_dispatched()
        taking = threading.Thread(target=store.adopt_topic_deletions, args=({"T": mark},))
        taking.start()
        try:
            assert reading.wait(20)
            copying = threading.Thread(target=store.append_replicated, args=(half, wire[half:]))
            copying.start()
            copying.join(10)
            assert not copying.is_alive(), "the copy waited for the mark"
        finally:
            go.set()
            taking.join(20)
        copying.join(20)
        assert store.commitlog.max_offset == len(wire)
        expect_new_only(store, 10)
        store.replica = False
        assert store.put("T", 0, msg(b"after")).queue_offset == 5
