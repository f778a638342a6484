"""Counting the Python bytecodes that threads execute, for the floor scripts in
``benchmarks/``: load-independent figures of work, where the wall clock and CPU time move
with the machine's load.

:class:`OpcodeCount` is a trace function (install it with ``threading.settrace`` before
the threads to count start, and ``sys.settrace`` for the current one) that counts opcode
events by a key its caller derives from each new frame -- a thread's name, a function's
-- while :attr:`OpcodeCount.on` is true. Frames whose key is ``None`` are not traced.
"""

from __future__ import annotations

import collections
import threading
import types
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["OpcodeCount", "function_name", "thread_named"]


def function_name(frame: types.FrameType) -> str:
    """``file.py:function`` of ``frame``'s code."""
    code = frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"


def thread_named(name: str, key: Callable[[types.FrameType], Hashable]
                 ) -> Callable[[types.FrameType], Hashable | None]:
    """``key`` in the thread called ``name``, ``None`` (not traced) elsewhere."""
    def keyed(frame: types.FrameType) -> Hashable | None:
        return key(frame) if threading.current_thread().name == name else None
    return keyed


class OpcodeCount:
    """Opcodes executed while :attr:`on`, by ``key(frame)`` of the frame executing them."""

    def __init__(self, key: Callable[[types.FrameType], Hashable | None]) -> None:
        self.key = key
        self.on = False
        self.counts: collections.Counter[Hashable] = collections.Counter()

    def total(self) -> int:
        return sum(self.counts.values())

    def trace(self, frame: types.FrameType, _event: str, _arg: Any) -> Any:
        key = self.key(frame)
        if key is None:
            return None
        counts = self.counts

        def local(_frame: types.FrameType, event: str, _arg: Any) -> Any:
            if event == "opcode" and self.on:
                counts[key] += 1
            return local

        # The frame's tracer first: from Python 3.12, asking for opcode events turns them
        # on only for a frame that has one, and the tracer returned here comes too late.
        frame.f_trace = local
        frame.f_trace_opcodes = True
        return local
