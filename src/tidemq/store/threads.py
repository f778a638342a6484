"""Threads the kernel knows by name.

Python 3.11 names a :class:`threading.Thread` only inside the interpreter: ``top -H``,
``ps -L``, ``perf`` and ``/proc/<pid>/task/<tid>/comm`` all show every thread of a
broker as ``python``. A :class:`NamedThread` gives its operating-system thread its Python
name as its first act (Linux ``prctl(PR_SET_NAME)``, at most 15 bytes: the kernel cuts
the rest), so an operator -- or ``tidemq bench`` -- can tell the flusher from the
dispatcher from the warmer that pre-faults commit-log pages. Elsewhere it is an ordinary
thread.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading

__all__ = ["NamedThread", "set_native_name"]

_PR_SET_NAME = 15
#: The kernel's limit (TASK_COMM_LEN 16, with the terminating NUL).
NATIVE_NAME_BYTES = 15


@functools.cache
def _prctl() -> ctypes._NamedFuncPointer | None:
    """libc's ``prctl``, from the symbols the interpreter already has loaded.

    Not ``ctypes.util.find_library``: it runs ``ldconfig -p`` in a child process, and a
    child forked while the store is open holds a copy of the store lock's file
    description until it execs -- long enough, on a busy machine, for the lock to
    outlive a store process killed with -9.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_native_name(name: str) -> bool:
    """Name the calling thread for the kernel (cut to 15 bytes); ``False`` where that is
    not possible. Never raises: a name is a convenience, not a duty."""
    prctl = _prctl()
    if prctl is None:
        return False
    raw = name.encode("utf-8", "replace")[:NATIVE_NAME_BYTES]
    return int(prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)) == 0


class NamedThread(threading.Thread):
    """A :class:`threading.Thread` whose operating-system thread carries its name."""

    def run(self) -> None:
        set_native_name(self.name)
        super().run()
