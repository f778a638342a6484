"""Light message queues in the store (RIP-28): fan-out, offsets, deletion, recovery, retention."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import ConfigError
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import Record
from tidemq.store.lmq_store import LmqEntry, LmqStore
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.recovery import scan_log
from tidemq.types import GetStatus

from .conftest import OpenStore, crash_copy, records, small_config

LMQ = {"enable_lmq": True, "enable_multi_dispatch": True}
Cfg = dict[str, Any]


@pytest.fixture(params=[False, True], ids=["serial", "concurrent"])
def lmq_cfg(request: pytest.FixtureRequest) -> Cfg:
    """LMQ on, with the serial and with the concurrent dispatcher (one contract)."""
    return {**LMQ, "enable_build_consume_queue_concurrently": request.param}


def fan_out(store: MessageStore, queue_id: int, body: bytes, names: list[str],
            topic: str = "Parent") -> int:
    props = encode_properties({"INNER_MULTI_DISPATCH": ",".join(names), "UNIQ_KEY": body.hex()})
    return store.put_multi_dispatch(topic, queue_id, MessageInput(body, props), names
                                    ).phys_offsets[0]


def lmq_records(store: MessageStore, name: str) -> list[Record]:
    """Every record of LMQ ``name`` from its min offset, read three at a time, with each
    record's INNER_MULTI_QUEUE_OFFSET checked against the offset it was read at."""
    assert store.wait_dispatched()
    out: list[Record] = []
    offset = store.min_offset(name, 0)
    while offset < store.max_offset(name, 0):
        result = store.get(name, 0, offset, max_count=3)
        assert result.found, (name, offset, result.status)
        for k, rec in enumerate(records(result)):
            assert lmq_offset(rec, name) == offset + k
            out.append(rec)
        offset = result.next_begin_offset
    return out


def lmq_offset(rec: Record, name: str) -> int:
    props = decode_properties(rec.properties)
    names = props["INNER_MULTI_DISPATCH"].split(",")
    offsets = [int(x) for x in props["INNER_MULTI_QUEUE_OFFSET"].split(",")]
    assert len(names) == len(offsets)
    return offsets[names.index(name)]


def expected_from_log(store: MessageStore) -> dict[str, list[bytes]]:
    """LMQ name -> bodies in LMQ-offset order, as the commit log's records say; no LMQ
    offset is assigned twice and each LMQ's offsets are dense from its first."""
    found: dict[str, dict[int, bytes]] = defaultdict(dict)

    def collect(rec: Record, _offset: int) -> None:
        props = decode_properties(rec.properties)
        if "INNER_MULTI_DISPATCH" not in props:
            return
        for name, off in zip(props["INNER_MULTI_DISPATCH"].split(","),
                             props["INNER_MULTI_QUEUE_OFFSET"].split(","), strict=True):
            assert int(off) not in found[name], f"{name} offset {off} assigned twice"
            found[name][int(off)] = bytes(rec.body)

    end, _, reason = scan_log(store.commitlog, store.commitlog.min_offset, on_record=collect)
    assert end == store.commitlog.max_offset, reason
    for name, by_off in found.items():
        assert sorted(by_off) == list(range(min(by_off), min(by_off) + len(by_off))), name
    return {name: [by_off[o] for o in sorted(by_off)] for name, by_off in found.items()}


# ---------------------------------------------------------------------- fan-out


def test_disabled_store_has_no_lmq(open_store: OpenStore) -> None:
    store = open_store()
    assert store.lmq is None and not store.is_lmq("%LMQ%a")
    with pytest.raises(ValueError, match="disabled"):
        store.put_multi_dispatch("T", 0, MessageInput(b"x"), ["%LMQ%a"])
    assert not store.delete_lmq("%LMQ%a")


def test_one_record_many_queues(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = open_store(**lmq_cfg)
    names = ["%LMQ%a", "%LMQ%b", "%LMQ%c"]
    phys = fan_out(store, 0, b"hello", names)
    assert store.wait_dispatched()
    for name in names:
        assert (store.min_offset(name, 0), store.max_offset(name, 0)) == (0, 1)
        [rec] = lmq_records(store, name)
        assert rec.physical_offset == phys and rec.topic == "Parent" and rec.queue_offset == 0
    assert store.max_offset("Parent", 0) == 1  # the parent queue indexes it as usual
    assert store.commitlog.max_offset == phys + records(store.get("Parent", 0, 0))[0].total_size


@pytest.mark.parametrize("cached", [200_000, 4], ids=["cached", "evicting"])
def test_concurrent_producers_on_several_parent_queues(lmq_cfg: Cfg, open_store: OpenStore,
                                                       cached: int) -> None:
    """Eight threads, four parent queues, overlapping LMQ sets: every LMQ is dense from
    0, holds each message naming it exactly once, in commit-log order -- also with
    caches smaller than the set of queues, so that queues leave them while others are
    read back, concurrently with dispatch."""
    store = open_store(mapped_file_size_commit_log=64 * 1024, lmq_cached_queues=cached,
                       **lmq_cfg)
    pool = [f"%LMQ%q{i}" for i in range(12)]
    named: dict[bytes, list[str]] = {}
    lock = threading.Lock()

    def producer(k: int) -> None:
        rng = random.Random(k)
        for i in range(150):
            body = f"{k}-{i}".encode()
            names = rng.sample(pool, rng.randint(1, 5))
            with lock:
                named[body] = names
            fan_out(store, k % 4, body, names)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want: dict[str, set[bytes]] = defaultdict(set)
    for body, names in named.items():
        for name in names:
            want[name].add(body)
    for name in pool:
        recs = lmq_records(store, name)
        bodies = [bytes(r.body) for r in recs]
        assert len(bodies) == len(set(bodies)) == store.max_offset(name, 0)
        assert set(bodies) == want[name]
        phys = [r.physical_offset for r in recs]
        assert phys == sorted(phys)  # LMQ order is commit-log order
    assert expected_from_log(store) == {n: [bytes(r.body) for r in lmq_records(store, n)]
                                        for n in pool}


def test_offsets_continue_after_a_clean_restart(lmq_cfg: Cfg, open_store: OpenStore,
        store_root: Path) -> None:
    store = open_store(**lmq_cfg)
    for i in range(5):
        fan_out(store, 0, b"m%d" % i, ["%LMQ%a", "%LMQ%b"] if i % 2 else ["%LMQ%a"])
    assert store.wait_dispatched()
    store.shutdown()
    again = open_store(**lmq_cfg)
    assert again.max_offset("%LMQ%a", 0) == 5 and again.max_offset("%LMQ%b", 0) == 2
    fan_out(again, 1, b"late", ["%LMQ%b"])
    assert [bytes(r.body) for r in lmq_records(again, "%LMQ%b")] == [b"m1", b"m3", b"late"]
    assert again.lmq is not None and sorted(again.lmq.queue_names()) == ["%LMQ%a", "%LMQ%b"]
    assert again.lmq.stats() == (2, 8)


def test_reads_follow_consume_queue_statuses(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = open_store(**lmq_cfg)
    assert store.get("%LMQ%none", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    for i in range(4):
        fan_out(store, 0, b"t%d" % i, ["%LMQ%s"])
    assert store.wait_dispatched()
    assert store.get("%LMQ%s", 0, 4).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get("%LMQ%s", 0, 9).status is GetStatus.OFFSET_OVERFLOW_BADLY
    got = store.get("%LMQ%s", 0, 1, max_count=2)
    assert got.found and got.message_count == 2 and got.next_begin_offset == 3
    ts = store.store_time_at("%LMQ%s", 0, 2)
    assert ts > 0 and store.offset_by_time("%LMQ%s", 0, ts) <= 2


# ---------------------------------------------------------------------- crash recovery


def test_crash_before_the_lmq_store_flushed_is_redispatched(lmq_cfg: Cfg,
        open_store: OpenStore, tmp_path: Path) -> None:
    """The LMQ store has no WAL: a crash loses its memtable; recovery re-dispatches from
    its own checkpoint and every LMQ comes back exactly as the commit log says."""
    store = open_store(flush_interval_consume_queue=60_000, **lmq_cfg)
    for i in range(40):
        fan_out(store, i % 3, b"c%02d" % i, [f"%LMQ%x{i % 5}", f"%LMQ%y{i % 2}"])
    assert store.wait_dispatched()
    want = expected_from_log(store)
    copy = crash_copy(store, tmp_path / "crashed")
    with MessageStore(small_config(copy, **lmq_cfg)) as again:
        assert again.recovery_report is not None and not again.recovery_report.clean
        assert {n: [bytes(r.body) for r in lmq_records(again, n)] for n in want} == want
        fan_out(again, 0, b"after", ["%LMQ%x0"])
        assert lmq_records(again, "%LMQ%x0")[-1].body == b"after"
        assert again.max_offset("%LMQ%x0", 0) == len(want["%LMQ%x0"]) + 1


def test_a_checkpoint_flushes_the_memtable_only_once_it_holds_enough(tmp_path: Path) -> None:
    """A checkpoint records the dispatched position; it flushes the memtable only once
    ``flush_entries`` entries were written since the last flush, or the last flush is
    ``flush_every`` seconds old, not at every call (each flush is a level-0 file that
    compaction merges with the whole database)."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.flush_entries = 10

        def in_memtable() -> int:
            return int(lmq.db.property_int_value("rocksdb.num-entries-active-mem-table") or 0)

        lmq.write_fanout([([f"%LMQ%q{i}" for i in range(4)], [0] * 4, 0, 10, 0, 1)], 10)
        lmq.checkpoint(10)
        assert lmq.dispatched == 10 and in_memtable() > 0  # 4 entries: kept
        lmq.write_fanout([([f"%LMQ%q{i}" for i in range(6)], [1] * 4 + [0] * 2, 10, 10, 0,
                           1)], 20)
        lmq.checkpoint(20)
        assert in_memtable() == 0  # 10 since the last flush: flushed
        lmq.write_fanout([(["%LMQ%q0"], [2], 20, 10, 0, 1)], 30)
        lmq.checkpoint(30)
        assert in_memtable() > 0
        lmq.flush_every = 0.0  # the last flush is old enough
        lmq.checkpoint(30)
        assert in_memtable() == 0
        lmq.checkpoint(30)  # nothing written since: nothing to flush
        assert lmq.max_offset("%LMQ%q0") == 3 and lmq.max_offset("%LMQ%q5") == 1
    finally:
        lmq.close()


def test_consumer_offsets_survive_a_crash(lmq_cfg: Cfg, open_store: OpenStore,
                                          tmp_path: Path) -> None:
    """Offsets are not derived data: they are written with the WAL on."""
    store = open_store(flush_interval_consume_queue=60_000, **lmq_cfg)
    fan_out(store, 0, b"x", ["%LMQ%o"])
    assert store.wait_dispatched() and store.lmq is not None
    store.lmq.commit_offset("g1", "%LMQ%o", 1)
    store.lmq.commit_offset("g2", "%LMQ%o", 0)
    copy = crash_copy(store, tmp_path / "crashed")
    with MessageStore(small_config(copy, **lmq_cfg)) as again:
        assert again.lmq is not None
        assert again.lmq.offsets_of("%LMQ%o") == {"g1": 1, "g2": 0}
        assert again.lmq.committed_offset("g3", "%LMQ%o") is None


def test_truncate_drops_entries_past_the_log_end(tmp_path: Path) -> None:
    """Power loss under ASYNC_FLUSH: the LMQ store reached disk, the log's tail did not."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write([LmqEntry("%LMQ%a", o, 100 * o, 100, 0, 1) for o in range(5)]
                  + [LmqEntry("%LMQ%b", 0, 250, 100, 0, 1)], 500)
        assert lmq.truncate_phys(600) == 0  # nothing beyond: not even walked
        assert lmq.truncate_phys(300) == 3  # a@3, a@4 and b@0 (250..350) end past 300
        assert (lmq.min_offset("%LMQ%a"), lmq.max_offset("%LMQ%a")) == (0, 3)
        assert lmq.max_offset("%LMQ%b") == 0 and lmq.dispatched == 300
        assert [e[0] for e in lmq.entries("%LMQ%a", 0, 10)] == [0, 100, 200]
    finally:
        lmq.close()


# ---------------------------------------------------------------------- deletion


def test_delete_drops_entries_and_offsets_and_restarts_at_zero(
        lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = open_store(**lmq_cfg)
    for i in range(3):
        fan_out(store, 0, b"old%d" % i, ["%LMQ%d", "%LMQ%keep"])
    assert store.wait_dispatched() and store.lmq is not None
    store.lmq.commit_offset("g", "%LMQ%d", 2)
    store.lmq.commit_offset("g", "%LMQ%keep", 1)
    assert store.delete_lmq("%LMQ%d")
    assert not store.delete_lmq("%LMQ%d")  # nothing left to delete
    assert store.max_offset("%LMQ%d", 0) == 0
    assert store.get("%LMQ%d", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.lmq.committed_offset("g", "%LMQ%d") is None
    assert store.lmq.committed_offset("g", "%LMQ%keep") == 1  # other queues untouched
    assert len(lmq_records(store, "%LMQ%keep")) == 3
    assert sorted(store.lmq.queue_names()) == ["%LMQ%keep"]
    fan_out(store, 0, b"new", ["%LMQ%d"])
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%d")] == [b"new"]


def test_records_dispatched_after_the_deletion_stay_deleted(
        lmq_cfg: Cfg, open_store: OpenStore) -> None:
    """Appended before the deletion, dispatched after it: the tombstone drops them."""
    store = open_store(**lmq_cfg)
    assert store.dispatcher is not None
    store.dispatcher.pause()
    for i in range(3):
        fan_out(store, 0, b"old%d" % i, ["%LMQ%z"])
    store.delete_lmq("%LMQ%z")
    fan_out(store, 0, b"new0", ["%LMQ%z"])
    store.dispatcher.resume()
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%z")] == [b"new0"]
    assert store.min_offset("%LMQ%z", 0) == 0


def fan_out_batch(store: MessageStore, queue_id: int, plan: list[tuple[bytes, list[str]]]
                  ) -> None:
    """One put_batch_multi_dispatch of ``(body, LMQ names)`` messages (no names: plain)."""
    msgs = [MessageInput(body, encode_properties(
        {"UNIQ_KEY": body.hex(), **({"INNER_MULTI_DISPATCH": ",".join(names)} if names else {})}))
        for body, names in plan]
    store.put_batch_multi_dispatch("Parent", queue_id, msgs, [names for _, names in plan])


def test_batched_fan_out_around_a_deletion_and_a_restart(
        lmq_cfg: Cfg, open_store: OpenStore, store_root: Path) -> None:
    """Batches assign an LMQ consecutive offsets in batch order, continuing what single
    fan-outs assigned; a batch appended before a deletion and dispatched after it stays
    deleted, the re-created queue starts at 0; after a restart (nothing cached) batches
    continue each queue where it ended."""
    store = open_store(**lmq_cfg)
    assert store.dispatcher is not None
    fan_out(store, 0, b"s0", ["%LMQ%b"])
    store.dispatcher.pause()
    fan_out_batch(store, 1, [(b"a0", ["%LMQ%d", "%LMQ%b"]), (b"a1", []),
                             (b"a2", ["%LMQ%b", "%LMQ%d"])])
    store.delete_lmq("%LMQ%d")
    fan_out_batch(store, 2, [(b"n0", ["%LMQ%d"]), (b"n1", ["%LMQ%d", "%LMQ%b"])])
    store.dispatcher.resume()
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%d")] == [b"n0", b"n1"]
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%b")] == [b"s0", b"a0", b"a2",
                                                                     b"n1"]
    assert store.max_offset("Parent", 1) == 3
    store.shutdown()
    with MessageStore(small_config(store_root, **lmq_cfg)) as again:
        fan_out_batch(again, 0, [(b"r0", ["%LMQ%b", "%LMQ%new"]), (b"r1", ["%LMQ%d"])])
        assert [bytes(r.body) for r in lmq_records(again, "%LMQ%b")][-2:] == [b"n1", b"r0"]
        assert [bytes(r.body) for r in lmq_records(again, "%LMQ%d")] == [b"n0", b"n1", b"r1"]
        assert [bytes(r.body) for r in lmq_records(again, "%LMQ%new")] == [b"r0"]


def test_recovery_from_before_a_deletion_does_not_resurrect(lmq_cfg: Cfg,
        open_store: OpenStore, tmp_path: Path) -> None:
    """No checkpoint since the start: recovery re-dispatches the whole log, records of the
    deleted generation included; only the re-created queue's records come back."""
    store = open_store(flush_interval_consume_queue=60_000, **lmq_cfg)
    for i in range(6):
        fan_out(store, 0, b"old%d" % i, ["%LMQ%r", "%LMQ%other"])
    assert store.wait_dispatched()
    store.delete_lmq("%LMQ%r")
    floor = store.commitlog.max_offset
    fan_out(store, 1, b"new0", ["%LMQ%r"])
    fan_out(store, 1, b"new1", ["%LMQ%r", "%LMQ%other"])
    assert store.wait_dispatched()
    copy = crash_copy(store, tmp_path / "crashed")
    with MessageStore(small_config(copy, **lmq_cfg)) as again:
        report = again.recovery_report
        assert report is not None and report.start_offset == 0 and report.records_scanned == 8
        assert [bytes(r.body) for r in lmq_records(again, "%LMQ%r")] == [b"new0", b"new1"]
        assert len(lmq_records(again, "%LMQ%other")) == 7
        assert again.lmq is not None and again.lmq.tombstones() == {"%LMQ%r": floor}


# ---------------------------------------------------------------------- retention


def retention_store(lmq_cfg: Cfg, open_store: OpenStore, **extra: Any) -> MessageStore:
    return open_store(file_reserved_time=0, delete_when="", **lmq_cfg, **extra)


def test_retention_raises_lmq_min_offsets(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = retention_store(lmq_cfg, open_store)
    for i in range(60):  # about 4 KiB segments of ~400-byte records: several segments
        names = ["%LMQ%all", "%LMQ%even"] if i % 2 == 0 else ["%LMQ%all"]
        fan_out(store, 0, b"%02d" % i + b"x" * 300, names)
    assert store.wait_dispatched()
    report = store.run_retention(manual=True)
    assert report.deleted_segments and report.lmq_entries_expired > 0
    cl_min = store.commitlog.min_offset
    for name in ("%LMQ%all", "%LMQ%even"):
        lo, hi = store.min_offset(name, 0), store.max_offset(name, 0)
        assert 0 < lo < hi
        assert store.get(name, 0, 0).status is GetStatus.OFFSET_TOO_SMALL
        recs = lmq_records(store, name)
        assert recs[0].physical_offset >= cl_min and lmq_offset(recs[0], name) == lo
    assert store.lmq is not None and store.lmq.stats()[1] == sum(
        store.max_offset(n, 0) - store.min_offset(n, 0) for n in ("%LMQ%all", "%LMQ%even"))


def test_expiry_resumes_across_budgeted_steps(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = retention_store(lmq_cfg, open_store)
    names = [f"%LMQ%b{i}" for i in range(10)]
    for i in range(40):
        fan_out(store, 0, b"y" * 300, names[i % 5: i % 5 + 5])
    assert store.wait_dispatched() and store.lmq is not None
    lmq = store.lmq
    # Retention deletes segments; sweep the LMQ store by hand, two queues per step.
    with store.commitlog.lock:
        while len(store.commitlog.segments) > 1:
            store.commitlog.delete_first()
    cl_min = store.commitlog.min_offset
    steps = 0
    while lmq.expiry_due(cl_min):
        lmq.expire_below(cl_min, budget=2)
        steps += 1
    assert steps >= 5
    for name in names:
        if lmq.max_offset(name):
            first = lmq.entries(name, lmq.min_offset(name), 1)
            assert not first or first[0][0] >= cl_min
    assert not lmq.expiry_due(cl_min)


def test_retention_drops_tombstones_it_passed(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    store = retention_store(lmq_cfg, open_store)
    for _ in range(30):
        fan_out(store, 0, b"z" * 300, ["%LMQ%t", "%LMQ%u"])
    assert store.wait_dispatched() and store.lmq is not None
    store.delete_lmq("%LMQ%t")
    floor = store.commitlog.max_offset
    assert store.lmq.tombstones() == {"%LMQ%t": floor}
    store.run_retention(manual=True)
    assert store.commitlog.min_offset < floor  # the floor is in the last segment: kept
    assert store.lmq.tombstones() == {"%LMQ%t": floor}
    for _ in range(30):  # roll past it
        fan_out(store, 0, b"v" * 300, ["%LMQ%u"])
    assert store.wait_dispatched()
    store.run_retention(manual=True)
    assert store.lmq.tombstones() == {} and store.lmq.floor("%LMQ%t") == 0


def test_cached_stats_never_walk_on_the_callers_thread(tmp_path: Path) -> None:
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write([LmqEntry("%LMQ%a", 0, 0, 10, 0, 1)], 10)
        assert lmq.first_stats() == (1, 1)  # waits for the first walk, on its thread
        lmq.write([LmqEntry("%LMQ%b", 0, 10, 10, 0, 1)], 20)
        assert lmq.cached_stats(max_age=0) == (1, 1)  # stale, a walk started meanwhile
        counting = lmq._stats_thread
        if counting is not None:
            counting.join()
        assert lmq.cached_stats(max_age=3600) == (2, 2)
        lmq.delete_queue("%LMQ%a", 20)
        assert lmq.cached_stats(max_age=3600) == (1, 1)  # a deletion adjusts exactly
    finally:
        lmq.close()


def test_a_deletion_of_an_lmq_written_after_the_count_is_recounted(tmp_path: Path) -> None:
    # figures counted before the queue existed: subtracting it made them negative
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write([LmqEntry("%LMQ%a", 0, 0, 10, 0, 1)], 10)
        assert lmq.first_stats() == (1, 1)
        lmq.write([LmqEntry("%LMQ%b", i, 10 + 10 * i, 10, 0, 1) for i in range(3)], 40)
        lmq.delete_queue("%LMQ%b", 40)
        figures = lmq.cached_stats()
        assert figures is not None and min(figures) >= 0, figures
        counting = lmq._stats_thread  # the deletion asked for a recount
        if counting is not None:
            counting.join()
        assert lmq.cached_stats(max_age=3600) == lmq.stats() == (1, 1)
    finally:
        lmq.close()


def test_the_first_count_does_not_stall_the_caller(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # a million LMQs take seconds to walk: the broker's loop asks, and must not wait
    lmq = LmqStore(tmp_path / "lmq")
    walking, finish = threading.Event(), threading.Event()
    walk = lmq.stats
    walks: list[int] = []

    def slow_walk() -> tuple[int, int]:
        walks.append(1)
        walking.set()
        assert finish.wait(30)
        return walk()

    monkeypatch.setattr(lmq, "stats", slow_walk)
    try:
        lmq.write([LmqEntry("%LMQ%a", 0, 0, 10, 0, 1)], 10)
        asked: list[tuple[int, int] | None] = []
        caller = threading.Thread(target=lambda: asked.append(lmq.cached_stats()))
        caller.start()
        caller.join(10)
        assert asked == [None]  # answered while the walk is under way
        assert walking.wait(10)
        assert lmq.cached_stats() is None  # no second walk is started meanwhile
        finish.set()
        assert lmq.first_stats() == (1, 1)
        assert len(walks) == 1
    finally:
        finish.set()
        lmq.close()


# ---------------------------------------------------------------------- derived max offsets


def m_keys(lmq: LmqStore) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v) for k, v in lmq.db.items(from_key=b"M")
            if bytes(k)[:1] == b"M"}


def test_dispatch_writes_no_metadata_and_a_cold_cache_derives_max_offsets(
        tmp_path: Path) -> None:
    """The max offset is the last entry's: dispatch writes one key per entry, and a miss
    (a new process, or an evicted queue) finds it with a reverse seek."""
    path = tmp_path / "lmq"
    lmq = LmqStore(path)
    try:
        lmq.write_fanout([(["%LMQ%a", "%LMQ%ab", "%LMQ%b"], [0, 0, 0], 0, 10, 0, 1)], 10)
        lmq.write_fanout([(["%LMQ%a", "%LMQ%b"], [1, 1], 10, 10, 0, 1),
                          (["%LMQ%a"], [2], 20, 10, 0, 1)], 30)
        lmq.write([LmqEntry("%LMQ%a", o, 10 * o, 10, 0, 1) for o in range(3, 40)], 400)
        assert m_keys(lmq) == {}
    finally:
        lmq.close()
    lmq = LmqStore(path)  # cold cache
    try:
        assert [lmq.max_offset(n) for n in ("%LMQ%a", "%LMQ%ab", "%LMQ%b", "%LMQ%")] == [
            40, 1, 2, 0]
        assert lmq.min_offset("%LMQ%a") == 0 and lmq.exists("%LMQ%ab")
        assert not lmq.exists("%LMQ%c") and not lmq.exists("%LMQ%a0")
        assert sorted(lmq.queue_names()) == ["%LMQ%a", "%LMQ%ab", "%LMQ%b"]
        assert lmq.stats() == (3, 43)
        # offsets continue from the derived max, in one batch with a cold queue
        lmq._meta.clear()
        touched = lmq.write_fanout([(["%LMQ%b", "%LMQ%ab"], [2, 1], 400, 10, 0, 1)], 410)
        assert touched == {"%LMQ%b": 3, "%LMQ%ab": 2}
        assert [e[0] for e in lmq.entries("%LMQ%b", 0, 10)] == [0, 10, 400]
    finally:
        lmq.close()


def test_dispatch_advances_each_cached_queue_alone(tmp_path: Path) -> None:
    """Dispatch advances cached queues in place: queues first known together -- new ones
    known without a read while the cache is complete, and ones read in one call -- each
    have metadata of their own, so advancing one moves no other."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.warm()  # an empty database: every name is known to be new
        assert lmq.complete
        assert lmq.max_offsets(["%LMQ%n1", "%LMQ%n2", "%LMQ%n3"]) == {
            "%LMQ%n1": 0, "%LMQ%n2": 0, "%LMQ%n3": 0}
        lmq.write_fanout([(["%LMQ%n1", "%LMQ%n2", "%LMQ%n3"], [0, 0, 0], 0, 10, 0, 1)], 10)
        assert lmq.write_fanout([(["%LMQ%n1"], [1], 10, 10, 0, 1),
                                 (["%LMQ%n1", "%LMQ%n3"], [2, 1], 20, 10, 0, 1)], 30) == {
            "%LMQ%n1": 3, "%LMQ%n3": 2}
        assert [lmq.max_offset(n) for n in ("%LMQ%n1", "%LMQ%n2", "%LMQ%n3")] == [3, 1, 2]
        lmq._meta.clear()
        lmq.complete = False
        assert lmq.max_offsets(["%LMQ%n2", "%LMQ%n3"]) == {"%LMQ%n2": 1, "%LMQ%n3": 2}
        lmq.write_fanout([(["%LMQ%n2"], [1], 30, 10, 0, 1)], 40)
        assert [lmq.max_offset(n) for n in ("%LMQ%n1", "%LMQ%n2", "%LMQ%n3")] == [3, 2, 2]
        assert [e[0] for e in lmq.entries("%LMQ%n1", 0, 10)] == [0, 10, 20]
    finally:
        lmq.close()


def test_metadata_is_kept_where_entries_cannot_show_it(tmp_path: Path) -> None:
    """``M`` is written for a queue first seen past 0, when expiry raises a minimum (or
    empties a queue) and for a tombstone; a cold cache reads the same offsets."""
    path = tmp_path / "lmq"
    lmq = LmqStore(path)
    try:
        lmq.write([LmqEntry("%LMQ%late", o, 100 + o, 1, 0, 1) for o in (5, 6)], 200)
        lmq.write([LmqEntry("%LMQ%gone", o, o, 1, 0, 1) for o in range(4)]
                  + [LmqEntry("%LMQ%half", o, 50 * o, 1, 0, 1) for o in range(4)]
                  + [LmqEntry("%LMQ%dead", 0, 150, 1, 0, 1)], 300)
        assert set(m_keys(lmq)) == {b"M%LMQ%late"}
        assert lmq.expire_below(100) == 4 + 2  # gone@0..3, half@0..1
        lmq.delete_queue("%LMQ%dead", 300)
        expected = {"%LMQ%late": (5, 7), "%LMQ%gone": (4, 4), "%LMQ%half": (2, 4),
                    "%LMQ%dead": (0, 0)}
        assert {n: (lmq.min_offset(n), lmq.max_offset(n)) for n in expected} == expected
        stats = lmq.stats()
    finally:
        lmq.close()
    lmq = LmqStore(path)
    try:
        assert {n: (lmq.min_offset(n), lmq.max_offset(n)) for n in expected} == expected
        assert lmq.floor("%LMQ%dead") == 300
        assert sorted(lmq.queue_names()) == ["%LMQ%gone", "%LMQ%half", "%LMQ%late"]
        assert lmq.stats() == stats == (3, 2 + 0 + 2)
    finally:
        lmq.close()


def test_walks_jump_over_long_queues(tmp_path: Path) -> None:
    lmq = LmqStore(tmp_path / "lmq")
    try:
        sizes = {"%LMQ%a": 1, "%LMQ%b": 15, "%LMQ%c": 16, "%LMQ%d": 17, "%LMQ%e": 500,
                 "%LMQ%p3": 3, "%LMQ%p4": 4, "%LMQ%p5": 5}
        lmq.write([LmqEntry(n, o, o, 1, 0, 1) for n, k in sizes.items() for o in range(k)],
                  1000)
        lmq._meta.clear()  # misses: point lookups for short queues, a seek for long ones
        assert {n: lmq.max_offset(n) for n in sizes} == sizes
        sizes = dict(sorted(sizes.items()))
        assert lmq.stats() == (len(sizes), sum(sizes.values()))
        assert list(lmq.queue_names()) == list(sizes)
        assert [(n, f, last) for n, f, last, _v in lmq._spans(b"%LMQ%b")] == [
            (n.encode(), 0, k - 1) for n, k in sizes.items() if n > "%LMQ%b"]
    finally:
        lmq.close()


def test_offsets_continue_after_a_crash_with_a_cold_cache(lmq_cfg: Cfg,
                                                          open_store: OpenStore,
                                                          tmp_path: Path) -> None:
    """Restart (crash and clean): the put side and the reader find every queue's max
    offset from its entries, and new fan-outs continue there."""
    store = open_store(**lmq_cfg)
    names = [f"%LMQ%r{i}" for i in range(30)]
    for i in range(90):
        fan_out(store, i % 2, b"%03d" % i, names[i % 30: i % 30 + 3])
    assert store.wait_dispatched()
    crashed = open_store(crash_copy(store, tmp_path / "crashed"), **lmq_cfg)
    store.shutdown()
    restarted = open_store(Path(store.config.store_path_root_dir), **lmq_cfg)
    for again in (crashed, restarted):
        for i in range(30):
            fan_out(again, 0, b"n%02d" % i, names[i: i + 1])
        expected = expected_from_log(again)
        for name in names:
            assert [bytes(r.body) for r in lmq_records(again, name)] == expected[name]
            assert expected[name][-1] == b"n%02d" % names.index(name)


@settings(deadline=None, max_examples=40,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(["%LMQ%a", "%LMQ%b", "%LMQ%ab", "%LMQ%z9",
                                          "%LMQ%\u00e9", "%LMQ%a\u00e9"]),
                         min_size=1, max_size=4, unique=True), min_size=1, max_size=40))
def test_grouped_fanout_stores_what_log_order_stores(
        tmp_path_factory: pytest.TempPathFactory, fanouts: list[list[str]]) -> None:
    """The dispatcher's fan-out goes to RocksDB grouped per queue: every entry, value and
    max offset equals what one ``write`` per entry in log order stores."""
    nxt: dict[str, int] = defaultdict(int)
    records: list[tuple[list[str], list[int], int, int, int, int]] = []
    for i, names in enumerate(fanouts):
        records.append((names, [nxt[n] for n in names], 100 * i, 50 + i, i % 3, 1000 + i))
        for n in names:
            nxt[n] += 1
    base = tmp_path_factory.mktemp("groups")
    grouped, plain = LmqStore(base / "grouped"), LmqStore(base / "plain")
    try:
        grouped.write_fanout(records, 100 * len(records))
        plain.write([LmqEntry(n, o, phys, size, tags, ts)
                     for names, offsets, phys, size, tags, ts in records
                     for n, o in zip(names, offsets, strict=True)], 100 * len(records))
        assert dict(grouped.db.items()) == dict(plain.db.items())
        for name, count in nxt.items():
            assert grouped.max_offset(name) == count
            assert len(grouped.entries(name, 0, count + 1)) == count
    finally:
        grouped.close()
        plain.close()


# ---------------------------------------------------------------------- pages for replicas

_NAMES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1,
                 max_size=6).map(lambda s: "%LMQ%" + s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.tuples(_NAMES, st.sampled_from(["g", "g\x01", "h", "gg"])),
                       st.integers(0, 1 << 40), max_size=30),
       st.dictionaries(_NAMES, st.integers(1, 1 << 40), max_size=10), st.integers(1, 7))
def test_offsets_and_tombstones_come_in_pages_each_row_once(
        tmp_path_factory: pytest.TempPathFactory, offsets: dict[tuple[str, str], int],
        tombstones: dict[str, int], limit: int) -> None:
    lmq = LmqStore(tmp_path_factory.mktemp("lmq"))
    try:
        for (name, group), offset in offsets.items():
            lmq.commit_offset(group, name, offset)
        for name, floor in tombstones.items():
            lmq.delete_queue(name, floor)
        rows: list[tuple[str, str, int]] = []
        after: tuple[str, str] | None = None
        while page := lmq.offsets_after(after, limit):
            assert len(page) <= limit
            rows += page
            after = page[-1][:2]
        kept = {k: v for k, v in offsets.items() if k[0] not in tombstones}
        assert rows == sorted((n, g, o) for (n, g), o in kept.items())  # byte order
        stones: list[tuple[str, int]] = []
        name_after: str | None = None
        while page2 := lmq.tombstones_after(name_after, limit):
            stones += page2
            name_after = page2[-1][0]
        assert sorted(stones) == sorted(tombstones.items())
    finally:
        lmq.close()


def test_fanout_below_a_tombstone_floor_is_dropped_per_queue(tmp_path: Path) -> None:
    """A record appended before its LMQ was deleted and dispatched after leaves no entry
    in that queue, and still its entries in the others."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write_fanout([(["%LMQ%a", "%LMQ%b"], [0, 0], 0, 10, 0, 1)], 10)
        assert lmq.delete_queue("%LMQ%a", 100)
        lmq.write_fanout([(["%LMQ%b", "%LMQ%a", "%LMQ%c"], [1, 1, 0], 50, 10, 0, 1),
                          (["%LMQ%a", "%LMQ%b"], [0, 2], 100, 10, 0, 1)], 110)
        assert [e[0] for e in lmq.entries("%LMQ%a", 0, 10)] == [100]
        assert [bytes(k) for k in lmq.db.keys(from_key=b"E%LMQ%a\x00")
                if bytes(k).startswith(b"E%LMQ%a\x00")] == [b"E%LMQ%a\x00" + bytes(8)]
        assert [e[0] for e in lmq.entries("%LMQ%b", 0, 10)] == [0, 50, 100]
        assert [e[0] for e in lmq.entries("%LMQ%c", 0, 10)] == [50]
        assert [lmq.max_offset(n) for n in ("%LMQ%a", "%LMQ%b", "%LMQ%c")] == [1, 3, 1]
    finally:
        lmq.close()


def test_a_queue_deleted_ahead_of_its_old_records_starts_at_its_new_first_offset(
        tmp_path: Path) -> None:
    """A tombstone whose floor lies past the log dispatched so far (a replica lagging its
    master): a round holding the deleted queue's last old record and the queue's first
    records created again starts the queue at 0, not at the old record's offset."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write_fanout([(["%LMQ%a", "%LMQ%b"], [0, 0], 0, 10, 0, 1)], 10)
        lmq.delete_queue("%LMQ%a", 100)
        lmq.write_fanout([(["%LMQ%a", "%LMQ%b"], [1, 1], 50, 10, 0, 1),
                          (["%LMQ%a", "%LMQ%b"], [0, 2], 100, 10, 0, 1),
                          (["%LMQ%a"], [1], 110, 10, 0, 1)], 120)
        assert (lmq.min_offset("%LMQ%a"), lmq.max_offset("%LMQ%a")) == (0, 2)
        assert [e[0] for e in lmq.entries("%LMQ%a", 0, 10)] == [100, 110]
    finally:
        lmq.close()


def test_a_queue_tells_whether_it_holds_an_entry_from_an_offset(tmp_path: Path) -> None:
    """Single entries and runs alike, whatever the key order of their offsets."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write_fanout([(["%LMQ%a"], [i], 100 * i, 10, 0, 1) for i in range(20)], 2000)
        lmq.write([LmqEntry("%LMQ%b", 0, 900, 10, 0, 1), LmqEntry("%LMQ%b", 1, 50, 10, 0, 1)],
                  2000)
        assert lmq.holds_from("%LMQ%a", 1900) and not lmq.holds_from("%LMQ%a", 1901)
        assert lmq.holds_from("%LMQ%b", 900) and not lmq.holds_from("%LMQ%b", 901)
        assert not lmq.holds_from("%LMQ%none", 0)
        assert not lmq.holds_from("%LMQ%", 0)  # a prefix of the others' names
    finally:
        lmq.close()


@settings(deadline=None, max_examples=25,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.integers(0, 12), kept=st.integers(0, 12), start=st.integers(0, 3),
       later=st.integers(0, 5))
def test_a_deletion_keeps_the_entries_of_the_queue_created_again(
        tmp_path_factory: pytest.TempPathFactory, old: int, kept: int, start: int,
        later: int) -> None:
    """``delete_queue`` with the entries of records at or above the floor: the queue holds
    those, from their first offset, before and after a reopen, and dispatch continues
    it; the old entries and offsets are gone, and the counts say so."""
    path = tmp_path_factory.mktemp("kept")
    new = [LmqEntry("%LMQ%a", start + i, 1000 + 10 * i, 10, 7, 1) for i in range(kept)]
    lmq = LmqStore(path)
    try:
        lmq.write_fanout([(["%LMQ%a", "%LMQ%b"], [i, i], 10 * i, 10, 0, 1)
                          for i in range(old)], 10 * old)
        lmq.commit_offset("g", "%LMQ%a", old)
        assert lmq.first_stats() == lmq.stats()  # counted: the deletion keeps it exact
        with pytest.raises(ValueError):
            lmq.delete_queue("%LMQ%a", 1000, [LmqEntry("%LMQ%a", 0, 999, 10, 7, 1)])
        assert lmq.delete_queue("%LMQ%a", 1000, new) == (old > 0)
        assert lmq.cached_stats() == lmq.stats()
    finally:
        lmq.close()
    lmq = LmqStore(path)
    try:
        low, high = (start, start + kept) if kept else (0, 0)
        assert (lmq.min_offset("%LMQ%a"), lmq.max_offset("%LMQ%a")) == (low, high)
        assert lmq.entries("%LMQ%a", low, 100) == [(e.phys, e.size, e.tags) for e in new]
        assert lmq.offsets_of("%LMQ%a") == {} and lmq.floor("%LMQ%a") == 1000
        nxt = high if kept else start  # the master's offsets go on from there
        lmq.write_fanout([(["%LMQ%a"], [nxt + i], 2000 + 10 * i, 10, 0, 1)
                          for i in range(later)], 2000 + 10 * later)
        assert lmq.max_offset("%LMQ%a") == (nxt + later if kept or later else 0)
        assert lmq.max_offset("%LMQ%b") == old
    finally:
        lmq.close()


def test_fanout_to_a_cached_queue_first_seen_past_zero_keeps_its_start(
        tmp_path: Path) -> None:
    """A queue already looked up (cached as new) whose first entry comes past 0 -- its
    start expired before a rebuild -- starts there, in a round with ordinary queues."""
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.write_fanout([(["%LMQ%b"], [0], 0, 10, 0, 1)], 10)
        assert lmq.max_offset("%LMQ%late") == 0  # cached as a new queue
        lmq.write_fanout([(["%LMQ%b", "%LMQ%late"], [1, 5], 10, 10, 0, 1),
                          (["%LMQ%late"], [6], 20, 10, 0, 1)], 30)
        assert (lmq.min_offset("%LMQ%late"), lmq.max_offset("%LMQ%late")) == (5, 7)
        assert (lmq.min_offset("%LMQ%b"), lmq.max_offset("%LMQ%b")) == (0, 2)
    finally:
        lmq.close()
    lmq = LmqStore(tmp_path / "lmq")
    try:
        assert (lmq.min_offset("%LMQ%late"), lmq.max_offset("%LMQ%late")) == (5, 7)
    finally:
        lmq.close()


# ---------------------------------------------------------------------- bounded caches


def test_offsets_stay_exact_while_many_queues_pass_through_small_caches(
        lmq_cfg: Cfg, open_store: OpenStore, store_root: Path) -> None:
    """Hundreds of distinct LMQs through caches of 16: the LMQ store's metadata cache and
    the appender's next offsets stay bounded, queues read back after they left the
    caches continue at their offsets, and so do they after a restart."""
    limit = 16
    store = open_store(lmq_cached_queues=limit, **lmq_cfg)
    assert store.lmq is not None
    rng = random.Random(5)
    pool = [f"%LMQ%m{i}" for i in range(300)]
    # The appender's two generations plus a round's queues; the LMQ store keeps those
    # pinned and, while they fill its cache, trims again only once it has grown by half,
    # plus a round's queues read meanwhile. Far below the 300 queues an unbounded cache
    # would hold.
    next_bound = 2 * limit + 10 * 3
    cached_bound = next_bound + next_bound // 2 + 10 * 3
    for r in range(40):
        for i in range(10):
            fan_out(store, i % 2, b"%d-%d" % (r, i), rng.sample(pool, 3))
        assert store.wait_dispatched()
        assert len(store.appender.lmq_next) <= next_bound
        assert store.lmq.cached() <= cached_bound
    expected = expected_from_log(store)
    assert len(expected) > 250 and set(expected) <= set(pool)
    for name in pool:
        assert [bytes(r.body) for r in lmq_records(store, name)] == expected.get(name, [])
        assert store.lmq.cached() <= cached_bound
    store.shutdown()
    again = open_store(lmq_cached_queues=limit, **lmq_cfg)
    for i, name in enumerate(pool):
        fan_out(again, 0, b"after%d" % i, [name])
    expected = expected_from_log(again)
    for name in pool:
        assert [bytes(r.body) for r in lmq_records(again, name)] == expected[name]
        assert expected[name][-1] == b"after%d" % pool.index(name)


def test_offsets_not_yet_dispatched_are_kept_past_the_bound(
        lmq_cfg: Cfg, open_store: OpenStore) -> None:
    """With dispatch stopped, the appender must keep every next offset it handed out,
    however many queues: the LMQ store does not know them yet. A queue deleted meanwhile
    is forgotten in whichever generation holds it."""
    store = open_store(lmq_cached_queues=4, **lmq_cfg)
    assert store.dispatcher is not None
    store.dispatcher.pause()
    names = [f"%LMQ%p{i}" for i in range(30)]
    for rnd in range(3):
        for i, name in enumerate(names):
            fan_out(store, 0, b"%d-%d" % (rnd, i), [name, names[(i + 1) % 30]])
    assert len(store.appender.lmq_next) >= 30
    assert store.delete_lmq(names[0])  # handed out offsets, not dispatched: it existed
    fan_out(store, 0, b"reborn", [names[0]])
    store.dispatcher.resume()
    assert [bytes(r.body) for r in lmq_records(store, names[0])] == [b"reborn"]
    for i, name in enumerate(names[1:], 1):  # named by messages i - 1 and i of each round
        assert [bytes(r.body) for r in lmq_records(store, name)] == [
            b"%d-%d" % (rnd, k) for rnd in range(3) for k in (i - 1, i)]
    for i in range(10):  # dispatch keeps up again: the generations age out
        fan_out(store, 0, b"late%d" % i, [f"%LMQ%late{i}"])
        assert store.wait_dispatched()
    assert len(store.appender.lmq_next) <= 2 * 4 + 1


def test_queues_waiting_for_dispatch_stay_cached(lmq_cfg: Cfg, open_store: OpenStore) -> None:
    """While dispatch lags by more queues than the cache holds, the queues the appender
    handed offsets out for stay cached, so dispatch reads none of them again."""
    store = open_store(lmq_cached_queues=8, **lmq_cfg)
    assert store.dispatcher is not None and store.lmq is not None
    store.dispatcher.pause()
    for i in range(40):
        fan_out(store, 0, b"m%d" % i, [f"%LMQ%w{i}", f"%LMQ%v{i}"])
    db = store.lmq.db
    counting = _Counting(db)
    store.lmq.db = counting  # type: ignore[assignment]
    try:
        store.dispatcher.resume()
        assert store.wait_dispatched()
        assert (counting.keys_read, counting.seeks) == (0, 0)
    finally:
        store.lmq.db = db
    for i in range(40):
        assert [bytes(r.body) for r in lmq_records(store, f"%LMQ%v{i}")] == [b"m%d" % i]
    cached = store.lmq.cached()
    assert cached <= 2 * 40 + 1
    for i in range(20):  # dispatch keeps up: new queues go to the table, not the cache
        fan_out(store, 0, b"late%d" % i, [f"%LMQ%late{i}"])
        assert store.wait_dispatched()
    assert store.lmq.cached() <= cached
    assert [store.max_offset(f"%LMQ%late{i}", 0) for i in range(20)] == [1] * 20


class _Counting:
    """The LMQ store's database with its reads counted: keys asked for, iterators made,
    seeks."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.keys_read = self.iterators = self.seeks = 0

    def get(self, key: Any, *args: Any) -> Any:
        self.keys_read += len(key) if isinstance(key, list) else 1
        return self.db.get(key, *args)

    def iter(self, *args: Any) -> Any:
        self.iterators += 1
        it = self.db.iter(*args)
        counter = self

        class Iter:
            def __getattr__(self, name: str) -> Any:
                if name.startswith("seek"):
                    counter.seeks += 1
                return getattr(it, name)

        return Iter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_first_use_reads_each_queue_once(tmp_path: Path) -> None:
    """A lookup of queues not cached reads each once: its ``M`` key and one reverse seek
    to its last run, with one iterator for them all -- however many runs a queue has,
    and for a queue that does not exist."""
    path = tmp_path / "lmq"
    lmq = LmqStore(path)
    sizes = {f"%LMQ%s{i}": 1 + i % 7 for i in range(40)}
    try:
        for rnd in range(7):  # one run per round and queue
            lmq.write_fanout([([n for n, k in sizes.items() if k > rnd],
                               [rnd] * sum(k > rnd for k in sizes.values()),
                               100 * rnd, 10, 0, 1)], 100 * rnd + 10)
    finally:
        lmq.close()
    lmq = LmqStore(path)
    try:
        db = lmq.db
        counting = _Counting(db)
        lmq.db = counting  # type: ignore[assignment]
        wanted = [*sizes, "%LMQ%never", "%LMQ%s1x"]
        assert lmq.max_offsets(wanted) == {**sizes, "%LMQ%never": 0, "%LMQ%s1x": 0}
        assert (counting.keys_read, counting.seeks) == (len(wanted), len(wanted))
        assert counting.iterators <= 1
        assert lmq.max_offsets(wanted) == {**sizes, "%LMQ%never": 0, "%LMQ%s1x": 0}
        assert (counting.keys_read, counting.seeks) == (len(wanted), len(wanted))  # cached
        # a dispatch round naming queues not cached reads them together too
        lmq._meta.clear()
        counting.keys_read = counting.seeks = counting.iterators = 0
        names = list(sizes)
        lmq.write_fanout([(names, [sizes[n] for n in names], 1000, 10, 0, 1)], 1010)
        assert (counting.keys_read, counting.seeks, counting.iterators) == (40, 40, 1)
        assert lmq.max_offsets(names) == {n: k + 1 for n, k in sizes.items()}
        lmq.db = db
    finally:
        lmq.close()


def test_a_miss_while_a_writer_holds_the_store_does_not_wait(tmp_path: Path) -> None:
    """A miss while a writer holds the lock (a dispatch round being written) reads the
    database without waiting. A reader's value is not cached (the round may be about to
    change it); the appender's is, as no round publishes a queue it asks about -- unless
    a trim or another writer ran during the read."""
    lmq = LmqStore(tmp_path / "lmq", cached_queues=8)
    try:
        lmq.write([LmqEntry(n, o, o, 1, 0, 1) for n in ("%LMQ%a", "%LMQ%c") for o in range(3)],
                  10)
        lmq._meta.clear()
        with lmq._lock:
            assert lmq.max_offset("%LMQ%a") == 3 and lmq.cached() == 0
            assert lmq.max_offsets(["%LMQ%a", "%LMQ%b"]) == {"%LMQ%a": 3, "%LMQ%b": 0}
            assert lmq._meta == {"%LMQ%a": [3, 0, 0], "%LMQ%b": [0, 0, 0]}
            load = lmq._load_metas

            def overlapped(names: list[str]) -> list[list[int]]:
                lmq._changes += 2  # a trim (or a deletion, expiry) ran meanwhile
                return load(names)

            lmq._load_metas = overlapped  # type: ignore[method-assign]
            assert lmq.max_offsets(["%LMQ%c"]) == {"%LMQ%c": 3}
            assert "%LMQ%c" not in lmq._meta
            lmq._load_metas = load  # type: ignore[method-assign]
        assert lmq.max_offset("%LMQ%c") == 3 and lmq.cached() == 3
        for i in range(20):
            assert not lmq.exists(f"%LMQ%none{i}")
            assert lmq.cached() <= 8 + 1  # trimmed before each fill of one queue
    finally:
        lmq.close()


def test_cache_sizes_below_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lmqCachedQueues"):
        small_config(tmp_path, lmq_cached_queues=0)
    with pytest.raises(ValueError, match="at least 1"):
        LmqStore(tmp_path / "lmq", cached_queues=0)
    with pytest.raises(ConfigError, match="lmqKnownQueues"):
        small_config(tmp_path, lmq_known_queues=-1)
    with pytest.raises(ValueError, match="negative"):
        LmqStore(tmp_path / "lmq", known_queues=-1)


@pytest.mark.parametrize(("limit", "known"), [(3, 0), (100, 0), (3, 100), (3, 2)])
def test_a_start_warms_the_cache_with_what_lookups_would_read(tmp_path: Path, limit: int,
                                                              known: int) -> None:
    """:meth:`LmqStore.warm` caches, for up to ``cached_queues`` queues, exactly what a
    cold lookup reads: queues with entries only, with ``M`` too (a late start, expiry),
    emptied by expiry, and deleted; the next ``known_queues`` go to the table, from
    which a lookup takes them without a read."""
    path = tmp_path / "lmq"
    lmq = LmqStore(path)
    try:
        lmq.write([LmqEntry("%LMQ%late", o, 100 + o, 1, 0, 1) for o in (5, 6)], 200)
        lmq.write([LmqEntry("%LMQ%gone", o, o, 1, 0, 1) for o in range(4)]
                  + [LmqEntry("%LMQ%half", o, 50 * o, 1, 0, 1) for o in range(4)]
                  + [LmqEntry("%LMQ%dead", 0, 150, 1, 0, 1)]
                  + [LmqEntry(f"%LMQ%e{i}", o, 200 + o, 1, 0, 1)
                     for i in range(5) for o in range(i + 1)], 300)
        lmq.expire_below(100)
        lmq.delete_queue("%LMQ%dead", 300)
    finally:
        lmq.close()
    names = ["%LMQ%dead", "%LMQ%gone", "%LMQ%half", "%LMQ%late",
             *(f"%LMQ%e{i}" for i in range(5))]
    cold = LmqStore(path)
    try:
        want = dict(zip(names, cold._load_metas(names), strict=True))
    finally:
        cold.close()
    assert want["%LMQ%late"] == [7, 5, 0] and want["%LMQ%dead"] == [0, 0, 300]
    warm = LmqStore(path, cached_queues=limit, known_queues=known)
    try:
        assert warm.warm() == min(limit + known, len(names))
        assert warm.cached() == min(limit, len(names))
        assert warm.complete == (limit + known >= len(names))
        assert {n: m for n, m in warm._meta.items()} == {
            n: want[n] for n in sorted(names)[:limit]}
        db = warm.db
        counting = _Counting(db)
        warm.db = counting  # type: ignore[assignment]
        seen = sorted(names)[:limit + known]
        assert dict(zip(seen, map(warm._read_meta, seen), strict=True)) == {
            n: want[n] for n in seen}
        assert (counting.keys_read, counting.seeks) == (0, 0)
        warm.db = db
    finally:
        warm.close()


def test_a_complete_cache_knows_new_queues_without_a_read(lmq_cfg: Cfg,
                                                          open_store: OpenStore) -> None:
    """After a start whose warm-up saw every queue, a queue not cached does not exist:
    its first use reads nothing. Without the table, once a queue has left the cache,
    misses read again."""
    store = open_store(lmq_cached_queues=8, lmq_known_queues=0, **lmq_cfg)
    for i in range(3):
        fan_out(store, 0, b"m%d" % i, ["%LMQ%a", f"%LMQ%n{i}"])
    assert store.wait_dispatched()
    store.shutdown()
    store = open_store(lmq_cached_queues=8, lmq_known_queues=0, **lmq_cfg)
    lmq = store.lmq
    assert lmq is not None and lmq.warmed.wait(30)
    assert lmq.complete and lmq.cached() == 4
    db = lmq.db
    counting = _Counting(db)
    lmq.db = counting  # type: ignore[assignment]
    try:
        fan_out(store, 0, b"new", ["%LMQ%a", "%LMQ%b", "%LMQ%c"])
        assert store.wait_dispatched()
        assert (store.max_offset("%LMQ%b", 0), store.max_offset("%LMQ%z", 0)) == (1, 0)
        assert (counting.keys_read, counting.seeks) == (0, 0)
        for i in range(10):  # past the bound: queues leave the cache, misses read
            fan_out(store, 0, b"more%d" % i, [f"%LMQ%x{i}"])
            assert store.wait_dispatched()
        assert not lmq.complete
        assert store.max_offset("%LMQ%n0", 0) == 1 and counting.seeks >= 1
    finally:
        lmq.db = db
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%a")] == [
        b"m0", b"m1", b"m2", b"new"]


def test_queues_that_leave_the_cache_are_taken_from_the_table_without_a_read(
        lmq_cfg: Cfg, open_store: OpenStore) -> None:
    """With the table, a queue the cache drops keeps its metadata in memory: sends that
    name it again, dispatch, and new names read nothing from RocksDB, and the offsets
    are those a store reading everything from the database hands out."""
    store = open_store(lmq_cached_queues=4, lmq_known_queues=100, **lmq_cfg)
    for i in range(6):
        fan_out(store, 0, b"m%d" % i, ["%LMQ%a", f"%LMQ%n{i}"])
    assert store.wait_dispatched()
    store.shutdown()
    store = open_store(lmq_cached_queues=4, lmq_known_queues=100, **lmq_cfg)
    lmq = store.lmq
    assert lmq is not None and lmq.warmed.wait(30)
    assert lmq.complete and lmq.cached() == 4 and lmq.known() == 3
    db = lmq.db
    counting = _Counting(db)
    lmq.db = counting  # type: ignore[assignment]
    try:
        for i in range(12):  # far past the cache: queues go through the table and back
            fan_out(store, 0, b"more%d" % i, [f"%LMQ%n{i % 6}", f"%LMQ%x{i}", "%LMQ%a"])
            assert store.wait_dispatched()
        assert lmq.complete
        assert (counting.keys_read, counting.seeks) == (0, 0)
        assert [store.max_offset(f"%LMQ%n{i}", 0) for i in range(6)] == [3] * 6
        assert store.max_offset("%LMQ%a", 0) == 18
        assert store.max_offset("%LMQ%never", 0) == 0
        assert (counting.keys_read, counting.seeks) == (0, 0)
    finally:
        lmq.db = db
    assert [bytes(r.body) for r in lmq_records(store, "%LMQ%n1")] == [
        b"m1", b"more1", b"more7"]
    store.shutdown()
    store = open_store(lmq_cached_queues=4, lmq_known_queues=0, **lmq_cfg)
    assert [store.max_offset(f"%LMQ%n{i}", 0) for i in range(6)] == [3] * 6
    assert [store.max_offset(f"%LMQ%x{i}", 0) for i in range(12)] == [1] * 12


def test_fan_outs_to_the_tables_queues_leave_the_cache_as_it_was(tmp_path: Path) -> None:
    """Past the cache, a queue's lookup by the appender and a dispatch round into it
    take it from the table and advance it there, new queues too once the store is
    complete: the cache neither grows nor turns over (no trim), nothing is read from
    RocksDB, and the offsets are those a store reading the database answers."""
    path = tmp_path / "lmq"
    names = [f"%LMQ%t{i:02d}" for i in range(12)]
    lmq = LmqStore(path)
    try:
        for i, name in enumerate(names):
            lmq.write([LmqEntry(name, o, 10 * i + o, 1, 0, 1) for o in range(i % 3 + 1)],
                      10 * i + 3)
    finally:
        lmq.close()
    lmq = LmqStore(path, cached_queues=4, known_queues=100)
    try:
        lmq.warm()
        assert lmq.complete and lmq.cached() == 4 and lmq.known() == 8
        cached = dict(lmq._meta)
        db = lmq.db
        counting = _Counting(db)
        lmq.db = counting  # type: ignore[assignment]
        try:
            targets = [*names[4:], "%LMQ%new"]
            nexts = lmq.max_offsets(targets)
            assert nexts == {**{n: i % 3 + 1 for i, n in enumerate(names) if i >= 4},
                             "%LMQ%new": 0}
            assert lmq.write_fanout([(targets, [nexts[n] for n in targets], 500, 1, 0, 1),
                                     (names[5:7], [nexts[n] + 1 for n in names[5:7]],
                                      501, 1, 0, 1)], 502) == {
                **{n: nexts[n] + 1 for n in targets}, names[5]: nexts[names[5]] + 2,
                names[6]: nexts[names[6]] + 2}
            assert (counting.keys_read, counting.seeks) == (0, 0)
        finally:
            lmq.db = db
        assert lmq._meta == cached and lmq._trims == 0 and lmq.known() == 9
        assert lmq.max_offsets(names) == {n: i % 3 + 2 + (i in (5, 6))
                                          for i, n in enumerate(names) if i >= 4} | {
            n: i % 3 + 1 for i, n in enumerate(names) if i < 4}
        assert [e[0] for e in lmq.entries(names[5], 0, 10)] == [50, 51, 52, 500, 501]
    finally:
        lmq.close()
    cold = LmqStore(path, cached_queues=100, known_queues=0)
    try:
        assert cold._load_metas([*names, "%LMQ%new"]) == [
            [i % 3 + 2 + (i in (5, 6)) if i >= 4 else i % 3 + 1, 0, 0]
            for i in range(12)] + [[1, 0, 0]]
    finally:
        cold.close()


def test_a_trim_survives_readers_filling_the_cache_meanwhile(tmp_path: Path) -> None:
    """A reader fills the cache without the lock while a writer's trim walks it (the
    appender's lookups while dispatch writes): the trim goes on, and every queue keeps
    its metadata. The pinned set is the seam: each lookup in it fills one queue."""
    lmq = LmqStore(tmp_path / "lmq", cached_queues=4, known_queues=100)
    try:
        names = [f"%LMQ%q{i}" for i in range(12)]
        for i, name in enumerate(names):
            lmq.write([LmqEntry(name, o, 100 * i + o, 1, 0, 1) for o in range(i % 3 + 1)],
                      100 * i + 3)
        cache = lmq._meta

        class Filling(set[str]):
            def __contains__(self, name: object) -> bool:
                for other in names:  # as _metas fills for a reader: table, else database
                    if other not in cache:
                        cache.setdefault(other, lmq._load_metas([other])[0])
                        break
                return False

        lmq.pinned = lambda: (Filling(),)
        for i in range(12, 20):
            lmq.write([LmqEntry(f"%LMQ%q{i}", 0, 100 * i, 1, 0, 1)], 100 * i + 1)
        assert [lmq.max_offset(name) for name in names] == [i % 3 + 1 for i in range(12)]
        assert [lmq.max_offset(f"%LMQ%q{i}") for i in range(12, 20)] == [1] * 8
    finally:
        lmq.close()


# ---------------------------------------------------------------------- a start's walk


class _HeldWalk:
    """:meth:`LmqStore._walk_metas` held after its first ``before`` rows until
    :attr:`gate` is set -- a walk slower than anything else the start does. A walk that
    runs on the start's own thread waits out :attr:`timeout` instead (:attr:`timed_out`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, before: int,
                 timeout: float = 30.0) -> None:
        self.gate = threading.Event()
        self.reached = threading.Event()
        self.timed_out = False
        walk_metas = LmqStore._walk_metas
        held = self

        def walk(store: LmqStore) -> Any:
            rows = walk_metas(store)
            for _ in range(before):
                row = next(rows, None)
                if row is None:
                    break
                yield row
            held.reached.set()
            held.timed_out = not held.gate.wait(timeout)
            yield from rows

        monkeypatch.setattr(LmqStore, "_walk_metas", walk)


def test_a_start_serves_at_once_while_its_walk_is_held(
        lmq_cfg: Cfg, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start does not wait for the walk that fills the cache and the table: with the
    walk held after two queues, the store is open, and fan-outs to queues the walk has
    taken, queues it has not reached, and new queues get the next offsets -- as many
    queues pass through the small cache into the table meanwhile. Once the walk goes
    on it leaves out what the store learnt since, so every queue still reads back as
    the commit log says, and the store is complete."""
    names = [f"%LMQ%w{i:02d}" for i in range(12)]
    store = open_store(lmq_cached_queues=4, lmq_known_queues=100, **lmq_cfg)
    for i, name in enumerate(names):
        for k in range(i % 4 + 1):
            fan_out(store, 0, b"%s-%d" % (name.encode(), k), [name])
    assert store.wait_dispatched()
    store.shutdown()
    held = _HeldWalk(monkeypatch, before=2)
    store = open_store(lmq_cached_queues=4, lmq_known_queues=100, **lmq_cfg)
    assert not held.timed_out, "the start waited for its walk"
    lmq = store.lmq
    assert lmq is not None
    assert held.reached.wait(30) and not lmq.warmed.is_set()
    want = {name: i % 4 + 1 for i, name in enumerate(names)}
    for round_ in range(3):
        for i in range(0, 12, 2):  # the walk's first two, the rest it has not reached
            batch = [names[i], names[(i + 5) % 12], f"%LMQ%new{round_}-{i}"]
            fan_out(store, i % 3, b"r%d-%d" % (round_, i), batch)
            for name in batch:
                want[name] = want.get(name, 0) + 1
        assert store.wait_dispatched()
    assert not lmq.warmed.is_set() and not lmq.complete
    assert {name: store.max_offset(name, 0) for name in want} == want
    held.gate.set()
    assert lmq.warmed.wait(30) and not held.timed_out
    assert lmq.complete
    assert {name: store.max_offset(name, 0) for name in want} == want
    assert store.max_offset("%LMQ%never", 0) == 0
    fan_out(store, 0, b"after", names)
    assert store.wait_dispatched()
    log = expected_from_log(store)
    assert {name: len(bodies) for name, bodies in log.items()} == {
        name: want[name] + (name in names) for name in want}
    for name in names:
        assert [bytes(r.body) for r in lmq_records(store, name)] == log[name]


_walk_ops = st.lists(st.one_of(
    st.tuples(st.just("send"), st.lists(st.integers(0, 15), min_size=1, max_size=4,
                                        unique=True)),
    st.tuples(st.just("fanout"), st.lists(st.lists(st.integers(0, 15), min_size=1,
                                                   max_size=4, unique=True),
                                          min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 15))), max_size=12)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 3), min_size=1, max_size=16),
       cached=st.integers(1, 6), known=st.integers(0, 12),
       ops=st.lists(_walk_ops, min_size=1, max_size=8), step=st.integers(1, 3))
def test_a_walk_interleaved_with_writes_leaves_every_queue_exact(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        sizes: list[int], cached: int, known: int, ops: list[list[tuple[str, Any]]],
        step: int) -> None:
    """A start's walk taken a few rows at a time, with writes between its steps -- a
    dispatch of fan-outs (queues walked, not yet walked, new; entry by entry, and whole
    rounds, which advance the table's queues in place), deletions, trims into a small
    table or past a full one: afterwards every queue's metadata is what a store
    reading the database answers, and a store the walk left complete knows every
    queue it lacks is new."""
    path = tmp_path_factory.mktemp("walk") / "lmq"
    names = [f"%LMQ%p{i:02d}" for i in range(16)]
    lmq = LmqStore(path)
    phys = 0
    try:
        for i, n in enumerate(sizes):
            if n:
                lmq.write([LmqEntry(names[i], o, phys + o, 1, 0, 1) for o in range(n)],
                          phys + n)
                phys += n
    finally:
        lmq.close()
    monkeypatch.setattr("tidemq.store.lmq_store._WARM_STEP", step)
    pending = iter(ops)
    walk_metas = LmqStore._walk_metas
    store = LmqStore(path, cached_queues=cached, known_queues=known)

    def apply(batch: list[tuple[str, Any]]) -> None:
        nonlocal phys
        for op, arg in batch:
            if op == "send":
                entries = [LmqEntry(names[k], store.max_offset(names[k]), phys, 1, 0, 1)
                           for k in arg]
                phys += 1
                store.write(entries, phys)
            elif op == "fanout":  # the dispatcher's round, offsets as the appender's
                nexts = store.max_offsets({names[k] for rec in arg for k in rec})
                records = []
                for rec in arg:
                    targets = [names[k] for k in rec]
                    records.append((targets, [nexts[t] for t in targets], phys, 1, 0, 1))
                    nexts.update((t, nexts[t] + 1) for t in targets)
                    phys += 1
                store.write_fanout(records, phys)
            else:
                phys += 1
                store.delete_queue(names[arg], phys)

    def walk(s: LmqStore) -> Any:
        for row in walk_metas(s):
            batch = next(pending, None)
            if batch is not None:
                apply(batch)
            yield row

    monkeypatch.setattr(LmqStore, "_walk_metas", walk)
    try:
        store.warm()
        for batch in pending:  # what the walk was too short for
            apply(batch)
        metas = {name: store._read_meta(name) for name in names}
    finally:
        store.close()
    cold = LmqStore(path, cached_queues=100, known_queues=0)
    try:
        assert metas == dict(zip(names, cold._load_metas(names), strict=True))
    finally:
        cold.close()
    if store.complete:
        assert all(name in store._meta or name in store._table for name in names
                   if metas[name] != [0, 0, 0])
