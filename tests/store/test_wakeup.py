"""Wakeup: the dispatch thread's flag, with threading.Event's behaviour."""

from __future__ import annotations

import threading

from tidemq.store.wakeup import Wakeup


def test_a_set_flag_stays_set_until_cleared() -> None:
    flag = Wakeup()
    assert not flag.is_set()
    assert not flag.wait(0)
    flag.set()
    flag.set()  # setting twice is no error
    assert flag.is_set()
    assert flag.wait(0) and flag.wait(0.01) and flag.wait(None)
    flag.clear()
    flag.clear()
    assert not flag.is_set()
    assert not flag.wait(0)
    assert not flag.wait(-1.0)  # a negative timeout does not wait, as Event's


def test_a_set_from_another_thread_wakes_the_waiter() -> None:
    flag, waiting, done = Wakeup(), threading.Event(), threading.Event()
    woken: list[bool] = []

    def sleeper() -> None:
        waiting.set()
        woken.append(flag.wait(60))
        done.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    assert waiting.wait(60)
    flag.set()
    assert done.wait(60)
    thread.join(60)
    assert woken == [True]
    assert flag.is_set()


def test_a_wait_times_out_without_a_set() -> None:
    flag = Wakeup()
    assert flag.wait(0.01) is False
    assert not flag.is_set()


def test_every_waiter_wakes() -> None:
    flag = Wakeup()
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(flag.wait(60)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    flag.set()
    for thread in threads:
        thread.join(60)
    assert results == [True] * 4


class _SetDuringWait:
    """The flag's lock, with another thread's ``set`` landing between a waiter's
    ``acquire`` and its ``release``: the interleaving a busy machine produces."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.raced = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got and not self.raced:
            self.raced = True
            self._lock.release()  # Wakeup.set() from the appender's thread
        return got

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


def test_a_set_between_a_waiters_acquire_and_release_is_no_error() -> None:
    flag = Wakeup()
    flag.set()
    racing = _SetDuringWait(flag._clear)
    flag._clear = racing  # type: ignore[assignment]
    assert flag.wait(0) is True
    assert racing.raced
    assert flag.is_set()
    flag.clear()
    assert not flag.is_set()

