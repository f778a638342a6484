"""A round's LMQ entries as one run per queue: the compiled ``lmq_fanout_runs`` gives what
its numpy twin gives, and both what one key per entry, grouped by hand, gives."""

from __future__ import annotations

import string
import struct
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.native import compiled

from tidemq.store import lmq_fanout
from tidemq.store.lmq_fanout import Runs, fanout_runs, py_fanout_runs
from tidemq.store.lmq_store import entry_prefix

_Q = struct.Struct(">q")
_NAMES = (st.sampled_from(["%LMQ%a", "%LMQ%ab", "%LMQ%b", "%LMQ%\u00e9", "%LMQ%a\u00e9"])
          | st.text(string.ascii_letters + string.digits + "%_|-", min_size=1, max_size=12)
          | st.text(min_size=1, max_size=4).filter(
              lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)))
_OFFSETS = st.integers(0, 40) | st.integers(-2**63, 2**63 - 1)


def by_hand(names: list[list[str]], offsets: list[list[int]], values: bytes) -> Runs:
    """The reference: entries grouped per queue in log order, queues in key order, a run
    broken where the next offset is not the last one + 1 (as 64-bit integers wrap)."""
    width = len(values) // len(names) if names else 0
    per_queue: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
    for i, (queue_names, queue_offsets) in enumerate(zip(names, offsets, strict=True)):
        for name, offset in zip(queue_names, queue_offsets, strict=True):
            per_queue[name].append((offset, values[i * width:(i + 1) * width]))
    keys, runs, present, firsts, lasts, total = [], [], [], [], [], 0
    for name in sorted(per_queue, key=str.encode):
        entries = per_queue[name]
        present.append(name)
        firsts.append(entries[0][0])
        lasts.append(entries[-1][0])
        total += len(entries)
        run_start = 0
        for k in range(1, len(entries) + 1):
            if k == len(entries) or (entries[k][0] - entries[k - 1][0]) % 2**64 != 1:
                keys.append(entry_prefix(name.encode()) + _Q.pack(entries[run_start][0]))
                runs.append(b"".join(v for _, v in entries[run_start:k]))
                run_start = k
    return keys, runs, present, firsts, lasts, total


@settings(deadline=None, max_examples=400)
@given(st.lists(st.lists(st.tuples(_NAMES, _OFFSETS), max_size=6), max_size=20),
       st.integers(1, 9), st.booleans())
def test_runs_are_the_entries_grouped_per_queue(records: list[list[tuple[str, int]]],
                                                width: int, tuples: bool) -> None:
    """Repeated names (in a record and across records), names that prefix one another,
    offsets that skip, repeat, go back and wrap."""
    names = [[n for n, _ in r] for r in records]
    offsets = [[o for _, o in r] for r in records]
    values = bytes(range(256)) * (len(records) * width // 256 + 1)
    values = values[:len(records) * width]
    expected = by_hand(names, offsets, values)
    assert py_fanout_runs(names, offsets, values) == expected
    assert fanout_runs(names, offsets, values) == expected
    if tuples:
        assert compiled().lmq_fanout_runs(tuple(map(tuple, names)),
                                          tuple(map(tuple, offsets)), values) == expected


def test_a_round_of_consecutive_offsets_is_a_run_per_queue() -> None:
    names = [["%LMQ%b", "%LMQ%a"], ["%LMQ%a"], ["%LMQ%a", "%LMQ%b"]]
    offsets = [[0, 4], [5], [6, 1]]
    for build in (py_fanout_runs, fanout_runs):
        keys, runs, present, firsts, lasts, total = build(names, offsets, b"xxyyzz")
        assert keys == [b"E%LMQ%a\x00" + _Q.pack(4), b"E%LMQ%b\x00" + _Q.pack(0)]
        assert runs == [b"xxyyzz", b"xxzz"]
        assert (present, firsts, lasts, total) == (["%LMQ%a", "%LMQ%b"], [4, 0], [6, 1], 5)


def test_what_does_not_pair_up_is_refused() -> None:
    for build in (py_fanout_runs, fanout_runs):
        with pytest.raises(ValueError, match="2 LMQ names but 1 offsets"):
            build([["%LMQ%a", "%LMQ%b"]], [[0]], b"x")
        with pytest.raises(ValueError, match="1 records' LMQ names but 2 records' offsets"):
            build([["%LMQ%a"]], [[0], [1]], b"xx")
        with pytest.raises(ValueError, match="3 bytes of values for 2 records"):
            build([["%LMQ%a"], ["%LMQ%a"]], [[0], [1]], b"xxx")
        assert build([], [], b"") == ([], [], [], [], [], 0)
        assert build([[], []], [[], []], b"xy") == ([], [], [], [], [], 0)


def test_the_compiled_runs_refuse_what_is_not_a_name_or_an_offset() -> None:
    c = compiled()
    with pytest.raises(TypeError):
        c.lmq_fanout_runs([[b"%LMQ%a"]], [[0]], b"x")
    with pytest.raises(TypeError):
        c.lmq_fanout_runs([["%LMQ%a"]], [["0"]], b"x")
    with pytest.raises(TypeError):
        c.lmq_fanout_runs([1], [[0]], b"x")
    with pytest.raises(OverflowError):
        c.lmq_fanout_runs([["%LMQ%a"]], [[2**63]], b"x")
    with pytest.raises(UnicodeEncodeError):
        c.lmq_fanout_runs([["%LMQ%\ud800"]], [[0]], b"x")


def test_the_compiled_runs_are_used() -> None:
    """Where the C module is built the dispatcher takes it; a silent fallback would hide
    a slower dispatcher."""
    compiled()
    assert lmq_fanout.NATIVE_FANOUT_RUNS
    assert lmq_fanout.fanout_runs is not lmq_fanout.py_fanout_runs
