"""Index keys: the key hash of docs/reference/store.md §7.1 for many keys at once, and the keys of a
batch as columns. Feeds :mod:`tidemq.store.index`; no file format of its own.

The hash of a key is Java's ``String.hashCode`` of ``topic + "#" + key`` made non-negative
(:func:`tidemq.formats.hashing.index_hash`). Over UTF-16 units ``u[0..L-1]`` it is
``sum(u[i] * 31**(L-1-i)) mod 2**32``, so ASCII keys of one length hash as one matrix
product of their bytes with the powers of 31, and ``hash(prefix + key)`` is
``hash(prefix) * 31**len(key) + hash(key)``: a batch's UNIQ_KEY column is hashed without
building a string per key (:func:`column_hashes`), and so are the keys of records queued
one by one (:func:`prefixed_hashes`, :func:`record_hashes`; a trace message's hundreds
of msgIds, which reach the index as one text, :class:`KeyWords`).

The products are summed in float64, exactly (:data:`_FLOAT_MAX_WIDTH`), a matrix-vector
product over at most :data:`_CHUNK` characters at a time: the float64 copy stays small
(eight bytes per character), and OpenBLAS keeps the product on the calling thread (from
about 460,000 elements it splits one with its worker thread, which then spins on the
broker's other core and takes several times the CPU). Where the compiled module
``tidemq.formats._crecords`` is built, a batch's UNIQ_KEY column is hashed by its
``key_hashes`` instead, in one pass (:func:`key_hashes`; :func:`py_key_hashes` is its twin),
and the keys of records queued one by one by its ``str_key_hashes``, straight from the
strings (:func:`prefixed_hashes`; :func:`py_prefixed_hashes` is its twin), or by its
``record_key_hashes`` straight from the records' key sets, a :class:`KeyWords`' keys from
its text (:func:`record_hashes`; :func:`py_record_hashes` is its twin).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import cast, overload

import numpy as np
import numpy.typing as npt

from tidemq.formats.hashing import index_hash, java_string_hash
from tidemq.formats.record.loops import compiled

__all__ = ["NATIVE_KEY_HASHES", "NATIVE_PREFIXED_HASHES", "NATIVE_RECORD_HASHES",
           "KeyColumns", "KeyWords", "column_hashes", "index_hashes", "key_hashes",
           "prefixed_hashes", "py_key_hashes", "py_prefixed_hashes", "py_record_hashes",
           "py_word_count", "record_hashes", "word_count"]

IntArray = npt.NDArray[np.int64]

_MASK32 = np.uint64(0xFFFFFFFF)
_VECTOR_MAX_LEN = 256
#: ``31**i`` and ``31**-i`` mod 2**32 (31 is odd, so invertible): the hash of a key padded
#: with ``p`` trailing NULs is ``hash(key) * 31**p``, which the inverse powers undo.
_POW = np.array([pow(31, i, 1 << 32) for i in range(_VECTOR_MAX_LEN)], dtype=np.uint64)
_INV_POW = np.array([pow(pow(31, -1, 1 << 32), i, 1 << 32)
                     for i in range(_VECTOR_MAX_LEN + 1)], dtype=np.uint64)


def index_hashes(keys: Sequence[str]) -> IntArray:
    """:func:`~tidemq.formats.hashing.index_hash` of every key, vectorised for ASCII keys."""
    n = len(keys)
    out = np.empty(n, dtype=np.int64)
    if not n:
        return out
    same = _same_width_ascii(keys)
    if same is not None:  # one buffer, one float64 sum of products: no object per key
        return _java_abs(_row_hashes(same))
    encoded = [k.encode("utf-8", "surrogatepass") for k in keys]
    lens = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    # ASCII (one byte per character, so one UTF-16 unit per byte) and not too long.
    fast = (lens == np.fromiter(map(len, keys), dtype=np.int64, count=n)) & (
        lens <= _VECTOR_MAX_LEN)
    if not fast.all():
        for i in np.flatnonzero(~fast).tolist():
            out[i] = index_hash(keys[i])
        picked = np.flatnonzero(fast)
        encoded = [encoded[i] for i in picked.tolist()]
        lens = lens[picked]
        if not encoded:
            return out
    width = max(int(np.max(lens)), 1)
    units = np.array(encoded, dtype=f"S{width}").view(np.uint8).reshape(-1, width)
    h = (units.astype(np.uint64) @ _POW[width - 1 :: -1]) & _MASK32
    h = (h * _INV_POW[width - lens]) & _MASK32
    signed = np.abs(h.astype(np.uint32).view(np.int32).astype(np.int64))
    signed[signed == 1 << 31] = 0  # Java: abs(MIN_VALUE) stays negative, upstream uses 0
    out[fast] = signed
    return out


def py_prefixed_hashes(prefixes: Sequence[str], counts: Sequence[int] | IntArray,
                    keys: Sequence[str]) -> IntArray:
    """:func:`~tidemq.formats.hashing.index_hash` of ``prefixes[r] + key`` for each of the
    ``counts[r]`` keys of record ``r``, flat: ``keys`` holds every record's keys in order.
    The twin of the compiled ``str_key_hashes`` (:func:`prefixed_hashes` is whichever
    runs).

    Keys that are ASCII and of one width (a trace message's msgIds, records' UNIQ_KEYs)
    are hashed from one buffer as :func:`index_hashes` hashes them, and each record's
    prefix joins its keys' hashes arithmetically (Java's hash of ``prefix + key`` is
    ``hash(prefix) * 31**len(key) + hash(key)`` mod 2**32): no string per key. Any other
    keys are joined to their prefixes and hashed by :func:`index_hashes`.
    """
    n = len(keys)
    if not n:
        return np.empty(0, dtype=np.int64)
    same = _same_width_ascii(keys)
    if same is None:
        full = [p + k for p, k in zip(_each_key(prefixes, counts), keys, strict=True)]
        return index_hashes(full)
    scale = pow(31, same.shape[1], 1 << 32)
    known = {p: (java_string_hash(p) & 0xFFFFFFFF) * scale & 0xFFFFFFFF
             for p in set(prefixes)}  # the topics of a drain: a few
    raw = _row_hashes(same)
    if len(known) == 1:
        raw += np.uint32(known[prefixes[0]])  # wraps mod 2**32, as Java's int arithmetic
    else:
        per_record = np.fromiter(map(known.__getitem__, prefixes), dtype=np.uint32,
                                 count=len(prefixes))
        raw += np.repeat(per_record, counts)
    return _java_abs(raw)


def _each_key(prefixes: Sequence[str], counts: Sequence[int] | IntArray) -> Iterator[str]:
    """Each record's prefix repeated once per key of the record."""
    return itertools.chain.from_iterable(map(itertools.repeat, prefixes, map(int, counts)))


#: Characters (matrix elements) hashed by one float64 product at most.
_CHUNK = 1 << 17


def _row_hashes(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """Java's ``String.hashCode`` mod 2**32 of each row of ASCII bytes, at most
    :data:`_FLOAT_MAX_WIDTH` wide: the rows' bytes weighted by the powers of 31, summed
    exactly in float64, :data:`_CHUNK` characters at a time (see the module docstring)."""
    n, width = rows.shape
    powers = _powers(width)
    step = max(1, _CHUNK // width)
    if n <= step:
        h = rows.astype(np.float64).dot(powers)
    else:
        h = np.empty(n, dtype=np.float64)
        for start in range(0, n, step):
            h[start : start + step] = rows[start : start + step].astype(np.float64).dot(powers)
    out: npt.NDArray[np.uint32] = h.astype(np.int64).astype(np.uint32)
    return out


def _java_abs(h: npt.NDArray[np.uint32]) -> IntArray:
    """Java's ``Math.abs`` of hashes read as signed ints, with upstream's rule that
    MIN_VALUE (which stays negative, in numpy too) becomes 0."""
    out: IntArray = np.maximum(np.abs(h.view(np.int32)), 0).astype(np.int64)
    return out


def _same_width_ascii(keys: Sequence[str]) -> npt.NDArray[np.uint8] | None:
    """The keys as rows of one ASCII byte matrix, when they are ASCII, all as long and
    not wider than :data:`_FLOAT_MAX_WIDTH` (a trace message's msgIds); else ``None``."""
    width = len(keys[0])
    if not 0 < width <= _FLOAT_MAX_WIDTH:
        return None
    joined = "".join(keys)
    if len(joined) != width * len(keys) or not joined.isascii():
        return None
    if max(map(len, keys)) != width:  # the same total from different lengths
        return None
    return np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(len(keys), width)


class KeyColumns(Sequence[tuple[str, ...]]):
    """The index keys of a batch whose records are keyed alike, as columns: record ``i``
    has its UNIQ_KEY -- row ``i`` of ``uniq``, ASCII bytes of one width (``None``: the
    records have none) -- then the ``extra`` keys (KEYS) every record shares.

    A sequence of per-record key tuples, like the list it replaces, so every consumer of
    a :class:`~tidemq.store.dispatch.DispatchBatch` works unchanged;
    :meth:`KeyIndex.put_key_columns` hashes it without a string per key.
    """

    __slots__ = ("extra", "n", "per_record", "uniq")

    def __init__(self, uniq: npt.NDArray[np.uint8] | None, extra: tuple[str, ...],
                 n: int) -> None:
        if uniq is not None and (uniq.ndim != 2 or len(uniq) != n or not uniq.shape[1]):
            raise ValueError("uniq must hold one non-empty row per record")
        self.uniq = uniq
        self.extra = extra
        self.n = n
        #: Keys of each record (read several times a batch on the dispatch thread).
        self.per_record = (uniq is not None) + len(extra)

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> tuple[str, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> KeyColumns: ...

    def __getitem__(self, i: int | slice) -> tuple[str, ...] | KeyColumns:
        uniq = self.uniq
        if isinstance(i, slice):
            picked = range(self.n)[i]
            if uniq is None:
                return KeyColumns(None, self.extra, len(picked))
            return KeyColumns(uniq[i], self.extra, len(picked))
        if uniq is None:
            range(self.n)[i]  # IndexError as a list would raise
            return self.extra
        return (uniq[i].tobytes().decode("ascii"), *self.extra)

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        uniq = self.uniq
        if uniq is None:
            return itertools.repeat(self.extra, self.n)
        w = uniq.shape[1]
        joined = uniq.tobytes().decode("ascii")
        values = map(joined.__getitem__, map(slice, range(0, self.n * w, w),
                                             range(w, self.n * w + 1, w)))
        extra = self.extra
        if not extra:
            return zip(values)
        return ((u, *extra) for u in values)


#: Widest UNIQ_KEY hashed in float64: each term is below 2**40, so a sum of up to 2**13 of
#: them is an exact integer below 2**53.
_FLOAT_MAX_WIDTH = 1 << 13


@functools.lru_cache(maxsize=64)
def _powers(width: int) -> npt.NDArray[np.float64]:
    """``31**(width-1) .. 31**0`` mod 2**32: the weights of a key's units, first to last."""
    out = np.array([pow(31, i, 1 << 32) for i in range(width - 1, -1, -1)], dtype=np.float64)
    out.flags.writeable = False
    return out


def py_key_hashes(rows: npt.NDArray[np.uint8], seed: int) -> IntArray:
    """The index hash of each row of ASCII bytes after a prefix whose
    :func:`~tidemq.formats.hashing.java_string_hash` mod 2**32 is ``seed``: Java's hash of
    ``prefix + row`` is ``seed * 31**len(row) + hash(row)`` mod 2**32, and a row's hash its
    bytes weighted by powers of 31, one matrix product (in float64, exact: see
    :data:`_FLOAT_MAX_WIDTH`); made non-negative as upstream does.

    ``key_hashes`` of the compiled module ``tidemq.formats._crecords`` computes the same
    in one pass (:func:`key_hashes` is whichever runs)."""
    w = rows.shape[1]
    prefix = seed * pow(31, w, 1 << 32) & 0xFFFFFFFF
    if w <= _FLOAT_MAX_WIDTH:
        h = _row_hashes(rows)
    else:
        h = np.array([java_string_hash(bytes(row).decode("ascii")) & 0xFFFFFFFF
                      for row in rows], dtype=np.uint32)
    h += np.uint32(prefix)  # wraps mod 2**32, as Java's int arithmetic
    # Java's abs: MIN_VALUE stays negative (numpy's too), and upstream then uses 0.
    out: IntArray = np.maximum(np.abs(h.view(np.int32)), 0).astype(np.int64)
    return out


def _native_key_hashes() -> Callable[[npt.NDArray[np.uint8], int], IntArray] | None:
    compiled_hashes = compiled("key_hashes")
    if compiled_hashes is None:
        return None

    def native_key_hashes(rows: npt.NDArray[np.uint8], seed: int) -> IntArray:
        out = np.empty(len(rows), np.int64)
        compiled_hashes(out, np.ascontiguousarray(rows), rows.shape[1], seed)
        return out

    return native_key_hashes


_compiled_key_hashes = _native_key_hashes()
#: Whether :func:`key_hashes` is the compiled loop (``False``: :func:`py_key_hashes`).
NATIVE_KEY_HASHES = _compiled_key_hashes is not None
key_hashes: Callable[[npt.NDArray[np.uint8], int], IntArray] = (
    _compiled_key_hashes if _compiled_key_hashes is not None else py_key_hashes)


def _native_prefixed_hashes() -> Callable[
        [Sequence[str], Sequence[int] | IntArray, Sequence[str]], IntArray] | None:
    compiled_hashes = compiled("str_key_hashes")
    if compiled_hashes is None:
        return None

    def native_prefixed_hashes(prefixes: Sequence[str], counts: Sequence[int] | IntArray,
                               keys: Sequence[str]) -> IntArray:
        """:func:`py_prefixed_hashes` in one pass over the keys' characters: no bytes
        copy of them, no matrix, no string per key."""
        out = np.empty(len(keys), np.int64)
        if len(prefixes) == 1:
            seeds = np.array([java_string_hash(prefixes[0]) & 0xFFFFFFFF], np.uint32)
        else:
            known = {p: java_string_hash(p) & 0xFFFFFFFF for p in set(prefixes)}
            seeds = np.fromiter(map(known.__getitem__, prefixes), np.uint32,
                                count=len(prefixes))
        compiled_hashes(out, keys if type(keys) is list else list(keys), seeds,
                        np.ascontiguousarray(counts, np.int64))
        return out

    return native_prefixed_hashes


_compiled_prefixed_hashes = _native_prefixed_hashes()
#: Whether :func:`prefixed_hashes` is the compiled loop (``False``:
#: :func:`py_prefixed_hashes`).
NATIVE_PREFIXED_HASHES = _compiled_prefixed_hashes is not None
prefixed_hashes: Callable[[Sequence[str], Sequence[int] | IntArray, Sequence[str]],
                          IntArray] = (_compiled_prefixed_hashes
                                       if _compiled_prefixed_hashes is not None
                                       else py_prefixed_hashes)


def column_hashes(topic: str, keys: KeyColumns) -> IntArray:
    """:func:`~tidemq.formats.hashing.index_hash` of ``topic#key`` for every key of
    ``keys``, record by record (UNIQ_KEY first, then the extra keys), flat: the UNIQ_KEY
    column in one :func:`key_hashes` call, the shared keys hashed once."""
    n, k = keys.n, keys.per_record
    uniq = keys.uniq
    hashed: IntArray | None = None
    if uniq is not None:
        hashed = key_hashes(uniq, java_string_hash(f"{topic}#") & 0xFFFFFFFF)
        if not keys.extra:
            return hashed
    out = np.empty((n, k), dtype=np.int64)
    if hashed is not None:
        out[:, 0] = hashed
    for j, key in enumerate(keys.extra, k - len(keys.extra)):
        out[:, j] = index_hash(f"{topic}#{key}")
    return out.ravel()


def py_word_count(text: str) -> int:
    """The words of ``text``, split at spaces, empty ones not counted: the keys of a KEYS
    text. The twin of the compiled ``word_count`` (:func:`word_count` is whichever
    runs)."""
    return sum(1 for word in text.split(" ") if word)


_compiled_word_count = cast("Callable[[str], int] | None", compiled("word_count"))
word_count: Callable[[str], int] = (
    _compiled_word_count if _compiled_word_count is not None else py_word_count)


class KeyWords(Sequence[str]):
    """A message's index keys kept as one text, its UNIQ_KEY and then the words of its
    KEYS, separated by spaces (empty words are not keys): a trace message's hundreds of
    msgIds reach the key index without a string each, and :func:`record_hashes` hashes
    them from the text. A sequence of its keys, like the tuple it replaces, for any
    other reader."""

    __slots__ = ("n", "text")

    def __init__(self, text: str, n: int) -> None:
        self.text = text
        #: The keys (non-empty words) of :attr:`text`.
        self.n = n

    @classmethod
    def of(cls, uniq: str, keys: str) -> KeyWords | tuple[str, ...]:
        """The index keys of a message whose UNIQ_KEY is ``uniq`` (may be empty) and whose
        KEYS are ``keys``, those :func:`~tidemq.formats.properties.index_keys` names: as a
        :class:`KeyWords`, or as that tuple when the UNIQ_KEY holds a space (it is one
        key, not words)."""
        if " " in uniq:
            return (uniq, *filter(None, keys.split(" ")))
        text = f"{uniq} {keys}" if uniq else keys
        return cls(text, word_count(text))

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...

    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return tuple(self)[i]

    def __iter__(self) -> Iterator[str]:
        return filter(None, self.text.split(" "))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyWords):
            return tuple(self) == tuple(other)
        return isinstance(other, tuple) and tuple(self) == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"KeyWords({self.text!r}, {self.n})"


def py_record_hashes(prefixes: Sequence[str], key_sets: Sequence[Sequence[str]]
                     ) -> tuple[IntArray, IntArray]:
    """:func:`~tidemq.formats.hashing.index_hash` of ``prefixes[r] + key`` for each
    non-empty key of each record ``r`` (``key_sets[r]``: a tuple of keys, or a
    :class:`KeyWords`), flat, and how many each record has. The twin of the compiled
    ``record_key_hashes`` (:func:`record_hashes` is whichever runs)."""
    sets = [tuple(filter(None, ks)) for ks in key_sets]
    counts = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    return prefixed_hashes(prefixes, counts, list(itertools.chain.from_iterable(sets))), counts


def _native_record_hashes() -> Callable[[Sequence[str], Sequence[Sequence[str]]],
                                        tuple[IntArray, IntArray]] | None:
    compiled_hashes = compiled("record_key_hashes")
    if compiled_hashes is None:
        return None

    def native_record_hashes(prefixes: Sequence[str], key_sets: Sequence[Sequence[str]]
                             ) -> tuple[IntArray, IntArray]:
        """:func:`py_record_hashes` in one pass over the keys' characters: a
        :class:`KeyWords`' keys found in its text, no flat list of the keys."""
        sets = key_sets if type(key_sets) is list else list(key_sets)
        counts = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        out = np.empty(int(counts.sum()), np.int64)
        if len(set(prefixes)) == 1:
            seeds = np.full(len(sets), java_string_hash(prefixes[0]) & 0xFFFFFFFF, np.uint32)
        else:
            known = {p: java_string_hash(p) & 0xFFFFFFFF for p in set(prefixes)}
            seeds = np.fromiter(map(known.__getitem__, prefixes), np.uint32,
                                count=len(prefixes))
        written = cast("int", compiled_hashes(out, counts, sets, seeds, KeyWords))
        return out[:written], counts

    return native_record_hashes


_compiled_record_hashes = _native_record_hashes()
#: Whether :func:`record_hashes` is the compiled loop (``False``: :func:`py_record_hashes`).
NATIVE_RECORD_HASHES = _compiled_record_hashes is not None
record_hashes: Callable[[Sequence[str], Sequence[Sequence[str]]],
                        tuple[IntArray, IntArray]] = (
    _compiled_record_hashes if _compiled_record_hashes is not None else py_record_hashes)
