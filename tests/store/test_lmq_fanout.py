"""The column-wise LMQ fan-out (runs of entries per queue and round) against one key per
entry: every reader, retention and truncation see the same queues."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.store.lmq_fanout import FanoutRecords, build_fanout
from tidemq.store.lmq_store import LmqEntry, LmqStore

NAMES = ["%LMQ%a", "%LMQ%b", "%LMQ%ab", "%LMQ%z9", "%LMQ%\u00e9", "%LMQ%a\u00e9"]
Record = tuple[list[str], list[int], int, int, int, int]  # names, offsets, phys, size, tags, ts


def make_rounds(fanouts: list[list[list[str]]]) -> list[list[Record]]:
    """Rounds of records in log order (phys 100 apart, size 60), offsets assigned densely
    per queue as the append path does."""
    nxt: dict[str, int] = defaultdict(int)
    rounds, i = [], 0
    for names_of_round in fanouts:
        records = []
        for names in names_of_round:
            records.append((names, [nxt[n] for n in names], 100 * i, 60, i % 5, 1000 + 7 * i))
            for n in names:
                nxt[n] += 1
            i += 1
        rounds.append(records)
    return rounds


def write_runs(lmq: LmqStore, rounds: list[list[Record]]) -> None:
    """What the concurrent dispatcher does with each round."""
    for records in rounds:
        if not records:
            continue
        fan = FanoutRecords()
        for rec in records:
            fan.add(*rec)
        end = records[-1][2] + records[-1][3]
        built = build_fanout(fan, lmq.floors, lmq.dispatched)
        assert built is not None
        assert lmq.write_prepared(built.batch, built.last, end, built.entries, built.first,
                                  generation=lmq.generation) is not None


def write_plain(lmq: LmqStore, rounds: list[list[Record]]) -> None:
    """One key per entry, in log order: the reference."""
    for records in rounds:
        if records:
            lmq.write([LmqEntry(n, o, phys, size, tags, ts)
                       for names, offsets, phys, size, tags, ts in records
                       for n, o in zip(names, offsets, strict=True)],
                      records[-1][2] + records[-1][3])


def views(lmq: LmqStore, probes: list[tuple[int, int]]) -> dict[str, object]:
    """Everything a reader can ask, for every queue."""
    out: dict[str, object] = {"stats": lmq.stats(), "names": sorted(lmq.queue_names()),
                              "stored": list(lmq.stored_entries())}
    for name in NAMES:
        lo, hi = lmq.min_offset(name), lmq.max_offset(name)
        out[name] = (lo, hi, lmq.entries(name, 0, hi + 1),
                     [lmq.entries(name, o, c) for o, c in probes],
                     [lmq.store_time_at(name, o) for o in range(hi + 1)],
                     [lmq.offset_by_time(name, t) for t in (0, 1000, 1500, 1700, 10**6)])
    return out


rounds_strategy = st.lists(
    st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
             max_size=12),
    min_size=1, max_size=6)


@settings(deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds_strategy, st.integers(0, 2**32), st.integers(0, 7000), st.integers(0, 7000))
def test_runs_read_like_one_key_per_entry(tmp_path_factory: pytest.TempPathFactory,
                                          fanouts: list[list[list[str]]], seed: int,
                                          cut: int, expire: int) -> None:
    rounds = make_rounds(fanouts)
    rng = random.Random(seed)
    probes = [(rng.randrange(0, 30), rng.randrange(1, 12)) for _ in range(8)]
    base = tmp_path_factory.mktemp("runs")
    runs, plain = LmqStore(base / "runs"), LmqStore(base / "plain")
    try:
        write_runs(runs, rounds)
        write_plain(plain, rounds)
        assert views(runs, probes) == views(plain, probes)
        runs._meta.clear()  # a cold cache derives max offsets from the runs
        assert views(runs, probes) == views(plain, probes)
        assert runs.truncate_phys(cut) == plain.truncate_phys(cut)
        assert views(runs, probes) == views(plain, probes)
        assert runs.expire_below(expire) == plain.expire_below(expire)
        assert views(runs, probes) == views(plain, probes)
    finally:
        runs.close()
        plain.close()
    runs = LmqStore(base / "runs")  # reopened: nothing cached
    plain = LmqStore(base / "plain")
    try:
        assert views(runs, probes) == views(plain, probes)
    finally:
        runs.close()
        plain.close()


def test_a_round_is_one_key_per_queue(tmp_path: Path) -> None:
    rounds = make_rounds([[["%LMQ%a", "%LMQ%b"], ["%LMQ%a"], ["%LMQ%b", "%LMQ%a"]]])
    lmq = LmqStore(tmp_path / "lmq")
    try:
        write_runs(lmq, rounds)
        keys = [bytes(k) for k, _v in lmq.db.items() if bytes(k)[:1] == b"E"]
        assert keys == [b"E%LMQ%a\x00" + bytes(8), b"E%LMQ%b\x00" + bytes(8)]
        assert len(lmq.db[keys[0]]) == 3 * 28 and len(lmq.db[keys[1]]) == 2 * 28
        assert [e[0] for e in lmq.entries("%LMQ%a", 1, 5)] == [100, 200]
    finally:
        lmq.close()


def test_records_below_the_checkpoint_are_not_written_again(tmp_path: Path) -> None:
    """Re-dispatch after a crash, by either dispatcher: the records below the LMQ
    store's checkpoint are in runs already, so nothing overlaps them."""
    rounds = make_rounds([[["%LMQ%a", "%LMQ%b"]] * 6, [["%LMQ%a"]] * 4])
    lmq, plain = LmqStore(tmp_path / "runs"), LmqStore(tmp_path / "plain")
    try:
        write_runs(lmq, rounds[:1])
        write_plain(plain, rounds)
        write_runs(lmq, [rounds[0][3:] + rounds[1][:2]])  # the concurrent one again
        lmq.write_fanout(rounds[0] + rounds[1], 1000)  # the serial one again
        assert list(lmq.stored_entries()) == list(plain.stored_entries())
        assert [len(bytes(v)) // 28 for k, v in lmq.db.items() if bytes(k)[:1] == b"E"] == [
            6, 2, 1, 1, 6]  # a: the first round's run, a run of 2, two single entries
        assert lmq.max_offset("%LMQ%a") == 10 and lmq.max_offset("%LMQ%b") == 6
    finally:
        lmq.close()
        plain.close()


def test_entries_of_a_deleted_generation_are_left_out(tmp_path: Path) -> None:
    rounds = make_rounds([[["%LMQ%a", "%LMQ%b"]] * 4])
    lmq = LmqStore(tmp_path / "lmq")
    try:
        lmq.delete_queue("%LMQ%a", 250)  # records at 0, 100, 200 belong to the old queue
        fan = FanoutRecords()
        for names, offsets, phys, size, tags, ts in rounds[0]:  # a: 0 1 2 (old), 0 (new)
            fan.add(names, [o - 3 if n == "%LMQ%a" else o
                            for n, o in zip(names, offsets, strict=True)], phys, size, tags, ts)
        built = build_fanout(fan, lmq.floors)
        assert built is not None
        assert built.entries == 4 + 1 and built.first == {"%LMQ%a": 0, "%LMQ%b": 0}
        assert built.last == {"%LMQ%a": 0, "%LMQ%b": 3}
        assert build_fanout(FanoutRecords(), lmq.floors) is None
        fan = FanoutRecords()
        fan.add(["%LMQ%a"], [0], 100, 60, 0, 1)
        assert build_fanout(fan, lmq.floors) is None  # everything below the floor
    finally:
        lmq.close()


def test_names_and_offsets_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 LMQ names but 1 offsets"):
        FanoutRecords().add(["%LMQ%a", "%LMQ%b"], [0], 0, 1, 0, 0)
