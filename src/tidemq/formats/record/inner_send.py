"""An inner batch's send (RIP-26) read in one call: the facts its record is stored with.

A SEND_BATCH_MESSAGE to a BatchCQ topic is stored as one record whose properties are the
send's property text less ``INNER_NUM`` (the store adds its own, and ``INNER_BASE``),
with ``CLUSTER``. :func:`inner_facts` reads, in one call, what the send processor needs
for the usual send -- the entry count, the stored property bytes, the batch-level
``UNIQ_KEY``, the index keys, whether the producer waits for the flush, the tags code --
or answers ``None`` for anything else, and the processor takes its general path, which
also names what is wrong. The usual send:

* the property text is ASCII; every segment between ``\\x02`` separators (the last one
  optional) is a non-empty name, one ``\\x01`` and a non-empty value; at most
  :data:`MAX_PAIRS` pairs, no name twice;
* ``UNIQ_KEY`` is there; ``INNER_BASE`` and ``INNER_MULTI_DISPATCH`` are not;
* the body is :data:`MIN_ENTRIES` to :data:`MAX_ENTRIES` entries of the first entry's
  size whose TOTALSIZE, BODYLENGTH and PROPERTIESLENGTH bytes repeat the first entry's
  (:func:`~tidemq.formats.record.loops.uniform_lengths`), and the first entry's
  properties do not name ``INNER_MULTI_DISPATCH``;
* an ``INNER_NUM`` says the count, in decimal.

The index keys and whether the producer waits are read by the rules of
:mod:`tidemq.formats.properties` (:func:`~tidemq.formats.properties.user_keys`,
:func:`~tidemq.formats.properties.wants_flush`), as every send path reads them.

The compiled ``inner_facts`` of ``tidemq.formats._crecords`` runs when built; the twin
:func:`py_inner_facts` otherwise, and the tests hold the two to the same results.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import cast

from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    user_keys,
    wants_flush,
)
from tidemq.formats.record.loops import Buffer, compiled, py_uniform_lengths

__all__ = ["MAX_ENTRIES", "MAX_PAIRS", "MIN_ENTRIES", "InnerFacts", "inner_facts",
           "py_inner_facts"]

#: count, stored property bytes, UNIQ_KEY, index keys (UNIQ_KEY first), whether the
#: producer waits for the flush, tags code.
InnerFacts = tuple[int, bytes, str, tuple[str, ...], bool, int]
#: The most pairs the usual property text holds.
MAX_PAIRS = 64
#: The fewest entries of the usual body (fewer are counted entry by entry).
MIN_ENTRIES = 4
#: The most entries an inner batch holds (its record's INNER_NUM is a short).
MAX_ENTRIES = 0x7FFF
#: An entry's TOTALSIZE and BODYLENGTH.
_SIZE_AND_BLEN = struct.Struct(">i12xi")
_PLEN = struct.Struct(">h")
_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
_MULTI_DISPATCH_KEY = b"INNER_MULTI_DISPATCH\x01"
_REFUSED = frozenset({"INNER_BASE", _MULTI_DISPATCH})


def _count(plain: Buffer) -> int:
    """The entry count of a body of the usual shape, else 0."""
    n_bytes = len(plain)
    if n_bytes < MIN_ENTRIES * ENTRY_OVERHEAD:
        return 0
    size, blen = _SIZE_AND_BLEN.unpack_from(plain)
    if size < ENTRY_OVERHEAD or n_bytes % size or not 0 <= blen <= size - ENTRY_OVERHEAD:
        return 0
    start = ENTRY_OVERHEAD + blen
    (plen,) = _PLEN.unpack_from(plain, start - 2)
    n: int = n_bytes // size
    if (start + plen != size or not MIN_ENTRIES <= n <= MAX_ENTRIES
            or not py_uniform_lengths(plain, n, size, blen)):
        return 0
    first = bytes(plain[start:size])
    if first.startswith(_MULTI_DISPATCH_KEY) or b"\x02" + _MULTI_DISPATCH_KEY in first:
        return 0
    return n


def py_inner_facts(text: str, plain: Buffer, cluster_pair: bytes) -> InnerFacts | None:
    """The facts of an inner batch send of the usual shape (see the module docstring)
    whose property text is ``text`` and whose body, inflated, is ``plain``; ``None`` for
    any other. ``cluster_pair``: the encoded ``CLUSTER`` pair the stored properties end
    with when the text has none."""
    if not text or not text.isascii():
        return None
    segments = text.split(PROPERTY_SEPARATOR)
    if not segments[-1]:
        segments.pop()
    if len(segments) > MAX_PAIRS:
        return None
    props: dict[str, str] = {}
    for segment in segments:
        name, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if not (sep and name and value) or NAME_VALUE_SEPARATOR in value or name in props:
            return None
        props[name] = value
    uniq = props.get("UNIQ_KEY")
    if uniq is None or not _REFUSED.isdisjoint(props):
        return None
    count = _count(plain)
    if count == 0:
        return None
    claimed = props.pop("INNER_NUM", None)
    if claimed is not None and claimed != str(count):
        return None
    raw = "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                  for name, value in props.items()).encode("ascii")
    if "CLUSTER" not in props:
        raw += cluster_pair
    return (count, raw, uniq, (uniq, *user_keys(props)), wants_flush(props),
            tags_code(props.get("TAGS")))


_compiled = compiled("inner_facts")
#: :func:`py_inner_facts`, compiled when built.
inner_facts: Callable[[str, Buffer, bytes], InnerFacts | None] = (
    cast("Callable[[str, Buffer, bytes], InnerFacts | None]", _compiled)
    if _compiled is not None else py_inner_facts)
