"""Many keys looked up in one dict at once: the compiled ``dict_get_many`` answers as
its twin ``list(map(d.get, keys))`` does, for dicts of any size and kind, keys present
or not, of any type, and refuses what ``dict.get`` refuses."""

from __future__ import annotations

import string
import sys
import sysconfig
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.store import lookups
from tidemq.store.lookups import get_many, py_get_many, py_set_many, set_many

_NAMES = st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=30)
_KEYS = _NAMES | st.integers() | st.text(max_size=8) | st.tuples(st.integers(), _NAMES)


class _Str(str):
    """A str subclass with a hash of its own: looked up as ``dict.get`` looks it up."""

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)


def _both(d: dict[Any, Any], keys: list[Any]) -> list[Any]:
    expected = py_get_many(d, keys)
    assert expected == list(map(d.get, keys))
    assert get_many(d, keys) == expected
    assert get_many(d, tuple(keys)) == expected
    return expected


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(_NAMES, st.integers() | st.lists(st.integers(), max_size=3),
                       max_size=40),
       st.lists(_NAMES, max_size=40), st.integers(0, 3000))
def test_str_keys_answer_as_dict_get(small: dict[str, Any], asked: list[str],
                                     grown: int) -> None:
    """Names of a dict small or past the size at which the compiled lookups prefetch
    (``grown`` more entries), some held and some not, in windows of any length, some
    asked for twice; a few entries removed, so that the dict holds deleted slots."""
    d = dict(small)
    d.update((f"%LMQ%q{i:06d}", i) for i in range(grown))
    for i in range(0, grown, 7):
        del d[f"%LMQ%q{i:06d}"]
    keys = asked + [f"%LMQ%q{i:06d}" for i in range(0, grown + 5, max(grown // 20, 1))]
    keys += keys[:3]
    _both(d, keys)


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_KEYS, st.integers(), max_size=300), st.lists(_KEYS, max_size=40))
def test_keys_of_any_type_answer_as_dict_get(d: dict[Any, int], asked: list[Any]) -> None:
    _both(d, asked + list(d)[:20])


def test_a_str_subclass_key_hashes_as_its_class_says() -> None:
    d = {f"k{i}": i for i in range(2000)}
    d[_Str("odd")] = -1
    assert _both(d, ["k1", _Str("odd"), "odd", _Str("k5"), "k1999"]) == [1, -1, None, None,
                                                                          1999]


def test_unhashable_keys_are_refused_as_dict_get_refuses_them() -> None:
    d = {f"k{i}": i for i in range(2000)}
    with pytest.raises(TypeError, match="unhashable"):
        d.get([1])  # type: ignore[call-overload]
    keys: list[Any] = ["k1", [1], "k2"]
    with pytest.raises(TypeError, match="unhashable"):
        get_many(d, keys)
    with pytest.raises(TypeError, match="unhashable"):
        py_get_many(d, keys)


def test_the_compiled_lookups_refuse_what_is_not_a_dict() -> None:
    c = compiled()
    with pytest.raises(TypeError):
        c.dict_get_many({"a": 1}.items(), ["a"])
    with pytest.raises(TypeError):
        c.dict_get_many({"a": 1}, 5)


def test_the_compiled_lookups_are_used() -> None:
    """Where the C module is built the LMQ lookups take it; a silent fallback would hide
    a slower send path."""
    compiled()
    assert lookups.NATIVE_GET_MANY
    assert lookups.get_many is not lookups.py_get_many


def test_the_compiled_lookups_read_ahead_on_the_interpreters_whose_dicts_they_know() -> None:
    """CPython 3.11, 3.12 and 3.13 with the GIL share the dict layout the compiled
    lookups read: on them the read-ahead is built in (and the LMQ send path keeps its
    overlapped misses); on any other interpreter it is not."""
    c = compiled()
    known = (sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13)
             and not sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert bool(c.DICT_READ_AHEAD) is known
    assert lookups.READ_AHEAD is known


def _set_both(d: dict[Any, Any], keys: list[Any], values: list[Any]) -> dict[Any, Any]:
    """Store with the compiled function and with its twin into copies of ``d``; both
    leave what ``d.update(zip(keys, values))`` leaves, in the same order."""
    want = dict(d)
    want.update(zip(keys, values, strict=True))
    for store in (set_many, py_set_many):
        got = dict(d)
        assert store(got, keys, values) is None
        assert list(got.items()) == list(want.items())
    got = dict(d)
    set_many(got, tuple(keys), tuple(values))
    assert list(got.items()) == list(want.items())
    return want


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(_NAMES, st.integers() | st.lists(st.integers(), max_size=3),
                       max_size=40),
       st.lists(st.tuples(_NAMES, st.integers()), max_size=40), st.integers(0, 3000))
def test_str_keys_store_as_dict_update(small: dict[str, Any], stores: list[tuple[str, int]],
                                       grown: int) -> None:
    """Names new and held, some stored twice, into a dict small or past the size at
    which the compiled stores read ahead, holding deleted slots; values replaced are
    released (a dict of lists, whose items the stores replace)."""
    d = dict(small)
    d.update((f"%LMQ%q{i:06d}", [i]) for i in range(grown))
    for i in range(0, grown, 7):
        del d[f"%LMQ%q{i:06d}"]
    keys = [k for k, _v in stores]
    keys += [f"%LMQ%q{i:06d}" for i in range(0, grown + 5, max(grown // 20, 1))]
    keys += keys[:3]
    _set_both(d, keys, [*(v for _k, v in stores), *range(len(keys) - len(stores))])


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_KEYS, st.integers(), max_size=300),
       st.lists(st.tuples(_KEYS, st.integers()), max_size=40))
def test_keys_of_any_type_store_as_dict_update(d: dict[Any, int],
                                               stores: list[tuple[Any, int]]) -> None:
    _set_both(d, [k for k, _v in stores] + list(d)[:20],
              [v for _k, v in stores] + list(range(min(len(d), 20))))


def test_stores_refuse_what_dict_update_refuses() -> None:
    """An unhashable key stops the stores where ``update`` stops, the keys before it
    stored; keys and values of different lengths are refused before any store."""
    for store in (set_many, py_set_many):
        d = {f"k{i}": i for i in range(2000)}
        with pytest.raises(TypeError, match="unhashable"):
            store(d, ["k1", [1], "k2"], [-1, -2, -3])
        assert d["k1"] == -1 and d["k2"] == 2
        with pytest.raises(ValueError, match="2 keys but 1 values"):
            store(d, ["k3", "k4"], [0])
        assert d["k3"] == 3
    c = compiled()
    with pytest.raises(TypeError):
        c.dict_set_many({"a": 1}.items(), ["a"], [1])
    with pytest.raises(TypeError):
        c.dict_set_many({"a": 1}, 5, [1])


@settings(deadline=None, max_examples=200)
@given(st.dictionaries(_NAMES, st.integers(-(1 << 62), 1 << 62), max_size=40),
       st.lists(st.tuples(_NAMES, st.integers(-(1 << 62), 1 << 62)), max_size=40),
       st.integers(-3, 3), st.integers(0, 3000))
def test_values_plus_a_delta_store_as_dict_update_of_the_sums(
        small: dict[str, int], stores: list[tuple[str, int]], delta: int, grown: int) -> None:
    """A fan-out's next offsets: each value stored plus ``delta``, into a dict small or
    past the size at which the compiled stores read ahead."""
    d = dict(small)
    d.update((f"%LMQ%q{i:06d}", i) for i in range(grown))
    keys = [k for k, _v in stores] + [f"%LMQ%q{i:06d}" for i in range(0, grown, 97)]
    values = [v for _k, v in stores] + list(range(len(keys) - len(stores)))
    want = dict(d)
    want.update(zip(keys, [v + delta for v in values], strict=True))
    for store in (set_many, py_set_many):
        got = dict(d)
        assert store(got, keys, values, delta) is None
        assert list(got.items()) == list(want.items())
        assert values[: len(stores)] == [v for _k, v in stores]  # the values are not changed


def test_values_plus_a_delta_refuse_what_is_no_int_or_overflows() -> None:
    for store in (set_many, py_set_many):
        d = {"a": 1, "b": 2}
        with pytest.raises(TypeError, match="must be an int, not float"):
            store(d, ["a", "b"], [5, 2.5], 1)
        assert d == {"a": 6, "b": 2}  # stopped where the bad value is, as update stops
        with pytest.raises(OverflowError, match="overflows a 64-bit int"):
            store(d, ["a"], [(1 << 63) - 1], 1)
        assert d["a"] == 6
        store(d, ["a"], [2.5], 0)  # no delta: any value
        assert d["a"] == 2.5


def test_the_compiled_stores_are_used() -> None:
    compiled()
    assert lookups.NATIVE_SET_MANY
    assert lookups.set_many is not lookups.py_set_many


def test_a_str_subclass_key_stores_as_its_class_says() -> None:
    d: dict[Any, Any] = {f"k{i}": i for i in range(2000)}
    _set_both(d, ["k1", _Str("odd"), _Str("k5"), "k1999"], [1, 2, 3, 4])


class _Emptying:
    """A key that collides with a stored name and, compared with it, empties the list of
    keys being looked up and fills the freed memory with other names."""

    def __init__(self, keys: list[Any]) -> None:
        self.keys = keys
        self.junk: list[str] = []

    def __hash__(self) -> int:
        return hash("k1")

    def __eq__(self, other: object) -> bool:
        n = len(self.keys)
        self.keys.clear()
        self.junk = [f"x{i}" for i in range(n)]
        return False


@pytest.mark.parametrize("lookup", [get_many, py_get_many])
def test_the_keys_are_those_given_even_when_a_comparison_changes_their_list(
        lookup: Any) -> None:
    """A key's comparison runs Python code: what it does to the list of keys changes
    neither the lookups nor the memory they read (the compiled lookups once read a
    cleared list's freed items)."""
    d = {f"k{i}": i for i in range(1000)}
    keys: list[Any] = [None] + [f"k{i}" for i in range(2, 40)]
    keys[0] = _Emptying(keys)
    assert lookup(d, keys) == [None, *range(2, 40)]
