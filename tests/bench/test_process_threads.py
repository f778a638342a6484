"""thread_cpu_seconds: CPU per named thread of a live process, read from /proc."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tidemq.bench.process import MAIN_THREAD, thread_cpu_seconds
from tidemq.store.threads import NamedThread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_thread_is_listed_by_name_while_it_lives() -> None:
    stop, running = threading.Event(), threading.Event()

    def wait() -> None:
        running.set()  # the name is set before the target runs
        stop.wait()

    thread = NamedThread(target=wait, name="tidemq-waiter", daemon=True)
    thread.start()
    try:
        assert running.wait(10)
        alive = thread_cpu_seconds(os.getpid())
    finally:
        stop.set()
        thread.join()
    assert "tidemq-waiter" in alive and MAIN_THREAD in alive
    assert all(u >= 0 and s >= 0 for u, s in alive.values())
    assert "tidemq-waiter" not in thread_cpu_seconds(os.getpid())


def test_live_spinner_accumulates_cpu() -> None:
    stop = threading.Event()
    thread = NamedThread(target=lambda: [sum(range(1000)) for _ in iter(stop.is_set, True)],
                         name="tidemq-live", daemon=True)
    thread.start()
    try:
        first = thread_cpu_seconds(os.getpid()).get("tidemq-live", (0.0, 0.0))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = thread_cpu_seconds(os.getpid()).get("tidemq-live", (0.0, 0.0))
            if sum(now) > sum(first):
                break
            time.sleep(0.02)
        assert sum(now) > sum(first)
    finally:
        stop.set()
        thread.join()


def test_a_missing_process_has_no_threads() -> None:
    assert thread_cpu_seconds(2**22 + 12345) == {}
