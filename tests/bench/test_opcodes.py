"""tidemq.bench.opcodes: opcode counts by key, only while on, only where the key says."""

from __future__ import annotations

import sys
import threading

from tidemq.bench.opcodes import OpcodeCount, function_name, thread_named


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def _counted(count: OpcodeCount, n: int) -> None:
    sys.settrace(count.trace)
    try:
        _work(n)
    finally:
        sys.settrace(None)


def test_counts_grow_with_the_work_and_only_while_on() -> None:
    count = OpcodeCount(function_name)
    _counted(count, 100)
    assert count.total() == 0  # off
    count.on = True
    _counted(count, 10)
    small = count.counts["test_opcodes.py:_work"]
    count.counts.clear()
    _counted(count, 1000)
    large = count.counts["test_opcodes.py:_work"]
    assert 0 < small < large
    assert large - small >= 990 * 3  # at least a few opcodes an iteration


def test_frames_whose_key_is_none_are_not_counted() -> None:
    count = OpcodeCount(thread_named("not-this-thread", function_name))
    count.on = True
    _counted(count, 100)
    assert count.total() == 0
    here = OpcodeCount(thread_named(threading.current_thread().name, function_name))
    here.on = True
    _counted(here, 100)
    assert here.counts["test_opcodes.py:_work"] > 100
