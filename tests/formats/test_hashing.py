"""Java ``String.hashCode`` for tags codes and index keys, checked against a hand port."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.hashing import index_hash, java_string_hash, tags_code


def utf16_units(text: str) -> list[int]:
    """UTF-16 code units of ``text``, surrogate pairs computed by hand (as Java stores them)."""
    units = []
    for ch in text:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units.append(0xD800 + (cp >> 10))
            units.append(0xDC00 + (cp & 0x3FF))
        else:
            units.append(cp)
    return units


def java_hash_reference(text: str) -> int:
    """A line-by-line port of ``java.lang.String.hashCode``.

    ``int h = 0; for (char c : value) h = 31 * h + c; return h;`` with 32-bit overflow.
    """
    h = 0
    for unit in utf16_units(text):
        h = 31 * h + unit
        h &= 0xFFFFFFFF  # int arithmetic wraps at 32 bits
    if h >= 0x80000000:  # reinterpret as a signed int
        h -= 0x100000000
    return h


def java_abs(h: int) -> int:
    """``Math.abs(int)``: MIN_VALUE has no positive counterpart and stays negative."""
    if h == -0x80000000:
        return h
    return -h if h < 0 else h


def index_hash_reference(key: str) -> int:
    """IndexService: ``Math.abs(key.hashCode())``, a negative result forced to 0."""
    h = java_abs(java_hash_reference(key))
    return 0 if h < 0 else h


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),
    ("polygenelubricants", -2147483648),
    ("\U0001F600", 31 * 0xD83D + 0xDE00),  # one non-BMP char = two surrogate units
    ("\ud800", 0xD800),                    # a lone surrogate is one unit
])
def test_vectors(text: str, expected: int) -> None:
    assert java_hash_reference(text) == expected
    assert java_string_hash(text) == expected


def test_non_bmp_hashes_as_surrogate_pair() -> None:
    assert java_string_hash("\U0001F600") == 1772899
    assert java_string_hash("x\U0001F600y") == java_hash_reference("x\ud83d\ude00y")
    # Not the same as hashing the code point as one unit.
    assert java_string_hash("\U0001F600") != 0x1F600


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("polygenelubricants") == -2147483648
    # The consume-queue field is the signed value sign-extended to 8 bytes.
    assert struct.pack(">q", tags_code("polygenelubricants")) == bytes.fromhex(
        "FFFFFFFF80000000")


def test_index_hash_edge_case() -> None:
    assert index_hash("polygenelubricants") == 0
    assert index_hash("TagA") == 2598919
    negative = next(s for s in (f"key{i}" for i in range(1000)) if java_hash_reference(s) < 0)
    assert index_hash(negative) == -java_hash_reference(negative) > 0


def test_long_ascii_strings() -> None:
    for n in (511, 512, 513, 2000):
        text = "".join(chr(33 + (i * 7) % 90) for i in range(n))
        assert java_string_hash(text) == java_hash_reference(text)
        assert index_hash(text) == index_hash_reference(text)


@settings(deadline=None, max_examples=300)
@given(st.one_of(st.text(max_size=60), st.text(alphabet=st.characters(max_codepoint=127),
                                                 max_size=700)))
def test_matches_reference(text: str) -> None:
    assert java_string_hash(text) == java_hash_reference(text)
    assert index_hash(text) == index_hash_reference(text)
    assert -2**31 <= java_string_hash(text) < 2**31
    assert 0 <= index_hash(text) < 2**31
