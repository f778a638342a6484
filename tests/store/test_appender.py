"""The append point: the hook sees every byte the commit log gets, in order, and rolls
close a segment with its BLANK marker."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.batch import encode_batch as encode_entries
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import BLANK_MAGIC, HostAddr, encode_record
from tidemq.store.append import MessageInput, UniformBatch

from .conftest import FakeClock, OpenStore

V6 = HostAddr(bytes(range(16)), 40002)
SEGMENT = 8192


def test_the_append_hook_sees_every_byte_in_log_order(open_store: OpenStore) -> None:
    clock = FakeClock(1_700_000_000_000)
    store = open_store(clock=clock, enable_lmq=True, enable_multi_dispatch=True,
                       mapped_file_size_commit_log=SEGMENT)
    store.set_batch_topic("Bcq")
    runs: list[tuple[int, bytes]] = []
    store.add_append_hook(lambda start, view: runs.append((start, bytes(view))))
    props = encode_properties({"TAGS": "a"})
    for i in range(60):
        store.put("T", i % 3, MessageInput(b"m%d" % i * (1 + i % 9), props),
                  born_host=V6 if i % 7 == 0 else None)
        if i % 10 == 0:
            store.put_batch("T", 0, [MessageInput(b"b" * (i % 5 + 1), props)] * 12)
    data = bytes(encode_entries([(b"e%03d" % i, b"", 0) for i in range(16)]))
    store.put_batch("T", 1, UniformBatch(data, 16, len(data) // 16, 4, b"", 0, None))
    store.put_inner_batch("Bcq", 0, data, props, 16)
    store.put_multi_dispatch("T", 2, MessageInput(b"lmq", props + b"INNER_MULTI_DISPATCH"
                                                  b"\x01%LMQ%x\x02"), ["%LMQ%x"])
    log = store.commitlog
    assert len(log.segments) >= 3  # rolled
    at = 0
    for start, data_run in runs:  # contiguous from offset 0, nothing written twice
        assert start == at
        at += len(data_run)
    assert at == log.max_offset
    written = b"".join(bytes(seg.view[: seg.wrote]) for seg in log.segments)
    assert b"".join(run for _, run in runs) == written
    for seg in log.segments[:-1]:  # each rolled segment ends with its BLANK marker run
        blank = next(run for start, run in runs if start + len(run) == seg.end)
        assert int.from_bytes(blank[:4], "big") == len(blank)
        assert int.from_bytes(blank[4:8], "big", signed=True) == BLANK_MAGIC




def test_a_fan_out_record_is_what_encode_record_gives(open_store: OpenStore) -> None:
    """put_multi_dispatch packs an IPv4, V1 record with a bytes body in one call and
    encodes the others field by field: both give encode_record's bytes, with each LMQ's
    next offset, and hand the dispatcher the names and offsets they wrote."""
    store = open_store(enable_lmq=True, enable_multi_dispatch=True)
    fresh = itertools.count()
    next_of: dict[str, int] = {}  # the next offset of each LMQ named so far

    @settings(max_examples=80, deadline=None)
    @given(body=st.binary(max_size=300), flag=st.integers(-(2**31), 2**31 - 1),
           sys_flag=st.sampled_from([0, 0x4, 0x8, 0x10, 0x20]),
           born_ts=st.integers(0, 2**50), reconsume=st.integers(0, 16),
           born=st.sampled_from(["v4", "v6", "store"]), view=st.booleans(),
           topic=st.sampled_from(["T", "P" * 127, "Q" * 128]),
           shared=st.lists(st.integers(0, 5), max_size=4, unique=True))
    def check(body: bytes, flag: int, sys_flag: int, born_ts: int, reconsume: int,
              born: str, view: bool, topic: str, shared: list[int]) -> None:
        # queues named before (their offsets grow) and a new one (offset 0)
        names = [f"%LMQ%s{i}" for i in shared] + [f"%LMQ%a{next(fresh)}"]
        offsets = [next_of.get(name, 0) for name in names]
        props = b"INNER_MULTI_DISPATCH\x01" + ",".join(names).encode() + b"\x02"
        host = {"v4": HostAddr(bytes([10, 0, 0, 7]), 5555), "v6": V6, "store": None}[born]
        d = store.dispatcher
        assert d is not None
        with d.held():
            result = store.put_multi_dispatch(
                topic, 0, MessageInput(memoryview(body) if view else body, props, flag), names,
                sys_flag=sys_flag, born_timestamp=born_ts, born_host=host,
                reconsume_times=reconsume)
            (batch,) = [b for b in d.pending if b.end == result.phys_offsets[0] + result.sizes[0]]
            assert batch.lmq == ((tuple(names), tuple(offsets)),)
        next_of.update((name, o + 1) for name, o in zip(names, offsets, strict=True))
        phys, size = result.phys_offsets[0], result.sizes[0]
        stamped = ",".join(map(str, offsets)).encode()
        want = encode_record(
            topic=topic.encode(), queue_id=0, body=body,
            properties=props + b"INNER_MULTI_QUEUE_OFFSET\x01" + stamped + b"\x02", flag=flag,
            sys_flag=sys_flag, born_timestamp=born_ts or result.store_timestamp,
            born_host=host or store.store_host,
            store_host=store.store_host, store_timestamp=result.store_timestamp,
            queue_offset=result.queue_offset, physical_offset=phys,
            reconsume_times=reconsume)
        assert size == len(want)
        assert bytes(store.commitlog.read(phys, size) or b"") == bytes(want)

    check()
