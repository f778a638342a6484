"""kill -9 a SYNC_FLUSH writer at random moments: every acknowledged message survives."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest
from tests.store.conftest import checkpoint_head

from tidemq.store.checkpoint import Checkpoint, Origin
from tidemq.store.layout import StoreLayout

from .ahead import Ahead, checked_copy, kill9
from .conftest import HELPER, check_store


def read_acks(path: Path) -> list[tuple[int, int, int]]:
    """Complete ``queue offset id`` lines; a line torn by the kill is ignored."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # whatever follows the last newline is torn
    return [(int(q), int(o), int(i)) for q, o, i in (line.split() for line in lines)]


def to_earlier_layout(root: Path) -> bool:
    """Rewrite the store's checkpoint as an earlier TideMQ wrote it (offsets at 24/32);
    ``False`` when there is none to rewrite."""
    path = StoreLayout(root).checkpoint_file
    cp = Checkpoint.read(path)
    if cp.origin is Origin.TIDEMQ:
        path.write_bytes(checkpoint_head(
            cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
            cp.flushed_phy_offset, cp.dispatched_phy_offset))
        assert Checkpoint.read(path).origin is Origin.EARLIER_TIDEMQ
        return True
    return False


def kill_loop(tmp_path: Path, iterations: int, seed: int, *,
              earlier_checkpoints: bool = False) -> int:
    """Rounds of a writer killed at a random moment, each followed by a check of the
    store; ``earlier_checkpoints``: each kill leaves the checkpoint in the earlier
    layout, for the check and the next writer to open."""
    rng = random.Random(seed)
    tmp_path.mkdir(exist_ok=True)
    root = tmp_path / "store"
    acks_path = tmp_path / "acks"
    acked: dict[tuple[int, int], int] = {}
    next_id = 0
    rewritten = 0
    writer = Ahead([str(HELPER)])
    try:
        for it in range(iterations):
            proc = writer.go("write", root, acks_path, seed + it, next_id)
            writer = Ahead([str(HELPER)])  # the next round's imports while this one runs
            assert proc.stdout is not None and proc.stderr is not None
            if rng.random() < 0.8:
                line = proc.stdout.readline()
                assert line == b"ready\n", proc.stderr.read().decode()
                time.sleep(rng.uniform(0, 0.25))  # the crash moment, not a synchronisation
            else:
                time.sleep(rng.uniform(0, 0.5))  # may land in start-up or recovery
            kill9(proc)
            if earlier_checkpoints:
                rewritten += to_earlier_layout(root)

            for queue_id, offset, body_id in read_acks(acks_path):
                previous = acked.setdefault((queue_id, offset), body_id)
                assert previous == body_id, f"queue offset {queue_id}/{offset} was reused"
            target = checked_copy(root, tmp_path, it)
            _, ids = check_store(target)
            for (queue_id, offset), body_id in acked.items():
                assert offset < len(ids[queue_id]), f"acknowledged {queue_id}/{offset} lost"
                assert ids[queue_id][offset] == body_id
            stored = [i for q in ids.values() for i in q]
            next_id = max([*stored, *acked.values(), next_id - 1]) + 1
            if target != root:
                shutil.rmtree(target)
    finally:
        writer.discard()
    assert rewritten or not earlier_checkpoints, "no kill left a checkpoint to rewrite"
    return len(acked)


def test_kill9_loses_no_acknowledged_message(tmp_path: Path) -> None:
    acked = kill_loop(tmp_path, iterations=15, seed=20240917)
    assert acked > 30


def test_kill9_with_checkpoints_in_the_earlier_layout(tmp_path: Path) -> None:
    acked = kill_loop(tmp_path, iterations=10, seed=20261201, earlier_checkpoints=True)
    assert acked > 20


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.skipif(os.environ.get("TIDEMQ_SLOW") != "1", reason="set TIDEMQ_SLOW=1")
def test_kill9_soak(tmp_path: Path) -> None:
    seed = int(time.time())
    print(f"seed {seed}")  # shown with a failure, so its rounds can be drawn again
    rounds, kills, total = 8, 25, 0
    for round_ in range(rounds):  # fresh stores keep each full check cheap
        acked = kill_loop(tmp_path / f"round{round_}", iterations=kills,
                          seed=seed + 1000 * round_)
        assert acked > 50, f"seed {seed}"
        total += acked
    print(f"{rounds * kills} kills, {total} acknowledged, each found after its kill")
