"""``put_many``: one message each to many queues under one hold of the append lock --
the bytes, offsets and results of as many ``put`` calls, each put failing alone."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidemq.errors import MessageTooLarge, PropertiesTooLarge, StoreReadOnly
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import HostAddr, Record, decode_record
from tidemq.store.message_store import MessageInput, MessageStore, PutResult

from .conftest import FakeClock, OpenStore, crash_copy, msg, small_config

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


def _same_queues(many: MessageStore, each: MessageStore, queues: int = 8) -> None:
    """The two stores' queues of topic T, once dispatched, end alike and hold the same
    records."""
    assert many.wait_dispatched(10.0) and each.wait_dispatched(10.0)
    for qid in range(queues):
        assert many.max_offset("T", qid) == each.max_offset("T", qid)
        mine = many.get("T", qid, 0, 64, 1 << 20)
        theirs = each.get("T", qid, 0, 64, 1 << 20)
        assert [bytes(b) for b in mine.buffers] == [bytes(b) for b in theirs.buffers]


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
            _same_queues(many, each)
        finally:
            for store in stores:
                store.shutdown()


def _keep_run(seen: list[tuple[int, bytes]], start: int, view: memoryview) -> None:
    seen.append((start, bytes(view)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(puts=puts_strategy, index=st.booleans())
def test_a_run_that_fits_its_segment_stores_what_puts_store(puts: list[Put],
                                                            index: bool) -> None:
    """The usual case -- every record fits the current segment -- written in one pass:
    the same bytes, offsets, queue entries and hook bytes as one ``put`` per message."""
    clock = FakeClock(1_700_000_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        stores = [MessageStore(small_config(Path(tmp) / name,
                                            mapped_file_size_commit_log=1 << 20,
                                            message_index_enable=index), clock=clock)
                  for name in ("many", "each")]
        runs: list[list[tuple[int, bytes]]] = [[], []]
        for store, seen in zip(stores, runs, strict=True):
            store.start()
            store.put("T", 0, msg(b"before"))
            store.add_append_hook(functools.partial(_keep_run, seen))
        try:
            many, each = stores
            got = many.put_many("T", puts, born_host=BORN, reconsume_times=3,
                                wait_flush=False)
            want: list[PutResult | Exception] = [
                each.put("T", qid, m, sys_flag=f, born_timestamp=b, born_host=BORN,
                         reconsume_times=3, wait_flush=False) for qid, m, f, b in puts]
            assert got == want
            assert len(many.commitlog.segments) == 1
            assert len(runs[0]) == 1  # one run of bytes for the whole call
            assert runs[0][0][1] == b"".join(data for _start, data in runs[1])
            _same_queues(many, each)
            for _qid, m, _f, _b in puts:
                for key in m.keys:
                    assert (many.query_by_key("T", key, 64) if index else []) == (
                        each.query_by_key("T", key, 64) if index else [])
        finally:
            for store in stores:
                store.shutdown()


def test_a_field_out_of_range_fails_alone_in_a_run(open_store: OpenStore) -> None:
    """A flag the record cannot hold refuses that put only, as ``put`` refuses it: the
    others of the run are stored, with the queue offsets they would have had."""
    store = open_store(mapped_file_size_commit_log=1 << 20)
    puts: list[Put] = [(0, msg(b"a"), 0, 0), (1, MessageInput(b"x", b"", 1 << 31), 0, 0),
                       (1, msg(b"b"), 0, 0), (0, msg(b"c"), 0, 0)]
    got = store.put_many("T", puts)
    assert isinstance(got[1], Exception) and not isinstance(got[1], PutResult)
    ok = [r for r in got if isinstance(r, PutResult)]
    assert [r.queue_offset for r in ok] == [0, 0, 1]
    records = [decode_record(store.read_record(r.phys_offsets[0]) or b"") for r in ok]
    assert [bytes(r.body) if isinstance(r, Record) else r for r in records] == [b"a", b"b", b"c"]
    assert ok[2].phys_offsets[0] + ok[2].sizes[0] == store.commitlog.max_offset


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


# ---------------------------------------------------------------- fan-out puts (RIP-28)

LMQ = {"enable_lmq": True, "enable_multi_dispatch": True}
LMQ_NAMES = [f"%LMQ%q{i}" for i in range(6)]
#: A property text that the LMQ offsets push over the 2-byte limit (a put refused alone),
#: and one that fits it but not a 4 KiB segment (refused by the roll, after its offsets).
OVER_LIMIT = "x" * (0x7FFF - 60)
OVER_SEGMENT = "y" * 5000


def _fan_msg(body: bytes, names: list[str], pad: str) -> MessageInput:
    props: dict[str, str] = {"UNIQ_KEY": body.hex() or "e"}
    if names:
        props["INNER_MULTI_DISPATCH"] = ",".join(names)
    if pad:
        props["PAD"] = pad
    return msg(body, **props)


fan_puts_strategy = st.lists(st.tuples(
    st.integers(0, 3),  # queue id
    st.binary(min_size=0, max_size=200),
    st.lists(st.sampled_from(LMQ_NAMES), max_size=4, unique=True),
    st.sampled_from(["", "", "", "", OVER_LIMIT, OVER_SEGMENT])),
    min_size=1, max_size=30)


def _outcomes(results: list[PutResult | Exception]) -> list[object]:
    return [(r.queue_offset, list(r.phys_offsets), list(r.sizes)) if isinstance(r, PutResult)
            else (type(r), str(r)) for r in results]


def _lmq_view(store: MessageStore) -> dict[str, object]:
    """Every LMQ's offsets and entries, and every parent queue's records."""
    assert store.wait_dispatched(10.0)
    view: dict[str, object] = {}
    for name in LMQ_NAMES:
        got = store.get(name, 0, 0, 256, 1 << 22)
        view[name] = (store.min_offset(name, 0), store.max_offset(name, 0),
                      [bytes(b) for b in got.buffers])
    for qid in range(4):
        got = store.get("Parent", qid, 0, 256, 1 << 22)
        view[f"Parent/{qid}"] = (store.max_offset("Parent", qid),
                                 [bytes(b) for b in got.buffers])
    return view


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(plan=[(0, b"u0", LMQ_NAMES[:2], ""), (1, b"u1", LMQ_NAMES[1:2], ""),
               (0, b"u2", [LMQ_NAMES[2], LMQ_NAMES[0]], ""), (2, b"u3", LMQ_NAMES[2:3], "")],
         before=[], settled=False, concurrent=False)  # a queue's fan-outs around another's
@given(plan=fan_puts_strategy,
       before=st.lists(st.lists(st.sampled_from(LMQ_NAMES), min_size=1, max_size=3,
                                unique=True), max_size=3),
       settled=st.booleans(), concurrent=st.booleans())
def test_fan_out_puts_stored_together_store_what_each_stores(
        plan: list[tuple[int, bytes, list[str], str]], before: list[list[str]],
        settled: bool, concurrent: bool) -> None:
    """A parent's fan-out and plain puts stored by one ``put_many`` give the records,
    results (a refused put's error included), consume-queue and LMQ entries that
    ``put_multi_dispatch`` and ``put`` give one by one: LMQs named by several puts take
    consecutive offsets in put order, a refused put takes none. ``before``: fan-outs
    stored first (``settled``: dispatched, so their offsets come from the LMQ store);
    ``concurrent``: the concurrent dispatcher."""
    _fan_out_oracle(plan, before, settled, concurrent)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.tuples(
           st.integers(0, 3), st.binary(min_size=0, max_size=200),
           st.lists(st.sampled_from(LMQ_NAMES), min_size=1, max_size=4, unique=True),
           st.sampled_from(["", "", "", "", "", OVER_LIMIT])), min_size=1, max_size=30),
       before=st.lists(st.lists(st.sampled_from(LMQ_NAMES), min_size=1, max_size=3,
                                unique=True), max_size=3),
       settled=st.booleans())
def test_fan_outs_that_fit_their_segment_store_what_each_stores(
        plan: list[tuple[int, bytes, list[str], str]], before: list[list[str]],
        settled: bool) -> None:
    """Every put a fan-out, every record fitting the segment (the run written in one
    pass unless a put's offsets push its properties over their limit): the records,
    results and queue and LMQ entries of one ``put_multi_dispatch`` a message."""
    _fan_out_oracle(plan, before, settled, False, segment=1 << 20)


def _fan_out_oracle(plan: list[tuple[int, bytes, list[str], str]], before: list[list[str]],
                    settled: bool, concurrent: bool, segment: int | None = None) -> None:
    clock = FakeClock(1_700_000_000_000)
    sized = {} if segment is None else {"mapped_file_size_commit_log": segment}
    with tempfile.TemporaryDirectory() as tmp:
        stores = [MessageStore(small_config(
            Path(tmp) / name, **LMQ, **sized,
            enable_build_consume_queue_concurrently=concurrent),
            clock=clock) for name in ("many", "each")]
        for store in stores:
            store.start()
        try:
            many, each = stores
            for k, names in enumerate(before):
                for store in stores:
                    store.put_multi_dispatch("Parent", 0, _fan_msg(b"b%d" % k, names, ""),
                                             names)
            if settled:
                for store in stores:
                    assert store.wait_dispatched(10.0)
            puts: list[Put] = [(qid, _fan_msg(body, names, pad), 0, 0)
                               for qid, body, names, pad in plan]
            targets = [names for _q, _b, names, _p in plan]
            got = many.put_many("Parent", puts, born_host=BORN, reconsume_times=2,
                                targets=targets)
            want: list[PutResult | Exception] = []
            for (qid, m, _f, _b), names in zip(puts, targets, strict=True):
                try:
                    want.append(
                        each.put_multi_dispatch("Parent", qid, m, names, born_host=BORN,
                                                reconsume_times=2) if names
                        else each.put("Parent", qid, m, born_host=BORN, reconsume_times=2))
                except Exception as exc:
                    want.append(exc)
            assert _outcomes(got) == _outcomes(want)
            assert _stored(many, [r for r in got if isinstance(r, PutResult)]) == _stored(
                each, [r for r in want if isinstance(r, PutResult)])
            assert _lmq_view(many) == _lmq_view(each)
            # and what the two stores hand out next
            more = _fan_msg(b"next", LMQ_NAMES[:3], "")
            after = [s.put_multi_dispatch("Parent", 1, more, LMQ_NAMES[:3]) for s in stores]
            assert _outcomes(list(after[:1])) == _outcomes(list(after[1:]))
            assert _lmq_view(many) == _lmq_view(each)
        finally:
            for store in stores:
                store.shutdown()


def test_fan_out_puts_come_back_after_a_crash(open_store: OpenStore, tmp_path: Path) -> None:
    """Fan-outs stored by ``put_many``, then a ``kill -9`` (the files as they are):
    recovery gives every LMQ its entries back, and the next fan-out the next offsets."""
    store = open_store(**LMQ)
    names = [LMQ_NAMES[:2], LMQ_NAMES[1:4], [], LMQ_NAMES[:1]]
    got = store.put_many("Parent", [(i % 2, _fan_msg(b"m%d" % i, n, ""), 0, 0)
                                    for i, n in enumerate(names)], targets=names)
    assert all(isinstance(r, PutResult) for r in got)
    want = _lmq_view(store)
    copy = crash_copy(store, tmp_path / "crashed")
    with MessageStore(small_config(copy, **LMQ)) as again:
        assert again.recovery_report is not None and not again.recovery_report.clean
        assert _lmq_view(again) == want
        [res] = again.put_many("Parent", [(0, _fan_msg(b"after", LMQ_NAMES[:2], ""), 0, 0)],
                               targets=[LMQ_NAMES[:2]])
        assert isinstance(res, PutResult)
        assert again.wait_dispatched(10.0)
        # q0 was named twice before, q1 twice: this put takes offset 2 of each
        assert [again.max_offset(n, 0) for n in LMQ_NAMES[:2]] == [3, 3]
        record = decode_record(again.read_record(res.phys_offsets[0]) or b"")
        assert decode_properties(record.properties)["INNER_MULTI_QUEUE_OFFSET"] == "2,2"


def test_a_fan_out_refused_alone_takes_no_lmq_offset(open_store: OpenStore) -> None:
    store = open_store(**LMQ)
    names = [LMQ_NAMES[:1], LMQ_NAMES[:1], LMQ_NAMES[:1]]
    puts: list[Put] = [(0, _fan_msg(b"a", names[0], ""), 0, 0),
                       (0, _fan_msg(b"b", names[1], OVER_LIMIT), 0, 0),
                       (0, _fan_msg(b"c", names[2], ""), 0, 0)]
    got = store.put_many("Parent", puts, targets=names)
    assert isinstance(got[1], PropertiesTooLarge)
    ok = [r for r in got if isinstance(r, PutResult)]
    assert [r.queue_offset for r in ok] == [0, 1]
    view = _lmq_view(store)
    assert view[LMQ_NAMES[0]][:2] == (0, 2)  # type: ignore[index]


def test_fan_outs_without_lmq_are_refused_each(open_store: OpenStore) -> None:
    store = open_store()
    got = store.put_many("Parent", [(0, msg(b"plain"), 0, 0),
                                    (0, _fan_msg(b"fan", LMQ_NAMES[:1], ""), 0, 0)],
                         targets=[[], LMQ_NAMES[:1]])
    assert isinstance(got[0], PutResult)
    assert isinstance(got[1], ValueError) and "disabled" in str(got[1])
