"""Body compression by sysflag type, with a bound on the output (remoting.md §3.5)."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.codec.compression import (
    FAST_ZLIB_LEVEL,
    CompressionType,
    clear_vector_state,
    compress,
    compression_of,
    decompress,
    py_clear_vector_state,
    sys_flag_for,
)
from tidemq.errors import CorruptRecord

TYPES = list(CompressionType)


@pytest.mark.parametrize(
    ("sys_flag", "ctype"),
    [
        (0x0, None),
        (0x300, None),
        (0x1, CompressionType.ZLIB),
        (0x301, CompressionType.ZLIB),
        (0x101, CompressionType.LZ4),
        (0x201, CompressionType.ZSTD),
        (0x1 | 0x40 | 0x80 | 0x200, CompressionType.ZSTD),
    ],
)
def test_compression_of(sys_flag: int, ctype: CompressionType | None) -> None:
    assert compression_of(sys_flag) is ctype


@pytest.mark.parametrize("sys_flag", [0x401, 0x701])
def test_unknown_compression_bits(sys_flag: int) -> None:
    with pytest.raises(CorruptRecord):
        compression_of(sys_flag)


def test_sys_flag_for_is_the_java_value() -> None:
    assert sys_flag_for(CompressionType.ZLIB) == 0x301
    assert [compression_of(sys_flag_for(t)) for t in TYPES] == TYPES


def test_formats_are_the_standard_ones() -> None:
    """Java reads zlib-with-header, LZ4 frame and zstd frame streams."""
    data = b"hello " * 100
    assert zlib.decompress(compress(data, CompressionType.ZLIB)) == data
    assert lz4.frame.decompress(compress(data, CompressionType.LZ4)) == data
    assert zstandard.ZstdDecompressor().decompress(compress(data, CompressionType.ZSTD)) == data
    assert decompress(zlib.compress(data, 5), CompressionType.ZLIB, len(data)) == data


@settings(deadline=None, max_examples=150)
@given(st.binary(max_size=3000), st.sampled_from(TYPES), st.booleans())
def test_round_trip(data: bytes, ctype: CompressionType, exact_bound: bool) -> None:
    bound = len(data) if exact_bound else len(data) + 100
    assert decompress(compress(data, ctype), ctype, bound) == data


@settings(deadline=None, max_examples=150)
@given(st.one_of(st.binary(max_size=3000),
                 st.lists(st.sampled_from([b"Pub\x01", b"7F000001", b"\x01true\x02", b"0"]),
                          max_size=2000).map(b"".join)))
def test_the_fast_zlib_level_is_a_zlib_stream(data: bytes) -> None:
    """ISA-L's deflate makes a zlib stream with its header, as Java's ``Inflater`` and
    every other zlib reader take it."""
    packed = compress(data, CompressionType.ZLIB, FAST_ZLIB_LEVEL)
    assert zlib.decompress(packed) == data
    assert decompress(packed, CompressionType.ZLIB, len(data)) == data


def test_the_fast_zlib_level_packs_repetitive_text_as_zlib_level_5_does() -> None:
    records = b"".join(b"Pub\x011796092107552\x01DefaultRegion\x01group\x01Topic\x01"
                       b"7F00000177CD1F7BE90800%010X\x01\x01\x01127.0.0.1:10911\x01128\x01"
                       b"2\x010\x017F00000100002A9F%016X\x01true\x02" % (i, i * 200)
                       for i in range(700))
    packed = compress(records, CompressionType.ZLIB, FAST_ZLIB_LEVEL)
    assert len(packed) <= len(zlib.compress(records, 5)) * 1.02


@pytest.mark.parametrize("clear", [clear_vector_state, py_clear_vector_state],
                         ids=["built", "twin"])
def test_clearing_the_vector_state_changes_no_value(clear: Callable[[], None]) -> None:
    """What the fast deflate calls after ISA-L (compiled: VZEROUPPER) is a no-op for
    every value: floating-point work (SSE and AVX registers) and a deflate round trip
    around it give what they give without it."""
    data = b"".join(b"7F00000100002A9F%016X\x01true\x02" % (i * 200) for i in range(300))
    xs = [i / 7 for i in range(1000)]
    expected = (sum(x * 1.5 for x in xs), compress(data, CompressionType.ZLIB, FAST_ZLIB_LEVEL))
    for _ in range(3):
        assert clear() is None
        assert (sum(x * 1.5 for x in xs),
                compress(data, CompressionType.ZLIB, FAST_ZLIB_LEVEL)) == expected
    assert zlib.decompress(expected[1]) == data


def _streamed_zstd(data: bytes) -> bytes:
    """A zstd frame without a content size in its header."""
    cobj = zstandard.ZstdCompressor().compressobj()
    return cobj.compress(data) + cobj.flush()


@pytest.mark.parametrize("ctype", TYPES)
def test_bomb_of_each_type(ctype: CompressionType) -> None:
    bomb = compress(b"\0" * 20_000_000, ctype)
    with pytest.raises(CorruptRecord, match="beyond"):
        decompress(bomb, ctype, 1_000_000)
    with pytest.raises(CorruptRecord):
        decompress(bomb, ctype, 0)


def test_streamed_zstd_bomb_and_exact_bound() -> None:
    with pytest.raises(CorruptRecord, match="beyond"):
        decompress(_streamed_zstd(b"\0" * 20_000_000), CompressionType.ZSTD, 1_000_000)
    data = b"abc" * 1000
    assert decompress(_streamed_zstd(data), CompressionType.ZSTD, len(data)) == data
    with pytest.raises(CorruptRecord):
        decompress(_streamed_zstd(data), CompressionType.ZSTD, len(data) - 1)


@pytest.mark.parametrize("ctype", TYPES)
def test_truncated_stream(ctype: CompressionType) -> None:
    data = compress(bytes(range(256)) * 40, ctype)
    with pytest.raises(CorruptRecord):
        decompress(data[: len(data) // 2], ctype, 1 << 20)


@settings(deadline=None, max_examples=500)
@given(st.binary(max_size=300), st.sampled_from(TYPES))
def test_garbage_raises_only_corrupt_record(data: bytes, ctype: CompressionType) -> None:
    try:
        out = decompress(data, ctype, 10_000)
    except CorruptRecord:
        return
    assert len(out) <= 10_000
