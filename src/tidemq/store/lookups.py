"""Many keys looked up in one large dict at once.

A dict of a million LMQ names (the LMQ store's cache and table, the appender's next
offsets) is far larger than the CPU's caches: a lookup of a name misses them for its
index slot, its entry and the stored key it compares, one after the other, and a
fan-out looks up ten names in each of several such dicts on the send path and again on
the dispatch thread. :func:`get_many` answers as ``list(map(d.get, keys))`` does; the
compiled ``dict_get_many`` (``tidemq.formats._crecords``) starts the memory reads of a
window of keys together before it looks them up, so their misses overlap instead of
adding up. It reads ahead only where it knows the interpreter's dict layout (CPython
3.11 to 3.13 with the GIL: :data:`READ_AHEAD`); elsewhere it looks the keys up one by
one, as its twin does. :func:`py_get_many` is that twin, the fallback where the module
is not built or ``TIDEMQ_NO_NATIVE=1`` is set. :func:`set_many` stores many keys the
same way (``dict_set_many``, twin :func:`py_set_many`), reading the values it replaces
ahead too: a dispatch round advances a fan-out's LMQs in the LMQ store's table of a
million names with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from tidemq.formats.record.native import MODULE, compiled

__all__ = ["NATIVE_GET_MANY", "NATIVE_SET_MANY", "READ_AHEAD", "get_many", "py_get_many",
           "py_set_many", "set_many"]

K = TypeVar("K")
V = TypeVar("V")


def py_get_many(d: dict[K, V], keys: Sequence[K]) -> list[V | None]:
    """``d``'s value of each of ``keys`` (as they are when called), ``None`` where it has
    none."""
    return list(map(d.get, tuple(keys)))


_compiled = compiled("dict_get_many")
#: Whether :func:`get_many` is the compiled one.
NATIVE_GET_MANY = _compiled is not None
#: Whether :func:`get_many` overlaps the cache misses of a window of keys.
READ_AHEAD = NATIVE_GET_MANY and bool(getattr(MODULE, "DICT_READ_AHEAD", 0))
#: :func:`py_get_many`, compiled where it can be.
get_many = cast("Callable[[dict[Any, Any], Sequence[Any]], list[Any]]",
                _compiled if _compiled is not None else py_get_many)


def py_set_many(d: dict[K, V], keys: Sequence[K], values: Sequence[V], delta: int = 0, /
                ) -> None:
    """Set ``d[keys[i]] = values[i]`` for each ``i``, in order; with ``delta`` other
    than 0 the values are ints, each stored plus ``delta`` (a fan-out's next offsets,
    from the offsets it took)."""
    if len(keys) != len(values):
        raise ValueError(f"dict_set_many: {len(keys)} keys but {len(values)} values")
    if delta:  # stored one by one: a bad value stops the stores where it stands
        for key, value in zip(keys, values, strict=True):
            d[key] = _plus(value, delta)  # type: ignore[assignment]
        return
    d.update(zip(keys, values, strict=True))


def _plus(value: object, delta: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"dict_set_many: a value plus {delta} must be an int, not "
                        f"{type(value).__name__}")
    total = value + delta
    if not -(1 << 63) <= total < 1 << 63:
        raise OverflowError("dict_set_many: a value plus delta overflows a 64-bit int")
    return total


_compiled_set = compiled("dict_set_many")
#: Whether :func:`set_many` is the compiled one.
NATIVE_SET_MANY = _compiled_set is not None
#: :func:`py_set_many`, compiled where it can be: a store reads the slots of a window of
#: keys, and the values they replace, with overlapped misses first.
class SetMany(Protocol):
    """:func:`py_set_many`'s signature."""

    def __call__(self, d: dict[Any, Any], keys: Sequence[Any], values: Sequence[Any],
                 delta: int = 0, /) -> None: ...


set_many = cast("SetMany",
                _compiled_set if _compiled_set is not None else py_set_many)
