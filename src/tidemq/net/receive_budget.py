"""The bytes of partly received frames a server holds, bounded over its connections.

A frame's bytes are kept until the whole frame has arrived. One peer can hold up to a
frame's worth (``max_frame_size``); many peers that start frames and never finish them
could hold it many times over. Each connection reports after every read how many bytes
of an incomplete frame it holds (:meth:`ReceiveBudget.update`). While the total stays
within ``limit`` nothing happens. When it goes over, the budget names the connections to
close: the one holding the most bytes for the longest first -- ranked by bytes times
seconds held since its last complete frame -- until the total is within the limit again.
A fast sender of large frames holds its bytes briefly and ranks low; a peer trickling a
frame it never finishes ranks high.

The budget only decides; the caller closes the connections it names (and calls
:meth:`ReceiveBudget.release` for every connection that goes away).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["DEFAULT_RECEIVE_BUDGET", "ReceiveBudget"]

#: Bytes of incomplete frames a server holds at most, over all its connections.
DEFAULT_RECEIVE_BUDGET = 256 * 1024 * 1024

K = TypeVar("K", bound=Hashable)


class ReceiveBudget(Generic[K]):
    """See the module docstring."""

    def __init__(self, limit: int = DEFAULT_RECEIVE_BUDGET) -> None:
        if limit <= 0:
            raise ValueError(f"the receive budget must be positive, not {limit}")
        self.limit = limit
        self.total = 0
        self._held: dict[K, tuple[int, float]] = {}  # owner -> (bytes, held since)

    def __len__(self) -> int:
        return len(self._held)

    def held(self, owner: K) -> int:
        """Bytes of an incomplete frame ``owner`` holds, as last reported."""
        entry = self._held.get(owner)
        return entry[0] if entry is not None else 0

    def update(self, owner: K, held: int, now: float, *, completed: bool = False) -> list[K]:
        """``owner`` holds ``held`` bytes of an incomplete frame at time ``now``
        (``completed``: it finished a frame since its last report). Returns the owners to
        close, worst first -- empty while the total is within the limit. They are
        released already."""
        entry = self._held.get(owner)
        if entry is None:
            if not held:
                return []
            since = now
        else:
            self.total -= entry[0]
            if not held:
                del self._held[owner]
                return []
            since = now if completed else entry[1]
        self._held[owner] = (held, since)
        self.total += held
        if self.total <= self.limit:
            return []
        return self._evict(now)

    def release(self, owner: K) -> None:
        """``owner`` is gone (or holds nothing any more)."""
        entry = self._held.pop(owner, None)
        if entry is not None:
            self.total -= entry[0]

    def _evict(self, now: float) -> list[K]:
        ranked = sorted(self._held.items(),
                        key=lambda item: (item[1][0] * (now - item[1][1]), item[1][0]),
                        reverse=True)
        out: list[K] = []
        for owner, (held, _since) in ranked:
            if self.total <= self.limit:
                break
            del self._held[owner]
            self.total -= held
            out.append(owner)
        return out
