"""The metadata of the LMQs the LMQ store knows but does not cache as lists (RIP-28).

:class:`~tidemq.store.lmq_store.LmqStore` caches the metadata of the queues in use as
``[next offset, min offset, floor]`` lists, which dispatch advances in place; that cache
is bounded, and a queue it drops would otherwise cost a RocksDB read when next used (its
``M`` key and a reverse seek to its last entry). The table keeps what the store knows of
those queues instead: filled by the walk of a start beyond the cache, and with every
queue the cache drops. Like RocketMQ, which keeps every LMQ's offset in memory, a
broker then reads no queue's metadata from RocksDB while the table has room.

A queue whose min offset is 0 and that was never deleted -- nearly every queue -- is one
entry ``name -> next offset`` of a dict; the others keep all three fields. The name is
the cache's own string (shared, not copied), so an entry costs the dict's slot and,
past 256, an int: see ``docs/lmq.md`` for the bytes per LMQ.

The table holds at most :attr:`LmqTable.limit` queues; :meth:`LmqTable.put_many` says
when one did not fit, and the store then stops trusting a miss to mean a new queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import eq, gt, is_, itemgetter, or_
from typing import cast

from tidemq.store.lookups import get_many, set_many

__all__ = ["LmqTable"]

_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)


class LmqTable:
    """Queue name -> ``[next offset, min offset, floor]``, compactly."""

    __slots__ = ("_other", "_plain", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        self.limit = limit
        #: Queues with min offset 0 and no floor: their next offset.
        self._plain: dict[str, int] = {}
        #: The other queues.
        self._other: dict[str, tuple[int, int, int]] = {}

    def __len__(self) -> int:
        return len(self._plain) + len(self._other)

    def __contains__(self, name: object) -> bool:
        return name in self._plain or name in self._other

    def get(self, name: str) -> list[int] | None:
        """A new list of ``name``'s metadata, or ``None`` for a queue not in the table."""
        nxt = self._plain.get(name)
        if nxt is not None:
            return [nxt, 0, 0]
        other = self._other.get(name)
        return None if other is None else list(other)

    def nexts(self, names: Sequence[str]) -> list[int | None]:
        """Each of ``names``' next offset, or ``None`` for a queue not in the table; no
        Python step a plain queue."""
        found: list[int | None] = get_many(self._plain, names)
        other = self._other
        if other and None in found:
            for i, name in enumerate(names):
                if found[i] is None and name in other:
                    found[i] = other[name][0]
        return found

    def advanceable(self, names: Sequence[str], nexts: Sequence[int], *, new: bool) -> bool:
        """Whether :meth:`advance` may move each of ``names`` to the next offset of the
        same index in ``nexts``: every name is a plain queue whose next offset that
        moves on (from 0, only to 1: a queue whose first entry is not 0 starts past 0),
        or, with ``new`` (the caller knows a name in neither its cache nor the table to
        be a new queue), one the table does not hold, taking its first entry at 0, with
        room for it."""
        found: list[int | None] = get_many(self._plain, names)
        if None in found:
            fresh = list(map(is_, found, repeat(None)))
            if (not new or len(self) + sum(fresh) > self.limit
                    or not all(map(eq, compress(nexts, fresh), repeat(1)))
                    or (self._other and not self._other.keys().isdisjoint(
                        compress(names, fresh)))):
                return False
            held = [0 if nxt is None else nxt for nxt in found]
        else:
            held = cast("list[int]", found)
        return all(map(gt, nexts, held)) and all(map(or_, map(bool, held),
                                                     map(eq, nexts, repeat(1))))

    def advance(self, names: Sequence[str], nexts: Sequence[int]) -> None:
        """Set the plain queues ``names`` to ``nexts`` (:meth:`advanceable` said so)."""
        set_many(self._plain, names, nexts)

    def put_many(self, names: Sequence[str], metas: Sequence[Sequence[int]]) -> bool:
        """Remember each of ``names`` with its metadata (replacing what the table held);
        ``False`` when some new name did not fit under :attr:`limit` (it is left out)."""
        plain, other, limit = self._plain, self._other, self.limit
        # Every name fits, and each is of a queue never expired nor deleted (the usual
        # trim): no Python step a queue.
        if (len(plain) + len(other) + len(names) <= limit and not any(map(_second, metas))
                and not any(map(_third, metas)) and other.keys().isdisjoint(names)):
            plain.update(zip(names, map(_first, metas), strict=True))
            return True
        fitted = True
        for name, (nxt, lo, floor) in zip(names, metas, strict=True):
            if name not in plain and name not in other and len(plain) + len(other) >= limit:
                fitted = False
            elif lo or floor:
                other[name] = (nxt, lo, floor)
                plain.pop(name, None)
            else:
                plain[name] = nxt
                if other:
                    other.pop(name, None)
        return fitted

    def fill(self, rows: Sequence[tuple[str, Sequence[int]]]) -> tuple[int, bool]:
        """Take ``(name, metadata)`` rows of a start's walk, of names the table does
        not hold, in order until it is full. Returns how many it took, and whether that
        was every row. Rows of plain queues, nearly all of them, go in with no Python
        step each."""
        plain, other = self._plain, self._other
        room = max(self.limit - len(self), 0)
        seen = len(rows) <= room
        rows = rows[:room]
        metas = list(map(_second, rows))  # [next offset, min offset, floor] each
        if any(map(_second, metas)) or any(map(_third, metas)):
            for name, (nxt, lo, floor) in rows:
                if lo or floor:
                    other[name] = (nxt, lo, floor)
                else:
                    plain[name] = nxt
        else:
            plain.update(zip(map(_first, rows), map(_first, metas), strict=True))
        return len(rows), seen

    def clear(self) -> None:
        self._plain = {}
        self._other = {}
