"""Java ``String.hashCode`` as RocketMQ uses it for tags codes and index keys.

The hash runs over UTF-16 code units (characters outside the BMP count as two surrogate
units), ``h = 31 * h + unit`` with 32-bit wrap-around, read as a signed int.

* Consume-queue tags code: the signed hash sign-extended to 64 bits; absent tags give 0.
* Index hash: Java ``Math.abs`` of the hash, where ``-2**31`` stays negative and is then
  forced to 0 (specs/store.md §7.1 and §10.3).

Test vectors: ``"TagA"`` -> 2598919, ``"polygenelubricants"`` -> -2147483648.
"""

from __future__ import annotations

import functools

__all__ = ["index_hash", "java_string_hash", "tags_code"]

_MASK32 = 0xFFFFFFFF


@functools.lru_cache(maxsize=65536)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``, as a signed 32-bit int."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def tags_code(tags: str | None) -> int:
    """The 8-byte tags field of a consume-queue entry: the signed hash, or 0 without tags."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_hash(key: str) -> int:
    """The non-negative hash the key index slots by (``abs`` with Java's MIN_VALUE rule)."""
    h = java_string_hash(key)
    if h == -0x8000_0000:
        return 0
    return -h if h < 0 else h
