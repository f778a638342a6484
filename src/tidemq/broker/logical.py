"""The logical-queue mappings a broker holds, persisted to ``config/logicalQueues.json``
(replaced atomically). The model itself is :mod:`tidemq.formats.logical_mapping`; a copy
received from the admin tool or a peer is merged into the one held
(:func:`~tidemq.formats.logical_migration.merge`), so no fact this broker knows -- its own
seals above all -- is ever lost to an older or partial copy."""

from __future__ import annotations

import json
from pathlib import Path

from tidemq.broker.table_json import read_table
from tidemq.formats.logical_mapping import (
    LOGICAL_BROKER,
    Segment,
    SegmentState,
    TopicMapping,
)
from tidemq.formats.logical_migration import complete, merge
from tidemq.store.checkpoint import atomic_write

__all__ = ["LOGICAL_BROKER", "LogicalQueues", "Segment", "SegmentState", "TopicMapping"]


class LogicalQueues:
    """The mappings this broker knows, persisted atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mappings: dict[str, TopicMapping] = {}

    def load(self) -> None:
        """Read the file (none: no mappings); one that does not read stops the start
        (:func:`~tidemq.broker.table_json.read_table`)."""
        mappings = read_table(self.path, lambda data: {
            m["topic"]: TopicMapping.from_json(m) for m in data.get("mappings", [])})
        if mappings is not None:
            self.mappings = mappings

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"mappings": [m.to_json() for _, m in sorted(self.mappings.items())]}
        atomic_write(self.path, json.dumps(data, sort_keys=True, indent=1).encode())

    def get(self, topic: str) -> TopicMapping | None:
        return self.mappings.get(topic)

    def update(self, mapping: TopicMapping, *, force: bool = False,
               older: bool = False) -> bool:
        """A copy pushed by the admin tool: merged into the one held (``force``: replaces
        it). Refused (ValueError) when its epoch is older (unless ``older``: a copy that
        only has to be merged in), when it belongs to an older incarnation of the topic,
        or when it contradicts the one held. Returns whether the held mapping changed."""
        old = self.mappings.get(mapping.topic)
        if old is None or force or mapping.created > old.created:
            return self._store(mapping)
        if mapping.created < old.created:
            raise ValueError(f"mapping of {mapping.topic} created at {mapping.created} is "
                             f"older than the one held (created at {old.created})")
        if mapping.epoch < old.epoch and not older:
            raise ValueError(f"mapping epoch {mapping.epoch} is older than {old.epoch}")
        return self._store(merge(old, mapping))

    def absorb(self, mapping: TopicMapping) -> bool:
        """A peer's copy, whatever its epoch: merged in, and any migration whose old
        segment is sealed committed. Returns whether the held mapping changed."""
        old = self.mappings.get(mapping.topic)
        if old is None:
            return False  # a topic this broker does not hold (or deleted): not taken
        return self._store(complete(merge(old, mapping, strict=False)))

    def _store(self, mapping: TopicMapping) -> bool:
        if self.mappings.get(mapping.topic) == mapping:
            return False
        self.mappings[mapping.topic] = mapping
        self.persist()
        return True

    def delete(self, topic: str) -> bool:
        if self.mappings.pop(topic, None) is None:
            return False
        self.persist()
        return True
