"""The logical-queue mappings a broker holds, persisted to ``config/logicalQueues.json``
(replaced atomically). The model itself is :mod:`tidemq.formats.logical_mapping`."""

from __future__ import annotations

import json
from pathlib import Path

from tidemq.formats.logical_mapping import (
    LOGICAL_BROKER,
    Segment,
    SegmentState,
    TopicMapping,
)
from tidemq.store.checkpoint import atomic_write

__all__ = ["LOGICAL_BROKER", "LogicalQueues", "Segment", "SegmentState", "TopicMapping"]


class LogicalQueues:
    """The mappings this broker knows, persisted atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mappings: dict[str, TopicMapping] = {}

    def load(self) -> None:
        if self.path.exists():
            data = json.loads(self.path.read_text("utf-8"))
            self.mappings = {m["topic"]: TopicMapping.from_json(m)
                             for m in data.get("mappings", [])}

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"mappings": [m.to_json() for _, m in sorted(self.mappings.items())]}
        atomic_write(self.path, json.dumps(data, sort_keys=True, indent=1).encode())

    def get(self, topic: str) -> TopicMapping | None:
        return self.mappings.get(topic)

    def update(self, mapping: TopicMapping, *, force: bool = False) -> bool:
        """Accept ``mapping`` unless its epoch is older; returns whether it changed."""
        old = self.mappings.get(mapping.topic)
        if old is not None and mapping.epoch < old.epoch and not force:
            raise ValueError(f"mapping epoch {mapping.epoch} is older than {old.epoch}")
        if old == mapping:
            return False
        self.mappings[mapping.topic] = mapping
        self.persist()
        return True

    def delete(self, topic: str) -> bool:
        if self.mappings.pop(topic, None) is None:
            return False
        self.persist()
        return True
