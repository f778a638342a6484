"""Committed consumer offsets: ``topic@group`` -> queue id -> next offset to consume.

Kept in memory, written to ``config/consumerOffset.json`` (RocketMQ's file name and
shape: ``{"offsetTable": {"topic@group": {"0": 42}}}``) atomically, every
``flushConsumerOffsetInterval`` (on a thread: :meth:`OffsetManager.persist`) and on
shutdown.
"""

from __future__ import annotations

import json
import threading

from tidemq.broker.offset_json import offset_table_json
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["OffsetManager"]


class OffsetManager:
    def __init__(self, layout: StoreLayout) -> None:
        self.path = layout.config_file("consumerOffset.json")
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._lock = threading.Lock()

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def load(self) -> None:
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text("utf-8"))
        table = data.get("offsetTable", {})
        self.table = {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()}

    def persist(self) -> None:
        """Write the table if it changed since the last write. Safe from another thread,
        and meant to run on one (a large table takes a while to encode): the table is
        copied first (:meth:`snapshot`) and encoded a slice at a time, so the event loop
        that commits runs on meanwhile. A commit during a write marks the table changed
        again, for the next write; writes do not overlap, and each holds every commit
        made before it started."""
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False  # first: a commit while copying is written next time too
            try:
                data = offset_table_json(self.snapshot())
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self.path, data)
            except BaseException:
                self._dirty = True
                raise

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The table as its JSON has it (queue ids as text). Safe from another thread:
        the table and each group's queues are copied whole (one C call each) first."""
        return {key: {str(q): o for q, o in queues.copy().items()}
                for key, queues in self.table.copy().items()}

    def replace(self, table: dict[str, dict[int, int]]) -> None:
        """Take ``table`` whole (a replica copying its master's offsets)."""
        if table != self.table:
            self.table = table
            self._dirty = True

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.table.setdefault(self.key(topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group)

    def lowest_by_queue(self) -> dict[tuple[str, int], int]:
        """The lowest offset any group committed on each queue. Safe from another thread:
        the table and each group's queues are copied whole (one C call each) first."""
        out: dict[tuple[str, int], int] = {}
        for key, queues in self.table.copy().items():
            topic = key.split("@", 1)[0]
            for queue_id, offset in queues.copy().items():
                old = out.get((topic, queue_id))
                if old is None or offset < old:
                    out[topic, queue_id] = offset
        return out

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def delete_topic(self, topic: str) -> None:
        for k in [k for k in self.table if k.split("@", 1)[0] == topic]:
            del self.table[k]
            self._dirty = True

    def delete_group(self, group: str) -> None:
        for k in [k for k in self.table if k.split("@", 1)[1] == group]:
            del self.table[k]
            self._dirty = True
