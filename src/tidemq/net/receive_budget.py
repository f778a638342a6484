"""The receive-buffer bytes a server holds for its peers, bounded over its connections.

A frame's bytes are kept until the whole frame has arrived. One peer can hold up to a
frame's worth (``max_frame_size``); many peers that start frames and never finish them
could hold it many times over. And a connection's buffer keeps its grown size between
frames (the next large frame is read in place), so many idle peers that each sent one
large frame hold a large buffer each.

Each connection reports after every read how many bytes of an incomplete frame it
holds, and otherwise how many spare buffer bytes it keeps (:meth:`ReceiveBudget.update`).
While the total stays within ``limit`` nothing happens. When it goes over, the budget
names, in a :class:`Verdict`, the connections that must give back their spare buffers
(largest first, which costs them nothing now), then -- if that is not enough -- the
connections to close: the one holding the most bytes for the longest first, ranked by
bytes times seconds held since its last complete frame, until the total fits. A fast
sender of large frames holds its bytes briefly and ranks low; a peer trickling a frame
it never finishes ranks high.

The budget only decides; the caller trims and closes (and calls
:meth:`ReceiveBudget.release` for every connection that goes away).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar, cast

__all__ = ["DEFAULT_RECEIVE_BUDGET", "ReceiveBudget", "Verdict"]

#: Receive-buffer bytes a server holds at most, over all its connections.
DEFAULT_RECEIVE_BUDGET = 256 * 1024 * 1024

K = TypeVar("K", bound=Hashable)


class Verdict(NamedTuple, Generic[K]):
    """What to do after a report: ``trim`` gives back spare buffers, ``close`` goes."""

    trim: tuple[K, ...]
    close: tuple[K, ...]


class ReceiveBudget(Generic[K]):
    """See the module docstring."""

    def __init__(self, limit: int = DEFAULT_RECEIVE_BUDGET) -> None:
        if limit <= 0:
            raise ValueError(f"the receive budget must be positive, not {limit}")
        self.limit = limit
        self.total = 0
        self._held: dict[K, tuple[int, float]] = {}  # owner -> (bytes, held since)
        self._spare: dict[K, int] = {}  # owner -> spare buffer bytes

    def __len__(self) -> int:
        return len(self._held.keys() | self._spare.keys())

    def held(self, owner: K) -> int:
        """Bytes of an incomplete frame ``owner`` holds, as last reported."""
        entry = self._held.get(owner)
        return entry[0] if entry is not None else 0

    def spare(self, owner: K) -> int:
        """Spare buffer bytes ``owner`` keeps, as last reported."""
        return self._spare.get(owner, 0)

    def update(self, owner: K, held: int, now: float, *, completed: bool = False,
               spare: int = 0) -> Verdict[K]:
        """``owner`` holds ``held`` bytes of an incomplete frame at time ``now``
        (``completed``: it finished a frame since its last report), and keeps ``spare``
        buffer bytes besides. Returns what to trim and whom to close -- both empty while
        the total is within the limit. Trimmed owners count no spare bytes any more and
        closed ones are released."""
        entry = self._held.get(owner)
        if entry is None and not held and not spare and owner not in self._spare:
            return cast("Verdict[K]", _NOTHING)  # the usual case: small frames, nothing kept
        if entry is not None:
            self.total -= entry[0]
        if held:
            since = now if entry is None or completed else entry[1]
            self._held[owner] = (held, since)
            self.total += held
        elif entry is not None:
            del self._held[owner]
        self.total += spare - self._spare.pop(owner, 0)
        if spare:
            self._spare[owner] = spare
        if self.total <= self.limit:
            return cast("Verdict[K]", _NOTHING)
        return self._over(now)

    def release(self, owner: K) -> None:
        """``owner`` is gone (or keeps nothing any more)."""
        entry = self._held.pop(owner, None)
        if entry is not None:
            self.total -= entry[0]
        self.total -= self._spare.pop(owner, 0)

    def _over(self, now: float) -> Verdict[K]:
        trim: list[K] = []
        for owner, spare in sorted(self._spare.items(), key=lambda item: item[1],
                                   reverse=True):
            if self.total <= self.limit:
                return Verdict(tuple(trim), ())
            del self._spare[owner]
            self.total -= spare
            trim.append(owner)
        ranked = sorted(self._held.items(),
                        key=lambda item: (item[1][0] * (now - item[1][1]), item[1][0]),
                        reverse=True)
        close: list[K] = []
        for owner, (held, _since) in ranked:
            if self.total <= self.limit:
                break
            del self._held[owner]
            self.total -= held
            close.append(owner)
        return Verdict(tuple(trim), tuple(close))


_NOTHING: Verdict[object] = Verdict((), ())
