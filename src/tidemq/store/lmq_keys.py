"""A dispatch round's LMQ entry keys, built and put in RocksDB's order (RIP-28).

Each entry of a fan-out is one ``E`` key of the LMQ store (:mod:`tidemq.store.lmq_store`
has the layout): ``b"E"``, the queue's name in UTF-8, ``b"\\x00"``, the entry's offset as
a big-endian int64. The serial dispatcher builds a round's keys and puts them into its
write batch sorted, since RocksDB inserts a batch in key order faster than in log order.
:func:`sorted_entry_keys` is the compiled ``lmq_entry_keys``
(``tidemq.formats._crecords``): one pass that writes each key once and one sort of
them, without the name's bytes, the offset's bytes and a tuple of parts per entry, and
a sort key call per entry, that :func:`py_sorted_entry_keys`, its twin, makes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import cast

from tidemq.formats.record.native import compiled

__all__ = ["NATIVE_ENTRY_KEYS", "py_sorted_entry_keys", "sorted_entry_keys"]

_Q = struct.Struct(">q")


def py_sorted_entry_keys(names: Sequence[str], offsets: Sequence[int]
                         ) -> tuple[list[bytes], list[int]]:
    """The ``E`` key of each entry (queue ``names[i]``, offset ``offsets[i]``) in
    ascending byte order, entries of equal keys in their given order; and, for each
    key, the index of its entry."""
    if len(names) != len(offsets):
        raise ValueError(f"{len(names)} names but {len(offsets)} offsets")
    keys = list(map(b"".join, zip(repeat(b"E"), map(str.encode, names), repeat(b"\x00"),
                                  map(_Q.pack, offsets), strict=False)))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return list(map(keys.__getitem__, order)), order


_compiled = compiled("lmq_entry_keys")
#: Whether :func:`sorted_entry_keys` is the compiled one.
NATIVE_ENTRY_KEYS = _compiled is not None
#: :func:`py_sorted_entry_keys`, compiled where it can be.
sorted_entry_keys = cast("Callable[[Sequence[str], Sequence[int]], tuple[list[bytes], list[int]]]",
                         _compiled if _compiled is not None else py_sorted_entry_keys)
