"""The half (prepared) transactional messages a broker holds and has not ended yet.

One :class:`HalfMessage` per transaction, keyed by its transaction id (the message's
``UNIQ_KEY``). A check-back stores a renewed copy of the half message (one more check
counted in ``TRANSACTION_CHECK_TIMES``), so a transaction may own several half-queue
offsets: the newest copy is the one checked and committed, and END_TRANSACTION may name
any of them (the producer answers with the offsets it was given). Ending a transaction
ends all of its copies.

Plain state, decided synchronously: :mod:`tidemq.broker.half_queue` stores and reads
the records, :mod:`tidemq.broker.transaction_check` asks the producers. At most
:data:`MAX_HALF_MESSAGES` transactions are held; a prepared send past that is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

__all__ = ["MAX_HALF_MESSAGES", "HalfMessage", "HalfTable"]

#: Open transactions held at most (each costs a few hundred bytes).
MAX_HALF_MESSAGES = 1_000_000


@dataclasses.dataclass(slots=True)
class HalfMessage:
    """One open transaction: its newest half-queue copy and the offsets of older ones."""

    #: The transaction id (``UNIQ_KEY``), or ``@<half-queue offset>`` without one.
    key: str
    #: The producer group (``PGROUP``): who is asked.
    group: str
    #: The real topic (``REAL_TOPIC``).
    topic: str
    #: Half-queue offset and commit-log offset of the newest copy.
    offset: int
    phys: int
    #: When the newest copy was stored (store clock, ms): checks are counted from it.
    stored_ms: int
    #: Check-backs so far (the newest copy's ``TRANSACTION_CHECK_TIMES``).
    checks: int = 0
    #: (half-queue offset, commit-log offset) of the older copies.
    older: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    def offsets(self) -> list[int]:
        """Every half-queue offset this transaction owns, ascending."""
        return sorted([self.offset, *(o for o, _ in self.older)])

    def owns(self, offset: int, phys: int) -> bool:
        """Whether the copy at half-queue ``offset`` and commit-log ``phys`` is one of
        this transaction's."""
        return (offset, phys) == (self.offset, self.phys) or (offset, phys) in self.older


class HalfTable:
    def __init__(self) -> None:
        self._by_key: dict[str, HalfMessage] = {}
        self._by_offset: dict[int, HalfMessage] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[HalfMessage]:
        return iter(list(self._by_key.values()))

    @property
    def full(self) -> bool:
        return len(self._by_key) >= MAX_HALF_MESSAGES

    def add(self, msg: HalfMessage) -> HalfMessage:
        """Hold ``msg``; a copy of a transaction already held joins it (the newer copy,
        by half-queue offset, becomes the one checked). The transaction held now."""
        held = self._by_key.get(msg.key)
        if held is None:
            self._by_key[msg.key] = msg
            held = msg
        elif msg.offset > held.offset:
            msg.older = [*held.older, (held.offset, held.phys), *msg.older]
            self._by_key[msg.key] = held = msg
        else:
            held.older.append((msg.offset, msg.phys))
        for offset in held.offsets():
            self._by_offset[offset] = held
        return held

    def find(self, offset: int) -> HalfMessage | None:
        """The open transaction owning half-queue ``offset``."""
        return self._by_offset.get(offset)

    def remove(self, msg: HalfMessage) -> None:
        """Forget ``msg`` (ended or discarded)."""
        if self._by_key.get(msg.key) is msg:
            del self._by_key[msg.key]
        for offset in msg.offsets():
            if self._by_offset.get(offset) is msg:
                del self._by_offset[offset]

    def due(self, now_ms: int, timeout_ms: int) -> list[HalfMessage]:
        """The transactions whose newest copy is ``timeout_ms`` old, oldest first."""
        return sorted((m for m in self._by_key.values() if m.stored_ms + timeout_ms <= now_ms),
                      key=lambda m: m.stored_ms)
