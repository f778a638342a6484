"""The property string: golden bytes, reader rules, round trips, garbage."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import CorruptRecord
from tidemq.formats.properties import (
    decode_properties,
    encode_properties,
    first_broken_pair,
    names_start,
    parse_checked_property_text,
    parse_property_text,
    property_error,
    property_text,
    property_text_error,
    text_without,
)


def test_golden_encoding() -> None:
    got = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true"})
    assert got == b"".join([
        b"TAGS", b"\x01", b"TagA", b"\x02",   # name, NAME_VALUE_SEPARATOR, value, terminator
        b"KEYS", b"\x01", b"k1 k2", b"\x02",
        b"WAIT", b"\x01", b"true", b"\x02",   # the last pair is terminated too
    ])


def test_empty_names_and_values_are_skipped() -> None:
    assert encode_properties({}) == b""
    assert encode_properties({"A": "", "": "x", "B": "1"}) == b"B\x011\x02"


def test_utf8() -> None:
    assert encode_properties({"KEYS": "clé"}) == "KEYS\x01clé\x02".encode()
    assert decode_properties("KEYS\x01clé\x02".encode()) == {"KEYS": "clé"}


def test_reader_rules() -> None:
    # No terminator after the last pair.
    assert decode_properties(b"A\x011\x02B\x012") == {"A": "1", "B": "2"}
    # Segments shorter than 3 characters are ignored; so are empty sides and no separator.
    assert decode_properties(b"A\x01\x02\x01B\x02ab\x02noseparator\x02C\x013\x02") == {"C": "3"}
    # Split at the first separator: the value keeps later \x01 characters.
    assert decode_properties(b"A\x01x\x01y\x02") == {"A": "x\x01y"}
    # A repeated name keeps the last value.
    assert decode_properties(b"A\x011\x02A\x012\x02") == {"A": "2"}
    assert decode_properties(b"") == {}
    assert decode_properties(memoryview(b"A\x011\x02")) == {"A": "1"}


names = st.text(min_size=1, max_size=20).filter(lambda s: "\x01" not in s and "\x02" not in s)
values = st.text(min_size=1, max_size=40).filter(lambda s: "\x02" not in s)


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(names, values, max_size=12))
def test_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=200))
def test_garbage_raises_only_corrupt_record(data: bytes) -> None:
    try:
        decoded = decode_properties(data)
    except CorruptRecord:
        return
    assert all(k and v for k, v in decoded.items())


def test_invalid_utf8_is_corrupt() -> None:
    try:
        decode_properties(b"A\x01\xff\xfe\x02")
    except CorruptRecord as exc:
        assert "UTF-8" in exc.reason
    else:
        raise AssertionError("invalid UTF-8 accepted")


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1,
                max_size=8)
_ANY = st.text(st.sampled_from("ab\x01\x02"), min_size=1, max_size=6)


@given(st.dictionaries(_TEXT, _TEXT, max_size=6))
def test_pairs_without_separators_pass_both_checks_and_read_back(props: dict[str, str]) -> None:
    assert all(property_error(k, v) is None for k, v in props.items())
    text = encode_properties(props).decode()
    assert property_text_error(text) is None
    assert decode_properties(text.encode()) == props


@given(st.dictionaries(_ANY, _ANY, min_size=1, max_size=4))
def test_a_writer_refuses_exactly_the_pairs_holding_a_separator(props: dict[str, str]) -> None:
    for name, value in props.items():
        held = any(c in name + value for c in "\x01\x02")
        assert (property_error(name, value) is not None) == held


@given(st.dictionaries(_ANY, _ANY, min_size=1, max_size=4))
def test_a_string_that_passes_the_check_loses_no_segment(props: dict[str, str]) -> None:
    """Joined without the writer's check, a string the broker accepts reads back as
    exactly its segments: none is cut or dropped silently (a pair with an empty side is
    dropped, as by every reader; Java writers send empty values)."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    if property_text_error(text) is None:
        pairs = [s.partition("\x01") for s in text.split("\x02") if s]
        names = {name for name, _, value in pairs if name and value}  # empty sides: dropped
        assert set(decode_properties(text.encode())) == names


@given(st.text(st.sampled_from("ab\x01\x02"), max_size=12))
def test_the_check_agrees_with_its_segment_by_segment_twin(text: str) -> None:
    assert property_text_error(text) == first_broken_pair(text)


def test_the_check_names_the_broken_pair() -> None:
    assert property_text_error("A\x011\x02B\x012") is None  # no final separator: fine
    assert property_text_error("A\x01\x02") is None  # empty value: dropped by readers, as ever
    problem = property_text_error("A\x011\x02b\x02")
    assert problem is not None and "pair 1 ('b')" in problem
    assert property_text_error("A\x011\x012\x02") is not None
    assert property_text_error("A\x011\x02\x02B\x012\x02") is not None


@given(st.lists(st.tuples(st.text(st.sampled_from("ab\x01\x02"), max_size=3),
                          st.text(st.sampled_from("ab \x01\x02"), min_size=0, max_size=700)),
                max_size=5))
def test_long_strings_of_few_pairs_agree_with_the_twin(pairs: list[tuple[str, str]]) -> None:
    """Long values (checked pair by pair) and short ones (one match) alike."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    assert property_text_error(text) == first_broken_pair(text)
    assert property_text_error(text + "x") == first_broken_pair(text + "x")


def _pair_by_pair(text: str) -> dict[str, str]:
    """The reader rules of the module docstring, spelled out one segment at a time."""
    out: dict[str, str] = {}
    for segment in text.split("\x02"):
        name, sep, value = segment.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


@settings(deadline=None, max_examples=400)
@given(st.text(st.sampled_from("ab\x01\x02"), max_size=16))
def test_parse_follows_the_reader_rules_for_any_text(text: str) -> None:
    # in order too: the broker stores what it parsed, encoded again
    assert list(parse_property_text(text).items()) == list(_pair_by_pair(text).items())


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_TEXT, _TEXT, max_size=6), st.booleans())
def test_parse_reads_what_writers_send(props: dict[str, str], last_separator: bool) -> None:
    text = encode_properties(props).decode()
    if not last_separator:
        text = text.removesuffix("\x02")
    assert parse_property_text(text) == props


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_ANY | _TEXT, st.sampled_from(["", "v"]) | _TEXT, max_size=6))
def test_property_text_is_the_encoding_before_utf8(props: dict[str, str]) -> None:
    assert property_text(props).encode() == encode_properties(props)


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(st.text(st.sampled_from("ab\x01"), max_size=3),
                       st.sampled_from([None, ""]) | st.text(st.sampled_from("ab\x01"), max_size=3),
                       max_size=5))
def test_property_text_writes_each_pair_but_the_empty_ones(props: dict[str, str | None]) -> None:
    """Whether or not some pair is skipped, the pairs written are those with a name and a
    value, in order."""
    assert property_text(props) == "".join(  # type: ignore[arg-type]
        f"{name}\x01{value}\x02" for name, value in props.items() if name and value)


def assert_check_then_general_parse(text: str) -> None:
    """The checked parse of ``text``: the check's own error, or the general parse's pairs
    in its order."""
    problem = property_text_error(text)
    got = parse_checked_property_text(text)
    if problem is not None:
        assert got == problem
    else:
        assert isinstance(got, dict)
        assert list(got.items()) == list(parse_property_text(text).items())


@settings(deadline=None, max_examples=600)
@given(st.text(st.sampled_from("ab\x01\x02"), max_size=16))
def test_the_checked_parse_is_the_check_then_the_general_parse(text: str) -> None:
    """Any text, empty sides, repeated names and broken segments included: the check's
    own error, or the general parse's pairs in its order."""
    assert_check_then_general_parse(text)


_LONG_VALUE = "7F000001000000000000000000000000 " * 80  # a trace message's KEYS, shortened


@settings(deadline=None, max_examples=600)
@given(st.text(st.sampled_from("ab\x01\x02"), max_size=12),
       st.text(st.sampled_from("ab\x01\x02"), max_size=12), st.sampled_from(["KEYS", "", "a"]))
def test_the_checked_parse_of_a_long_text_is_the_check_then_the_general_parse(
        head: str, tail: str, name: str) -> None:
    """A text long enough for the parse that finds its separators (a long value amid
    any pairs, broken ones too): the check's own error, or the general parse's pairs in
    its order."""
    text = f"{head}{name}\x01{_LONG_VALUE}\x02{tail}"
    assert_check_then_general_parse(text)


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_TEXT, _TEXT, max_size=40), st.booleans())
def test_the_checked_parse_of_a_long_text_reads_what_writers_send(
        props: dict[str, str], last_separator: bool) -> None:
    """Up to forty pairs around a long value: more than the separators are looked for
    by find."""
    props = {"KEYS": _LONG_VALUE, **props}
    text = encode_properties(props).decode()
    if not last_separator:
        text = text.removesuffix("\x02")
    assert parse_checked_property_text(text) == props


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_TEXT, _TEXT, max_size=6), st.booleans())
def test_the_checked_parse_reads_what_writers_send(props: dict[str, str],
                                                    last_separator: bool) -> None:
    text = encode_properties(props).decode()
    if not last_separator:
        text = text.removesuffix("\x02")
    assert parse_checked_property_text(text) == props


_NAMES = st.sampled_from(["a", "b", "INNER_NUM", "KEYS"]) | _ANY


@given(st.lists(st.tuples(_NAMES, st.sampled_from(["", "1", "v"]) | _ANY), max_size=6),
       st.booleans(), _NAMES)
def test_a_pair_cut_out_of_the_text_is_the_rest_encoded(pairs: list[tuple[str, str]],
                                                        last_separator: bool,
                                                        name: str) -> None:
    """Whenever text_without answers, it is property_text of the parsed pairs less
    ``name``; and it answers for every text a writer makes of distinct names (but the
    empty one)."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    if not last_separator:
        text = text.removesuffix("\x02")
    props = parse_property_text(text)
    cut = text_without(text, props, name)
    rest = dict(props)
    rest.pop(name, None)
    if cut is not None:
        assert cut == property_text(rest)
    elif (pairs and len({k for k, _ in pairs}) == len(pairs)
          and all(k and v and property_error(k, v) is None for k, v in pairs)):
        raise AssertionError(f"a writer's text not cut: {text!r}")


_STARTS = ("DELAY\x01", "TIMER_", "TRAN_MSG\x01")
_NAMES = st.sampled_from(["DELAY", "DELAYED", "TIMER_DELAY_SEC", "TRAN_MSG", "TRAN_MSGS",
                          "KEYS", "UNIQ_KEY", "WAIT", "XDELAY", "a"])
_VALUES = st.one_of(st.sampled_from(["DELAY", "TIMER_x", "TRAN_MSG", "true", ""]),
                    st.text(alphabet="0123456789ABCDEF ", max_size=3000))


@settings(max_examples=300)
@given(st.dictionaries(_NAMES, _VALUES, max_size=6))
def test_names_start_finds_every_name_and_long_texts_names_only(
        props: dict[str, str]) -> None:
    """A property whose name starts so is always found; in a long text with few pairs
    (a trace message's) a value holding the same text is not taken for a name."""
    props = {k: v for k, v in props.items() if v}
    text = property_text(props)
    named = any(k.startswith(("TIMER_",)) or k in ("DELAY", "TRAN_MSG") for k in props)
    found = names_start(text, _STARTS)
    if named:
        assert found
    elif len(text) >= 2048:
        assert not found
    else:  # a short text is searched whole: a value may count
        assert found == any(s in text for s in _STARTS)


def test_names_start_searches_a_long_text_of_many_pairs_whole() -> None:
    """Beyond the pairs it reads one by one, the whole text is searched: a name is never
    missed."""
    props = {f"p{i}": "x" * 60 for i in range(40)}
    props["DELAY"] = "3"
    text = property_text(props)
    assert len(text) >= 2048 and names_start(text, _STARTS)
    del props["DELAY"]
    assert not names_start(property_text(props), _STARTS)
