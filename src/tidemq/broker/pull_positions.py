"""How far each group's pulls have reached on each queue: the ``nextBeginOffset`` of the
last pull that found messages, per ``(topic, group)`` and queue id. Kept in memory only,
as upstream's ``pullOffsetTable``; it answers how many messages a group holds pulled but
not yet committed (``pullOffset`` of GET_CONSUME_STATS, mqadmin's ``#Inflight``).
Light message queues are left out: there can be millions of them.
"""

from __future__ import annotations

__all__ = ["PullPositions"]


class PullPositions:
    def __init__(self) -> None:
        self._table: dict[tuple[str, str], dict[int, int]] = {}

    def note(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """A pull of ``group`` found messages; the next one starts at ``next_offset``."""
        queues = self._table.get((topic, group))
        if queues is None:
            queues = self._table[topic, group] = {}
        queues[queue_id] = next_offset

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self._table.get((topic, group))
        return None if queues is None else queues.get(queue_id)

    def forget(self, group: str | None = None, topic: str | None = None) -> None:
        """Drop what is known of ``group`` (on ``topic``), of every group on ``topic``,
        or of a group everywhere: after a reset or a deletion."""
        for key in [k for k in self._table
                    if (topic is None or k[0] == topic) and (group is None or k[1] == group)]:
            del self._table[key]
