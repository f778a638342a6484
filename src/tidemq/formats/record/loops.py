"""The per-message loops of a batch of records: compiled when built, numpy otherwise.

A producer batch whose entries share one layout becomes commit-log records of one size,
tiled from a template (:mod:`.batch`). Per message, only fixed-offset fields then vary.
The functions down to ``uniform_entries`` do that work in one call per batch;
``check_records`` checks the stored records a read is about to serve, all of them in one
call:

==================  ==========================================================
function            what it does, for ``n`` records of ``rec`` bytes in ``buf``
==================  ==========================================================
stamp_records       the template record ``head`` into each record ``i``, with
                    FLAG, BODY and PROPERTIES from client entry ``i``,
                    BODYCRC = crc32(body) & 0x7FFFFFFF, QUEUEID, BORNTIMESTAMP,
                    QUEUEOFFSET ``qo + i``, PHYSICALOFFSET ``phys + i * rec``
                    and STORETIMESTAMP, in one pass
patch_records       QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP alone (records
                    encoded apart)
uniform_entries     whether every client entry repeats the first one's length
                    fields and property bytes but for the UNIQ_KEY value
                    (separator-free ASCII in each)
uniform_lengths     whether every client entry repeats the first one's
                    TOTALSIZE, BODYLENGTH and PROPERTIESLENGTH (an inner batch's
                    layout, whatever its properties hold)
uniform_split       the first entry's layout read, uniform_entries checked and
                    the UNIQ_KEY values copied out as one column, in one call
offset_ids          the records' offset message ids, joined by commas
check_records       how many records of ``buf`` (at given starts, of given
                    sizes), from the first, are sound beyond doubt: what the
                    read path checks of records written before a start
write_records       whole records with IPv4 hosts, one per item of a put's
                    columns, one after another into a buffer (body CRCs
                    taken), every field checked before a byte is written
body_crc32          zlib's CRC-32 of a buffer, as ``check_records`` computes
                    body CRCs (compiled: by carry-less multiplication where the
                    CPU has it, several times zlib's speed on bodies of a few
                    hundred bytes)
==================  ==========================================================

:data:`NATIVE` says which implementation runs: the C module ``tidemq.formats._crecords``
(built by ``setup.py`` where a compiler and zlib's headers exist; ``TIDEMQ_NO_NATIVE=1``
ignores it) or the numpy code below (the ``py_*`` twins), which the tests hold to the same
bytes. Byte positions are the names of :mod:`.layout` and :mod:`tidemq.formats.batch`;
the C module repeats them as numbers, and :func:`_check_native` proves on import that it
writes what the twins write.
"""

from __future__ import annotations

import functools
import mmap
import operator
import struct
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

import numpy as np
import numpy.typing as npt

from tidemq.errors import CorruptRecord
from tidemq.formats.batch import (
    ENTRY_OFF_BODY,
    ENTRY_OFF_BODY_LENGTH,
    ENTRY_OFF_FLAG,
    ENTRY_OFF_TOTAL_SIZE,
    ENTRY_OVERHEAD,
    first_layout,
)
from tidemq.formats.record import native
from tidemq.formats.record.decode import Record, decode_record
from tidemq.formats.record.encode import encode_v4_joined
from tidemq.formats.record.layout import (
    OFF_BODY,
    OFF_BODY_CRC,
    OFF_BORN_TIMESTAMP,
    OFF_FLAG,
    OFF_PHYSICAL_OFFSET,
    OFF_QUEUE_ID,
    OFF_QUEUE_OFFSET,
    OFF_STORE_TIMESTAMP,
    crc32,
)
from tidemq.formats.record.native import compiled

__all__ = [
    "NATIVE",
    "Ints",
    "UniformSplit",
    "body_crc32",
    "check_records",
    "compiled",
    "joined_offset_ids",
    "offset_ids",
    "patch_records",
    "py_body_crc32",
    "py_check_records",
    "py_offset_ids",
    "py_patch_records",
    "py_stamp_records",
    "py_uniform_entries",
    "py_uniform_lengths",
    "py_uniform_split",
    "py_write_records",
    "stamp_records",
    "uniform_entries",
    "uniform_lengths",
    "uniform_split",
    "write_records",
]

Buffer = bytes | bytearray | memoryview
#: Integers as :func:`check_records` takes them: an int64 array (the compiled loop reads
#: it without an object per item) or any sequence of ints.
Ints = Sequence[int] | npt.NDArray[np.int64]


def _check_entries_fit(fn: str, n: int, size: int, blen: int, rec: int, props_at: int,
                       data_len: int, buf_len: int) -> None:
    """Raise ``ValueError`` naming ``fn`` unless ``n`` client entries of ``size`` bytes
    with ``blen``-byte bodies, in ``data_len`` bytes, fit ``n`` records of ``rec`` bytes
    with their properties at ``props_at``, in ``buf_len`` bytes."""
    plen = size - (ENTRY_OVERHEAD + blen)
    if (n < 0 or blen < 0 or plen < 0 or rec < OFF_BODY + blen or props_at < OFF_BODY + blen
            or props_at + plen > rec or buf_len < n * rec or data_len < n * size):
        raise ValueError(f"{fn}: {n} entries of {size} bytes ({blen}-byte bodies) "
                         f"do not fit {n} records of {rec} bytes (properties at {props_at}) "
                         f"in {data_len}/{buf_len} bytes")


def _tile_records(buf: bytearray | memoryview, head: Buffer, n: int) -> None:
    """Copy ``head`` into each of the first ``n`` records of ``len(head)`` bytes of
    ``buf`` (checked by the caller)."""
    grid = np.frombuffer(buf, np.uint8, n * len(head)).reshape(n, len(head))
    grid[:] = np.frombuffer(head, np.uint8)


def _fill_records(buf: bytearray | memoryview, rec: int, data: Buffer, n: int, size: int,
                  blen: int, props_at: int) -> None:
    """Copy each of the ``n`` client entries of ``size`` bytes in ``data`` into record
    ``i`` of ``buf`` (geometry checked by the caller): FLAG, the ``blen``-byte BODY, the
    PROPERTIES (the entry's rest, to record ``props_at``), and the body's masked CRC32 as
    BODYCRC."""
    pstart = ENTRY_OVERHEAD + blen
    plen = size - pstart
    grid = np.frombuffer(buf, np.uint8, n * rec).reshape(n, rec)
    entries = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
    grid[:, OFF_FLAG : OFF_FLAG + 4] = entries[:, ENTRY_OFF_FLAG : ENTRY_OFF_FLAG + 4]
    grid[:, OFF_BODY : OFF_BODY + blen] = entries[:, ENTRY_OFF_BODY : ENTRY_OFF_BODY + blen]
    grid[:, props_at : props_at + plen] = entries[:, pstart:]
    # The bodies as bytes objects from one Struct call (a slice each costs several times
    # as much), then one CRC call each.
    if n <= _BODIES_STRUCT_MAX:
        bodies: Iterator[bytes] = iter(_bodies_struct(n, size, blen).unpack_from(data))
    else:
        bodies = map(operator.itemgetter(0),
                     struct.iter_unpack(_body_format(size, blen), data[: n * size]))
    crcs = np.fromiter(map(crc32, bodies), np.uint32, n)
    crcs &= 0x7FFFFFFF
    grid[:, OFF_BODY_CRC : OFF_BODY_CRC + 4] = crcs.astype(">u4").view(np.uint8).reshape(n, 4)


#: Batches of up to this many entries have their bodies read by one cached Struct.
_BODIES_STRUCT_MAX = 1024


def _body_format(size: int, blen: int) -> str:
    """One entry's BODY as a struct field, the rest of the entry skipped."""
    return f"{ENTRY_OFF_BODY}x{blen}s{size - ENTRY_OFF_BODY - blen}x"


@functools.lru_cache(maxsize=32)
def _bodies_struct(n: int, size: int, blen: int) -> struct.Struct:
    return struct.Struct("<" + _body_format(size, blen) * n)


_PHYSICAL_END = OFF_PHYSICAL_OFFSET + 8


def py_patch_records(buf: bytearray | memoryview, n: int, rec: int, queue_offset: int,
                     phys_base: int, store_ts: int, ts_at: int) -> None:
    """Record ``i`` of ``buf`` gets QUEUEOFFSET ``queue_offset + i``, PHYSICALOFFSET
    ``phys_base + i * rec`` and STORETIMESTAMP (at ``ts_at``)."""
    if n < 0 or rec < _PHYSICAL_END or ts_at < 0 or ts_at + 8 > rec or len(buf) < n * rec:
        raise ValueError(f"patch_records: {n} records of {rec} bytes (store time at "
                         f"{ts_at}) do not fit {len(buf)} bytes")
    grid = np.frombuffer(buf, np.uint8, n * rec).reshape(n, rec)
    steps = np.arange(n, dtype=np.int64)
    grid[:, OFF_QUEUE_OFFSET : OFF_QUEUE_OFFSET + 8] = (
        (steps + queue_offset).astype(">i8").view(np.uint8).reshape(n, 8))
    grid[:, OFF_PHYSICAL_OFFSET : _PHYSICAL_END] = (
        (steps * rec + phys_base).astype(">i8").view(np.uint8).reshape(n, 8))
    grid[:, ts_at : ts_at + 8] = np.frombuffer(store_ts.to_bytes(8, "big", signed=True),
                                               np.uint8)


def py_stamp_records(buf: bytearray | memoryview, head: Buffer, data: Buffer, n: int,
                     size: int, blen: int, props_at: int, queue_id: int, born_ts: int,
                     queue_offset: int, phys_base: int, store_ts: int) -> None:
    """``n`` records of ``len(head)`` bytes (``head``: a template record with IPv4 hosts)
    in one call: the template tiled, filled from the client entries and patched, and each
    record given QUEUEID ``queue_id`` and BORNTIMESTAMP ``born_ts``."""
    rec = len(head)
    _check_entries_fit("stamp_records", n, size, blen, rec, props_at, len(data), len(buf))
    if not n:
        return
    _tile_records(buf, head, n)
    _fill_records(buf, rec, data, n, size, blen, props_at)
    py_patch_records(buf, n, rec, queue_offset, phys_base, store_ts, OFF_STORE_TIMESTAMP)
    grid = np.frombuffer(buf, np.uint8, n * rec).reshape(n, rec)
    grid[:, OFF_QUEUE_ID : OFF_QUEUE_ID + 4] = np.frombuffer(
        queue_id.to_bytes(4, "big", signed=True), np.uint8)
    grid[:, OFF_BORN_TIMESTAMP : OFF_BORN_TIMESTAMP + 8] = np.frombuffer(
        born_ts.to_bytes(8, "big", signed=True), np.uint8)


def py_uniform_entries(data: Buffer, n: int, size: int, blen: int, ustart: int,
                       uend: int) -> bool:
    """Whether each of the ``n`` entries of ``size`` bytes repeats the first one's
    TOTALSIZE, BODYLENGTH, PROPERTIESLENGTH and property bytes, except property bytes
    ``ustart:uend`` (the UNIQ_KEY value), which are ASCII without the 0x01 and 0x02
    separators in every entry."""
    pstart = ENTRY_OVERHEAD + blen
    plen = size - pstart
    if (n < 1 or blen < 0 or plen < 0 or ustart < 0 or ustart > uend or uend > plen
            or len(data) < n * size):
        raise ValueError(f"uniform_entries: {n} entries of {size} bytes with {blen}-byte "
                         f"bodies and a key at {ustart}:{uend} do not fit {len(data)} bytes")
    rows = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
    if ustart != uend:
        values = rows[:, pstart + ustart : pstart + uend].tobytes()
        if not values.isascii() or b"\x01" in values or b"\x02" in values:
            return False
    columns = np.r_[ENTRY_OFF_TOTAL_SIZE : ENTRY_OFF_TOTAL_SIZE + 4,
                    ENTRY_OFF_BODY_LENGTH : ENTRY_OFF_BODY_LENGTH + 4,
                    pstart - 2 : pstart + ustart, pstart + uend : size]
    fixed = rows.take(columns, axis=1).tobytes()
    return fixed == fixed[: len(columns)] * n


#: The bytes of an entry's TOTALSIZE and BODYLENGTH; PROPERTIESLENGTH follows the body.
_LENGTH_BYTES = (*range(ENTRY_OFF_TOTAL_SIZE, ENTRY_OFF_TOTAL_SIZE + 4),
                 *range(ENTRY_OFF_BODY_LENGTH, ENTRY_OFF_BODY_LENGTH + 4))


#: :func:`uniform_split`'s answer: ``(n, size, blen, ustart, uend, shape, keys)``.
UniformSplit = tuple[int, int, int, int, int, tuple[bytes, bytes, int], bytes | None]
_UNIQ_NAME = b"UNIQ_KEY\x01"


def py_uniform_split(data: Buffer, max_body: int, column: bool) -> UniformSplit | None:
    """The split of a client batch body whose entries share one layout, or ``None``:
    the first entry is well formed (TOTALSIZE at least ``ENTRY_OVERHEAD`` and dividing
    the body, BODYLENGTH within the entry and at most ``max_body``, PROPERTIESLENGTH
    closing it) and :func:`py_uniform_entries` holds, ``ustart:uend`` being the value of
    the first ``UNIQ_KEY`` name in the first entry's properties (up to the next 0x02 or
    their end; ``plen:plen`` without one). ``shape`` is ``(properties[:ustart],
    properties[uend:], plen)``, what every entry's properties are around its UNIQ_KEY
    value; ``keys``, with ``column`` and a value to read, the ``n`` values joined, else
    ``None``."""
    layout = first_layout(data)
    if layout is None or layout[1] > max_body:
        return None
    size, blen = layout
    pstart = ENTRY_OVERHEAD + blen
    plen = size - pstart
    n = len(data) // size
    props = bytes(data[pstart:size])
    ustart = uend = plen
    at = props.find(_UNIQ_NAME)
    if at >= 0:
        ustart = at + len(_UNIQ_NAME)
        sep = props.find(b"\x02", ustart)
        uend = plen if sep < 0 else sep
    if not py_uniform_entries(data, n, size, blen, ustart, uend):
        return None
    keys = None
    if column and uend > ustart:
        rows = np.frombuffer(data, np.uint8, n * size).reshape(n, size)
        keys = rows[:, pstart + ustart : pstart + uend].tobytes()
    return n, size, blen, ustart, uend, (props[:ustart], props[uend:], plen), keys


def py_uniform_lengths(data: Buffer, n: int, size: int, blen: int) -> bool:
    """Whether each of the ``n`` entries of ``size`` bytes repeats the first one's
    TOTALSIZE, BODYLENGTH and PROPERTIESLENGTH bytes: a strided slice per byte (they keep
    the GIL, which array gathers may drop)."""
    pstart = ENTRY_OVERHEAD + blen
    if n < 1 or blen < 0 or size < pstart or len(data) < n * size:
        raise ValueError(f"uniform_lengths: {n} entries of {size} bytes with {blen}-byte "
                         f"bodies do not fit {len(data)} bytes")
    raw = data if type(data) is bytes else bytes(data)
    end = n * size
    for off in (*_LENGTH_BYTES, pstart - 2, pstart - 1):
        if raw[off:end:size] != raw[off : off + 1] * n:
            return False
    return True


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


def py_check_records(buf: Buffer, phys: int, starts: Ints, sizes: Ints) -> int:
    """How many of the records of ``buf`` -- record ``i`` the ``sizes[i]`` bytes at
    ``starts[i]``, stored at log position ``phys + starts[i]`` -- are sound beyond doubt,
    from the first: each decodes with its body CRC and PHYSICALOFFSET checked, its
    TOTALSIZE is its size, its topic and properties are ASCII. The record where the
    count stops may still be sound (UTF-8 beyond ASCII): the caller looks closer."""
    if len(starts) != len(sizes):
        raise ValueError("check_records: starts and sizes differ in length")
    view = memoryview(buf)
    for i, (at, size) in enumerate(zip(starts, sizes, strict=True)):
        if at < 0 or size > len(view) - at:
            return i
        try:
            rec = decode_record(view[at : at + size], 0, check_crc=True,
                                expected_physical_offset=phys + at)
        except CorruptRecord:
            return i
        if (not isinstance(rec, Record) or rec.total_size != size or not rec.topic.isascii()
                or not rec.properties.isascii()):
            return i
    return len(sizes)


def py_body_crc32(data: Buffer, value: int = 0) -> int:
    """zlib's CRC-32 of ``data``, continuing from ``value``."""
    return crc32(data, value)


def py_write_records(buf: bytearray | memoryview | mmap.mmap, pos: int, topic_field: bytes,
                     born_host: bytes, store_host: bytes, reconsume_times: int,
                     store_ts: int, queue_ids: Sequence[int], flags: Sequence[int],
                     queue_offsets: Sequence[int], phys_offsets: Sequence[int],
                     sys_flags: Sequence[int], born_ts: Sequence[int],
                     bodies: Sequence[Buffer], properties: Sequence[bytes]) -> int:
    """Write record ``i`` of the columns (``bodies``: buffers whose ``len`` is their byte
    count; ``properties``: bytes) after
    record ``i - 1``, from ``buf[pos]``: a V1 record with IPv4 hosts (``born_host`` and
    ``store_host``: 8 packed bytes each; ``topic_field``: TOPICLENGTH and TOPIC), its
    body CRC taken, a born timestamp of 0 written as ``store_ts``. Every record is
    encoded before any is written: a field out of range raises and writes nothing.
    Returns the bytes written."""
    columns = (queue_ids, flags, queue_offsets, phys_offsets, sys_flags, born_ts, bodies,
               properties)
    if (len(set(map(len, columns))) != 1 or not 1 <= len(topic_field) <= 128
            or len(born_host) != 8 or len(store_host) != 8):
        raise ValueError("write_records: columns of one length, a topic field of 1 to 128 "
                         "bytes and 8-byte hosts")
    records = []
    for qid, flag, qo, phys, sys_flag, born, body, props in zip(*columns, strict=True):
        if type(props) is not bytes:
            raise TypeError("write_records: properties are bytes")
        if type(body) is not bytes and (
                not memoryview(body).c_contiguous or memoryview(body).nbytes != len(body)):
            raise TypeError("write_records: a body is a buffer of bytes")
        size = OFF_BODY + len(body) + len(topic_field) + 2 + len(props)
        records.append(encode_v4_joined(
            size, crc32(body) & 0x7FFFFFFF, qid, flag, qo, phys, sys_flag, born or store_ts,
            born_host, store_ts, store_host, reconsume_times, body, topic_field, props))
    data = b"".join(records)
    if pos < 0 or pos + len(data) > len(buf):
        raise ValueError(f"write_records: {len(data)} bytes do not fit {len(buf)} bytes "
                         f"at {pos}")
    buf[pos : pos + len(data)] = data
    return len(data)


#: The functions the compiled module must have; each has a twin in this module. (A build
#: without ``body_crc32`` is still used: its ``check_records`` computes the same CRCs with
#: zlib, only slower; so is one without ``uniform_lengths``, whose twin runs instead.)
_NATIVE_NAMES = ("stamp_records", "patch_records", "uniform_entries", "offset_ids",
                 "check_records")


def _native() -> ModuleType | None:
    if native.MODULE is not None:
        _check_native(native.MODULE)
    return native.MODULE


def _check_native(mod: ModuleType) -> None:
    """Refuse a compiled module whose byte positions are not the layout's: it would store
    records that nothing can read. Two small records, stamped and patched by both."""
    from tidemq.formats.batch import encode_batch as encode_entries

    missing = [name for name in _NATIVE_NAMES if not hasattr(mod, name)]
    if missing:
        raise ImportError(f"tidemq.formats._crecords was built from an older source (it has "
                          f"no {', '.join(missing)}): rebuild it (`make` does; or "
                          f"`pip install -e .`), or set TIDEMQ_NO_NATIVE=1")

    data = encode_entries([(b"abc", b"K\x01v\x02", 7), (b"xyz", b"K\x01w\x02", -2)])
    size, blen, rec = len(data) // 2, 3, OFF_BODY + 3 + 16
    head = bytes(range(rec))
    ours, theirs = bytearray(2 * rec), bytearray(2 * rec)
    for stamp, buf in ((py_stamp_records, ours), (mod.stamp_records, theirs)):
        stamp(buf, head, data, 2, size, blen, rec - 5, -4, 1 << 33, 5, 1 << 40, -3)
    if ours != theirs:
        raise ImportError("tidemq.formats._crecords stamps other byte positions than "
                          "tidemq.formats.record.layout: rebuild it from this source")
    for patch, buf in ((py_patch_records, ours), (mod.patch_records, theirs)):
        patch(buf, 2, rec, 7, 1 << 41, -9, rec - 8)
    if ours != theirs:
        raise ImportError("tidemq.formats._crecords writes other byte positions than "
                          "tidemq.formats.record.layout: rebuild it from this source")
    keyed = encode_entries([(b"a", b"U\x01k\x01x", 0), (b"b", b"U\x01k\x01y", 0)])
    if mod.uniform_entries(keyed, 2, len(keyed) // 2, 1, 2, 5):
        raise ImportError("tidemq.formats._crecords lets a separator through a UNIQ_KEY "
                          "value: it was built from an older source; rebuild it")
    split = encode_entries([(b"a", b"UNIQ_KEY\x01ab\x02T\x01x", 0),
                            (b"b", b"UNIQ_KEY\x01cd\x02T\x01x", 0)])
    if hasattr(mod, "uniform_split") and (mod.uniform_split(split, 9, True)
                                          != py_uniform_split(split, 9, True)):
        raise ImportError("tidemq.formats._crecords splits batches otherwise than "
                          "tidemq.formats.batch: rebuild it from this source")
    if hasattr(mod, "write_records"):
        args = (b"\x01t", b"\x7f\x00\x00\x01\x00\x00\x01\x00", bytes(8), 3, 1 << 41,
                [1, -5], [0, 7], [9, 1 << 40], [100, 300], [0, 4], [0, -1], [b"ab", b""],
                [b"K\x01v\x02", b""])
        ours, theirs = bytearray(256), bytearray(256)
        if (py_write_records(ours, 5, *args) != mod.write_records(theirs, 5, *args)
                or ours != theirs):
            raise ImportError("tidemq.formats._crecords writes other records than "
                              "tidemq.formats.record.encode: rebuild it from this source")
    sample = bytes(range(256)) * 8  # every fold the CPU takes: 16, 64 and 256 bytes a step
    if hasattr(mod, "body_crc32") and any(
            mod.body_crc32(sample[:n], 7) != crc32(sample[:n], 7)
            for n in (0, 63, 64, 333, 1111, 2048)):
        raise ImportError("tidemq.formats._crecords computes other CRC-32 values than zlib "
                          "on this CPU: set TIDEMQ_NO_NATIVE=1 and report it")


_mod = _native()
#: Whether the compiled loops run (``False``: the numpy code of this module).
NATIVE = _mod is not None

stamp_records: Callable[[bytearray | memoryview, Buffer, Buffer, int, int, int, int, int, int,
                         int, int, int], None] = (
    _mod.stamp_records if _mod is not None else py_stamp_records)
patch_records: Callable[[bytearray | memoryview, int, int, int, int, int, int], None] = (
    _mod.patch_records if _mod is not None else py_patch_records)
uniform_entries: Callable[[Buffer, int, int, int, int, int], bool] = (
    _mod.uniform_entries if _mod is not None else py_uniform_entries)
#: Optional in the compiled module (a build from before it falls back to the twin).
uniform_lengths: Callable[[Buffer, int, int, int], bool] = getattr(
    _mod, "uniform_lengths", py_uniform_lengths)
offset_ids: Callable[[str, int, int, int], str] = (
    _mod.offset_ids if _mod is not None else py_offset_ids)
check_records: Callable[[Buffer, int, Ints, Ints], int] = (
    _mod.check_records if _mod is not None else py_check_records)
body_crc32: Callable[[Buffer, int], int] = getattr(_mod, "body_crc32", py_body_crc32)
#: Optional in the compiled module too.
uniform_split: Callable[[Buffer, int, bool], UniformSplit | None] = getattr(
    _mod, "uniform_split", py_uniform_split)
#: Optional in the compiled module too.
write_records: Callable[..., int] = getattr(_mod, "write_records", py_write_records)


