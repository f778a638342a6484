"""thread_cpu_seconds: CPU per named thread of a live process, read from /proc;
thread_cpu_split: two readings as CPU per message, user and kernel time apart."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tidemq.bench.process import MAIN_THREAD, thread_cpu_seconds, thread_cpu_split
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
    # join() returns once the thread's Python part is done; the OS thread leaves the
    # process's task list a moment later
    deadline = time.monotonic() + 10
    while "tidemq-waiter" in thread_cpu_seconds(os.getpid()):
        assert time.monotonic() < deadline, "the thread was still listed 10 s after join"
        time.sleep(0.01)


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


def test_split_per_message_keeps_user_and_kernel_apart() -> None:
    before = {MAIN_THREAD: (1.0, 0.5), "tidemq-dispatch": (0.2, 0.1), "gone": (5.0, 5.0)}
    after = {MAIN_THREAD: (1.6, 0.6), "tidemq-dispatch": (0.3, 0.1),
             "tidemq-quiet": (0.001, 0.0), "tidemq-new": (0.0, 0.2)}
    split = thread_cpu_split(before, after, seconds=2.0, msgs=1000)
    # all threads alive at the end: 0.6 + 0.1 + 0.001 user, 0.1 + 0.2 kernel seconds
    assert split["user_ns_per_msg"] == pytest.approx(0.701e6)
    assert split["sys_ns_per_msg"] == pytest.approx(0.3e6)
    rows = {t["thread"]: t for t in split["threads"]}
    assert list(rows) == [MAIN_THREAD, "tidemq-new", "tidemq-dispatch"]  # busiest first
    main = rows[MAIN_THREAD]
    assert main["cpu_pct"] == pytest.approx(35.0) and main["sys_pct"] == pytest.approx(5.0)
    assert main["user_ns_per_msg"] == pytest.approx(0.6e6)
    assert main["sys_ns_per_msg"] == pytest.approx(0.1e6)
    assert main["ns_per_msg"] == pytest.approx(0.7e6)
    assert rows["tidemq-new"]["user_ns_per_msg"] == 0.0


def test_split_of_no_messages_divides_by_one() -> None:
    split = thread_cpu_split({}, {MAIN_THREAD: (0.5, 0.0)}, seconds=1.0, msgs=0)
    assert split["user_ns_per_msg"] == pytest.approx(0.5e9)
