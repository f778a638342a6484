"""A queue whose later files lost entries the commit log still holds is repaired from
the log at start, from the end of its last valid entry (not from the start of the log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidemq.store.batch_consume_queue import BCQ_UNIT
from tidemq.store.consume_queue import CQ_UNIT
from tidemq.store.inspect import verify
from tidemq.store.message_store import MessageStore

from .conftest import CQ_FILE, FakeClock, OpenStore, msg, read_queue

BCQ_FILE = BCQ_UNIT * 16  # 16 entries per batch-consume-queue file, as CQ_FILE
#: Messages of the damaged queue: 16 per file, so three full files and a fourth of 4.
COUNT = 52


def _dir(root: Path, batch: bool) -> Path:
    return root / ("batchconsumequeue" if batch else "consumequeue") / "T" / "0"


def _fill(store: MessageStore, clock: FakeClock | None = None, count: int = COUNT) -> None:
    """T/0 gets ``count`` messages, another queue some between them and after them, so
    the other queue ends later in the log than T/0 does."""
    for i in range(count):
        if clock is not None:
            clock.now += 1
        store.put("T", 0, msg(b"t%d" % i, tags="A"))
        if i % 5 == 0:
            store.put("Other", 1, msg(b"o%d" % i))
    for i in range(3):
        store.put("Other", 1, msg(b"after%d" % i))


def _state(store: MessageStore) -> dict[str, object]:
    assert store.wait_dispatched()
    return {f"{t}/{q}": (store.min_offset(t, q), store.max_offset(t, q),
                         [(r.queue_offset, r.physical_offset, bytes(r.body))
                          for r in read_queue(store, t, q)])
            for t, q in (("T", 0), ("Other", 1))}


def _damage(qdir: Path, how: str, unit: int) -> None:
    files = sorted(qdir.iterdir())
    size = files[0].stat().st_size
    if how == "earlier zeroed":
        files[1].write_bytes(bytes(size))  # not one of the last files, read whole on load
        return
    assert len(files) == 4, files
    if how == "last zeroed":
        files[-1].write_bytes(bytes(size))
    elif how == "last emptied":
        files[-1].write_bytes(b"")
    elif how == "later full zeroed":
        # the last file is zeroed and the one before it too: both were written
        files[-1].write_bytes(bytes(size))
        files[-2].write_bytes(bytes(size))
    elif how == "hole in last":
        raw = bytearray(files[-1].read_bytes())
        raw[unit : 3 * unit] = bytes(2 * unit)  # entries 1 and 2 zeroed, 3 kept
        files[-1].write_bytes(bytes(raw))
    else:
        raise AssertionError(how)


HOW = ["last zeroed", "last emptied", "later full zeroed", "hole in last"]


@pytest.mark.parametrize("batch", [False, True], ids=["cq", "batch-cq"])
@pytest.mark.parametrize("how", HOW)
def test_a_later_queue_file_that_lost_entries_is_repaired_after_a_clean_stop(
        open_store: OpenStore, store_root: Path, batch: bool, how: str) -> None:
    clock = FakeClock(7000)
    store = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_FILE)
    if batch:
        store.set_batch_topic("T")
    _fill(store, clock)
    before = _state(store)
    end = store.commitlog.max_offset
    store.shutdown()
    _damage(_dir(store_root, batch), how, BCQ_UNIT if batch else CQ_UNIT)
    preview = verify(store_root).recovery
    assert preview is not None and not preview.start_fails

    reopened = open_store(clock=clock, mapper_file_size_batch_consume_queue=BCQ_FILE)
    report = reopened.recovery_report
    assert report is not None and report.clean and report.end_offset == end
    assert report.start_offset == preview.start_offset  # verify says what a start does
    # the re-dispatch started at T/0's last valid entry, not at the start of the log
    assert 0 < report.start_offset < end
    assert _state(reopened) == before
    # and the queue goes on from where it was
    res = reopened.put("T", 0, msg(b"next", tags="A"))
    assert res.queue_offset == COUNT


@pytest.mark.parametrize("batch", [False, True], ids=["cq", "batch-cq"])
def test_an_earlier_queue_file_zeroed_puts_the_queue_in_doubt(
        open_store: OpenStore, store_root: Path, batch: bool) -> None:
    """A zeroed file before the last ones, which a start does not read whole: its first
    and last entries show it, and the queue is rebuilt as any queue in doubt."""
    store = open_store(mapper_file_size_batch_consume_queue=BCQ_FILE)
    if batch:
        store.set_batch_topic("T")
    _fill(store, count=100)  # seven files
    before = _state(store)
    store.shutdown()
    _damage(_dir(store_root, batch), "earlier zeroed", BCQ_UNIT if batch else CQ_UNIT)
    preview = verify(store_root).recovery
    assert preview is not None and preview.queues_rebuilt
    reopened = open_store(mapper_file_size_batch_consume_queue=BCQ_FILE)
    assert _state(reopened) == before


_WRITER = textwrap.dedent("""
    import os, signal, sys
    from tidemq.formats.hashing import tags_code
    from tidemq.formats.properties import encode_properties
    from tidemq.store.config import StoreConfig
    from tidemq.store.message_store import MessageInput, MessageStore
    from tidemq.types import FlushDiskType

    root, count, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    store = MessageStore(StoreConfig(store_path_root_dir=root,
                                     mapped_file_size_commit_log=4096,
                                     mapped_file_size_consume_queue=%(cq)d,
                                     mapper_file_size_batch_consume_queue=%(bcq)d,
                                     max_hash_slot_num=4096, max_index_num=16384,
                                     flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.start()
    if batch:
        store.set_batch_topic("T")
    def m(body, tags=None):
        props = {"TAGS": tags} if tags else {}
        return MessageInput(body=body, properties=encode_properties(props),
                            tags_code=tags_code(tags))
    for i in range(count):
        store.put("T", 0, m(b"t%%d" %% i, "A")).wait_durable(10)
        if i %% 5 == 0:
            store.put("Other", 1, m(b"o%%d" %% i)).wait_durable(10)
    for i in range(3):
        store.put("Other", 1, m(b"after%%d" %% i)).wait_durable(10)
    assert store.wait_dispatched()
    store._write_checkpoint()  # as the housekeeper does: a start scans from the end
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""") % {"cq": CQ_FILE, "bcq": BCQ_FILE}


@pytest.mark.parametrize("batch", [False, True], ids=["cq", "batch-cq"])
@pytest.mark.parametrize("how", ["last zeroed", "later full zeroed"])
def test_a_later_queue_file_that_lost_entries_is_repaired_after_kill_9(
        open_store: OpenStore, tmp_path: Path, batch: bool, how: str) -> None:
    root = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(root), str(COUNT),
                           "1" if batch else "0"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "written"
    _damage(_dir(root, batch), how, BCQ_UNIT if batch else CQ_UNIT)

    store = open_store(root, mapper_file_size_batch_consume_queue=BCQ_FILE)
    report = store.recovery_report
    assert report is not None and not report.clean
    assert 0 < report.start_offset < report.end_offset  # not the whole log
    got = read_queue(store, "T", 0)
    assert [bytes(r.body) for r in got] == [b"t%d" % i for i in range(COUNT)]
    others = [bytes(r.body) for r in read_queue(store, "Other", 1)]
    assert others == [b"o%d" % i for i in range(0, COUNT, 5)] + [b"after%d" % i
                                                                  for i in range(3)]
    assert store.max_offset("T", 0) == COUNT
