"""Dispatch hooks: they fire with the new max offset once the entries are readable."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import GetStatus

from .conftest import OpenStore, msg, small_config


def test_hook_sees_readable_entries(open_store: OpenStore) -> None:
    store = open_store()
    seen: list[tuple[str, int, int, GetStatus, int]] = []
    done = threading.Event()

    def hook(topic: str, queue_id: int, new_max: int) -> None:
        last = store.get(topic, queue_id, new_max - 1)
        seen.append((topic, queue_id, new_max, last.status, store.max_offset(topic, queue_id)))
        if (topic, queue_id, new_max) == ("T", 0, 4):
            done.set()

    store.add_dispatch_hook(hook)
    store.put("T", 1, msg(b"other"))
    store.put("T", 0, msg(b"a"))
    store.put_batch("T", 0, [msg(b"b"), msg(b"c"), msg(b"d")])
    assert done.wait(10)
    assert all(status is GetStatus.FOUND for *_, status, _ in seen)
    assert all(visible >= new_max for _, _, new_max, _, visible in seen)
    assert ("T", 1, 1) in [s[:3] for s in seen]
    maxima = [new_max for topic, q, new_max, *_ in seen if (topic, q) == ("T", 0)]
    assert maxima == sorted(maxima) and maxima[-1] == 4


def test_hook_registered_before_start_and_failing_hook(store_root: Path) -> None:
    store = MessageStore(small_config(store_root))
    calls: list[int] = []
    done = threading.Event()

    def broken(topic: str, queue_id: int, new_max: int) -> None:
        raise RuntimeError("a broken hook must not stop dispatch")

    def good(topic: str, queue_id: int, new_max: int) -> None:
        calls.append(new_max)
        if new_max == 2:
            done.set()

    store.add_dispatch_hook(broken)
    store.add_dispatch_hook(good)
    store.start()
    try:
        store.put("T", 0, msg(b"1"))
        assert store.wait_dispatched()
        store.put("T", 0, msg(b"2"))
        assert done.wait(10)
        assert calls == [1, 2]
        assert store.status == "RUNNING"
    finally:
        store.shutdown()


@pytest.mark.parametrize("concurrent", [False, True])
def test_round_hook_gets_every_queue_a_round_moved(store_root: Path, concurrent: bool) -> None:
    """A round hook is called once a round with every queue the round moved (LMQs
    included) and its new max offset, already readable; a broken one stops nothing."""
    store = MessageStore(small_config(store_root, enable_lmq=True, enable_multi_dispatch=True,
                                      enable_build_consume_queue_concurrently=concurrent))
    rounds: list[dict[tuple[str, int], int]] = []
    readable: list[bool] = []
    done = threading.Event()

    def broken(touched: object) -> None:
        raise RuntimeError("a broken round hook must not stop dispatch")

    def hook(touched: Mapping[tuple[str, int], int]) -> None:
        rounds.append(dict(touched))
        readable.append(all(store.max_offset(t, q) >= m for (t, q), m in touched.items()))
        if touched.get(("%LMQ%b", 0)) == 2:
            done.set()

    store.add_dispatch_round_hook(broken)
    store.start()
    try:
        store.add_dispatch_round_hook(hook)  # also after the start
        store.dispatcher.pause()  # type: ignore[union-attr]
        store.put("T", 1, msg(b"other"))
        names = ["%LMQ%a", "%LMQ%b"]
        store.put_multi_dispatch("P", 0, MessageInput(b"x", _fan_out(names)), names)
        store.put_batch_multi_dispatch("P", 0, [MessageInput(b"y", _fan_out(["%LMQ%b"]))],
                                       [["%LMQ%b"]])
        store.dispatcher.resume()  # type: ignore[union-attr]
        assert done.wait(10)
        moved: dict[tuple[str, int], int] = {}
        for touched in rounds:
            moved.update(touched)
        assert moved == {("T", 1): 1, ("P", 0): 2, ("%LMQ%a", 0): 1, ("%LMQ%b", 0): 2}
        assert all(readable)
        assert store.status == "RUNNING"
    finally:
        store.shutdown()


def _fan_out(names: list[str]) -> bytes:
    return b"INNER_MULTI_DISPATCH\x01" + ",".join(names).encode() + b"\x02"


@pytest.mark.parametrize("concurrent", [False, True])
def test_a_put_is_dispatched_on_the_append_without_waiting_to_fill(
        store_root: Path, concurrent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default configuration the dispatcher is woken by the append and takes
    the round as it is: it never sleeps to let a small round fill (a linger adds its
    length, and a sleep's scheduling delay, to every message's dispatch lag)."""
    sleeps: list[float] = []
    real_sleep = time.sleep

    def recorded(seconds: float) -> None:
        if threading.current_thread().name == "tidemq-dispatch":
            sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recorded)
    store = MessageStore(small_config(
        store_root, enable_build_consume_queue_concurrently=concurrent))
    store.start()
    try:
        for i in range(20):
            store.put("T", 0, msg(b"%d" % i))
            assert store.wait_dispatched()
            assert store.max_offset("T", 0) == i + 1
    finally:
        store.shutdown()
    assert sleeps == []
