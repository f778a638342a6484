"""Consumer offsets a replica took itself, to be carried to its master.

While its master is down, consumers commit their offsets to a replica (the TideMQ and
Java clients commit to the master, else to a replica of the group). The replica stores
them as a master would (LMQ offsets in its LMQ store), and also notes them here. Its
next copy of the master's metadata (:mod:`tidemq.broker.replication.metadata`) would
otherwise replace them with the master's older table; instead, each noted offset the
master lacks or holds lower is sent to the master (UPDATE_CONSUMER_OFFSET) before the
master's table is taken, and is kept in the copy. The clients also send their positions
again once a master is listed; carrying them here covers the consumers that stopped
meanwhile.

An offset a replica took goes back only forward: a master that meanwhile took a higher
offset for the queue keeps it. The notes live in memory: a replica restarted while its
master is down still serves the offsets it took (its offset file holds them), but
carries none of them.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CarriedOffsets", "OffsetKey"]

#: (consumer group, topic, queue id)
OffsetKey = tuple[str, str, int]


class CarriedOffsets:
    """The offsets a replica took, by (group, topic, queue id). No I/O."""

    __slots__ = ("_taken",)

    def __init__(self) -> None:
        self._taken: dict[OffsetKey, int] = {}

    def took(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._taken[group, topic, queue_id] = offset

    def to_carry(self, master: Mapping[OffsetKey, int]) -> dict[OffsetKey, int]:
        """Decide: the noted offsets the master (its offsets, ``master``) lacks or holds
        lower."""
        return {key: offset for key, offset in self._taken.items()
                if master.get(key, -1) < offset}

    def carried(self, done: Mapping[OffsetKey, int]) -> None:
        """Forget the offsets in ``done`` (the master took them, or refused them for
        good), unless a newer one was noted meanwhile."""
        for key, offset in done.items():
            if self._taken.get(key) == offset:
                del self._taken[key]

    def pending(self) -> dict[OffsetKey, int]:
        return dict(self._taken)

    def clear(self) -> None:
        """The broker became master: its own table is the group's now."""
        self._taken.clear()

    def __len__(self) -> int:
        return len(self._taken)
