"""AppendTimes: the store time of the record holding any offset of the runs appended, as
the append hook hands them over (records, BLANK markers, unused segment tails)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.replication.append_times import AppendTimes
from tidemq.formats.record import (
    MAGIC_V1,
    MAGIC_V2,
    HostAddr,
    encode_blank,
    encode_record,
    store_timestamp_offset,
)

HOST = HostAddr(b"\x7f\x00\x00\x01", 10911)
HOST6 = HostAddr(b"\x00" * 15 + b"\x01", 10911)


class _Log:
    """The bytes appended, by where each run starts: what the master reads a run's store
    time from (the store time of the record starting at an offset, ``None`` where no
    record starts)."""

    def __init__(self) -> None:
        self.runs: dict[int, bytes] = {}

    def times(self, limit: int = 1 << 16) -> AppendTimes:
        return AppendTimes(self.read, limit)

    def note(self, times: AppendTimes, start: int, run: bytes) -> None:
        self.runs[start] = run
        times.note(start, memoryview(run))

    def read(self, offset: int) -> int | None:
        run = self.runs.get(offset)
        if run is None or len(run) < 40:
            return None
        magic, = struct.unpack_from(">i", run, 4)
        if magic not in (MAGIC_V1, MAGIC_V2):
            return None
        at = store_timestamp_offset(struct.unpack_from(">i", run, 36)[0])
        stored: int = struct.unpack_from(">q", run, at)[0]
        return stored


def _run(n: int, stored: int, body: int, born: HostAddr = HOST) -> bytes:
    """``n`` records written under one hold of the append lock: one store time."""
    return b"".join(bytes(encode_record(topic=b"T", queue_id=0, body=b"b" * body,
                                        properties=b"", born_host=born, store_host=HOST,
                                        store_timestamp=stored)) for _ in range(n))


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 2**45), st.integers(0, 40),
                               st.sampled_from([0, 0, 0, 8, 23]),
                               st.sampled_from([HOST, HOST, HOST6])), min_size=1, max_size=12),
       data=st.data())
def test_every_offset_gets_the_time_of_the_record_holding_it(
        runs: list[tuple[int, int, int, int, HostAddr]], data: st.DataObject) -> None:
    """Any offset inside a run of records (born host IPv4 or IPv6) answers that run's
    store time; an offset in a BLANK marker or a segment's unused tail answers the next
    run's."""
    log = _Log()
    times = log.times()
    at = 1000
    truth: list[tuple[int, int, int]] = []  # (start, end, time) of each run of records
    for n, stored, body, gap, born in runs:
        run = _run(n, stored, body, born)
        log.note(times, at, run)
        truth.append((at, at + len(run), stored))
        at += len(run)
        if gap:  # a BLANK marker (and a tail) closes a segment
            log.note(times, at, bytes(encode_blank(gap)) + bytes(max(0, gap - 8)))
            at += gap
    offset = data.draw(st.integers(truth[0][0], at - 1))
    want = next((t for start, end, t in truth if offset < end), None)
    assert times.time_at(offset) == want
    assert times.time_at(truth[0][0] - 1) is None  # before anything noted
    assert times.time_at(at) is None  # nothing written there yet


def test_a_log_cut_back_starts_over() -> None:
    log = _Log()
    times = log.times()
    first, second = _run(2, 100, 5), _run(1, 200, 5)
    log.note(times, 0, first)
    log.note(times, len(first), second)
    assert times.time_at(3) == 100 and times.time_at(len(first) + 3) == 200
    log.note(times, 10, _run(1, 300, 5))  # the log was cut back to 10
    assert len(times) == 1 and times.time_at(12) == 300 and times.time_at(3) is None


def test_at_most_the_limit_of_runs_is_kept() -> None:
    log = _Log()
    times = log.times(limit=8)
    run = _run(1, 7, 3)
    for i in range(100):
        log.note(times, i * len(run), run)
    assert 1 <= len(times) <= 8
    assert times.time_at(99 * len(run) + 1) == 7
    assert times.time_at(0) is None  # dropped: no answer rather than a wrong one
