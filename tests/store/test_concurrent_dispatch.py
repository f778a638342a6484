"""Concurrent dispatch (``enableBuildConsumeQueueConcurrently``): in-order visibility under
randomized preparation delays, the serial/concurrent contract, and the dispatch-lag metric.

The stress scenario writes, from several producer threads, to 64 classic queues (single
puts, batches, LMQ fan-out) and to a BatchCQ topic (inner batches and plain batches), with
every message keyed; a reader thread pulls every queue while they run. The same checks
run under both dispatchers (a contract suite), and the concurrent one runs with
:meth:`ConcurrentDispatcher._prepare` slowed by a random 0-5 ms, so rounds finish
preparing out of order.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store import dispatch
from tidemq.store.batch_consume_queue import BatchConsumeQueue
from tidemq.store.concurrent_dispatch import SERIAL_BELOW, ConcurrentDispatcher
from tidemq.store.consume_queue import ConsumeQueue
from tidemq.store.dispatch import DispatchBatch, Dispatcher
from tidemq.store.flush import FlushStatus
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.types import FlushDiskType, GetStatus

from .conftest import FakeClock, records, small_config

CLASSIC = "Classic"
CLASSIC_QUEUES = 64
BATCH = "Batched"
BATCH_QUEUES = 4
LMQS = [f"%LMQ%dev{i}" for i in range(24)]
#: "pipelined" is the concurrent dispatcher without its inline path (a round committed
#: on the builder thread when nothing is in flight): every round crosses the ring.
DISPATCHERS = ["serial", "concurrent", "pipelined"]

QueueKey = tuple[str, int]


# ---------------------------------------------------------------------- the workload


def key_of(mid: int) -> str:
    return f"K{mid:09d}"


def body_of(mid: int) -> bytes:
    return f"{mid:09d}:".encode() + bytes([mid % 251]) * (mid % 97)


def message(mid: int, lmqs: tuple[str, ...] = ()) -> MessageInput:
    tags = f"t{mid % 5}"
    props = {"TAGS": tags, "UNIQ_KEY": key_of(mid)}
    if lmqs:
        props["INNER_MULTI_DISPATCH"] = ",".join(lmqs)
    return MessageInput(body_of(mid), encode_properties(props), tags_code=tags_code(tags),
                        keys=(key_of(mid),))


@dataclass
class Sent:
    """What the producers wrote: ids per queue (classic, BatchCQ) and per LMQ."""

    ids: set[int] = field(default_factory=set)
    per_lmq: dict[str, set[int]] = field(default_factory=dict)
    inner: dict[int, int] = field(default_factory=dict)  # id -> messages in its inner batch


def produce(store: MessageStore, rng: random.Random, first_id: int, count: int,
            sent: Sent, lock: threading.Lock) -> None:
    """``count`` ids from ``first_id`` in a random mix of every kind of put."""
    mid, end = first_id, first_id + count
    while mid < end:
        kind = rng.random()
        if kind < 0.35:
            store.put(CLASSIC, rng.randrange(CLASSIC_QUEUES), message(mid))
            ids = [mid]
        elif kind < 0.55:
            n = min(rng.randint(2, 9), end - mid)
            ids = list(range(mid, mid + n))
            store.put_batch(CLASSIC, rng.randrange(CLASSIC_QUEUES), [message(i) for i in ids])
        elif kind < 0.68:  # a batch whose messages fan out (or not) each on their own
            n = min(rng.randint(1, 6), end - mid)
            ids = list(range(mid, mid + n))
            targets = [tuple(rng.sample(LMQS, rng.randint(0, 3))) for _ in ids]
            msgs = [message(i, t) for i, t in zip(ids, targets, strict=True)]
            store.put_batch_multi_dispatch(CLASSIC, rng.randrange(CLASSIC_QUEUES), msgs,
                                           targets)
            with lock:
                for i, names in zip(ids, targets, strict=True):
                    for name in names:
                        sent.per_lmq.setdefault(name, set()).add(i)
        elif kind < 0.8:
            lmqs = tuple(rng.sample(LMQS, rng.randint(1, 4)))
            store.put_multi_dispatch(CLASSIC, rng.randrange(CLASSIC_QUEUES),
                                     message(mid, lmqs), lmqs)
            ids = [mid]
            with lock:
                for name in lmqs:
                    sent.per_lmq.setdefault(name, set()).add(mid)
        elif kind < 0.92:
            inner = rng.randint(1, 6)
            props = encode_properties({"UNIQ_KEY": key_of(mid)})
            store.put_inner_batch(BATCH, rng.randrange(BATCH_QUEUES), body_of(mid), props,
                                  inner, tags_code=7, keys=(key_of(mid),))
            ids = [mid]
            with lock:
                sent.inner[mid] = inner
        else:
            n = min(rng.randint(1, 4), end - mid)
            ids = list(range(mid, mid + n))
            store.put_batch(BATCH, rng.randrange(BATCH_QUEUES), [message(i) for i in ids])
        with lock:
            sent.ids.update(ids)
        mid += len(ids)


def open_store(root: Path, dispatcher: str, clock: Callable[[], int] | None = None,
               **overrides: Any) -> MessageStore:
    config = small_config(
        root, mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 64,
        mapper_file_size_batch_consume_queue=46 * 64, enable_lmq=True,
        enable_multi_dispatch=True,
        enable_build_consume_queue_concurrently=dispatcher != "serial",
        **{"dispatch_workers": 3, "dispatch_round_records": 24, "dispatch_ring_size": 6,
           **overrides})
    store = MessageStore(config, clock=clock) if clock is not None else MessageStore(config)
    store.set_batch_topic(BATCH)
    store.start()
    if dispatcher == "pipelined":
        assert isinstance(store.dispatcher, ConcurrentDispatcher)
        store.dispatcher.inline = False
    elif dispatcher == "concurrent":  # inline rounds take both ways: serial and prepared
        assert isinstance(store.dispatcher, ConcurrentDispatcher)
        store.dispatcher.serial_below = 8
    return store


@pytest.fixture
def slow_prepare(monkeypatch: pytest.MonkeyPatch) -> random.Random:
    """Fault injection: every round's preparation takes a random extra 0-5 ms, so later
    rounds often finish preparing before earlier ones."""
    rng = random.Random(7)
    original = ConcurrentDispatcher._prepare

    def delayed(self: ConcurrentDispatcher, seq: int, batches: list[DispatchBatch]) -> Any:
        time.sleep(rng.uniform(0, 0.005))
        return original(self, seq, batches)

    monkeypatch.setattr(ConcurrentDispatcher, "_prepare", delayed)
    return rng


# ---------------------------------------------------------------------- the reader


def decode_all(store: MessageStore, topic: str, queue_id: int, offset: int,
               max_count: int = 32) -> tuple[GetStatus, int, int, list[Record]]:
    result = store.get(topic, queue_id, offset, max_count=max_count)
    return result.status, result.next_begin_offset, result.max_offset, records(result)


def mid_of(rec: Record) -> int:
    return int(bytes(rec.body[:9]))


class Reader:
    """Pulls every queue from offset 0 as entries appear; records what it saw and every
    violation of in-order visibility."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.keys: list[QueueKey] = ([(CLASSIC, q) for q in range(CLASSIC_QUEUES)]
                                     + [(BATCH, q) for q in range(BATCH_QUEUES)]
                                     + [(name, 0) for name in LMQS])
        self.next: dict[QueueKey, int] = dict.fromkeys(self.keys, 0)
        self.last_phys: dict[QueueKey, int] = dict.fromkeys(self.keys, -1)
        self.ids: dict[QueueKey, list[int]] = {k: [] for k in self.keys}
        self.errors: list[str] = []
        self.polls = 0

    def poll(self, key: QueueKey) -> bool:
        """Read ``key`` from where it stopped; whether anything new was found."""
        topic, queue_id = key
        offset = self.next[key]
        status, next_offset, max_offset, recs = decode_all(self.store, topic, queue_id, offset)
        self.polls += 1
        if status is not GetStatus.FOUND:
            if offset < max_offset or status not in (
                    GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                    GetStatus.NO_MATCHED_LOGIC_QUEUE):
                self.errors.append(f"{key}: {status.name} at {offset}, max {max_offset}")
            return False
        expected = offset
        for rec in recs:
            got = self._offset_of(key, rec)
            if got != expected:
                self.errors.append(f"{key}: offset {got} where {expected} was due")
            if rec.physical_offset <= self.last_phys[key]:
                self.errors.append(f"{key}: phys {rec.physical_offset} after "
                                   f"{self.last_phys[key]}")
            self.last_phys[key] = rec.physical_offset
            self.ids[key].append(mid_of(rec))
            expected += self._count_of(key, rec)
        if next_offset != expected:
            self.errors.append(f"{key}: next offset {next_offset}, expected {expected}")
        self.next[key] = expected
        return True

    @staticmethod
    def _offset_of(key: QueueKey, rec: Record) -> int:
        if key[0].startswith("%LMQ%"):
            props = decode_properties(rec.properties)
            names = props["INNER_MULTI_DISPATCH"].split(",")
            return int(props["INNER_MULTI_QUEUE_OFFSET"].split(",")[names.index(key[0])])
        return rec.queue_offset

    @staticmethod
    def _count_of(key: QueueKey, rec: Record) -> int:
        if key[0] == BATCH:
            return int(decode_properties(rec.properties).get("INNER_NUM", "1"))
        return 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            for key in self.keys:
                self.poll(key)

    def catch_up(self) -> None:
        for key in self.keys:
            while self.poll(key):
                pass


class HookCheck:
    """An ``on_dispatched`` hook: the reported max offset must already be readable."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.errors: list[str] = []
        self.maxima: dict[QueueKey, int] = {}
        self.calls = 0

    def __call__(self, topic: str, queue_id: int, new_max: int) -> None:
        self.calls += 1
        key = (topic, queue_id)
        if new_max < self.maxima.get(key, 0):
            self.errors.append(f"{key}: hook went back from {self.maxima[key]} to {new_max}")
        self.maxima[key] = new_max
        visible = self.store.max_offset(topic, queue_id)
        last = self.store.get(topic, queue_id, new_max - 1, max_count=1)
        if visible < new_max or last.status is not GetStatus.FOUND:
            self.errors.append(f"{key}: hook says {new_max}, a pull sees max {visible} and "
                               f"{last.status.name} at {new_max - 1}")


# ---------------------------------------------------------------------- the checks


def check_final(store: MessageStore, reader: Reader, sent: Sent) -> None:
    """Everything sent was seen exactly once, dense offsets, every key indexed."""
    assert not reader.errors, reader.errors[:10]
    seen = [mid for key in reader.keys if not key[0].startswith("%LMQ%")
            for mid in reader.ids[key]]
    assert len(seen) == len(set(seen)), "a message was seen twice"
    assert set(seen) == sent.ids
    for key in reader.keys:
        assert reader.next[key] == store.max_offset(*key), key
        assert store.min_offset(*key) == 0
    for name in LMQS:
        ids = reader.ids[(name, 0)]
        assert len(ids) == len(set(ids)) == store.max_offset(name, 0)
        assert set(ids) == sent.per_lmq.get(name, set()), name
    batch_total = sum(sent.inner.get(mid, 1) for q in range(BATCH_QUEUES)
                      for mid in reader.ids[(BATCH, q)])
    assert batch_total == sum(store.max_offset(BATCH, q) for q in range(BATCH_QUEUES))
    for key in reader.keys:
        if key[0].startswith("%LMQ%"):
            continue
        for mid in reader.ids[key]:
            found = store.query_by_key(key[0], key_of(mid), max_num=4)
            assert [mid_of_view(v) for v in found] == [mid], (key, mid)


def mid_of_view(view: memoryview) -> int:
    rec = decode_record(view)
    assert isinstance(rec, Record)
    return mid_of(rec)


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_readers_see_every_queue_in_order_while_producers_run(
        tmp_path: Path, dispatcher: str, slow_prepare: random.Random) -> None:
    store = open_store(tmp_path / "store", dispatcher)
    try:
        reader = race(store, seeds=(1, 2, 3), count=1500)
        assert reader.polls > 2 * len(reader.keys), "the reader never raced the producers"
        if dispatcher != "serial":
            assert isinstance(store.dispatcher, ConcurrentDispatcher)
            assert store.dispatcher.commit_seq > 50, "too few rounds to interleave"
    finally:
        store.shutdown()


def race(store: MessageStore, seeds: tuple[int, ...], count: int) -> Reader:
    """Producers (threads ``producer-SEED``) racing each other and a reader until all
    they put is dispatched; then every hook call in order and every message in its
    queues exactly once. Returns the reader."""
    hook = HookCheck(store)
    store.add_dispatch_hook(hook)
    reader = Reader(store)
    sent, lock = Sent(), threading.Lock()
    stop = threading.Event()
    reading = threading.Thread(target=reader.run, args=(stop,))
    producers = [threading.Thread(target=produce, args=(store, random.Random(seed),
                                                        seed * 1_000_000, count, sent, lock),
                                  name=f"producer-{seed}")
                 for seed in seeds]
    reading.start()
    try:
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        assert store.wait_dispatched(30)
    finally:
        stop.set()
        reading.join()
    reader.catch_up()
    assert not hook.errors, hook.errors[:10]
    check_final(store, reader, sent)
    return reader


# ---------------------------------------------------------------------- the contract


def snapshot(store: MessageStore) -> dict[str, Any]:
    """Every derived structure as plain data: consume-queue and batch-queue entries,
    LMQ keys and values, key-index answers."""
    assert store.wait_dispatched(30)
    out: dict[str, Any] = {}
    for q in sorted(store.queues.all(), key=lambda q: (q.topic, q.queue_id)):
        if isinstance(q, ConsumeQueue):
            parts, offset = [], q.min_offset
            while offset < q.max_offset:  # one file at a time
                parts.append(q.entries(offset, q.max_offset - offset))
                offset += len(parts[-1])
            arr = np.concatenate(parts) if parts else np.empty(0)
        else:
            assert isinstance(q, BatchConsumeQueue)
            parts, offset = [], q.min_offset
            while offset < q.max_offset:
                e = q.entries(offset, 64)
                parts.append(e)
                offset = int(e["base"][-1]) + int(e["batch"][-1])
            arr = np.concatenate(parts) if parts else np.empty(0)
        out[f"{q.topic}/{q.queue_id}"] = (q.min_offset, q.max_offset, arr.tobytes())
    lmq = store.lmq
    assert lmq is not None
    out["lmq"] = list(lmq.stored_entries())  # runs expanded
    out["lmq-meta"] = {bytes(k): bytes(v) for k, v in lmq.db.items(from_key=b"M")
                        if bytes(k)[:1] == b"M"}
    keys = {}
    for q in store.queues.all():
        offset = q.min_offset
        while offset < q.max_offset:
            res = store.get(q.topic, q.queue_id, offset, max_count=64)
            for buf in res.buffers:
                pos = 0
                while pos < len(buf):
                    rec = decode_record(buf, pos)
                    assert isinstance(rec, Record)
                    key = decode_properties(rec.properties)["UNIQ_KEY"]
                    keys[key] = [bytes(v) for v in store.query_by_key(q.topic, key)]
                    pos += rec.total_size
            offset = res.next_begin_offset
    out["index"] = keys
    return out


def produce_serially(store: MessageStore, seed: int, count: int) -> Sent:
    sent = Sent()
    produce(store, random.Random(seed), 0, count, sent, threading.Lock())
    return sent


def test_serial_and_concurrent_build_identical_queues(
        tmp_path: Path, slow_prepare: random.Random) -> None:
    """One deterministic put sequence (a fixed clock, one producer) under each dispatcher:
    byte-identical commit logs, so the derived queues must be identical too."""
    results = {}
    for dispatcher in DISPATCHERS:
        store = open_store(tmp_path / dispatcher, dispatcher, clock=FakeClock())
        try:
            produce_serially(store, seed=11, count=2500)
            results[dispatcher] = snapshot(store)
            results[dispatcher]["log"] = b"".join(bytes(seg.view[: seg.wrote])
                                                  for seg in store.commitlog.segments)
        finally:
            store.shutdown()
    serial = results["serial"]
    for dispatcher in DISPATCHERS[1:]:
        other = results[dispatcher]
        assert serial.keys() == other.keys()
        for name in serial:
            assert serial[name] == other[name], (dispatcher, name)
    assert len(serial["lmq"]) > 100 and len(serial["index"]) > 1000


def test_small_inline_rounds_are_applied_the_serial_way(tmp_path: Path) -> None:
    """A round below ``serial_below`` records skips the column-wise preparation (whose
    fixed cost per round and queue a small round does not repay), a larger one is
    prepared; the queues come out as the serial dispatcher writes them."""
    prepared: list[int] = []
    stores = {}
    for dispatcher in ("serial", "concurrent"):
        store = open_store(tmp_path / dispatcher, dispatcher, clock=FakeClock(),
                           dispatch_round_records=0)
        stores[dispatcher] = store
        d = store.dispatcher
        assert d is not None
        if isinstance(d, ConcurrentDispatcher):
            d.serial_below = 16
            original = d._prepare

            def counted(seq: int, batches: list[DispatchBatch],
                        original: Any = original) -> Any:
                prepared.append(sum(len(b.phys) for b in batches))
                return original(seq, batches)

            d._prepare = counted  # type: ignore[method-assign]
        mid = 0
        for size in (3, 40, 1, 15, 16, 2, 100):  # one round each: paused while putting
            d.pause()
            for _ in range(size):
                lmqs = (LMQS[mid % 24], LMQS[(mid * 7 + 1) % 24])
                store.put_multi_dispatch(CLASSIC, mid % CLASSIC_QUEUES, message(mid, lmqs),
                                         lmqs)
                mid += 1
            d.resume()
            assert store.wait_dispatched()
    try:
        assert prepared == [40, 16, 100]
        assert snapshot(stores["serial"]) == snapshot(stores["concurrent"])
    finally:
        for store in stores.values():
            store.shutdown()


def _voluntary_switches(thread_name: str) -> int:
    """How often the kernel put the named thread to sleep because it waited (Linux)."""
    thread = next(t for t in threading.enumerate() if t.name == thread_name)
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("voluntary_ctxt_switches")))


def test_inline_rounds_leave_the_committer_asleep(tmp_path: Path) -> None:
    """A round committed on the builder thread has nothing for the committer: it is not
    woken (each wake-up is a thread switch and a GIL hand-off on a lightly loaded store,
    where rounds of a few records come one per append)."""
    store = open_store(tmp_path / "store", "concurrent")
    try:
        before = _voluntary_switches("tidemq-commit")
        for mid in range(200):
            store.put(CLASSIC, mid % CLASSIC_QUEUES, message(mid))
            assert store.wait_dispatched()
        woken = _voluntary_switches("tidemq-commit") - before
        assert store.max_offset(CLASSIC, 199 % CLASSIC_QUEUES) == 4
    finally:
        store.shutdown()
    assert woken <= 5, f"the committer woke {woken} times for 200 inline rounds"


class _RoundCalls:
    """Python functions called inside each round's ``_pop_confirmed`` and ``run_once``
    on the dispatch thread (a profiler installed for the threads a store starts): the
    steps of a round from taking it to making it visible, counted without a clock."""

    def __init__(self) -> None:
        self.rounds: list[int] = []
        self._outer: Any = None
        self._calls = 0
        self._taken = 0
        self._take = Dispatcher._pop_confirmed.__code__
        self._codes = {self._take, Dispatcher.run_once.__code__,
                       ConcurrentDispatcher.run_once.__code__}

    def profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            if self._outer is not None:
                self._calls += 1
            elif frame.f_code in self._codes:
                self._outer, self._calls = frame, 0
        elif event == "return" and frame is self._outer:
            self._outer = None
            if frame.f_code is self._take:
                self._taken = self._calls
            else:
                self.rounds.append(self._taken + self._calls)


@pytest.mark.parametrize("puts", [1, 8])
def test_a_small_round_with_nothing_in_flight_takes_the_serial_steps(
        tmp_path: Path, puts: int) -> None:
    """Rounds of a few puts (a lightly loaded store) with no round in flight: the
    concurrent dispatcher takes and applies them as the serial dispatcher does, with two
    Python calls more (its own ``run_once``; the count of a round's records against
    ``round_records``), not a step a put, and none of the ring's bookkeeping (numbering,
    conditions, a prepared round), which at a few records a round is a cost the serial
    one does not pay."""
    medians = {}
    for dispatcher in ("serial", "concurrent"):
        calls = _RoundCalls()
        threading.setprofile(calls.profile)
        try:
            store = open_store(tmp_path / dispatcher, dispatcher, clock=FakeClock(),
                               dispatch_round_records=2048)
        finally:
            threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]
        d = store.dispatcher
        assert d is not None
        if isinstance(d, ConcurrentDispatcher):
            d.serial_below = SERIAL_BELOW  # open_store's takes rounds of 8 the other way
        try:
            for mid in range(4 * CLASSIC_QUEUES):
                if mid == 2 * CLASSIC_QUEUES:  # every queue's files made: count from here
                    calls.rounds.clear()
                if mid % puts == 0:
                    d.pause()
                lmqs = (LMQS[mid % 24],)
                store.put_multi_dispatch(CLASSIC, mid % CLASSIC_QUEUES, message(mid, lmqs),
                                         lmqs)
                if mid % puts == puts - 1:
                    d.resume()
                    assert store.wait_dispatched()
            assert store.max_offset(CLASSIC, 5) == 4
        finally:
            store.shutdown()
        assert len(calls.rounds) >= 2 * CLASSIC_QUEUES // puts
        medians[dispatcher] = sorted(calls.rounds)[len(calls.rounds) // 2]
    assert medians["concurrent"] <= medians["serial"] + 2, medians


@pytest.mark.parametrize("kinds", ["rows", "batches", "mixed"])
def test_rounds_end_at_the_item_that_reaches_round_records(tmp_path: Path,
                                                           kinds: str) -> None:
    """A backlog is taken in rounds that end with the put that brings them to
    ``round_records`` records (single puts one record, batches theirs), the rest left
    for the next round in order; the queues come out as the serial dispatcher's."""
    rng = random.Random(5)
    sizes = [1 if kinds == "rows" or (kinds == "mixed" and rng.random() < 0.5)
             else rng.randint(2, 9) for _ in range(60)]
    expected, records = [], 0
    for size in sizes:  # the rule, one put at a time
        records += size
        if records >= 12:
            expected.append(records)
            records = 0
    expected += [records] if records else []
    stores = {}
    rounds: list[int] = []
    for dispatcher in ("serial", "concurrent"):
        store = open_store(tmp_path / dispatcher, dispatcher, clock=FakeClock(),
                           dispatch_round_records=12 if dispatcher == "concurrent" else 0)
        stores[dispatcher] = store
        d = store.dispatcher
        assert d is not None
        if isinstance(d, ConcurrentDispatcher):
            number = d.run_once

            def counted(batches: list[DispatchBatch], number: Any = number) -> None:
                rounds.append(sum(len(b.phys) for b in batches))
                number(batches)

            d.run_once = counted  # type: ignore[method-assign]
        d.pause()
        mid = 0
        for size in sizes:
            queue_id = mid % CLASSIC_QUEUES
            if size == 1:
                store.put(CLASSIC, queue_id, message(mid))
            else:
                store.put_batch(CLASSIC, queue_id, [message(i) for i in range(mid, mid + size)])
            mid += size
        d.resume()
        assert store.wait_dispatched()
    try:
        assert rounds == expected
        assert snapshot(stores["serial"]) == snapshot(stores["concurrent"])
    finally:
        for store in stores.values():
            store.shutdown()


# ---------------------------------------------------------------------- visibility units


def test_drain_waits_for_a_round_between_take_and_numbering(tmp_path: Path) -> None:
    """``wait_dispatched`` must not return while the builder holds a round it has taken
    but not numbered yet, even when the committer finishes the previous round in that
    window (it used to clear the busy flag then)."""
    store = open_store(tmp_path / "store", "pipelined")
    dispatcher = store.dispatcher
    assert isinstance(dispatcher, ConcurrentDispatcher)
    committing, open_commit, committed = threading.Event(), threading.Event(), threading.Event()
    taken, release = threading.Event(), threading.Event()
    commit, number = dispatcher._commit, dispatcher.run_once

    def gated_commit(p: Any) -> None:
        if p.seq == 0:
            committing.set()
            open_commit.wait(10)
        commit(p)
        if p.seq == 0:
            committed.set()

    def held(batches: list[DispatchBatch]) -> None:
        if dispatcher._next_seq == 1:  # round 1, taken while round 0 commits
            taken.set()
            release.wait(10)
        number(batches)

    dispatcher._commit = gated_commit  # type: ignore[method-assign]
    dispatcher.run_once = held  # type: ignore[method-assign]
    try:
        store.put(CLASSIC, 0, message(1))
        assert committing.wait(10)  # round 0 numbered, its commit held
        store.put(CLASSIC, 0, message(2))
        assert taken.wait(10)  # round 1 taken, not numbered
        open_commit.set()
        assert committed.wait(10)
        assert not store.wait_dispatched(0.2), "drain returned with a round in hand"
        release.set()
        assert store.wait_dispatched()
        assert store.max_offset(CLASSIC, 0) == 2
    finally:
        open_commit.set()
        release.set()
        store.shutdown()


class ReaderInsideWrite:
    """Stands in for the LMQ store's RocksDB handle: just before each write lands it reads
    the queues as a concurrent pull would, and records any max offset that is ahead of
    the entries it can read."""

    def __init__(self, store: MessageStore) -> None:
        lmq = store.lmq
        assert lmq is not None
        self.lmq, self.db = lmq, lmq.db
        self.errors: list[str] = []
        self.writes = 0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.db, attr)

    def write(self, wb: Any, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        for name in LMQS[:3]:
            hi = self.lmq.max_offset(name)
            readable = len(self.lmq.entries(name, 0, hi))
            if readable != hi:
                self.errors.append(f"{name}: max offset {hi}, {readable} entries readable")
        self.db.write(wb, *args, **kwargs)


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_lmq_max_offset_is_never_ahead_of_its_entries(tmp_path: Path, dispatcher: str) -> None:
    store = open_store(tmp_path / "store", dispatcher)
    assert store.lmq is not None
    spy = ReaderInsideWrite(store)
    store.lmq.db = spy  # type: ignore[assignment]
    try:
        for mid in range(40):
            lmqs = tuple(LMQS[: 1 + mid % 3])
            store.put_multi_dispatch(CLASSIC, mid % 4, message(mid, lmqs), lmqs)
            if mid % 7 == 0:
                assert store.wait_dispatched()
        assert store.wait_dispatched()
        assert spy.writes > 5 and not spy.errors, spy.errors[:5]
        assert [store.max_offset(name, 0) for name in LMQS[:3]] == [40, 26, 13]
    finally:
        store.lmq.db = spy.db
        store.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_batch_queue_reads_never_pass_its_max_offset(
        tmp_path: Path, dispatcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull that lands between a BatchCQ write and the move of its max offset returns
    nothing beyond that max offset, so the consumer's next pull is not
    OFFSET_OVERFLOW_BADLY (which makes consumers rewind and read a batch twice)."""
    store = open_store(tmp_path / "store", dispatcher)
    errors: list[str] = []
    write = BatchConsumeQueue._write

    def write_then_pull(self: BatchConsumeQueue, raw: Any, bases: Any) -> None:
        write(self, raw, bases)  # entries written, max offset not moved yet
        res = store.get(self.topic, self.queue_id, 0, max_count=10_000)
        if res.next_begin_offset > self.max_offset:
            errors.append(f"read up to {res.next_begin_offset}, max {self.max_offset}")

    monkeypatch.setattr(BatchConsumeQueue, "_write", write_then_pull)
    try:
        for mid in range(12):
            store.put_inner_batch(BATCH, 0, body_of(mid), b"", 1 + mid % 3)
            store.put_batch(BATCH, 0, [message(1000 + mid)])
            assert store.wait_dispatched()
        assert store.max_offset(BATCH, 0) == 12 + sum(1 + m % 3 for m in range(12))
        assert not errors, errors[:5]
    finally:
        store.shutdown()


def test_batch_topic_declared_after_its_classic_queue_exists(tmp_path: Path) -> None:
    """The committer writes by the queue's real type, as the serial dispatcher does."""
    for dispatcher in DISPATCHERS:
        store = open_store(tmp_path / dispatcher, dispatcher)
        try:
            store.put_batch("Late", 0, [message(1), message(2)])
            assert store.wait_dispatched()
            store.set_batch_topic("Late")  # the queue on disk stays classic
            store.put_batch("Late", 0, [message(3), message(4)])
            assert store.wait_dispatched()
            assert store.status == "RUNNING", dispatcher
            assert store.max_offset("Late", 0) == 4
            assert [mid_of(r) for r in decode_all(store, "Late", 0, 0)[3]] == [1, 2, 3, 4]
        finally:
            store.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS[1:])
def test_prepare_failure_stops_dispatch_with_an_error(
        tmp_path: Path, dispatcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: ConcurrentDispatcher, seq: int, batches: list[DispatchBatch]) -> Any:
        raise RuntimeError("injected preparation failure")

    store = open_store(tmp_path / "store", dispatcher)
    assert isinstance(store.dispatcher, ConcurrentDispatcher)
    store.dispatcher.serial_below = 0  # a round of one record is prepared too
    try:
        monkeypatch.setattr(ConcurrentDispatcher, "_prepare", broken)
        store.put(CLASSIC, 0, message(1))
        assert not store.wait_dispatched(5)
        assert store.status == "DISPATCH_ERROR"
        assert store.max_offset(CLASSIC, 0) == 0
    finally:
        store.shutdown()


# ---------------------------------------------------------------------- dispatch lag


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_dispatch_lag_is_measured_and_warned_about(
        tmp_path: Path, dispatcher: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    store = open_store(tmp_path / "store", dispatcher, clock=clock, dispatch_lag_warn_ms=500)
    assert store.dispatcher is not None
    try:
        assert store.dispatch_lag() == (0, 0.0)
        store.dispatcher.pause()
        result = store.put(CLASSIC, 3, message(1))
        clock.now += 400
        behind, lag_ms = store.dispatch_lag()
        assert behind == result.sizes[0] and lag_ms == 400
        assert "dispatch lag" not in caplog.text
        clock.now += 200  # 600 ms: past dispatchLagWarnMs, with nothing dispatched
        with caplog.at_level(logging.WARNING, logger="tidemq.store.dispatch"):
            assert store.dispatch_lag() == (behind, 600.0)
            store.dispatch_lag()  # rate-limited: one warning
        warnings = [r for r in caplog.records if "dispatch lag" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        assert "600 ms exceeds dispatchLagWarnMs=500" in warnings[0].getMessage()
        store.dispatcher.resume()
        assert store.wait_dispatched()
        assert store.dispatch_lag() == (0, 0.0)
    finally:
        store.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_lag_counts_the_round_being_written(tmp_path: Path, dispatcher: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A record taken from the pending queue is still not visible: the lag keeps counting
    it until its round is written (the serial dispatcher used to report 0 meanwhile)."""
    clock = FakeClock()
    # On the dispatch thread: a round applied on append would hold up the put itself.
    store = open_store(tmp_path / "store", dispatcher, clock=clock, dispatch_on_append_records=0)
    entered, release = threading.Event(), threading.Event()
    append = ConsumeQueue.append

    def held(self: ConsumeQueue, *args: Any) -> int:
        entered.set()
        release.wait(10)
        return append(self, *args)

    monkeypatch.setattr(ConsumeQueue, "append", held)
    try:
        store.put(CLASSIC, 0, message(1))
        assert entered.wait(10)
        clock.now += 700
        assert store.dispatch_lag()[1] == 700.0
        release.set()
        assert store.wait_dispatched()
        assert store.dispatch_lag() == (0, 0.0)
    finally:
        release.set()
        store.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_a_replica_s_lag_counts_from_when_it_wrote_its_master_s_bytes(
        tmp_path: Path, dispatcher: str, caplog: pytest.LogCaptureFixture) -> None:
    """A replica catching up gets records its master stored long ago: the time before
    they arrived is replication delay, which neither its dispatch lag nor the lag's
    warning counts; a replica whose dispatch is slow is still told, in those words."""
    clock = FakeClock()
    master = open_store(tmp_path / "master", dispatcher, clock=clock)
    try:
        first = master.put(CLASSIC, 0, message(1)).sizes[0]
        master.put(CLASSIC, 0, message(2))
        assert master.wait_dispatched()
        view = master.read_log(0, 1 << 20)
        assert view is not None
        wire = bytes(view)
    finally:
        master.shutdown()
    clock.now += 5000  # the replica is five seconds behind its master
    replica = open_store(tmp_path / "replica", dispatcher, clock=clock,
                         dispatch_lag_warn_ms=500)
    assert replica.dispatcher is not None
    try:
        replica.replica = True
        with caplog.at_level(logging.WARNING, logger="tidemq.store.dispatch"):
            replica.dispatcher.pause()
            replica.append_replicated(0, wire[:first])
            clock.now += 100
            assert replica.dispatch_lag() == (first, 100.0)
            replica.dispatcher.resume()
            assert replica.wait_dispatched()
            assert replica.dispatch_lag() == (0, 0.0)
            assert "dispatch lag" not in caplog.text
            replica.dispatcher.pause()
            replica.append_replicated(first, wire[first:])
            clock.now += 600
            assert replica.dispatch_lag() == (len(wire) - first, 600.0)
        assert ("dispatch lag 600 ms exceeds dispatchLagWarnMs=500 (since this replica "
                "wrote the bytes its master sent, replication delay apart") in caplog.text
        replica.dispatcher.resume()
        assert replica.wait_dispatched()
        assert replica.max_offset(CLASSIC, 0) == 2
    finally:
        replica.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_a_replica_cut_back_counts_the_bytes_copied_again_from_their_new_arrival(
        tmp_path: Path, dispatcher: str) -> None:
    """A replica that cut its tail copies those offsets again: their lag counts from the
    second copy, not from the first one, which the cut dropped."""
    clock = FakeClock()
    master = open_store(tmp_path / "master", dispatcher, clock=clock)
    try:
        first = master.put(CLASSIC, 0, message(1)).sizes[0]
        master.put(CLASSIC, 0, message(2))
        assert master.wait_dispatched()
        view = master.read_log(0, 1 << 20)
        assert view is not None
        wire = bytes(view)
    finally:
        master.shutdown()
    # no round and no housekeeping measures the lag in between (neither is due)
    replica = open_store(tmp_path / "replica", dispatcher, clock=clock,
                         dispatch_lag_warn_ms=0, flush_interval_consume_queue=600_000)
    assert replica.dispatcher is not None
    try:
        replica.replica = True
        replica.append_replicated(0, wire)
        assert replica.wait_dispatched()
        assert replica.cut_tail(first) == len(wire) - first
        clock.now += 10_000
        replica.dispatcher.pause()
        replica.append_replicated(first, wire[first:])
        clock.now += 100
        assert replica.dispatch_lag() == (len(wire) - first, 100.0)
        replica.dispatcher.resume()
        assert replica.wait_dispatched()
        assert replica.max_offset(CLASSIC, 0) == 2
    finally:
        replica.shutdown()


@pytest.mark.parametrize("dispatcher", DISPATCHERS)
def test_a_late_round_warns_when_dispatched(tmp_path: Path, dispatcher: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The round's own lag is checked when it becomes visible."""
    clock = FakeClock()
    store = open_store(tmp_path / "store", dispatcher, clock=clock, dispatch_lag_warn_ms=500)
    assert store.dispatcher is not None
    try:
        store.dispatcher.pause()
        store.put(CLASSIC, 0, message(1))
        clock.now += 2000
        with caplog.at_level(logging.WARNING, logger="tidemq.store.dispatch"):
            store.dispatcher.resume()
            assert store.wait_dispatched()
            store.dispatcher.stop()  # the hooks and the check run after the round
        assert "dispatch lag 2000 ms exceeds dispatchLagWarnMs=500" in caplog.text
    finally:
        store.shutdown()


def test_housekeeper_reports_a_stuck_dispatcher(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path / "store", "concurrent", clock=clock,
                       dispatch_lag_warn_ms=100, flush_interval_consume_queue=20)
    assert store.dispatcher is not None
    warned = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "dispatch lag 1000 ms" in record.getMessage():
                warned.set()

    watch = Watch()
    logging.getLogger("tidemq.store.dispatch").addHandler(watch)
    try:
        store.dispatcher.pause()
        store.put(CLASSIC, 0, message(1))
        clock.now += 1000
        assert warned.wait(10), "the housekeeper (every 20 ms) never warned"
    finally:
        logging.getLogger("tidemq.store.dispatch").removeHandler(watch)
        store.dispatcher.resume()
        store.shutdown()



# ---------------------------------------------------------------------- rounds on append


class RoundThreads:
    """A round hook that records which thread applied each round, and checks that every
    queue's max offset only moves forward from one round to the next."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.last: dict[QueueKey, int] = {}
        self.errors: list[str] = []

    def __call__(self, touched: Any) -> None:
        self.names.append(threading.current_thread().name)
        for key, max_offset in touched.items():
            if max_offset < self.last.get(key, 0):
                self.errors.append(f"{key} went back to {max_offset}")
            self.last[key] = max_offset


def until_asleep(dispatcher: Dispatcher, timeout: float = 10.0) -> None:
    """Wait until the dispatch thread announced its sleep (a flag; no event exists)."""
    deadline = time.monotonic() + timeout
    while not dispatcher.idle:
        assert time.monotonic() < deadline, "the dispatch thread never went to sleep"
        time.sleep(0.001)


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_rounds_on_append_and_on_the_thread_keep_every_queue_in_order(
        tmp_path: Path, dispatcher: str, slow_prepare: random.Random) -> None:
    """Producers racing each other: a round is applied by the appender when the thread
    sleeps and by the thread otherwise; every queue still moves in log order and every
    message is in its queues exactly once."""
    # Batches of up to 9 records: those above 4 go to the thread.
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=4)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    try:
        race(store, seeds=(4, 5, 6), count=1200)
        assert not rounds.errors, rounds.errors[:10]
        assert store.dispatcher is not None
        on_append = sum(name.startswith("producer-") for name in rounds.names)
        assert on_append == store.dispatcher.rounds_on_append > 0
        assert len(rounds.names) > on_append, "no round was left to the dispatch thread"
    finally:
        store.shutdown()


def test_queues_are_the_same_whichever_thread_applies_the_rounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One deterministic put sequence, every small round applied on append or none: the
    same derived queues, LMQ entries and key index. Lone fan-out records, which the
    dispatch thread takes by default, are applied on append too here: each would wake
    the thread, which then takes the puts that follow while it is busy."""
    monkeypatch.setattr(dispatch, "_lone_fanout", lambda item: False)
    results = {}
    for name, limit in (("thread", 0), ("append", 64)):
        store = open_store(tmp_path / name, "serial", clock=FakeClock(),
                           dispatch_on_append_records=limit)
        try:
            assert store.dispatcher is not None
            store.dispatcher.on_append_gap = 0  # every put's round, however close
            until_asleep(store.dispatcher)
            produce_serially(store, seed=12, count=1500)
            results[name] = snapshot(store)
            if limit:
                assert store.dispatcher.rounds_on_append > 100
            else:
                assert store.dispatcher.rounds_on_append == 0
        finally:
            store.shutdown()
    assert results["thread"] == results["append"]


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_a_small_round_is_visible_when_its_put_returns(tmp_path: Path, dispatcher: str) -> None:
    """The dispatch thread asleep: a put's round is applied by the put, hooks included,
    and the thread sleeps on; a round above the limit goes to the thread."""
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=4)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    assert store.dispatcher is not None
    try:
        until_asleep(store.dispatcher)
        store.put(CLASSIC, 3, message(1))
        assert store.max_offset(CLASSIC, 3) == 1  # no wait: applied by the put
        assert rounds.names == [threading.current_thread().name]
        assert store.dispatcher.idle and store.dispatcher.rounds_on_append == 1
        store.put_batch(CLASSIC, 3, [message(i) for i in range(2, 12)])  # 10 records
        assert store.wait_dispatched()
        assert store.max_offset(CLASSIC, 3) == 11
        assert rounds.names[1:] == ["tidemq-dispatch"]
        assert store.dispatcher.rounds_on_append == 1
    finally:
        store.shutdown()


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_puts_in_quick_succession_wake_the_dispatch_thread(tmp_path: Path,
                                                           dispatcher: str) -> None:
    """A put within ``on_append_gap`` of the put before it that found the dispatch thread
    asleep leaves its round to the thread: a thread putting in a loop would otherwise pay
    a round of one record for every put."""
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=4)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    assert store.dispatcher is not None
    store.dispatcher.on_append_gap = 3600.0  # every put after the first is "quick"
    try:
        until_asleep(store.dispatcher)
        for i in range(1, 201):
            store.put(CLASSIC, 5, message(i))
        assert store.wait_dispatched()
        assert [mid_of(r) for r in decode_all(store, CLASSIC, 5, 0, 300)[3]] == \
            list(range(1, 201))
        assert store.dispatcher.rounds_on_append == 1
        assert rounds.names[0] == threading.current_thread().name
        assert len(rounds.names) > 1  # the rest on the dispatcher's threads
        assert threading.current_thread().name not in rounds.names[1:]
    finally:
        store.shutdown()


def test_sync_flush_rounds_stay_on_the_dispatch_thread(tmp_path: Path) -> None:
    """Under SYNC_FLUSH a round is confirmed only once flushed, never at its append: the
    dispatch thread applies every round."""
    store = open_store(tmp_path / "store", "serial", flush_disk_type=FlushDiskType.SYNC_FLUSH,
                       dispatch_on_append_records=64)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    assert store.dispatcher is not None
    try:
        for i in range(5):
            until_asleep(store.dispatcher)
            result = store.put(CLASSIC, 0, message(i))
            assert result.flush_group is not None
            assert result.flush_group.wait(result.flush_deadline) is FlushStatus.FLUSHED
            assert store.wait_dispatched()
        assert store.max_offset(CLASSIC, 0) == 5
        assert rounds.names and set(rounds.names) == {"tidemq-dispatch"}
        assert store.dispatcher.rounds_on_append == 0
    finally:
        store.shutdown()


def test_a_failed_round_on_append_stops_dispatch_but_keeps_the_put(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that fails on the appender's thread is the dispatcher's failure, as on its
    own thread: the put is stored and answered, the queues stop advancing."""
    store = open_store(tmp_path / "store", "serial")
    assert store.dispatcher is not None

    def broken(*_args: Any) -> int:
        raise OSError("consume queue write failed")

    try:
        until_asleep(store.dispatcher)
        monkeypatch.setattr(ConsumeQueue, "append_one", broken)
        result = store.put(CLASSIC, 0, message(1))
        assert result.queue_offset == 0
        assert isinstance(store.dispatcher.error, OSError)
        assert not store.wait_dispatched(1)
        assert store.max_offset(CLASSIC, 0) == 0
    finally:
        monkeypatch.undo()
        store.shutdown()


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_a_lone_fanout_record_is_left_to_the_dispatch_thread(tmp_path: Path,
                                                             dispatcher: str) -> None:
    """The dispatch thread asleep: a put of one message naming LMQs is applied by the
    thread (its round costs a RocksDB write whatever it holds, and the thread folds the
    fan-outs appended meanwhile into one), a fan-out batch of several by the put."""
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=64)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    assert store.dispatcher is not None and store.lmq is not None
    lmqs = ("%LMQ%a", "%LMQ%b")
    store.dispatcher.on_append_gap = 0  # the second put may follow the first within it
    try:
        until_asleep(store.dispatcher)
        store.put_multi_dispatch(CLASSIC, 1, message(1, lmqs), lmqs)
        assert store.wait_dispatched()
        assert rounds.names == ["tidemq-dispatch"]
        assert store.dispatcher.rounds_on_append == 0
        assert [store.lmq.max_offset(name) for name in lmqs] == [1, 1]
        until_asleep(store.dispatcher)
        store.put_batch_multi_dispatch(CLASSIC, 1, [message(i, lmqs) for i in (2, 3)],
                                       [lmqs, lmqs])
        assert [store.lmq.max_offset(name) for name in lmqs] == [3, 3]  # no wait
        assert rounds.names[1:] == [threading.current_thread().name]
        assert store.dispatcher.rounds_on_append == 1
    finally:
        store.shutdown()


class Later:
    """An event loop's ``call_soon`` reduced to its contract: callbacks given on the
    thread that made it run when the test runs them; other threads are refused."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.calls: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], None]) -> bool:
        if threading.get_ident() != self.thread:
            return False
        self.calls.append(fn)
        return True

    def run(self) -> None:
        calls, self.calls = self.calls, []
        for fn in calls:
            fn()


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_a_round_left_to_the_loop_takes_every_put_of_its_pass(tmp_path: Path,
                                                              dispatcher: str) -> None:
    """Puts made on a loop leave their small round to the end of the loop's pass: the
    put returns (and its answer goes out) first, and the puts of one pass share one
    round, applied on the loop's thread."""
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=64)
    rounds = RoundThreads()
    store.add_dispatch_round_hook(rounds)
    later = Later()
    store.dispatch_soon(later)
    assert store.dispatcher is not None
    try:
        until_asleep(store.dispatcher)
        for i in range(3):
            store.put(CLASSIC, 2, message(i + 1))
        assert len(later.calls) == 1  # one round for the pass, not one a put
        assert store.dispatcher.rounds_on_append == 0  # nothing applied by the puts
        later.run()
        assert store.wait_dispatched()
        assert [mid_of(r) for r in decode_all(store, CLASSIC, 2, 0, 10)[3]] == [1, 2, 3]
        if rounds.names != ["tidemq-dispatch"]:  # unless its timed wake came first
            assert rounds.names == [threading.current_thread().name]
            assert store.dispatcher.rounds_on_append == 1
        assert not later.calls
    finally:
        store.shutdown()


@pytest.mark.parametrize("dispatcher", ["serial", "concurrent"])
def test_a_round_left_to_the_loop_that_grew_too_big_wakes_the_thread(
        tmp_path: Path, dispatcher: str) -> None:
    """Puts from another thread while the loop's round waits join it; a round that is
    then over the limit goes to the dispatch thread, and nothing is left behind."""
    store = open_store(tmp_path / "store", dispatcher, dispatch_on_append_records=2)
    later = Later()
    store.dispatch_soon(later)
    assert store.dispatcher is not None
    try:
        until_asleep(store.dispatcher)
        store.put(CLASSIC, 4, message(1))
        other = threading.Thread(target=lambda: [store.put(CLASSIC, 4, message(i))
                                                 for i in (2, 3)])
        other.start()
        other.join()
        assert len(later.calls) == 1
        later.run()
        assert store.wait_dispatched()
        assert [mid_of(r) for r in decode_all(store, CLASSIC, 4, 0, 10)[3]] == [1, 2, 3]
        assert store.dispatcher.rounds_on_append == 0
    finally:
        store.shutdown()
