"""``put_many``: one message each to many queues under one hold of the append lock --
the bytes, offsets and results of as many ``put`` calls, each put failing alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import MessageTooLarge, StoreReadOnly
from tidemq.formats.record import HostAddr, decode_record
from tidemq.store.message_store import MessageInput, MessageStore, PutResult

from .conftest import FakeClock, OpenStore, msg, small_config

BORN = HostAddr(b"\x0a\x01\x02\x03", 40001)
Put = tuple[int, MessageInput, int, int]

puts_strategy = st.lists(st.tuples(
    st.integers(0, 7),  # queue id
    st.builds(MessageInput,
              st.one_of(st.binary(min_size=0, max_size=300),
                        st.binary(min_size=1, max_size=300).map(memoryview)),
              st.sampled_from([b"", b"UNIQ_KEY\x01ab\x02WAIT\x01true\x02",
                               b"TAGS\x01t\x02KEYS\x01k1 k2\x02"]),
              st.integers(-(2**31), 2**31 - 1), st.integers(0, 99),
              st.sampled_from([(), ("u1",), ("u2", "k")])),
    st.integers(0, 0x7FFF),  # sys flag (the store clears the IPv6 host bits)
    st.integers(0, 2**40)),  # born timestamp (0: the store time)
    min_size=1, max_size=40)


def _positions(results: list[PutResult | Exception]) -> list[tuple[int, list[int], list[int]]]:
    return [(r.queue_offset, list(r.phys_offsets), list(r.sizes)) for r in results
            if isinstance(r, PutResult)]


def _stored(store: MessageStore, results: list[PutResult | Exception]) -> list[bytes]:
    out = []
    for res in results:
        assert isinstance(res, PutResult)
        record = store.read_record(res.phys_offsets[0])
        assert record is not None
        out.append(bytes(record))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(puts=puts_strategy, first=st.booleans())
def test_put_many_stores_what_puts_store(puts: list[Put], first: bool) -> None:
    """Record bytes, queue offsets and results equal those of one ``put`` per message
    (small segments: some calls roll to a new segment half-way)."""
    clock = FakeClock(1_700_000_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        stores = [MessageStore(small_config(Path(tmp) / name), clock=clock)
                  for name in ("many", "each")]
        for store in stores:
            store.start()
        try:
            many, each = stores
            if first:  # the topic known already: its shape cached by an earlier put
                for store in stores:
                    store.put("T", 0, msg(b"before"))
            got = many.put_many("T", puts, born_host=BORN, reconsume_times=3)
            want: list[PutResult | Exception] = [
                each.put("T", qid, m, sys_flag=f, born_timestamp=b, born_host=BORN,
                         reconsume_times=3) for qid, m, f, b in puts]
            assert _positions(got) == _positions(want)
            assert _stored(many, got) == _stored(each, want)
            assert many.wait_dispatched(10.0) and each.wait_dispatched(10.0)
            for qid in range(8):
                assert many.max_offset("T", qid) == each.max_offset("T", qid)
                mine = many.get("T", qid, 0, 64, 1 << 20)
                theirs = each.get("T", qid, 0, 64, 1 << 20)
                assert [bytes(b) for b in mine.buffers] == [bytes(b) for b in theirs.buffers]
        finally:
            for store in stores:
                store.shutdown()


def test_a_failing_put_leaves_its_siblings_stored(open_store: OpenStore) -> None:
    store = open_store(max_message_size=100)
    puts: list[Put] = [(0, msg(b"a"), 0, 0), (1, msg(b"x" * 101), 0, 0),
                       (1, msg(b"b"), 0, 0)]
    got = store.put_many("T", puts)
    assert isinstance(got[1], MessageTooLarge)
    ok = [r for r in got if isinstance(r, PutResult)]
    assert [r.queue_offset for r in ok] == [0, 0]
    bodies = [decode_record(store.read_record(r.phys_offsets[0]) or b"").body for r in ok]
    assert bodies == [b"a", b"b"]


def test_hooks_see_contiguous_runs_across_a_roll(open_store: OpenStore) -> None:
    store = open_store()  # 4 KiB segments: 40 records of ~200 bytes roll once or twice
    runs: list[tuple[int, bytes]] = []
    store.add_append_hook(lambda start, view: runs.append((start, bytes(view))))
    got = store.put_many("T", [(q % 4, msg(b"y" * 100, UNIQ_KEY=f"k{q}"), 0, 0)
                               for q in range(40)])
    assert all(isinstance(r, PutResult) for r in got)
    at = runs[0][0]
    for start, data in runs:  # no gap, no overlap, in log order
        assert start == at
        at += len(data)
    assert at == store.commitlog.max_offset
    assert len(runs) >= 3  # records, the BLANK tail of the full segment, records


def test_a_store_that_refuses_puts_refuses_each(open_store: OpenStore) -> None:
    store = open_store()
    store.put("T", 0, msg(b"first"))
    store.commitlog.werr = "injected"
    got = store.put_many("T", [(0, msg(b"a"), 0, 0), (1, msg(b"b"), 0, 0)])
    assert all(isinstance(r, StoreReadOnly) for r in got)


def test_a_record_too_large_for_a_segment_fails_alone(open_store: OpenStore) -> None:
    store = open_store()  # 4 KiB segments
    runs: list[tuple[int, int]] = []
    store.add_append_hook(lambda start, view: runs.append((start, len(view))))
    got = store.put_many("T", [(0, msg(b"a" * 100), 0, 0), (0, msg(b"b" * 5000), 0, 0),
                               (0, msg(b"c" * 100), 0, 0)])
    assert isinstance(got[1], MessageTooLarge)
    first, third = got[0], got[2]
    assert isinstance(first, PutResult) and isinstance(third, PutResult)
    assert (first.queue_offset, third.queue_offset) == (0, 1)
    assert third.phys_offsets[0] == first.phys_offsets[0] + first.sizes[0]
    at = runs[0][0]
    for start, length in runs:  # each byte reported once, in order
        assert start == at
        at += length
    assert at == store.commitlog.max_offset
