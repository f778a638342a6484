"""A trace message's text in one call: the compiled ``trace_pub_run`` and ``unique_words``
make the same text as their twins, and the twins what the records and keys are made of
one by one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.codec.trace_text import pub_run, py_pub_run, py_unique_words, unique_words

#: Text without lone surrogates (not UTF-8) and, for ids, without commas (the joiner).
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_ID = (st.text("0123456789ABCDEF", min_size=0, max_size=34)
       | _TEXT.filter(lambda t: "," not in t))


@settings(deadline=None, max_examples=400)
@given(st.lists(st.tuples(_ID, _ID), min_size=1, max_size=40), _TEXT, _TEXT,
       st.booleans())
def test_a_run_is_each_record_joined(pairs: list[tuple[str, str]], mid: str, between: str,
                                     fixed: bool) -> None:
    if fixed:  # the usual: ids of one width
        pairs = [(f"{i:032X}", f"7F00000100002A9F{i * 200:016X}") for i in range(len(pairs))]
    ids, offsets = ",".join(p[0] for p in pairs), ",".join(p[1] for p in pairs)
    if any(s in ids + offsets for s in "\x01\x02"):
        for run in (py_pub_run, compiled().trace_pub_run):
            with pytest.raises(ValueError, match="0x01 or 0x02"):
                run(mid, between, ids, offsets)
        return
    id_widths = {len(p[0]) for p in pairs}
    off_widths = {len(p[1]) for p in pairs}
    expected = (between.join(f"{i}{mid}{o}" for i, o in pairs), len(pairs),
                id_widths.pop() if len(id_widths) == 1 and ids.isascii() else -1,
                off_widths.pop() if len(off_widths) == 1 and offsets.isascii() else -1)
    assert py_pub_run(mid, between, ids, offsets) == expected
    assert compiled().trace_pub_run(mid, between, ids, offsets) == expected
    assert pub_run(mid, between, ids, offsets) == expected


def test_ids_and_offsets_of_other_counts_are_refused() -> None:
    for run in (py_pub_run, compiled().trace_pub_run):
        with pytest.raises(ValueError, match="2 ids and 3 offset ids"):
            run("m", "b", "a,b", "x,y,z")


def test_a_separator_in_an_offset_id_is_refused() -> None:
    for run in (py_pub_run, compiled().trace_pub_run):
        with pytest.raises(ValueError, match="0x01 or 0x02"):
            run("m", "b", "a,b", "x,y\x02")


def test_the_compiled_run_takes_four_str() -> None:
    c = compiled()
    with pytest.raises(TypeError):
        c.trace_pub_run("m", "b", b"a", "x")
    with pytest.raises(TypeError):
        c.trace_pub_run("m", "b", "a")
    with pytest.raises(TypeError):
        c.unique_words(["a"])


def test_text_that_is_not_utf8_goes_to_the_twin() -> None:
    assert pub_run("m", "b", "a\ud800", "x") == ("a\ud800mx", 1, -1, 1)
    assert unique_words("a\ud800 a\ud800 b") == "a\ud800 b"


_WORDS = st.lists(st.sampled_from(["", "a", "b", "ab", "é", "键", "\U0001F600", "a" * 40])
                  | _TEXT.filter(lambda t: " " not in t), max_size=60)


@settings(deadline=None, max_examples=400)
@given(_WORDS, st.lists(st.integers(1, 3), min_size=60, max_size=60))
def test_unique_words_keeps_each_first_one(words: list[str], gaps: list[int]) -> None:
    text = "".join(w + " " * g for w, g in zip(words, gaps, strict=False))
    expected = " ".join(dict.fromkeys(w for w in text.split(" ") if w))
    assert py_unique_words(text) == expected
    assert compiled().unique_words(text) == expected
    assert unique_words(text) == expected


def test_many_keys_and_their_repeats() -> None:
    ids = [f"7F000001{i * 7919:024X}" for i in range(5000)]
    text = " ".join(ids + ids[::-1] + ids[:10])
    assert compiled().unique_words(text) == " ".join(ids)
