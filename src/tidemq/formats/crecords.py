"""The per-message loops of a uniform batch: compiled when built, numpy otherwise.

A producer batch whose entries share one layout becomes commit-log records of one size,
tiled from a template (:mod:`tidemq.store.append`). Per message, only fixed-offset fields
then vary. These four functions do that work in one call per batch:

==================  ==========================================================
function            what it does, for ``n`` records of ``rec`` bytes in ``buf``
==================  ==========================================================
fill_records        FLAG, BODY and PROPERTIES from client entry ``i``, and
                    BODYCRC = crc32(body) & 0x7FFFFFFF, into record ``i``
patch_records       QUEUEOFFSET ``qo + i``, PHYSICALOFFSET ``phys + i * rec``,
                    STORETIMESTAMP
uniform_entries     whether every client entry repeats the first one's length
                    fields and property bytes but for the UNIQ_KEY value
                    (separator-free ASCII in each)
offset_ids          the records' offset message ids, joined by commas
==================  ==========================================================

:data:`NATIVE` says which implementation runs: the C module ``_crecords`` (built by
``setup.py`` where a compiler and zlib's headers exist; ``TIDEMQ_NO_NATIVE=1`` ignores
it) or the numpy code below, which the tests hold to the same bytes. Byte positions are
those of :mod:`tidemq.formats.batch` and :mod:`tidemq.formats.record`.
"""

from __future__ import annotations

import functools
import operator
import os
import struct
from collections.abc import Callable, Iterator
from types import ModuleType

import numpy as np
import numpy.typing as npt

from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.record import crc32

__all__ = [
    "NATIVE",
    "fill_records",
    "joined_offset_ids",
    "offset_ids",
    "patch_records",
    "py_fill_records",
    "py_offset_ids",
    "py_patch_records",
    "py_uniform_entries",
    "uniform_entries",
]

Buffer = bytes | bytearray | memoryview


def py_fill_records(buf: bytearray | memoryview, rec: int, data: Buffer, n: int, size: int,
                    blen: int, props_at: int) -> None:
    """Copy each of the ``n`` client entries of ``size`` bytes in ``data`` into record
    ``i`` of ``buf``: FLAG (entry 12:16 to record 16:20), the ``blen``-byte BODY (entry
    20: to record 88:), the PROPERTIES (the entry's rest, to record ``props_at``), and the
    body's masked CRC32 at record 8."""
    pstart = ENTRY_OVERHEAD + blen
    plen = size - pstart
    if (n < 0 or blen < 0 or plen < 0 or rec < 88 + blen or props_at < 88 + blen
            or props_at + plen > rec or len(buf) < n * rec or len(data) < n * size):
        raise ValueError(f"fill_records: {n} entries of {size} bytes ({blen}-byte bodies) "
                         f"do not fit {n} records of {rec} bytes (properties at {props_at}) "
                         f"in {len(data)}/{len(buf)} bytes")
    grid = np.frombuffer(buf, np.uint8, n * rec).reshape(n, rec)
    entries = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
    grid[:, 16:20] = entries[:, 12:16]
    grid[:, 88 : 88 + blen] = entries[:, 20 : 20 + blen]
    grid[:, props_at : props_at + plen] = entries[:, pstart:]
    # The bodies as bytes objects from one Struct call (a slice each costs several times
    # as much), then one CRC call each.
    if n <= _BODIES_STRUCT_MAX:
        bodies: Iterator[bytes] = iter(_bodies_struct(n, size, blen).unpack_from(data))
    else:
        bodies = map(operator.itemgetter(0),
                     struct.iter_unpack(f"<20x{blen}s{size - 20 - blen}x", data[: n * size]))
    crcs = np.fromiter(map(crc32, bodies), np.uint32, n)
    crcs &= 0x7FFFFFFF
    grid[:, 8:12] = crcs.astype(">u4").view(np.uint8).reshape(n, 4)


#: Batches of up to this many entries have their bodies read by one cached Struct.
_BODIES_STRUCT_MAX = 1024


@functools.lru_cache(maxsize=32)
def _bodies_struct(n: int, size: int, blen: int) -> struct.Struct:
    return struct.Struct("<" + f"20x{blen}s{size - 20 - blen}x" * n)


def py_patch_records(buf: bytearray | memoryview, n: int, rec: int, queue_offset: int,
                     phys_base: int, store_ts: int, ts_at: int) -> None:
    """Record ``i`` of ``buf`` gets QUEUEOFFSET ``queue_offset + i`` (at 20),
    PHYSICALOFFSET ``phys_base + i * rec`` (at 28) and STORETIMESTAMP (at ``ts_at``)."""
    if n < 0 or rec < 36 or ts_at < 0 or ts_at + 8 > rec or len(buf) < n * rec:
        raise ValueError(f"patch_records: {n} records of {rec} bytes (store time at "
                         f"{ts_at}) do not fit {len(buf)} bytes")
    grid = np.frombuffer(buf, np.uint8, n * rec).reshape(n, rec)
    steps = np.arange(n, dtype=np.int64)
    grid[:, 20:28] = (steps + queue_offset).astype(">i8").view(np.uint8).reshape(n, 8)
    grid[:, 28:36] = (steps * rec + phys_base).astype(">i8").view(np.uint8).reshape(n, 8)
    grid[:, ts_at : ts_at + 8] = np.frombuffer(store_ts.to_bytes(8, "big", signed=True),
                                               np.uint8)


def py_uniform_entries(data: Buffer, n: int, size: int, blen: int, ustart: int,
                       uend: int) -> bool:
    """Whether each of the ``n`` entries of ``size`` bytes repeats the first one's
    TOTALSIZE, BODYLENGTH, PROPERTIESLENGTH and property bytes, except property bytes
    ``ustart:uend`` (the UNIQ_KEY value), which are ASCII without 0x02 in every entry."""
    pstart = ENTRY_OVERHEAD + blen
    plen = size - pstart
    if (n < 1 or blen < 0 or plen < 0 or ustart < 0 or ustart > uend or uend > plen
            or len(data) < n * size):
        raise ValueError(f"uniform_entries: {n} entries of {size} bytes with {blen}-byte "
                         f"bodies and a key at {ustart}:{uend} do not fit {len(data)} bytes")
    rows = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
    if ustart != uend:
        values = rows[:, pstart + ustart : pstart + uend].tobytes()
        if not values.isascii() or b"\x02" in values:
            return False
    columns = np.r_[0:4, 16:20, pstart - 2 : pstart + ustart, pstart + uend : size]
    fixed = rows.take(columns, axis=1).tobytes()
    return fixed == fixed[: len(columns)] * n


def py_offset_ids(prefix: str, start: int, step: int, n: int) -> str:
    """``",".join(prefix + "%016X" % (start + i * step) for i in range(n))``."""
    if not prefix.isascii() or n < 0:
        raise ValueError("offset_ids: the prefix must be ASCII, n >= 0")
    if n == 0:
        return ""
    return joined_offset_ids(prefix, np.arange(n, dtype=np.int64) * step + start)


def joined_offset_ids(prefix: str, offsets: npt.ArrayLike) -> str:
    """The ids of any (non-empty) ``offsets``, joined as :func:`offset_ids` joins them:
    one ``bytes.hex`` of all of them (a comma every 8 bytes), not a format per offset."""
    at = np.asarray(offsets).astype(">u8")
    return prefix + at.tobytes().hex(",", 8).upper().replace(",", "," + prefix)


def _native() -> ModuleType | None:
    if os.environ.get("TIDEMQ_NO_NATIVE") == "1":
        return None
    try:
        from tidemq.formats import _crecords
    except ImportError:
        return None
    return _crecords


_mod = _native()
#: Whether the compiled loops run (``False``: the numpy code of this module).
NATIVE = _mod is not None

fill_records: Callable[[bytearray | memoryview, int, Buffer, int, int, int, int], None] = (
    _mod.fill_records if _mod is not None else py_fill_records)
patch_records: Callable[[bytearray | memoryview, int, int, int, int, int, int], None] = (
    _mod.patch_records if _mod is not None else py_patch_records)
uniform_entries: Callable[[Buffer, int, int, int, int, int], bool] = (
    _mod.uniform_entries if _mod is not None else py_uniform_entries)
offset_ids: Callable[[str, int, int, int], str] = (
    _mod.offset_ids if _mod is not None else py_offset_ids)
