"""A replica takes its master's LMQ tombstones at the master's commit-log offsets
(:meth:`MessageStore.adopt_lmq_tombstones`): the deleted LMQ's records below the floor
have no entry in it, dispatched before the tombstone arrived or after; the records of the
LMQ created again above it keep theirs, at the master's offsets -- also after a crash,
and once the replica becomes master."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store.append import MessageInput
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

from .conftest import crash_copy, records, small_config

SEGMENT = 64 * 1024
A, B = "%LMQ%a", "%LMQ%b"


def config(root: Path, **overrides: Any) -> StoreConfig:
    return small_config(root, enable_lmq=True, enable_multi_dispatch=True,
                        mapped_file_size_commit_log=SEGMENT, **overrides)


def fan_out(store: MessageStore, body: bytes, names: list[str]) -> None:
    """Put one message of topic P naming ``names``."""
    props = b"INNER_MULTI_DISPATCH\x01" + ",".join(names).encode() + b"\x02"
    store.put_multi_dispatch("P", 0, MessageInput(body, props), names)


def master_log(root: Path, old: int, new: int) -> tuple[bytes, int]:
    """A master's log: ``old`` messages into LMQs a and b, a deleted, ``new`` more into
    both (a created again); the log and a's floor."""
    runs: list[bytes] = []
    with MessageStore(config(root)) as store:
        store.add_append_hook(lambda _start, view: runs.append(bytes(view)))
        for i in range(old):
            fan_out(store, b"old%d" % i * 20, [A, B])
        assert store.delete_lmq(A)
        assert store.lmq is not None
        floor = store.lmq.floor(A)
        for i in range(new):
            fan_out(store, b"new%d" % i * 20, [A, B])
        assert store.wait_dispatched()
    return b"".join(runs), floor


def lmq_bodies(store: MessageStore, name: str) -> list[bytes]:
    """The LMQ's bodies, from offset 0 (its min offset must be 0)."""
    assert store.wait_dispatched()
    assert store.min_offset(name, 0) == 0
    got = store.get(name, 0, 0, max_count=1000)
    return [bytes(r.body) for r in records(got)]


def expect_new_only(store: MessageStore, old: int, new: int) -> None:
    assert lmq_bodies(store, A) == [b"new%d" % i * 20 for i in range(new)]
    assert store.max_offset(A, 0) == new
    assert lmq_bodies(store, B) == ([b"old%d" % i * 20 for i in range(old)]
                                    + [b"new%d" % i * 20 for i in range(new)])


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.integers(1, 40), new=st.integers(0, 40), cut=st.floats(0, 1))
def test_a_tombstone_taken_at_any_point_of_the_copy_leaves_the_new_lmq_s_messages(
        tmp_path_factory: pytest.TempPathFactory, old: int, new: int, cut: float) -> None:
    """The replica holds any prefix of its master's log when the tombstone arrives --
    ahead of the floor (the LMQ deleted and created again within one copy interval) or
    behind it (a lagging replica) -- and the rest arrives after: its LMQs are the
    master's."""
    tmp = tmp_path_factory.mktemp("tombstone")
    wire, floor = master_log(tmp / "master", old, new)
    with MessageStore(config(tmp / "replica")) as store:
        store.replica = True
        store.append_replicated(0, wire[:int(len(wire) * cut)])
        assert store.wait_dispatched()
        assert store.adopt_lmq_tombstones([(A, floor)]) == [A]
        assert store.adopt_lmq_tombstones([(A, floor)]) == []  # held already
        store.append_replicated(store.commitlog.max_offset, wire[store.commitlog.max_offset:])
        expect_new_only(store, old, new)


@pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])
def test_a_replica_ahead_of_the_floor_keeps_the_new_lmq_across_a_crash_and_an_election(
        tmp_path: Path, concurrent: bool) -> None:
    """Dispatched before the tombstone arrived, the new LMQ's entries went over the old
    queue's; the tombstone leaves the new messages at the master's offsets, which a
    ``kill -9`` right after keeps, and a replica elected master continues."""
    wire, floor = master_log(tmp_path / "master", 30, 10)
    with MessageStore(config(tmp_path / "replica",
                             enable_build_consume_queue_concurrently=concurrent)) as store:
        store.replica = True
        store.append_replicated(0, wire)
        assert store.wait_dispatched()
        assert store.adopt_lmq_tombstones([(A, floor)]) == [A]
        expect_new_only(store, 30, 10)
        crashed = crash_copy(store, tmp_path / "crashed")
    with MessageStore(config(crashed)) as store:
        expect_new_only(store, 30, 10)
        store.replica = False  # elected master: puts continue the master's LMQ
        fan_out(store, b"after", [A])
        assert lmq_bodies(store, A)[10:] == [b"after"]
