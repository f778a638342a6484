"""The committed offsets' keys indexed by topic and by group: the requests about one
topic or one group answer as a walk of the whole table would, without one. The keys'
order, which the encodings of the table walk a slice at a time: each key of the table
once, whatever was deleted and committed again, and while a write drops the deleted
keys from it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemq.broker.offsets as offsets_module
from tidemq.broker import offset_json
from tidemq.broker.offsets import OffsetManager, index_of
from tidemq.store.layout import StoreLayout

names = st.sampled_from(["a", "b", "c", "a@b", ""])
ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), names, names, st.integers(0, 3), st.integers(0, 9)),
    st.tuples(st.just("delete_topic"), names),
    st.tuples(st.just("delete_group"), names),
    st.tuples(st.just("persist")),
    st.tuples(st.just("replace"), st.dictionaries(
        st.tuples(names, names).map("@".join), st.dictionaries(
            st.integers(0, 3), st.integers(0, 9), max_size=2), max_size=4)),
), max_size=30)


def _walked(table: dict[str, dict[int, int]], topic: str | None = None,
            group: str | None = None) -> list[str]:
    if topic is not None:
        return sorted(k.partition("@")[2] for k in table if k.partition("@")[0] == topic)
    return sorted(k.partition("@")[0] for k in table if k.partition("@")[2] == group)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key twice: {keys}"
    return dict(pairs)


def _read(body: bytes) -> dict[str, dict[int, int]]:
    """The table a body holds (queue ids as ints); a key twice fails."""
    table = json.loads(body, object_pairs_hook=_unique)["offsetTable"]
    return {k: {int(q): o for q, o in v.items()} for k, v in table.items()}


@settings(deadline=None)  # a write fsyncs: slow on a busy machine
@given(ops=ops)
def test_the_index_answers_as_a_walk_of_the_table(tmp_path_factory: Any,
                                                  ops: list[tuple[Any, ...]]) -> None:
    offsets = OffsetManager(StoreLayout(tmp_path_factory.mktemp("o")))
    model: dict[str, dict[int, int]] = {}
    for op, *args in ops:
        if op == "commit":
            group, topic, queue_id, offset = args
            offsets.commit(group, topic, queue_id, offset)
            model.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        elif op == "delete_topic":
            offsets.delete_topic(args[0])
            model = {k: v for k, v in model.items() if k.partition("@")[0] != args[0]}
        elif op == "delete_group":
            offsets.delete_group(args[0])
            model = {k: v for k, v in model.items() if k.partition("@")[2] != args[0]}
        elif op == "persist":
            offsets.persist()
            if offsets.path.exists():
                assert _read(offsets.path.read_bytes()) == model
        else:
            table = {k: dict(v) for k, v in args[0].items()}
            # as a replica takes its master's: examined on a thread
            offsets.take(table, index_of(table), differs=offsets.differs(table))
            model = {k: dict(v) for k, v in args[0].items()}
        assert offsets.table == model
        assert _read(b"".join(offsets.json_parts())) == model
        for name in ("a", "b", "c", "a@b", ""):
            assert offsets.groups_of(name) == _walked(model, topic=name)
            assert offsets.topics_of(name) == _walked(model, group=name)
        for count in (0, 1, 2, 40):
            assert offsets.first_keys(count) == (sorted(model)[:count], len(model))
        assert offsets.lowest_by_queue() == _lowest(model)


def _lowest(table: dict[str, dict[int, int]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for key, queues in table.items():
        for queue_id, offset in queues.items():
            at = (key.split("@", 1)[0], queue_id)
            out[at] = min(offset, out.get(at, offset))
    return out


class Walks(dict[str, dict[int, int]]):
    """A table that counts the walks over it."""

    walks = 0

    def __iter__(self) -> Iterator[str]:
        Walks.walks += 1
        return super().__iter__()


def test_one_topic_or_group_is_answered_without_walking_the_table(tmp_path: Path) -> None:
    offsets = OffsetManager(StoreLayout(tmp_path))
    for g in range(50):
        for t in range(5):
            offsets.commit(f"g{g}", f"T{t}", 0, g)
    offsets.table = Walks(offsets.table)
    Walks.walks = 0
    assert offsets.groups_of("T1") == sorted(f"g{g}" for g in range(50))
    assert offsets.topics_of("g7") == [f"T{t}" for t in range(5)]
    offsets.delete_topic("T2")
    offsets.delete_group("g3")
    assert Walks.walks == 0
    assert "T2@g1" not in offsets.table and "T1@g3" not in offsets.table
    assert len(offsets.table) == 49 * 4


class Copies(Walks):
    """A table that counts its walks and its copies."""

    def copy(self) -> dict[str, dict[int, int]]:
        Walks.walks += 1
        return super().copy()


@pytest.mark.parametrize("slice_keys", [1, 3, 4096])
def test_the_first_keys_and_the_lowest_offsets_are_read_a_slice_of_keys_a_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_keys: int) -> None:
    """Neither copies nor walks the whole table in one call (each would hold the
    interpreter, and so the event loop, for as long as the table is long), and a key
    deleted or committed again on the loop meanwhile is read as it is then."""
    monkeypatch.setattr(offsets_module, "ENTRY_SLICE", slice_keys)
    offsets = OffsetManager(StoreLayout(tmp_path))
    for i in range(20):
        offsets.commit(f"g{i % 4}", f"T{i % 5}", i % 3, 100 - i)
    offsets.delete_topic("T1")
    offsets.commit("g1", "T1", 0, 7)  # deleted, then committed again
    offsets.table = Copies(offsets.table)
    Walks.walks = 0
    model = dict(offsets.table)
    assert offsets.first_keys(3) == (sorted(model)[:3], len(model))
    assert offsets.first_keys(100) == (sorted(model), len(model))
    assert offsets.lowest_by_queue() == _lowest(model)
    assert Walks.walks == 0


def test_the_loop_deletes_and_commits_while_a_write_drops_the_deleted_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = OffsetManager(StoreLayout(tmp_path))
    for t in ("A", "B", "C", "D"):
        offsets.commit("g", t, 0, 1)
    offsets.delete_topic("A")
    offsets.delete_topic("B")
    drop = offsets_module.filterfalse
    calls = 0

    def meanwhile(dead: Any, keys: Iterable[str]) -> Iterator[str]:
        nonlocal calls
        calls += 1
        if calls == 1:  # the loop, between two slices of the write's pass
            offsets.commit("g", "A", 0, 2)  # dropped by this pass, back meanwhile
            offsets.delete_topic("C")  # dropped next time
            offsets.commit("g", "E", 0, 3)  # new meanwhile
            offsets.delete_topic("D")
            offsets.commit("g", "D", 0, 4)  # deleted and back meanwhile
        return drop(dead, keys)

    monkeypatch.setattr(offsets_module, "filterfalse", meanwhile)
    offsets.persist()
    want = {"A@g": {0: 2}, "D@g": {0: 4}, "E@g": {0: 3}}
    assert offsets.table == want
    assert _read(b"".join(offsets.json_parts())) == want
    offsets.persist()
    assert _read(offsets.path.read_bytes()) == want
    assert calls == 2
    assert sorted(offsets._order) == sorted(want)


def test_a_write_reads_the_table_a_slice_of_keys_a_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing copies, sorts or frees the whole table in one call while a write holds the
    interpreter: it encodes the live table a slice of keys a call."""
    offsets = OffsetManager(StoreLayout(tmp_path))
    n = 3 * offset_json.ENTRY_SLICE + 5
    for i in range(n):
        offsets.commit(f"g{i % 7}", f"T{i}", i % 3, i)
    encode = offset_json.offset_entries
    slices: list[int] = []

    def counted(table: Any, keys: list[str], start: int, stop: int, *seps: bytes) -> bytes:
        assert table is offsets.table  # the live table, not a copy
        slices.append(stop - start)
        return encode(table, keys, start, stop, *seps)

    monkeypatch.setattr(offset_json, "offset_entries", counted)
    offsets.persist()
    assert max(slices) <= offset_json.ENTRY_SLICE and len(slices) == 4
    assert _read(offsets.path.read_bytes()) == offsets.table
