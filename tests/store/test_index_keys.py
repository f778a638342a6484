"""Index-key hashing: the keys of records queued one by one hashed with their topics
joined arithmetically (``prefixed_hashes``, and ``record_hashes`` from the records' key
sets, a trace message's keys from their text), against ``index_hash`` of the whole
string; and hashing that stays on the calling thread."""

from __future__ import annotations

import string
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.formats.hashing import index_hash, java_string_hash
from tidemq.formats.properties import index_keys as index_keys_of
from tidemq.store import index_keys
from tidemq.store.index_keys import (
    KeyWords,
    prefixed_hashes,
    py_prefixed_hashes,
    py_record_hashes,
    py_word_count,
    record_hashes,
)

_TOPICS = st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=20)
_ASCII_KEY = st.text(string.printable.replace(" ", ""), min_size=1, max_size=90)
_ANY_KEY = st.text(min_size=1, max_size=12)
#: Any character, lone surrogates too (Java hashes them as the UTF-16 units they are).
_UNIT_KEY = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=12)


@st.composite
def _records(draw: st.DrawFn) -> tuple[list[str], list[int], list[str]]:
    """Prefixes (``topic#``), key counts and the keys of a few records: keys of one width
    (msgIds, UNIQ_KEYs: the arithmetic path) or of any widths and characters."""
    n = draw(st.integers(1, 6))
    prefixes = [t + "#" for t in draw(st.lists(_TOPICS, min_size=n, max_size=n))]
    counts = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    total = sum(counts)
    if draw(st.booleans()):
        width = draw(st.integers(1, 90))
        key = st.text(string.ascii_letters + string.digits, min_size=width, max_size=width)
    else:
        key = st.one_of(_ASCII_KEY, _ANY_KEY, _UNIT_KEY)
    keys = draw(st.lists(key, min_size=total, max_size=total))
    return prefixes, counts, keys


@settings(deadline=None, max_examples=300)
@given(_records())
def test_prefixed_hashes_are_index_hash_of_topic_and_key(
        records: tuple[list[str], list[int], list[str]]) -> None:
    prefixes, counts, keys = records
    each = [p for p, c in zip(prefixes, counts, strict=True) for _ in range(c)]
    expected = [index_hash(p + k) for p, k in zip(each, keys, strict=True)]
    assert prefixed_hashes(prefixes, counts, keys).tolist() == expected
    assert py_prefixed_hashes(prefixes, counts, keys).tolist() == expected
    if index_keys.NATIVE_PREFIXED_HASHES:  # the loop a CPU with AVX2 leaves for dot products
        out = np.empty(len(keys), np.int64)
        seeds = np.array([java_string_hash(p) & 0xFFFFFFFF for p in prefixes], np.uint32)
        compiled().str_key_hashes(out, keys, seeds, np.array(counts, np.int64), False)
        assert out.tolist() == expected


def test_the_compiled_prefixed_hashes_are_used() -> None:
    """Where the C module is built, a trace message's keys are hashed by it; a silent
    fallback would hide a slower dispatch thread."""
    compiled()
    assert index_keys.NATIVE_PREFIXED_HASHES
    assert index_keys.prefixed_hashes is not index_keys.py_prefixed_hashes


def test_the_compiled_prefixed_hashes_refuse_counts_that_do_not_add_up() -> None:
    """Counts naming more or fewer keys than given, or a key not a str: an error, never a
    read past the list."""
    c = compiled()
    out = np.empty(2, np.int64)
    seeds = np.zeros(1, np.uint32)
    with pytest.raises(ValueError, match="counts"):
        c.str_key_hashes(out, ["a", "b"], seeds, np.array([3], np.int64))
    with pytest.raises(ValueError, match="counts"):
        c.str_key_hashes(out, ["a", "b"], seeds, np.array([1], np.int64))
    with pytest.raises(TypeError, match="str"):
        c.str_key_hashes(out, ["a", b"b"], seeds, np.array([2], np.int64))
    with pytest.raises(ValueError, match="agree"):
        c.str_key_hashes(np.empty(3, np.int64), ["a", "b"], seeds, np.array([2], np.int64))


_KeyHashes = Callable[[npt.NDArray[np.uint8], int], npt.NDArray[np.int64]]


def _scalar_key_hashes(rows: npt.NDArray[np.uint8], seed: int) -> npt.NDArray[np.int64]:
    """The compiled module's loop of four rows a step, which a CPU with AVX2 leaves for
    the dot products."""
    from tidemq.formats import _crecords

    out = np.empty(len(rows), np.int64)
    _crecords.key_hashes(out, np.ascontiguousarray(rows), rows.shape[1], seed, False)
    return out


def _key_hashers() -> list[_KeyHashes]:
    fns: list[_KeyHashes] = [index_keys.py_key_hashes]
    if index_keys.NATIVE_KEY_HASHES:
        fns += [index_keys.key_hashes, _scalar_key_hashes]
    return fns


def test_the_compiled_key_hashes_are_used() -> None:
    """The C module is built wherever the project runs; a silent fallback would hide a
    slower dispatch thread."""
    compiled()
    assert index_keys.NATIVE_KEY_HASHES
    assert index_keys.key_hashes is not index_keys.py_key_hashes


@settings(deadline=None, max_examples=300)
@given(_TOPICS, st.integers(1, 50) | st.integers(250, 300), st.integers(0, 9), st.data())
def test_key_hashes_of_rows_are_index_hash_of_topic_and_key(
        topic: str, width: int, n: int, data: st.DataObject) -> None:
    """Both compiled loops and their numpy twin: rows of one width, any count (the
    scalar loop takes four rows a step, then the rest one by one; the dot products eight
    bytes of a row a step, then the rest of it, with the powers of 31 on the stack up to
    256 bytes a row)."""
    keys = data.draw(st.lists(st.text(string.printable, min_size=width, max_size=width),
                              min_size=n, max_size=n))
    rows = np.frombuffer("".join(keys).encode("ascii"), np.uint8).reshape(n, width)
    seed = java_string_hash(f"{topic}#") & 0xFFFFFFFF
    expect = [index_hash(f"{topic}#{key}") for key in keys]
    for fn in _key_hashers():
        assert list(fn(rows, seed)) == expect, fn


def test_key_hashes_of_a_min_value_sum_are_zero() -> None:
    """``seed * 31 + ord("a")`` is 2**31 mod 2**32: Java's abs keeps MIN_VALUE negative,
    and upstream then uses 0."""
    seed = (2**31 - ord("a")) * pow(31, -1, 1 << 32) % (1 << 32)
    rows = np.frombuffer(b"abaaaa", np.uint8).reshape(6, 1)
    for fn in _key_hashers():
        got = list(fn(rows, seed))
        assert got[0] == 0 and got[2:] == [0, 0, 0, 0] and got[1] > 0, fn


def test_a_hash_whose_sum_is_min_value_is_zero() -> None:
    # Java: "polygenelubricants".hashCode() is MIN_VALUE; upstream indexes it as 0.
    assert prefixed_hashes(["polygene"], [1], ["lubricants"]).tolist() == [0]
    assert prefixed_hashes(["a#", "polygene"], [1, 1], ["xy", "lubricants"]).tolist() == [
        index_hash("a#xy"), 0]
    assert py_prefixed_hashes(["polygene"], [1], ["lubricants"]).tolist() == [0]


_NO_HELPERS = textwrap.dedent("""
    import os, sys, tempfile, time
    from pathlib import Path
    from tidemq.store.index import KeyIndex
    from tidemq.store.layout import StoreLayout

    def others() -> int:  # clock ticks of every thread but this one
        me, total = str(os.getpid()), 0
        for tid in os.listdir("/proc/self/task"):
            if tid != me:
                fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        return total

    with tempfile.TemporaryDirectory() as root:
        idx = KeyIndex(StoreLayout(Path(root)), max_hash_slot_num=1024,
                       max_index_num=200_000)
        idx.load()
        # OpenBLAS's threads spin for a while after numpy's import: wait until they rest
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            settled = others()
            time.sleep(0.2)
            if others() == settled:
                break
        before = others()
        phys = 0
        for _ in range(8):  # trace messages' keys: hundreds of 32-character msgIds each
            for _ in range(25):
                phys += 1000
                idx.put_keys("RMQ_SYS_TRACE_TOPIC",
                             tuple(f"{phys:016X}{i:016X}" for i in range(750)), phys, 1)
            idx.drain()
        print(others() - before)
        idx.close()
""")


def test_hashing_many_keys_leaves_the_other_threads_idle(tmp_path: Path) -> None:
    """A broker has two cores for its event loop and its store threads: hashing a drain's
    keys must not hand work to a math library's worker threads (numpy's OpenBLAS starts
    them at import, and splits a product of many thousands of keys across them)."""
    done = subprocess.run([sys.executable, "-c", _NO_HELPERS], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 0  # CPU clock ticks spent by threads other than the caller


# ---------------------------------------------------------------------- key sets and words

#: Words of a KEYS text: msgIds, any characters but spaces (lone surrogates too: Java
#: hashes them as the units they are).
_WORD = (st.text("0123456789ABCDEF", min_size=32, max_size=32)
         | st.text(st.characters(blacklist_characters=" ") | st.characters(categories=["Cs"]),
                   min_size=1, max_size=12))


@st.composite
def _key_sets(draw: st.DrawFn) -> tuple[list[str], list[Sequence[str]]]:
    """Prefixes and the key sets of a few records: tuples (empty keys among them, as a
    record may queue), lists, and :class:`KeyWords` of a UNIQ_KEY and KEYS."""
    n = draw(st.integers(1, 6))
    prefixes = [t + "#" for t in draw(st.lists(_TOPICS, min_size=n, max_size=n))]
    sets: list[Sequence[str]] = []
    for _ in range(n):
        kind = draw(st.sampled_from(["tuple", "list", "words"]))
        words = draw(st.lists(_WORD, max_size=30))
        if kind == "words":
            made = KeyWords.of(draw(st.sampled_from(["", "U" * 32])), " ".join(words))
            sets.append(made)
        else:
            keys = [*words, *draw(st.lists(st.just(""), max_size=2))]
            sets.append(tuple(keys) if kind == "tuple" else keys)
    return prefixes, sets


@settings(deadline=None, max_examples=300)
@given(_key_sets())
def test_record_hashes_are_index_hash_of_each_non_empty_key(
        records: tuple[list[str], list[Sequence[str]]]) -> None:
    prefixes, sets = records
    expected = [index_hash(p + k) for p, ks in zip(prefixes, sets, strict=True) for k in ks if k]
    counts = [sum(1 for k in ks if k) for ks in sets]
    for hashes in (record_hashes, py_record_hashes):
        got, got_counts = hashes(prefixes, sets)
        assert got.tolist() == expected and got_counts.tolist() == counts
    seeds = np.array([java_string_hash(p) & 0xFFFFFFFF for p in prefixes], np.uint32)
    for vector in (True, False):  # with AVX2's dot products and without
        out = np.empty(sum(map(len, sets)), np.int64)
        made = np.empty(len(sets), np.int64)
        written = compiled().record_key_hashes(out, made, sets, seeds, KeyWords, vector)
        assert out[:written].tolist() == expected and made.tolist() == counts


def test_the_compiled_record_hashes_are_used() -> None:
    compiled()
    assert index_keys.NATIVE_RECORD_HASHES
    assert index_keys.record_hashes is not index_keys.py_record_hashes


def test_the_compiled_record_hashes_refuse_what_does_not_fit() -> None:
    """More keys than the output holds, a key not a str, columns of other lengths: an
    error, never a write past the array."""
    c = compiled()
    seeds = np.zeros(1, np.uint32)
    counts = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="more keys than the 1"):
        c.record_key_hashes(np.empty(1, np.int64), counts, [KeyWords("a b", 2)], seeds,
                            KeyWords)
    with pytest.raises(ValueError, match="more keys than the 1"):
        c.record_key_hashes(np.empty(1, np.int64), counts, [("a", "b")], seeds, KeyWords)
    with pytest.raises(TypeError, match="not a str"):
        c.record_key_hashes(np.empty(2, np.int64), counts, [("a", 1)], seeds, KeyWords)
    with pytest.raises(ValueError, match="do not agree"):
        c.record_key_hashes(np.empty(2, np.int64), np.zeros(2, np.int64), [("a",)], seeds,
                            KeyWords)


@settings(deadline=None, max_examples=300)
@given(st.sampled_from(["", "U" * 32, "a b"]), st.lists(st.sampled_from(["", "k", "é", "ID"]),
                                                          max_size=8))
def test_key_words_are_the_index_keys_of_the_properties(uniq: str, words: list[str]) -> None:
    """KeyWords.of names the keys index_keys names, in order (as the tuple when the
    UNIQ_KEY holds a space)."""
    keys = " ".join(words)
    props = {"UNIQ_KEY": uniq, "KEYS": keys} if uniq else {"KEYS": keys}
    made = KeyWords.of(uniq, keys)
    assert tuple(made) == index_keys_of(props) and len(made) == len(index_keys_of(props))
    assert made == index_keys_of(props)
    listed = index_keys_of(props)
    if listed:
        assert made[0] == listed[0] and made[-2:] == listed[-2:]


@settings(deadline=None, max_examples=400)
@given(st.lists(st.sampled_from(["", " ", "  ", "a", "ID" * 9, "é", "键", "\U0001F600", "x" * 7]),
                max_size=40))
def test_word_count_is_the_non_empty_words(parts: list[str]) -> None:
    text = "".join(parts)
    expected = len([w for w in text.split(" ") if w])
    assert py_word_count(text) == expected
    assert compiled().word_count(text) == expected
    assert index_keys.word_count is not py_word_count


def test_key_words_of_a_text_with_empty_words() -> None:
    """Runs of spaces, a leading and a trailing one: the words are the keys, and the
    compiled hashes skip the empty ones as the twin does."""
    made = KeyWords.of("U", "  a b  c ")
    assert isinstance(made, KeyWords) and len(made) == 4 and tuple(made) == ("U", "a", "b", "c")
    assert made == ("U", "a", "b", "c") and made[1:3] == ("a", "b")
    assert record_hashes(["T#"], [made])[0].tolist() == [
        index_hash(f"T#{k}") for k in ("U", "a", "b", "c")]
    assert KeyWords.of("U V", "a") == ("U V", "a")
