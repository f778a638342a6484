"""The uniform-batch loops: the compiled module and the numpy fallback give the same bytes,
and both match what the record and batch codecs write message by message."""

from __future__ import annotations

import array
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.errors import CorruptRecord
from tidemq.formats.batch import encode_batch
from tidemq.formats.record import HostAddr, Record, decode_record, encode_record
from tidemq.formats.record import loops as crecords


def _native() -> ModuleType:
    return compiled()


def test_the_compiled_module_is_built_and_used() -> None:
    """setup.py builds it where a C compiler and zlib's headers exist, as on the machines
    this project targets; a silent fallback would hide a 3x slower send path."""
    native = _native()
    assert crecords.NATIVE
    assert crecords.offset_ids is native.offset_ids
    assert crecords.body_crc32 is native.body_crc32
    assert crecords.uniform_lengths is native.uniform_lengths
    assert crecords.write_records is native.write_records
    assert crecords.stamp_records is native.stamp_records
    assert crecords.uniform_split is native.uniform_split


def _both(name: str) -> list[Callable[..., Any]]:
    fns: list[Callable[..., Any]] = [getattr(crecords, f"py_{name}")]
    if crecords.NATIVE:
        fns.append(getattr(crecords, name))
    return fns


_HOST = HostAddr(bytes([10, 0, 0, 7]), 10911)
_STORE = HostAddr(bytes([127, 0, 0, 1]), 10912)


@st.composite
def _batches(draw: st.DrawFn) -> tuple[int, int, list[tuple[bytes, bytes, int]]]:
    n = draw(st.integers(1, 40))
    blen = draw(st.integers(0, 300))
    plen = draw(st.integers(0, 60))
    msgs = [(draw(st.binary(min_size=blen, max_size=blen)),
             draw(st.binary(min_size=plen, max_size=plen)),
             draw(st.integers(-(2**31), 2**31 - 1))) for _ in range(n)]
    return blen, plen, msgs


@settings(max_examples=80, deadline=None)
@given(batch=_batches(), qo=st.integers(0, 2**40), phys=st.integers(0, 2**50),
       ts=st.integers(0, 2**45))
def test_patch_records_writes_the_offsets_and_store_time_the_codec_writes(
        batch: tuple[int, int, list[tuple[bytes, bytes, int]]], qo: int, phys: int,
        ts: int) -> None:
    """Records encoded apart with offsets and store time zero, patched in one call, are
    the records encoded with them, compiled and twin alike."""
    _, _, msgs = batch
    unpatched, expected = bytearray(), bytearray()
    for i, (body, props, flag) in enumerate(msgs):
        unpatched += encode_record(topic=b"T", queue_id=3, body=body, properties=props,
                                   flag=flag, born_host=_HOST, store_host=_STORE)
        rec = bytearray(encode_record(topic=b"T", queue_id=3, body=body, properties=props,
                                      flag=flag, queue_offset=qo + i, born_host=_HOST,
                                      store_host=_STORE, store_timestamp=ts))
        struct.pack_into(">q", rec, 28, phys + len(expected))
        expected += rec
    rec_size = len(expected) // len(msgs)
    for patch in _both("patch_records"):
        buf = bytearray(unpatched)
        patch(buf, len(msgs), rec_size, qo, phys, ts, 56)
        assert buf == expected


@settings(max_examples=100, deadline=None)
@given(batch=_batches(), cluster=st.sampled_from([b"", b"CLUSTER\x01c\x02"]),
       queue_id=st.integers(-(2**31), 2**31 - 1), born=st.integers(-(2**63), 2**63 - 1),
       qo=st.integers(0, 2**40), phys=st.integers(0, 2**50), ts=st.integers(0, 2**45),
       at=st.integers(0, 9))
def test_stamp_records_writes_the_records_the_codec_writes(
        batch: tuple[int, int, list[tuple[bytes, bytes, int]]], cluster: bytes,
        queue_id: int, born: int, qo: int, phys: int, ts: int, at: int) -> None:
    """One stamp of a template is the records encoded one by one, whatever surrounds
    them in the buffer, compiled and twin alike."""
    blen, plen, msgs = batch
    n = len(msgs)
    data = encode_batch(msgs)
    expected = bytearray()
    for i, (body, props, flag) in enumerate(msgs):
        rec = bytearray(encode_record(
            topic=b"Topic", queue_id=queue_id, body=body, properties=props + cluster,
            flag=flag, queue_offset=qo + i, born_timestamp=born, born_host=_HOST,
            store_host=_STORE, sys_flag=0x2, reconsume_times=3))
        struct.pack_into(">q", rec, 28, phys + len(expected))
        struct.pack_into(">q", rec, 56, ts)
        expected += rec
    rec_size = len(expected) // n
    head = bytearray(expected[:rec_size])  # a template: what stamp_records writes is noise
    head[8:24] = b"\xa5" * 16
    head[28:36] = head[40:48] = head[56:64] = b"\x5a" * 8
    head[88 : 88 + blen] = b"\x33" * blen
    props_at = rec_size - plen - len(cluster)
    head[props_at : props_at + plen] = b"\x44" * plen
    for stamp in _both("stamp_records"):
        buf = bytearray(b"\xee" * (at + len(expected) + 3))
        stamp(memoryview(buf)[at : at + len(expected)], bytes(head), data, n, 22 + blen + plen,
              blen, props_at, queue_id, born, qo, phys, ts)
        assert buf[at : at + len(expected)] == expected
        assert buf[:at] == b"\xee" * at and buf[at + len(expected) :] == b"\xee" * 3


def _entries(n: int, blen: int, head: bytes, keys: list[bytes], tail: bytes) -> bytes:
    return encode_batch([(bytes([i % 251]) * blen, head + keys[i] + tail, i) for i in range(n)])


#: Key bytes the check lets pass (0x00 and 0x03 lie just beside the separators).
_KEY_BYTE = st.sampled_from([0x00, *range(0x03, 0x80)])


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 30), blen=st.integers(0, 50), head=st.binary(max_size=40),
       tail=st.binary(max_size=40), klen=st.integers(0, 40), data=st.data())
def test_uniform_entries_agrees_with_a_reading_entry_by_entry(
        n: int, blen: int, head: bytes, tail: bytes, klen: int, data: st.DataObject) -> None:
    key = st.one_of(st.binary(min_size=klen, max_size=klen),
                    st.lists(_KEY_BYTE, min_size=klen, max_size=klen).map(bytes))
    keys = [data.draw(key) for _ in range(n)]
    if klen and data.draw(st.booleans()):  # one byte the check must find, anywhere
        i, at = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, klen - 1))
        bad = data.draw(st.sampled_from([0x01, 0x02, 0x80, 0xFF]))
        keys[i] = keys[i][:at] + bytes([bad]) + keys[i][at + 1 :]
    body = bytearray(_entries(n, blen, head, keys, tail))
    size = len(body) // n
    if data.draw(st.booleans()):  # damage one byte somewhere
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))
    ustart, uend = len(head), len(head) + klen
    pstart = 22 + blen
    rows = [bytes(body[i * size : (i + 1) * size]) for i in range(n)]

    def shared(row: bytes) -> bytes:
        return row[0:4] + row[16:20] + row[pstart - 2 : pstart + ustart] + row[pstart + uend :]

    values = b"".join(r[pstart + ustart : pstart + uend] for r in rows)
    truth = (all(shared(r) == shared(rows[0]) for r in rows)
             and values.isascii() and b"\x01" not in values and b"\x02" not in values)
    for fn in _both("uniform_entries"):
        assert fn(bytes(body), n, size, blen, ustart, uend) is truth


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 30), blen=st.integers(0, 50), head=st.binary(max_size=12),
       tail=st.binary(max_size=12), klen=st.integers(0, 40), named=st.booleans(),
       max_body=st.integers(0, 60), data=st.data())
def test_uniform_split_reads_what_each_entry_holds(
        n: int, blen: int, head: bytes, tail: bytes, klen: int, named: bool, max_body: int,
        data: st.DataObject) -> None:
    """Compiled and twin agree on any body, a damaged one included; on a batch whose
    entries differ only in the value after the first UNIQ_KEY name, the split names the
    value's place, what surrounds it and every entry's value, as read entry by entry."""
    head = head.replace(b"UNIQ_KEY\x01", b"")
    if named:
        head += b"UNIQ_KEY\x01"
        tail = b"\x02" + tail if tail else tail
    keys = [data.draw(st.lists(_KEY_BYTE, min_size=klen, max_size=klen).map(bytes))
            for _ in range(n)]
    body = bytearray(_entries(n, blen, head, keys, tail))
    size = len(body) // n
    damaged = data.draw(st.booleans())
    if damaged:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))
    column = data.draw(st.booleans())
    found = [fn(bytes(body), max_body, column) for fn in _both("uniform_split")]
    assert all(f == found[0] for f in found)
    if damaged:
        return
    props = head + keys[0] + tail
    plen = len(props)
    if named:
        ustart, uend = len(head), len(head) + klen
    else:  # the first name found, wherever it is, or none
        at = props.find(b"UNIQ_KEY\x01")
        ustart = uend = plen
        if at >= 0:
            ustart = at + 9
            sep = props.find(b"\x02", ustart)
            uend = plen if sep < 0 else sep
    alike = all(b"".join((head, k, tail))[:ustart] == props[:ustart]
                and b"".join((head, k, tail))[uend:] == props[uend:] for k in keys)
    if blen > max_body or (not named and not alike):
        if blen > max_body:
            assert found[0] is None
        return
    want_keys = b"".join(keys) if column and klen and named else None
    assert found[0] == (n, size, blen, ustart, uend, (props[:ustart], props[uend:], plen),
                        want_keys)


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 30), blen=st.integers(0, 40), plen=st.integers(0, 12),
       data=st.data())
def test_uniform_lengths_agrees_with_a_reading_entry_by_entry(
        n: int, blen: int, plen: int, data: st.DataObject) -> None:
    """Entries of one layout whose properties differ (an inner batch's), some damaged:
    the answer is whether every entry's TOTALSIZE, BODYLENGTH and PROPERTIESLENGTH are
    the first one's bytes."""
    props = [data.draw(st.binary(min_size=plen, max_size=plen)) for _ in range(n)]
    body = bytearray(encode_batch([(bytes([i % 251]) * blen, props[i], i) for i in range(n)]))
    size = len(body) // n
    for _ in range(data.draw(st.integers(0, 2))):  # damage a byte or two anywhere
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))
    rows = [bytes(body[i * size : (i + 1) * size]) for i in range(n)]

    def lengths(row: bytes) -> tuple[int, int, int]:
        total, = struct.unpack_from(">i", row, 0)
        blength, = struct.unpack_from(">i", row, 16)
        plength, = struct.unpack_from(">h", row, 20 + blen)
        return total, blength, plength

    truth = all(lengths(r) == lengths(rows[0]) for r in rows)
    for fn in _both("uniform_lengths"):
        assert fn(bytes(body), n, size, blen) is truth
        assert fn(memoryview(body), n, size, blen) is truth


@settings(max_examples=200)
@given(prefix=st.text(st.characters(max_codepoint=127), max_size=24),
       start=st.one_of(st.integers(0, 2**62),  # ... or just below a change of the top digits
                       st.integers(1, 2**38).map(lambda k: k * 2**24 - 3000)),
       step=st.integers(0, 2**20), n=st.integers(0, 50))
def test_offset_ids_are_the_formatted_offsets(prefix: str, start: int, step: int,
                                              n: int) -> None:
    expected = ",".join(f"{prefix}{start + i * step:016X}" for i in range(n))
    for fn in _both("offset_ids"):
        assert fn(prefix, start, step, n) == expected


@pytest.mark.parametrize("name, args", [
    ("patch_records", (bytearray(100), 2, 100, 0, 0, 0, 56)),  # short buffer
    ("patch_records", (bytearray(200), 2, 100, 0, 0, 0, 96)),  # store time past the record
    ("uniform_entries", (bytes(50), 2, 50, 0, 0, 0)),  # short data
    ("uniform_entries", (bytes(100), 2, 50, 0, 20, 10)),  # key bounds reversed
    ("uniform_lengths", (bytes(50), 2, 50, 0)),  # short data
    ("uniform_lengths", (bytes(100), 2, 50, 40)),  # the body runs past the entry
    ("uniform_lengths", (bytes(100), 0, 50, 0)),  # no entries
    ("offset_ids", ("é", 0, 1, 1)),  # non-ASCII prefix
    ("stamp_records", (bytearray(100), bytes(120), bytes(200), 1, 150, 100, 100, 0, 0, 0, 0,
                       0)),  # short buffer
    ("stamp_records", (bytearray(1000), bytes(100), bytes(40), 1, 40, 30, 90, 0, 0, 0, 0,
                       0)),  # body over the props
])
def test_impossible_geometry_is_a_value_error(name: str, args: tuple[Any, ...]) -> None:
    for fn in _both(name):
        with pytest.raises(ValueError, match=name):
            fn(*args)


def test_a_compiled_module_writing_elsewhere_is_refused() -> None:
    """The C module repeats the layout's positions as numbers: one that disagrees with
    the layout (stale build, edited source) must not store records."""

    def shifted_patch(buf: bytearray, n: int, rec: int, qo: int, phys: int, ts: int,
                      ts_at: int) -> None:
        crecords.py_patch_records(buf, n, rec, qo, phys, ts, ts_at)
        buf[rec - 1] ^= 1

    stale = ModuleType("stale")
    for name in crecords._NATIVE_NAMES:
        setattr(stale, name, getattr(crecords, "py_" + name))
    stale.patch_records = shifted_patch  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="other byte positions"):
        crecords._check_native(stale)
    crecords._check_native(_native())  # the module built from this source passes


def test_a_compiled_module_stamping_elsewhere_is_refused() -> None:
    stale = ModuleType("stale")
    for name in crecords._NATIVE_NAMES:
        setattr(stale, name, getattr(crecords, "py_" + name))

    def shifted_stamp(buf: bytearray, *args: Any) -> None:
        crecords.py_stamp_records(buf, *args)
        buf[13] ^= 1  # the queue id

    stale.stamp_records = shifted_stamp  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="stamps other byte positions"):
        crecords._check_native(stale)


def test_a_compiled_module_built_from_an_older_source_is_refused_by_name() -> None:
    """A build that predates a function (the source was updated, the module was not
    rebuilt) is refused at import with what is missing, not at the first call."""
    old = ModuleType("old")
    for name in crecords._NATIVE_NAMES:
        if name != "check_records":
            setattr(old, name, getattr(crecords, "py_" + name))
    with pytest.raises(ImportError, match="no check_records"):
        crecords._check_native(old)


@st.composite
def _stored(draw: st.DrawFn) -> tuple[bytearray, int, list[int], list[int]]:
    """Records as the store writes them, maybe with gaps between them (other queues'
    records): ``(bytes, log position of byte 0, starts, sizes)``; topics and properties
    ASCII or not, IPv4 or IPv6 hosts."""
    phys = draw(st.integers(0, 2**50))
    out = bytearray()
    starts, sizes = [], []
    for _ in range(draw(st.integers(0, 6))):
        out += bytes(draw(st.sampled_from([0, 0, 5, 91])))
        v6 = draw(st.booleans())
        host = HostAddr(bytes(range(16)), 7) if v6 else _HOST
        rec = encode_record(
            topic=draw(st.sampled_from([b"T", b"t" * 130, "\u00e9".encode()])),
            queue_id=draw(st.integers(0, 7)), body=draw(st.binary(max_size=300)),
            properties=draw(st.sampled_from([b"", b"K\x01v\x02",
                                             "K\x01\u00e9\x02".encode()])),
            born_host=host, store_host=draw(st.sampled_from([host, _STORE])),
            physical_offset=phys + len(out))
        starts.append(len(out))
        sizes.append(len(rec))
        out += rec
    return out, phys, starts, sizes


@settings(max_examples=300, deadline=None)
@given(stored=_stored(), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)),
                                        max_size=2),
       resize=st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(-3, 3))),
       move=st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(-200, 200))),
       shift=st.sampled_from([0, 0, 1]))
def test_check_records_agrees_with_decoding_record_by_record(
        stored: tuple[bytearray, int, list[int], list[int]], flips: list[tuple[int, int]],
        resize: tuple[int, int] | None, move: tuple[int, int] | None, shift: int) -> None:
    """Flipped bytes, a size or start that is not the record's, a wrong position: the
    compiled loop and its twin stop at the same record, and that is the first one that
    decoding with its CRC and position checked does not find sound, sized and ASCII."""
    buf, phys, starts, sizes = stored
    for at, x in flips:
        if buf:
            buf[at % len(buf)] ^= x
    if resize is not None and sizes:
        i, d = resize
        sizes[i % len(sizes)] = max(0, sizes[i % len(sizes)] + d)
    if move is not None and starts:
        i, d = move
        starts[i % len(starts)] += d
    phys += shift
    expect = len(sizes)
    for i, (at, size) in enumerate(zip(starts, sizes, strict=True)):
        try:
            if at < 0:
                raise CorruptRecord("before the buffer", offset=at)
            rec = decode_record(buf, at, check_crc=True, expected_physical_offset=phys + at)
        except CorruptRecord:
            expect = i
            break
        if (not isinstance(rec, Record) or rec.total_size != size
                or not (rec.topic + rec.properties.decode("latin-1")).isascii()):
            expect = i
            break
    for fn in _both("check_records"):
        assert fn(bytes(buf), phys, starts, sizes) == expect
        assert fn(memoryview(buf), phys, tuple(starts), tuple(sizes)) == expect
        at, size = np.array(starts, np.int64), np.array(sizes, np.int64)
        assert fn(buf, phys, at, size) == expect  # int64 arrays, as the read path passes
        assert fn(buf, phys, at.astype(">i8"), size.astype(np.int32)) == expect
        assert fn(buf, phys, np.repeat(at, 2)[::2], size) == expect  # not contiguous
        with pytest.raises(ValueError, match="differ in length"):
            fn(bytes(buf), phys, [*starts, 0], sizes)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=700) | st.binary(min_size=700, max_size=5000),
       value=st.integers(0, 2**32 - 1), skip=st.integers(0, 15))
def test_body_crc32_is_zlibs_crc32(data: bytes, value: int, skip: int) -> None:
    """The compiled CRC folds 256 (where the CPU has VPCLMULQDQ), 64 and 16 bytes at a
    time and leaves the rest to zlib: every length and alignment (a view that starts
    ``skip`` bytes into its buffer) gives zlib's value, also continuing from any earlier
    one."""
    view = memoryview(bytes(skip) + data)[skip:]
    for fn in _both("body_crc32"):
        assert fn(view, value) == zlib.crc32(data, value)
        assert fn(data, 0) == zlib.crc32(data)


def test_a_compiled_module_whose_crc_differs_from_zlibs_is_refused() -> None:
    """A compiled CRC that is wrong on this CPU would mark every record read after a
    start damaged: it is refused at import, and the twins take over."""
    wrong = ModuleType("wrong")
    for name in crecords._NATIVE_NAMES:
        setattr(wrong, name, getattr(crecords, "py_" + name))
    crecords._check_native(wrong)  # a build from before body_crc32 is still used
    wrong.body_crc32 = lambda data, value=0: zlib.crc32(bytes(data)[:-1], value)  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="other CRC-32 values"):
        crecords._check_native(wrong)


def test_a_crc_wrong_only_from_the_256_byte_fold_on_is_refused() -> None:
    """The 256-byte fold runs only on CPUs with VPCLMULQDQ and AVX-512, and its loop only
    from 512 bytes on: the import check takes buffers that long, so a fold wrong there is
    refused on the CPU that would take it."""
    wrong = ModuleType("wrong")
    for name in crecords._NATIVE_NAMES:
        setattr(wrong, name, getattr(crecords, "py_" + name))

    def folds_wrong_from_512(data: bytes, value: int = 0) -> int:
        crc = zlib.crc32(data, value)
        return crc ^ 1 if len(data) >= 512 else crc

    wrong.body_crc32 = folds_wrong_from_512  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="other CRC-32 values"):
        crecords._check_native(wrong)


_PACKED_BORN = _HOST.ip + _HOST.port.to_bytes(4, "big")
_PACKED_STORE = _STORE.ip + _STORE.port.to_bytes(4, "big")
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)

#: One record's columns: queue id, flag, queue offset, physical offset, sys flag (the
#: IPv6 host bits clear), born timestamp, body, properties.
_write_rows = st.lists(st.tuples(
    _I32, _I32, _I64, _I64, _I32.map(lambda f: f & ~0x30), st.one_of(st.just(0), _I64),
    st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(memoryview)),
    st.binary(max_size=200)), max_size=12)


@settings(max_examples=80, deadline=None)
@given(rows=_write_rows, topic=st.binary(min_size=0, max_size=127), pos=st.integers(0, 40),
       reconsume=_I32, ts=_I64)
def test_write_records_writes_the_records_the_codec_writes(
        rows: list[tuple[int, int, int, int, int, int, bytes | memoryview, bytes]], topic: bytes,
        pos: int,
        reconsume: int, ts: int) -> None:
    """Each record as :func:`encode_record` encodes it on its own, one after another
    from ``pos``; the bytes around them untouched."""
    expected = b"".join(
        encode_record(topic=topic, queue_id=qid, body=body, properties=props, flag=flag,
                      sys_flag=sys_flag, born_timestamp=born or ts, born_host=_HOST,
                      store_host=_STORE, store_timestamp=ts, queue_offset=qo,
                      physical_offset=phys, reconsume_times=reconsume)
        for qid, flag, qo, phys, sys_flag, born, body, props in rows)
    columns = [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * 8
    for fn in _both("write_records"):
        buf = bytearray(b"\xee" * (pos + len(expected) + 7))
        written = fn(buf, pos, bytes([len(topic)]) + topic, _PACKED_BORN, _PACKED_STORE,
                     reconsume, ts, *columns)
        assert written == len(expected)
        assert buf == b"\xee" * pos + expected + b"\xee" * 7


@settings(max_examples=60, deadline=None)
@given(rows=_write_rows.filter(bool), data=st.data())
def test_write_records_writes_nothing_when_a_field_is_out_of_range(
        rows: list[tuple[int, int, int, int, int, int, bytes | memoryview, bytes]],
        data: st.DataObject) -> None:
    """One field of one record its width cannot hold (or properties over 0x7FFF bytes,
    or a body not a buffer of bytes): both refuse before writing a byte."""
    at = data.draw(st.integers(0, len(rows) - 1))
    field = data.draw(st.integers(0, 8))
    row: list[Any] = list(rows[at])
    if field < 6:
        wide = field in (2, 3, 5)
        row[field] = data.draw(st.sampled_from(
            [2**63, -(2**63) - 1] if wide else [2**31, -(2**31) - 1, 2**40]))
    elif field == 6:  # a buffer whose len() is not its byte count, or not a buffer
        row[6] = memoryview(array.array("i", [1, 2])) if data.draw(st.booleans()) else "text"
    else:
        row[7] = b"p" * 0x8000
    columns = [list(column) for column in zip(*rows, strict=True)]
    columns[min(field, 7)][at] = row[min(field, 7)]
    for fn in _both("write_records"):
        buf = bytearray(1 << 16)
        with pytest.raises((OverflowError, TypeError, ValueError, struct.error)):
            fn(buf, 0, b"\x01T", _PACKED_BORN, _PACKED_STORE, 0, 5, *columns)
        assert buf == bytes(1 << 16)


def test_write_records_refuses_what_does_not_fit() -> None:
    for fn in _both("write_records"):
        buf = bytearray(200)
        with pytest.raises(ValueError, match="write_records"):
            fn(buf, 150, b"\x01T", _PACKED_BORN, _PACKED_STORE, 0, 5, [0], [0], [0], [0],
               [0], [0], [b"x" * 20], [b""])
        with pytest.raises(ValueError, match="write_records"):
            fn(buf, 0, b"\x01T", _PACKED_BORN, _PACKED_STORE, 0, 5, [0, 1], [0], [0], [0],
               [0], [0], [b""], [b""])
        assert buf == bytes(200)


def test_a_compiled_module_writing_other_records_is_refused() -> None:
    """The record writer repeats the layout's positions as numbers too: a build that
    writes a field elsewhere is refused at import."""

    def shifted(buf: bytearray, pos: int, *args: Any) -> int:
        n = int(crecords.py_write_records(buf, pos, *args))
        buf[pos + 50] ^= 1
        return n

    stale = ModuleType("stale")
    for name in crecords._NATIVE_NAMES:
        setattr(stale, name, getattr(crecords, "py_" + name))
    crecords._check_native(stale)  # a build from before write_records is still used
    stale.write_records = shifted  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="other records"):
        crecords._check_native(stale)
