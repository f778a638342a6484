"""Message body compression as RocketMQ marks it in the sysflag (docs/reference/remoting.md §3.5).

==========  ===========  ===============  ============================================
sysflag     bits 8-10    type             format
==========  ===========  ===============  ============================================
0x1 set     0 or 3       ZLIB             zlib stream with header (Java ``Deflater``)
0x1 set     1            LZ4              LZ4 *frame* format
0x1 set     2            ZSTD             zstd frame
==========  ===========  ===============  ============================================

Java producers compress single bodies of 4 KiB or more with ZLIB level 5 (sysflag
``0x301``). ZLIB at level 1 (:data:`FAST_ZLIB_LEVEL`) is ISA-L's deflate (``isal``) where
it is installed: the same zlib stream, which every RocketMQ reader inflates, made in a
fraction of zlib's time (repetitive text, such as trace records, packs as small as at
zlib's level 5). Decompression takes a ``max_output`` bound and never produces more than
that many bytes: a body that would inflate beyond it (a decompression bomb), a truncated
stream or garbage raise :class:`~tidemq.errors.CorruptRecord`.
"""

from __future__ import annotations

import enum
import threading
import zlib
from collections.abc import Callable
from typing import cast

import lz4.frame
import zstandard

try:
    from isal.isal_zlib import compress as _isal_compress
    _fast_deflate: Callable[[bytes | bytearray | memoryview, int], bytes] | None = (
        _isal_compress)
except ImportError:  # pragma: no cover - no isal wheel for this platform
    _fast_deflate = None

from tidemq.errors import CorruptRecord
from tidemq.formats.record.native import compiled

__all__ = [
    "BATCH_LEVELS",
    "COMPRESSED",
    "COMPRESSION_MASK",
    "FAST_ZLIB_LEVEL",
    "CompressionType",
    "clear_vector_state",
    "compress",
    "compress_if_smaller",
    "compression_of",
    "decompress",
    "py_clear_vector_state",
    "sys_flag_for",
]

COMPRESSED = 0x1
COMPRESSION_MASK = 0x700


class CompressionType(enum.IntEnum):
    """The value of sysflag bits 8-10 (0 is read as ZLIB)."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3


#: The ZLIB level ISA-L makes (module docstring).
FAST_ZLIB_LEVEL = 1
#: Levels matching the Java producer defaults (zlib 5) and each library's usual default.
DEFAULT_LEVELS = {CompressionType.ZLIB: 5, CompressionType.LZ4: 0, CompressionType.ZSTD: 3}
#: Levels of end-to-end (inner batch) compression, :func:`compress_if_smaller`, when none
#: is given: zstd level -1 (the first "fast" level). On a producer's batch (tens of KB of
#: similar messages) libzstd is nearly all of the cost of compression, and -1 spends the
#: least of it that still packs well (``tidemq bench batchcq``: levels 1 and 3 pack
#: better and cost more to compress and to inflate). The batch is inflated twice
#: after it is sent -- by the broker, which counts its entries, and by the consumer -- so
#: the saving counts three times; lower levels barely save more CPU and pack much worse.
BATCH_LEVELS = {**DEFAULT_LEVELS, CompressionType.ZSTD: -1}
#: A compression type by sysflag bits 8-10 (0 is read as ZLIB; above 3 is an error).
_BY_BITS = (CompressionType.ZLIB, CompressionType.LZ4, CompressionType.ZSTD,
            CompressionType.ZLIB)


def compression_of(sys_flag: int) -> CompressionType | None:
    """The compression of a body with ``sys_flag``, or ``None`` if it is not compressed."""
    if not sys_flag & COMPRESSED:
        return None
    bits = (sys_flag & COMPRESSION_MASK) >> 8
    if bits > 3:
        raise CorruptRecord(f"unknown compression type {bits} in sysflag {sys_flag:#x}")
    return _BY_BITS[bits]  # a tuple index: the enum call CompressionType(bits) is slower


def sys_flag_for(ctype: CompressionType) -> int:
    """The sysflag bits that mark a body compressed with ``ctype``."""
    return COMPRESSED | (int(ctype) << 8)


class _ZstdContexts(threading.local):
    """zstd contexts reused by one thread (making one costs about as much as compressing
    a 20 KB batch; they are not thread-safe, hence one set per thread)."""

    def __init__(self) -> None:
        self.compressors: dict[int, zstandard.ZstdCompressor] = {}
        self.decompressor = zstandard.ZstdDecompressor()

    def compressor(self, level: int) -> zstandard.ZstdCompressor:
        c = self.compressors.get(level)
        if c is None:
            c = self.compressors[level] = zstandard.ZstdCompressor(level=level)
        return c


_zstd_contexts = _ZstdContexts()


def py_clear_vector_state() -> None:
    """The twin of the compiled ``clear_vector_state``: Python leaves no vector state."""


#: After ISA-L's deflate: clears the vector registers' upper halves, which its vector
#: code leaves set and every later SSE instruction of the thread would pay for
#: (``_crecords.c``); the twin where the module is not built.
clear_vector_state = cast("Callable[[], None]",
                          compiled("clear_vector_state") or py_clear_vector_state)


def compress(data: bytes | bytearray | memoryview, ctype: CompressionType,
             level: int | None = None) -> bytes:
    """Compress ``data`` in the format ``ctype`` names."""
    lvl = DEFAULT_LEVELS[ctype] if level is None else level
    if ctype is CompressionType.ZLIB:
        if lvl == FAST_ZLIB_LEVEL and _fast_deflate is not None:
            packed = _fast_deflate(data, 1)
            clear_vector_state()
            return packed
        return zlib.compress(data, lvl)
    if ctype is CompressionType.LZ4:
        return bytes(lz4.frame.compress(bytes(data), compression_level=lvl))
    return _zstd_contexts.compressor(lvl).compress(data)


#: Bodies shorter than this are never worth a compression frame.
MIN_COMPRESS_BYTES = 256


def compress_if_smaller(data: bytes, ctype: CompressionType, level: int | None = None,
                        min_saving: float = 0.05) -> tuple[bytes, int]:
    """``(compressed, sys_flag_for(ctype))`` when compressing ``data`` at ``level``
    (default :data:`BATCH_LEVELS`) saves at least ``min_saving`` of its size, else
    ``(data, 0)``: incompressible or tiny payloads are sent as they are, so the consumer
    does not pay to inflate them."""
    if len(data) < MIN_COMPRESS_BYTES:
        return data, 0
    packed = compress(data, ctype, BATCH_LEVELS[ctype] if level is None else level)
    if len(packed) > len(data) * (1.0 - min_saving):
        return data, 0
    return packed, sys_flag_for(ctype)


def decompress(data: bytes | bytearray | memoryview, ctype: CompressionType,
               max_output: int) -> bytes:
    """Decompress ``data``, producing at most ``max_output`` bytes.

    Raises :class:`CorruptRecord` when the output would exceed ``max_output``, when the
    stream is truncated, or when it is not in the ``ctype`` format.
    """
    try:
        if ctype is CompressionType.ZLIB:
            return _zlib(data, max_output)
        if ctype is CompressionType.LZ4:
            return _lz4(data, max_output)
        return _zstd(data, max_output)
    except CorruptRecord:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError, MemoryError) as exc:
        raise CorruptRecord(f"{ctype.name} body does not decompress: {exc}") from None


def _too_big(ctype: CompressionType, max_output: int) -> CorruptRecord:
    return CorruptRecord(f"{ctype.name} body inflates beyond {max_output} bytes")


def _zlib(data: bytes | bytearray | memoryview, max_output: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, max_output + 1)
    if len(out) > max_output:
        raise _too_big(CompressionType.ZLIB, max_output)
    if not d.eof:
        raise CorruptRecord("ZLIB body is truncated")
    return out


def _lz4(data: bytes | bytearray | memoryview, max_output: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = bytes(d.decompress(bytes(data), max_length=max_output + 1))
    if len(out) > max_output:
        raise _too_big(CompressionType.LZ4, max_output)
    if not d.eof:
        raise CorruptRecord("LZ4 body is truncated")
    return out


def _zstd(data: bytes | bytearray | memoryview, max_output: int) -> bytes:
    declared = zstandard.frame_content_size(data)
    if declared > max_output:
        raise _too_big(CompressionType.ZSTD, max_output)
    # With an unknown size (-1) the library stops at max_output_size and reports an
    # incomplete frame; with a declared size it allocates exactly that, checked above.
    try:  # max_output_size=0 would mean "unbounded"
        out = _zstd_contexts.decompressor.decompress(data, max_output_size=max(max_output, 1))
    except zstandard.ZstdError as exc:
        if declared < 0 and "full frame" in str(exc):
            raise CorruptRecord(
                f"ZSTD body is truncated or inflates beyond {max_output} bytes"
            ) from None
        raise
    if len(out) > max_output:
        raise _too_big(CompressionType.ZSTD, max_output)
    return out
