"""Java ``.properties`` parsing and binding to config dataclasses."""

from __future__ import annotations

import dataclasses
import enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import (
    MASK,
    bind,
    camel,
    config_keys,
    describe,
    env_values,
    parse_properties,
    primary_keys,
    properties_text,
    shown_key,
    stray_env,
)


def test_syntax() -> None:
    text = "\n".join([
        "# a comment",
        "! another comment",
        "",
        "brokerName = broker-a",
        "listenPort:10911",
        "storePathRootDir /data/store",
        "namesrvAddr\t=\t127.0.0.1:9876;127.0.0.2:9876",
        "deleteWhen = 04;\\",
        "    16",
        "escaped = tab\\there\\nnewline \\\\ backslash",
        "empty =",
        "bare",
        "  indented.key = value  ",
        "brokerName = broker-b",
    ])
    assert parse_properties(text) == {
        "brokerName": "broker-b",  # the last definition wins
        "listenPort": "10911",
        "storePathRootDir": "/data/store",
        "namesrvAddr": "127.0.0.1:9876;127.0.0.2:9876",
        "deleteWhen": "04;16",
        "escaped": "tab\there\nnewline \\ backslash",
        "empty": "",
        "bare": "",
        "indented.key": "value",
    }


def test_line_endings_and_trailing_continuation() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}
    assert parse_properties("a=x\\") == {"a": "x"}
    # Only \n and \r end lines; other Unicode line breaks are part of the value.
    assert parse_properties("a=x\x85y\u2028z\n") == {"a": "x\x85y\u2028z"}


def test_escapes_follow_java() -> None:
    text = "\n".join([
        "key\\=with\\:seps\\ and\\ spaces = v",   # escaped separators stay in the key
        "odd = a\\\\\\",                          # \\ then a continuation
        "  b",
        "even = a\\\\",                           # an escaped backslash, no continuation
        "uni = caf\\u00e9 \\u4e2d",               # \\uXXXX escapes
        "lead = \\ x",                            # an escaped leading space is kept
        "trail = x\\ ",                           # so is an escaped trailing space
        "# comment = 1",
    ])
    assert parse_properties(text) == {
        "key=with:seps and spaces": "v",
        "odd": "a\\b",
        "even": "a\\",
        "uni": "caf\u00e9 \u4e2d",
        "lead": " x",
        "trail": "x ",
    }


def test_camel() -> None:
    assert camel("flush_disk_type") == "flushDiskType"
    assert camel("enable_lmq") == "enableLmq"
    assert camel("x") == "x"


class Mode(enum.Enum):
    FAST = "FAST"
    SAFE = "SAFE"


@dataclasses.dataclass(frozen=True)
class Sample:
    listen_port: int = 10911
    enable_lmq: bool = False
    ratio: float = 0.5
    mode: Mode = Mode.FAST
    name: str = "x"
    check_crc: bool = dataclasses.field(default=True, metadata={"key": "checkCRC"})


def test_bind() -> None:
    obj, unknown = bind(Sample, {"listenPort": "9999", "enableLmq": "yes", "ratio": "0.75",
                                 "mode": "SAFE", "name": "n", "bogus": "1", "otherKey": "2"})
    assert obj == Sample(9999, True, 0.75, Mode.SAFE, "n")
    assert unknown == ["bogus", "otherKey"]
    obj2, unknown2 = bind(Sample, {"listen_port": 1, "enable_lmq": "false", "checkCRC": "no",
                                   "checkCrc": "no"}, base=obj)
    assert obj2 == Sample(1, False, 0.75, Mode.SAFE, "n", False)
    assert unknown2 == ["checkCrc"]  # the metadata key replaces the camelCase one
    assert config_keys(Sample)["listenPort"] == "listen_port"
    assert config_keys(Sample)["checkCRC"] == "check_crc"


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("listenPort", "ten", "an integer"),
    ("enableLmq", "maybe", "true or false"),
    ("ratio", "half", "a number"),
    ("mode", "TURBO", "one of FAST, SAFE"),
])
def test_bad_values_name_the_key_and_what_it_takes(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        bind(Sample, {key: value})
    assert info.value.key == key
    assert f"bad value {value!r} for {key}: expected {expected}" in str(info.value)


def test_a_comment_after_a_value_is_named_as_the_cause() -> None:
    # .properties has no end-of-line comments: the text after the value is part of it
    values = parse_properties("enableLmq=true      # the light message queues\n")
    with pytest.raises(ConfigError) as info:
        bind(Sample, values)
    assert info.value.key == "enableLmq"
    assert "a '#' comment belongs on a line of its own" in str(info.value)
    with pytest.raises(ConfigError) as plain:
        bind(Sample, {"enableLmq": "maybe"})
    assert "comment" not in str(plain.value)


# ---------------------------------------------------------------- round trip through a writer

_KEY_ESCAPES = {"\\": "\\\\", " ": "\\ ", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f",
                "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def escape(text: str, *, key: bool) -> str:
    """Escape like ``java.util.Properties.store`` (UTF-8 output, so no \\u escapes)."""
    out = []
    for i, ch in enumerate(text):
        if ch == " " and not key and i > 0:
            out.append(ch)  # only a leading space of a value needs escaping
        else:
            out.append(_KEY_ESCAPES.get(ch, ch))
    return "".join(out)


def write_properties(props: dict[str, str], splits: list[int]) -> str:
    lines = ["# written by the test"]
    for n, (k, v) in enumerate(props.items()):
        value = escape(v, key=False)
        cut = splits[n % len(splits)] if splits else 0
        # Continue a line between whole escapes and not before a space, as a writer would.
        if 0 < cut < len(value) and value[cut - 1] != "\\" and value[cut] not in " \t\f":
            value = value[:cut] + "\\\n    " + value[cut:]
        lines.append(f"{escape(k, key=True)}={value}")
    return "\n".join(lines) + "\n"


# Java splits lines on \n and \r only and trims ' ', \t and \f; keep other whitespace out of
# the ends of values, where the reader trims (documented).
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
keys = _text.filter(lambda s: s != "")
values = _text.filter(lambda s: s == s.rstrip(" \t\f"))


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(keys, values, max_size=8), st.lists(st.integers(0, 40), max_size=4))
def test_round_trip(props: dict[str, str], splits: list[int]) -> None:
    assert parse_properties(write_properties(props, splits)) == props


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(keys, values, max_size=8))
def test_properties_text_reads_back(props: dict[str, str]) -> None:
    assert parse_properties(properties_text(props)) == props


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(keys, _text, max_size=8))
def test_properties_text_keeps_trailing_spaces(props: dict[str, str]) -> None:
    """The writer escapes what the reader would trim: any value reads back whole."""
    assert parse_properties(properties_text(props)) == props


def test_trailing_spaces_of_a_value_are_escaped() -> None:
    assert properties_text({"k": "a b  "}) == "k=a b\\ \\ \n"
    assert parse_properties(properties_text({"k": " "})) == {"k": " "}


@dataclasses.dataclass(frozen=True)
class Aliased:
    acting: bool = dataclasses.field(default=False, metadata={"aliases": ("enableActing",)})
    scan: int = dataclasses.field(default=5, metadata={"key": "scanInterval",
                                                      "aliases": ("scanOld", "scanOther")})


def test_an_alias_binds_to_its_field_and_is_not_shown() -> None:
    obj, unknown = bind(Aliased, {"enableActing": "true", "scanOther": "9"})
    assert obj == Aliased(acting=True, scan=9) and unknown == []
    assert config_keys(Aliased) == {"acting": "acting", "scanInterval": "scan",
                                    "enableActing": "acting", "scanOld": "scan",
                                    "scanOther": "scan"}
    assert primary_keys(Aliased) == {"acting": "acting", "scanInterval": "scan"}
    assert describe(Aliased, obj) == {"acting": "true", "scanInterval": "9"}
    assert [shown_key(Aliased, k) for k in ("scanOld", "scanInterval", "scan", "enableActing",
                                            "nothing")] == [
        "scanInterval", "scanInterval", "scanInterval", "acting", "nothing"]
    assert env_values(Aliased, {"TIDEMQ_ENABLE_ACTING": "1"}) == {"enableActing": "1"}


def test_describe_shows_every_key_and_masks_secrets() -> None:
    @dataclasses.dataclass(frozen=True)
    class Conf:
        listen_port: int = 1
        use_it: bool = False
        kind: Mode = Mode.SAFE
        password: str = dataclasses.field(default="", repr=False)
        token: str = dataclasses.field(default="", repr=False)

    shown = describe(Conf, Conf(password="hunter2"))
    assert shown == {"listenPort": "1", "useIt": "false", "kind": "SAFE", "password": MASK,
                     "token": ""}
    assert "hunter2" not in properties_text(shown)


@given(st.sampled_from([*sorted(config_keys(Aliased)), "acting", "scan"]),
       st.booleans(), st.booleans())
def test_a_variable_env_values_reads_is_never_stray(key: str, upper: bool,
                                                    underscores: bool) -> None:
    name = "_".join(key) if underscores else key
    var = "TIDEMQ_" + (name.upper() if upper else name)
    assert env_values(Aliased, {var: "1"}) != {}
    assert stray_env([Aliased], {var: "1"}) == {}


def test_a_stray_variable_is_named_with_the_key_it_is_closest_to() -> None:
    env = {"TIDEMQ_SCANINTERVALL": "1", "TIDEMQ_ENABLEACTNG": "1", "TIDEMQ_ZZZ": "1",
           "TIDEMQ_OURS": "1", "OTHER_SCANINTERVALL": "1", "TIDEMQ_SCAN_OLD": "1"}
    assert stray_env([Aliased], env, other={"TIDEMQ_OURS"}) == {
        "TIDEMQ_ENABLEACTNG": "enableActing", "TIDEMQ_SCANINTERVALL": "scanInterval",
        "TIDEMQ_ZZZ": None}
