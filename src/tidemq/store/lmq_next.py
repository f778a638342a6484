"""The appender's next offset of each LMQ it hands offsets out for, kept bounded (RIP-28).

An LMQ's offsets are assigned under the append lock and written into each record's
``INNER_MULTI_QUEUE_OFFSET``; the LMQ store learns them only when the record is
dispatched. Until then the appender must remember the next offset of every queue it
named; once the store's dispatched position (:attr:`LmqStore.dispatched
<tidemq.store.lmq_store.LmqStore.dispatched>`) has passed the records, the store gives
the same offset back and the appender may forget it.

The map is kept in two generations, so that it stays bounded however many queues are
named over time. Assignments go to :attr:`LmqNextOffsets.young`. When it holds
``limit`` queues, it is sealed at the current end of the log and a new ``young``
begins. The sealed generation is dropped as soon as dispatch has passed the end of the
log it was sealed at: the LMQ store then answers each of its queues as it would, and a
lookup that misses ``young`` asks one large map fewer. A queue is looked up in
``young``, then in the sealed generation (while there is one), then in the LMQ store.
While dispatch lags, ``young`` grows past ``limit`` until it catches up: what cannot be
forgotten yet is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import is_not, not_
from typing import cast

from tidemq.store.lookups import get_many

__all__ = ["LmqNextOffsets"]

#: Queues a generation holds before it is sealed, by default.
LIMIT = 100_000


class LmqNextOffsets:
    """Next offsets per LMQ name: assigned by the appender and not yet known to be
    dispatched. Used under the append lock."""

    __slots__ = ("_sealed", "_sealed_at", "limit", "young")

    def __init__(self, limit: int = LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        #: The generation assignments go to.
        self.young: dict[str, int] = {}
        self._sealed: dict[str, int] = {}
        #: The end of the log when ``_sealed`` stopped taking assignments.
        self._sealed_at = 0

    def __len__(self) -> int:
        return len(self.young) + len(self._sealed)

    def get(self, name: str) -> int | None:
        nxt = self.young.get(name)
        return self._sealed.get(name) if nxt is None else nxt

    def older(self, names: Iterable[str], store: Callable[[Iterable[str]], dict[str, int]]
              ) -> dict[str, int]:
        """The next offsets of ``names`` (not in :attr:`young`): from the sealed
        generation, else from ``store`` (the LMQ store's max offsets), asked once for
        all of them."""
        sealed = self._sealed
        if not sealed:
            return store(names)
        names = list(names)
        held: list[int | None] = get_many(sealed, names)
        if None not in held:
            return dict(zip(names, cast("list[int]", held), strict=True))
        present = list(map(is_not, held, repeat(None)))
        found = dict(zip(compress(names, present), cast("Iterable[int]", compress(held, present)),
                         strict=True))
        found.update(store(list(compress(names, map(not_, present)))))
        return found

    def generations(self) -> tuple[dict[str, int], dict[str, int]]:
        """Both generations, to ask whether they hold a name without building their
        union (the LMQ store's trims: see ``LmqStore.pinned``)."""
        return self.young, self._sealed

    def set(self, name: str, nxt: int) -> None:
        self.young[name] = nxt

    def pop(self, name: str) -> int | None:
        """Forget ``name`` (a deleted queue): its next offset, or ``None``."""
        young = self.young.pop(name, None)
        sealed = self._sealed.pop(name, None)
        return young if young is not None else sealed

    def clear(self) -> None:
        self.young = {}
        self._sealed = {}
        self._sealed_at = 0

    def age(self, dispatched: int, log_end: int) -> None:
        """Drop the sealed generation once every record that took offsets from it (all
        below the log end it was sealed at) is below ``dispatched``, and then seal
        :attr:`young` if it holds :attr:`limit` queues. ``log_end``: the end of the log
        now, past every assignment in :attr:`young`."""
        if dispatched >= self._sealed_at:
            if self._sealed:
                self._sealed = {}
            if len(self.young) >= self.limit:
                self._sealed = self.young
                self.young = {}
                self._sealed_at = log_end
