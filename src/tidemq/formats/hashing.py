"""Java ``String.hashCode`` as RocketMQ uses it for tags codes and index keys.

The hash runs over UTF-16 code units (characters outside the BMP count as two surrogate
units), ``h = 31 * h + unit`` with 32-bit wrap-around, read as a signed int.

* Consume-queue tags code: the signed hash sign-extended to 64 bits; absent tags give 0.
* Index hash: Java ``Math.abs`` of the hash, where ``-2**31`` stays negative and is then
  forced to 0 (docs/reference/store.md §7.1 and §10.3).

Test vectors: ``"TagA"`` -> 2598919, ``"polygenelubricants"`` -> -2147483648.
"""

from __future__ import annotations

import functools
import operator

__all__ = ["index_hash", "java_string_hash", "tags_code"]

_MASK32 = 0xFFFFFFFF
#: ``31**i mod 2**32``: an ASCII string's hash is one C-level sum over its reversed bytes.
_POWERS = [pow(31, i, 1 << 32) for i in range(512)]


def _java_hash(text: str) -> int:
    """Uncached ``String.hashCode()``; index keys are mostly unique, so caching them would
    only evict the tags the cache is for."""
    if text.isascii() and len(text) <= len(_POWERS):
        h: int = sum(map(operator.mul, text.encode("ascii")[::-1], _POWERS)) & _MASK32
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        h = 0
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


@functools.lru_cache(maxsize=65536)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``, as a signed 32-bit int."""
    return _java_hash(text)


def tags_code(tags: str | None) -> int:
    """The 8-byte tags field of a consume-queue entry: the signed hash, or 0 without tags."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_hash(key: str) -> int:
    """The non-negative hash the key index slots by (``abs`` with Java's MIN_VALUE rule)."""
    h = _java_hash(key)
    if h == -0x8000_0000:
        return 0
    return -h if h < 0 else h
