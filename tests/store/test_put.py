"""put / put_batch results, store timestamps, time lookups."""

from __future__ import annotations

from pathlib import Path

from tidemq.formats.record import HostAddr, Record, decode_record
from tidemq.store.message_store import PutStatus

from .conftest import FakeClock, OpenStore, crash_copy, msg, read_queue


def test_put_returns_offsets_and_sizes(open_store: OpenStore) -> None:
    clock = FakeClock(5000)
    store = open_store(clock=clock)
    a = store.put("T", 0, msg(b"a" * 10, tags="TagA"))
    b = store.put("T", 0, msg(b"b" * 20))
    c = store.put_batch("T", 1, [msg(b"c" * 5), msg(b"d" * 6, tags="X"), msg(b"e")])
    d = store.put("T", 0, msg(b"f"))
    props_a = len(b"TAGS\x01TagA\x02")
    assert a.status is PutStatus.PUT_OK and a.count == 1
    assert (a.queue_offset, list(a.phys_offsets), list(a.sizes)) == (
        0, [0], [92 + 10 + props_a])
    assert (b.queue_offset, list(b.phys_offsets), list(b.sizes)) == (
        1, [a.sizes[0]], [92 + 20])
    base = a.sizes[0] + b.sizes[0]
    sizes_c = [92 + 5, 92 + 6 + len(b"TAGS\x01X\x02"), 92 + 1]
    assert c.queue_offset == 0 and c.count == 3
    assert list(c.sizes) == sizes_c
    assert list(c.phys_offsets) == [base, base + sizes_c[0], base + sizes_c[0] + sizes_c[1]]
    assert d.queue_offset == 2 and list(d.phys_offsets) == [base + sum(sizes_c)]
    assert [r.stored_bytes for r in (a, b, c, d)] == [sum(r.sizes) for r in (a, b, c, d)]
    assert a.wait_durable() is PutStatus.PUT_OK  # ASYNC_FLUSH: nothing to wait for
    # The stored records carry exactly those offsets and the returned store time.
    for result in (a, b, c, d):
        for phys, size in zip(result.phys_offsets, result.sizes, strict=True):
            view = store.read_record(phys)
            assert view is not None and len(view) == size
            rec = decode_record(view, check_crc=True, expected_physical_offset=phys)
            assert isinstance(rec, Record)
            assert rec.store_timestamp == result.store_timestamp == 5000
    q0 = read_queue(store, "T", 0)
    assert [bytes(r.body) for r in q0] == [b"a" * 10, b"b" * 20, b"f"]
    q1 = read_queue(store, "T", 1)
    assert [(r.queue_offset, r.physical_offset) for r in q1] == list(
        enumerate(c.phys_offsets))
    assert store.next_queue_offset("T", 0) == 3
    assert store.topics() == {"T": [0, 1]}


def test_store_timestamps_never_decrease(open_store: OpenStore) -> None:
    clock = FakeClock(2000)
    store = open_store(clock=clock)
    stamps = []
    for now, batch in [(2000, False), (3000, False), (1500, False), (1500, True), (900, True),
                       (3000, False), (3001, True), (10, False)]:
        clock.now = now
        if batch:
            res = store.put_batch("T", 0, [msg(b"x"), msg(b"y")])
        else:
            res = store.put("T", 0, msg(b"x"))
        stamps.append(res.store_timestamp)
    assert stamps == [2000, 3000, 3000, 3000, 3000, 3000, 3001, 3001]
    logged = [r.store_timestamp for r in read_queue(store, "T", 0)]
    assert logged == sorted(logged) and logged[-1] == 3001


def test_store_timestamps_never_decrease_across_restarts(open_store: OpenStore,
                                                         tmp_path: Path) -> None:
    clock = FakeClock(50_000)
    store = open_store(clock=clock, flush_interval_consume_queue=60_000)
    store.put("T", 0, msg(b"before"))
    assert store.wait_dispatched()
    crashed = crash_copy(store, tmp_path / "crashed")  # no checkpoint written yet
    store.shutdown()
    for root in (store.layout.root, crashed):  # clean restart, then crash restart
        clock.now = 10_000  # the wall clock stepped back while the broker was down
        reopened = open_store(root, clock=clock)
        res = reopened.put("T", 0, msg(b"after"))
        assert res.store_timestamp >= 50_000, root
        reopened.shutdown()


def test_offset_by_time_and_earliest_store_time(open_store: OpenStore) -> None:
    clock = FakeClock()
    store = open_store(clock=clock)
    assert store.earliest_store_time("T", 0) == -1
    assert store.offset_by_time("T", 0, 0) == 0
    for now in (1000, 2000, 2000, 2000, 3000, 5000):
        clock.now = now
        store.put("T", 0, msg(b"m"))
    assert store.wait_dispatched()
    assert store.earliest_store_time("T", 0) == 1000
    assert store.store_time_at("T", 0, 4) == 3000
    assert store.store_time_at("T", 0, 6) == -1
    expected = {0: 0, 1000: 0, 1001: 1, 2000: 1, 2001: 4, 3000: 4, 4000: 5, 5000: 5, 5001: 6}
    assert {ts: store.offset_by_time("T", 0, ts) for ts in expected} == expected
    assert store.offset_by_time("T", 9, 1000) == 0  # unknown queue


def test_ipv6_host_bits_of_a_sender_never_move_the_store_time(open_store: OpenStore) -> None:
    """A sender's SYSFLAG may carry the IPv6 host bits while the hosts stored are IPv4:
    the record is laid out for the hosts it holds, and STORETIMESTAMP goes where that
    layout puts it (it used to land 12 bytes further, over the store host's port and
    RECONSUMETIMES, leaving the store time 0)."""
    clock = FakeClock(1_700_000_000_000)
    store = open_store(clock=clock)
    born = HostAddr(b"\x0a\x00\x00\x09", 5555)
    one = store.put("T", 0, msg(b"single"), sys_flag=0x10, born_host=born, reconsume_times=3)
    few = store.put_batch("T", 0, [msg(b"a"), msg(b"bb")], sys_flag=0x30, born_host=born,
                          reconsume_times=2)
    for phys, reconsume in ((one.phys_offsets[0], 3), *((p, 2) for p in few.phys_offsets)):
        view = store.read_record(phys)
        assert view is not None
        got = decode_record(view)
        assert isinstance(got, Record)
        assert got.sys_flag & 0x30 == 0
        assert got.store_timestamp == clock.now
        assert got.store_host == store.store_host
        assert got.reconsume_times == reconsume
