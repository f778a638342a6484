"""kill -9 an LMQ writer in the middle of dispatch: recovery loses and duplicates nothing.

The writer (``lmq_proc.py``) fans messages out from four threads while the dispatcher
writes LMQ entries into RocksDB with its WAL off and checkpoints every 50 ms, so kills
land before, during and after LMQ write batches and memtable flushes. After each kill
the store is opened (crash recovery) and every LMQ is compared with the commit log's
``INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET`` records: the same entries at the
same offsets, dense from 0, nothing else; every acknowledged fan-out is there.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store.message_store import MessageStore
from tidemq.store.recovery import scan_log

from .ahead import Ahead, checked_copy, kill9
from .lmq_proc import POOL, lmq_config
from .store_proc import body_for, body_id

HELPER = Path(__file__).with_name("lmq_proc.py")

Acks = dict[tuple[str, int], int]  # (lmq, offset) -> body id


def read_acks(path: Path) -> list[tuple[int, list[tuple[str, int]]]]:
    """Complete ack lines; a line torn by the kill is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().split("\n")[:-1]:
        ident, *pairs = line.split()
        out.append((int(ident), [(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1]))
                                 for p in pairs]))
    return out


def log_view(store: MessageStore) -> dict[str, list[int]]:
    """LMQ -> body ids by LMQ offset, as the commit log's records say (offsets dense
    from 0, none assigned twice)."""
    found: dict[str, dict[int, int]] = defaultdict(dict)

    def collect(rec: Record, _offset: int) -> None:
        props = decode_properties(rec.properties)
        assert bytes(rec.body) == body_for(body_id(bytes(rec.body)))
        names = props["INNER_MULTI_DISPATCH"].split(",")
        offsets = [int(x) for x in props["INNER_MULTI_QUEUE_OFFSET"].split(",")]
        for name, off in zip(names, offsets, strict=True):
            assert off not in found[name], f"{name}@{off} assigned twice"
            found[name][off] = body_id(bytes(rec.body))

    cl = store.commitlog
    end, _, reason = scan_log(cl, cl.min_offset, check_crc=True, on_record=collect)
    assert end == cl.max_offset, reason
    out = {}
    for name, by_off in found.items():
        assert sorted(by_off) == list(range(len(by_off))), f"{name} has a gap in the log"
        out[name] = [by_off[o] for o in range(len(by_off))]
    return out


def lmq_view(store: MessageStore, name: str) -> list[int]:
    """Body ids of LMQ ``name`` as a consumer reads it, checked record by record."""
    ids: list[int] = []
    offset = 0
    assert store.min_offset(name, 0) == 0
    while offset < store.max_offset(name, 0):
        result = store.get(name, 0, offset, max_count=50)
        assert result.found, (name, offset, result.status)
        for buf in result.buffers:
            pos = 0
            while pos < len(buf):
                rec = decode_record(buf, pos, check_crc=True)
                assert isinstance(rec, Record)
                props = decode_properties(rec.properties)
                names = props["INNER_MULTI_DISPATCH"].split(",")
                got = int(props["INNER_MULTI_QUEUE_OFFSET"].split(",")[names.index(name)])
                assert got == len(ids), (name, got)  # read at its own offset
                ids.append(body_id(bytes(rec.body)))
                pos += rec.total_size
        offset = result.next_begin_offset
    return ids


def check(root: Path, flush: str, acked: Acks) -> int:
    """Recover ``root`` in-process and compare every LMQ with the log; returns the
    highest body id stored."""
    with MessageStore(lmq_config(root, flush)) as store:
        want = log_view(store)
        assert store.lmq is not None
        assert set(store.lmq.queue_names()) == set(want)
        for name in POOL:
            got = lmq_view(store, name)
            assert got == want.get(name, []), f"{name}: LMQ differs from the commit log"
            assert store.max_offset(name, 0) == len(got)
        for (name, offset), ident in acked.items():
            assert offset < len(want[name]), f"acknowledged {name}@{offset} lost"
            assert want[name][offset] == ident
        return max((i for ids in want.values() for i in ids), default=-1)


def kill_loop(tmp_path: Path, flush: str, iterations: int, seed: int,
              hold: bool = False) -> int:
    rng = random.Random(seed)
    root = tmp_path / "store"
    acks_path = tmp_path / "acks"
    acked: Acks = {}
    next_id = 0
    writer = Ahead([str(HELPER)])
    try:
        for it in range(iterations):
            proc = writer.go("write", root, acks_path, seed + it, next_id, flush,
                             "1" if it % 3 == 2 else "0", "1" if hold else "0")
            writer = Ahead([str(HELPER)])  # the next round's imports while this one runs
            next_id = kill_round(proc, rng, tmp_path, flush, it, acked, next_id)
    finally:
        writer.discard()
    return len(acked)


def kill_round(proc: subprocess.Popen[bytes], rng: random.Random, tmp_path: Path, flush: str,
               it: int, acked: Acks, next_id: int) -> int:
    """Kill the writer ``proc`` at a random moment after it is ready and check the store
    it left against everything acknowledged so far; the next round's first body id."""
    root = tmp_path / "store"
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert line == b"ready\n", proc.stderr.read().decode()
    time.sleep(rng.uniform(0.05, 0.4))  # the crash moment, not a synchronisation
    kill9(proc)
    for ident, pairs in read_acks(tmp_path / "acks"):
        for name, offset in pairs:
            previous = acked.setdefault((name, offset), ident)
            assert previous == ident, f"{name}@{offset} was handed out twice"
    target = checked_copy(root, tmp_path, it)
    highest = check(target, flush, acked)
    if target != root:
        shutil.rmtree(target)
    return max(highest, max(acked.values(), default=-1), next_id - 1) + 1


@pytest.mark.timeout(600)
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_kill9_mid_dispatch_loses_and_duplicates_no_lmq_entry(tmp_path: Path,
                                                             flush: str) -> None:
    acked = kill_loop(tmp_path, flush, iterations=6, seed=20260301)
    assert acked > 100


@pytest.mark.timeout(600)
def test_kill9_while_a_start_walk_is_held_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    """Each writer's start walk of the LMQ store is held after two queues, so it serves,
    dispatches and passes queues through a cache of four while the walk has not
    reached the others -- and is killed so: the offsets it hands out continue each
    queue's, and nothing acknowledged is lost."""
    acked = kill_loop(tmp_path, "SYNC_FLUSH", iterations=4, seed=20261129, hold=True)
    assert acked > 50
