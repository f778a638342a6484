"""The lowest committed offset of each queue across the groups that committed on it
(retention's floor), gathered a slice of the offsets table's keys at a time.

:func:`lowest_offsets` reads the keys ``keys[start:stop]`` of the live table (no copy of
it) into a map of each ``(topic, queue id)`` to the lowest offset seen so far: in C where
it is built (``lowest_offsets`` of ``tidemq.formats._crecords``), by its twin
:func:`py_lowest_offsets` otherwise; the tests hold the two to the same maps. One call
holds the interpreter for its slice only, so a caller on a thread lets the event loop run
between slices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

from tidemq.formats.record.native import compiled

__all__ = ["NATIVE_LOWEST", "lowest_offsets", "py_lowest_offsets"]

OffsetTable = Mapping[str, Mapping[int, int]]
Lowest = dict[tuple[str, int], int]

_compiled = cast(
    "Callable[[OffsetTable, Sequence[str], int, int, Lowest, dict[str, str]], None] | None",
    compiled("lowest_offsets"))
#: Whether :func:`lowest_offsets` is compiled.
NATIVE_LOWEST = _compiled is not None


def py_lowest_offsets(table: OffsetTable, keys: Sequence[str], start: int, stop: int,
                      out: Lowest, topics: dict[str, str]) -> None:
    """Into ``out``, for each queue of the keys ``keys[start:stop]`` that ``table`` holds
    (``"topic@group"`` -> queue id -> offset), its offset where ``out`` has none or a
    higher one; the topic is the key up to its first ``@``. ``topics`` is the compiled
    function's store of one str object per topic, kept by the caller between the calls
    of one gathering (``out``'s keys then share them); the twin leaves it alone."""
    for key in keys[start:stop]:
        queues = table.get(key)
        if queues is None:
            continue  # deleted since the keys were listed
        topic = key.split("@", 1)[0]
        for queue_id, offset in dict(queues).items():  # one C call: a thread's copy
            old = out.get((topic, queue_id))
            if old is None or offset < old:
                out[topic, queue_id] = offset


def lowest_offsets(table: OffsetTable, keys: Sequence[str], start: int, stop: int,
                   out: Lowest, topics: dict[str, str]) -> None:
    """:func:`py_lowest_offsets`, in C where it is built (a dict and a list)."""
    if _compiled is not None and type(table) is dict and type(keys) is list:
        _compiled(table, keys, start, stop, out, topics)
    else:
        py_lowest_offsets(table, keys, start, stop, out, topics)
