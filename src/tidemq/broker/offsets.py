"""Committed consumer offsets: ``topic@group`` -> queue id -> next offset to consume.

Kept in memory, written to ``config/consumerOffset.json`` (RocketMQ's file name and
shape: ``{"offsetTable": {"topic@group": {"0": 42}}}``) atomically, every
``flushConsumerOffsetInterval`` (on a thread: :meth:`OffsetManager.persist`) and on
shutdown. The keys are indexed by topic and by group, so that the requests about one
topic or one group (consumerProgress, QUERY_TOPIC_CONSUME_BY_WHO, the deletions) do not
walk the table of every group.

The file and GET_ALL_CONSUMER_OFFSET's body are encoded on a thread from the live table,
a slice of keys a call (:func:`~tidemq.broker.offset_json.offset_json_parts`), with no
copy of it: a copy of millions of LMQ offsets, and freeing it, holds the interpreter
(so the event loop) as long as it takes. The slices come from a list of the keys in the
order they were first committed, which the loop only appends to; a deleted key stays in
it (left out of the encoding: the table no longer has it) until the next write drops the
deleted keys from it, on its thread too, a slice at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from itertools import filterfalse

from tidemq.broker.offset_json import ENTRY_SLICE, SPACED, offset_json_parts
from tidemq.broker.offset_lowest import lowest_offsets
from tidemq.broker.table_json import read_table
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["OffsetIndex", "OffsetManager", "index_of"]

#: A table's keys by topic and by group, and in its order.
OffsetIndex = tuple[dict[str, set[str]], dict[str, set[str]], list[str]]


def _index(by_topic: dict[str, set[str]], by_group: dict[str, set[str]], key: str) -> None:
    topic, _, group = key.partition("@")
    by_topic.setdefault(topic, set()).add(key)
    by_group.setdefault(group, set()).add(key)


def index_of(table: Mapping[str, object]) -> OffsetIndex:
    """The keys of ``table`` by topic and by group, and in its order (on a thread for a
    large table that nothing else holds yet)."""
    by_topic: dict[str, set[str]] = {}
    by_group: dict[str, set[str]] = {}
    order: list[str] = []
    for key in table:
        _index(by_topic, by_group, key)
        order.append(key)
    return by_topic, by_group, order


class OffsetManager:
    def __init__(self, layout: StoreLayout) -> None:
        self.path = layout.config_file("consumerOffset.json")
        self._table: dict[str, dict[int, int]] = {}
        self._by_topic: dict[str, set[str]] = {}
        self._by_group: dict[str, set[str]] = {}
        #: Every key of the table once, in the order first committed, and the deleted
        #: keys not dropped from it yet (``_dead``); replaced whole by ``_keys_lock``'s
        #: holder only, and counted in ``_orders`` each time a new table brings its own.
        self._order: list[str] = []
        self._dead: set[str] = set()
        self._orders = 0
        self._keys_lock = threading.Lock()
        self._dirty = False
        self._lock = threading.Lock()

    @property
    def table(self) -> dict[str, dict[int, int]]:
        """``topic@group`` -> queue id -> offset. Changed only through this manager
        (its keys are indexed); a table given whole is indexed again."""
        return self._table

    @table.setter
    def table(self, table: dict[str, dict[int, int]]) -> None:
        self._take(table, index_of(table))

    def _take(self, table: dict[str, dict[int, int]], index: OffsetIndex) -> None:
        with self._keys_lock:
            self._table = table
            self._by_topic, self._by_group, self._order = index
            self._dead = set()
            self._orders += 1

    def _indexed(self, key: str) -> None:
        _index(self._by_topic, self._by_group, key)
        with self._keys_lock:
            if key in self._dead:
                self._dead.discard(key)  # back where it was in the order
            else:
                self._order.append(key)

    def _drop(self, keys: set[str]) -> None:
        with self._keys_lock:
            self._dead |= keys
        for key in keys:
            del self._table[key]
            topic, _, group = key.partition("@")
            for index, name in ((self._by_topic, topic), (self._by_group, group)):
                left = index.get(name)
                if left is not None:
                    left.discard(key)
                    if not left:
                        del index[name]
            self._dirty = True

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def load(self) -> None:
        """Read the file (none: no offsets); one that does not read stops the start
        (:func:`~tidemq.broker.table_json.read_table`)."""
        table = read_table(self.path, lambda data: {
            k: {int(q): int(o) for q, o in v.items()}
            for k, v in data.get("offsetTable", {}).items()})
        if table is not None:
            self.table = table

    def persist(self) -> None:
        """Write the table if it changed since the last write. Safe from another thread,
        and meant to run on one (a large table takes a while to encode): the table is
        encoded a slice of keys at a time (:meth:`json_parts`), so the event loop that
        commits runs on meanwhile. A commit during a write marks the table changed
        again, for the next write; writes do not overlap, and each holds every commit
        made before it started."""
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False  # first: a commit while encoding is written next time too
            try:
                self._compact()
                parts = self.json_parts()
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self.path, parts)
            except BaseException:
                self._dirty = True
                raise

    def json_parts(self, separators: tuple[str, str] = SPACED) -> list[bytes]:
        """The table's JSON, in parts (:func:`~tidemq.broker.offset_json.offset_json_parts`).
        Safe from another thread, and meant to run on one: it holds every commit made
        before it started, each entry as it is when its slice is encoded."""
        with self._keys_lock:
            table, keys = self._table, self._order
        return offset_json_parts(table, keys, separators)

    def _compact(self) -> None:
        """Drop the deleted keys from the order of the keys (on the writer's thread: a
        slice at a time, while the loop appends to it and deletes)."""
        with self._keys_lock:
            order, dead, orders = self._order, self._dead, self._orders
            if not dead:
                return
            self._dead = set()  # deleted from now on: dropped next time
            size = len(order)
        kept: list[str] = []
        for start in range(0, size, ENTRY_SLICE):
            kept.extend(filterfalse(dead.__contains__, order[start:start + ENTRY_SLICE]))
        with self._keys_lock:
            if self._orders == orders:  # not replaced by a new table meanwhile
                kept.extend(order[size:])  # committed first meanwhile
                self._order = kept

    def differs(self, table: Mapping[str, Mapping[int, int]]) -> bool:
        """Whether ``table`` is not this one. Safe from another thread, and meant to run
        on one for a large table: a key at a time (one lookup each), so the event loop
        takes turns; a commit meanwhile marks the table changed anyway."""
        mine = self._table
        return len(table) != len(mine) or any(
            mine.get(key) != queues for key, queues in table.items())

    def take(self, table: dict[str, dict[int, int]], index: OffsetIndex, *,
             differs: bool) -> None:
        """Take ``table`` whole (a replica copying its master's offsets), where
        ``differs`` says whether it differs from this one (:meth:`differs`) and ``index``
        indexes it (:func:`index_of`): both made on a thread for a large table."""
        if differs:
            self._take(table, index)
            self._dirty = True

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = self.key(topic, group)
        queues = self._table.get(key)
        if queues is None:
            queues = self._table[key] = {}
            self._indexed(key)
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.partition("@")[2] for k in self._by_topic.get(topic, ()))

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.partition("@")[0] for k in self._by_group.get(group, ()))

    def first_keys(self, count: int) -> tuple[list[str], int]:
        """The ``count`` smallest keys of the table, in order, and how many keys it has.
        Safe from another thread, and meant to run on one: the keys are read from their
        order a slice at a time, those below the ``count``-th smallest so far kept, and
        the kept sorted (one call of at most a few times ``count`` keys) as they grow."""
        with self._keys_lock:
            table, order = self._table, self._order
            size, total = len(order), len(table)
        if count <= 0:
            return [], total
        first: list[str] = []
        for start in range(0, size, ENTRY_SLICE):
            keys: Iterable[str] = order[start:start + ENTRY_SLICE]
            if len(first) >= count:
                keys = filter(first[count - 1].__gt__, keys)
            first.extend(filter(table.__contains__, keys))
            if len(first) > 4 * count:
                first.sort()
                del first[count:]
        first.sort()
        return first[:count], total

    def lowest_by_queue(self) -> dict[tuple[str, int], int]:
        """The lowest offset any group committed on each queue. Safe from another thread,
        and meant to run on one: the keys are read from their order a slice at a time
        (no copy of the table in one call, :func:`~tidemq.broker.offset_lowest.
        lowest_offsets`, compiled where built); a key deleted meanwhile is left out."""
        with self._keys_lock:
            table, order = self._table, self._order
            size = len(order)
        out: dict[tuple[str, int], int] = {}
        topics: dict[str, str] = {}
        for start in range(0, size, ENTRY_SLICE):
            lowest_offsets(table, order, start, min(start + ENTRY_SLICE, size), out, topics)
        return out

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def delete_topic(self, topic: str) -> None:
        self._drop(set(self._by_topic.get(topic, ())))

    def delete_group(self, group: str) -> None:
        self._drop(set(self._by_group.get(group, ())))
