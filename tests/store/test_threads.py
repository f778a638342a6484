"""NamedThread: the kernel sees the thread's Python name (cut to 15 bytes)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tidemq.store.threads import NATIVE_NAME_BYTES, NamedThread, set_native_name

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def _native_name(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().rstrip("\n")


@linux_only
@pytest.mark.parametrize(("name", "seen"), [("tidemq-dispatch", "tidemq-dispatch"),
                                            ("tidemq-housekeep", "tidemq-housekee"),
                                            ("t", "t")])
def test_the_kernel_sees_the_name(name: str, seen: str) -> None:
    seen_by_kernel: list[str] = []
    ready = threading.Event()

    def body() -> None:
        seen_by_kernel.append(_native_name(threading.get_native_id()))
        ready.set()

    thread = NamedThread(target=body, name=name, daemon=True)
    thread.start()
    assert ready.wait(10)
    thread.join()
    assert seen_by_kernel == [seen] and len(seen.encode()) <= NATIVE_NAME_BYTES


@linux_only
def test_set_native_name_names_only_the_calling_thread() -> None:
    results: list[tuple[bool, str]] = []

    def body() -> None:
        ok = set_native_name("tidemq-probe")
        results.append((ok, _native_name(threading.get_native_id())))

    before = _native_name(threading.get_native_id())
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert results == [(True, "tidemq-probe")]
    assert _native_name(threading.get_native_id()) == before


def test_a_named_thread_still_runs_its_target_and_arguments() -> None:
    got: list[int] = []
    thread = NamedThread(target=got.append, args=(7,), name="tidemq-args")
    thread.start()
    thread.join()
    assert got == [7]
