"""Client batch bodies: golden bytes, round trips, garbage that must only corrupt."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import CorruptRecord
from tidemq.formats.batch import count_entries, encode_batch, iter_batch


def test_golden_batch_body() -> None:
    props1 = b"TAGS\x01A\x02"
    body = encode_batch([(b"abc", props1, 7), (b"", b"", -1)])
    assert body == b"".join([
        # first sub-message
        struct.pack(">i", 22 + 3 + len(props1)),  # TOTALSIZE of this entry
        struct.pack(">i", 0),                    # MAGICCODE, written as 0
        struct.pack(">i", 0),                    # BODYCRC, written as 0
        struct.pack(">i", 7),                    # FLAG
        struct.pack(">i", 3), b"abc",            # BODYLENGTH, BODY
        struct.pack(">h", len(props1)), props1,  # PROPERTIESLENGTH, PROPERTIES
        # second sub-message: empty body and properties
        struct.pack(">i", 22),                   # TOTALSIZE
        struct.pack(">i", 0),                    # MAGICCODE
        struct.pack(">i", 0),                    # BODYCRC
        struct.pack(">i", -1),                   # FLAG
        struct.pack(">i", 0),                    # BODYLENGTH
        struct.pack(">h", 0),                    # PROPERTIESLENGTH
    ])
    entries = list(iter_batch(body))
    assert [(bytes(e.body), bytes(e.properties), e.flag, e.offset, e.size) for e in entries] == [
        (b"abc", props1, 7, 0, 32),
        (b"", b"", -1, 32, 22),
    ]
    assert count_entries(body) == 2


def test_magic_and_crc_fields_are_ignored_on_read() -> None:
    body = bytearray(encode_batch([(b"x", b"", 0)]))
    body[4:12] = b"\xde\xad\xbe\xef" * 2
    assert count_entries(body) == 1


def test_empty_batch() -> None:
    assert encode_batch([]) == b""
    assert list(iter_batch(b"")) == []


entries_st = st.lists(
    st.tuples(st.binary(max_size=300), st.binary(max_size=100), st.integers(-2**31, 2**31 - 1)),
    max_size=12,
)


@settings(deadline=None, max_examples=200)
@given(entries_st)
def test_round_trip(entries: list[tuple[bytes, bytes, int]]) -> None:
    body = encode_batch(entries)
    assert len(body) == sum(22 + len(b) + len(p) for b, p, _ in entries)
    got = [(bytes(e.body), bytes(e.properties), e.flag) for e in iter_batch(memoryview(body))]
    assert got == entries
    assert count_entries(bytearray(body)) == len(entries)


def _walk(buf: bytes) -> None:
    try:
        for _ in iter_batch(buf):
            pass
    except CorruptRecord:
        pass


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt_record(buf: bytes) -> None:
    _walk(buf)


@settings(deadline=None, max_examples=300)
@given(entries=entries_st.filter(bool), data=st.data())
def test_mutations_raise_only_corrupt_record(entries: list[tuple[bytes, bytes, int]],
                                             data: st.DataObject) -> None:
    body = bytearray(encode_batch(entries))
    kind = data.draw(st.sampled_from(["truncate", "flip", "overwrite", "size"]))
    if kind == "truncate":
        keep = data.draw(st.integers(0, len(body) - 1))
        boundaries = {e.offset for e in iter_batch(bytes(body))}
        if keep in boundaries:  # a cut between entries leaves a shorter, valid batch
            assert count_entries(bytes(body[:keep])) == sorted(boundaries).index(keep)
        else:
            with pytest.raises(CorruptRecord):
                count_entries(bytes(body[:keep]))
        return
    if kind == "flip":
        bit = data.draw(st.integers(0, len(body) * 8 - 1))
        body[bit // 8] ^= 1 << (bit % 8)
    elif kind == "overwrite":
        start = data.draw(st.integers(0, len(body) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=len(body) - start))
        body[start : start + len(junk)] = junk
    else:
        first = next(iter_batch(bytes(body)))
        struct.pack_into(">i", body, first.offset, data.draw(st.integers(-2**31, 2**31 - 1)))
    _walk(bytes(body))
