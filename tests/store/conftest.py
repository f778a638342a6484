"""Fixtures for store tests: small segments in ``tmp_path``, an injectable clock."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.store import spool
from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageInput, MessageStore
from tidemq.store.reader import GetResult

SEGMENT = 4096
CQ_FILE = 20 * 16  # 16 entries per consume-queue file
#: A key index of about 330 KB: room for every key a test here writes, where the default
#: geometry makes a 400 MB sparse file that each copy of a store writes out in full and
#: each verify reads slot by slot.
INDEX_SLOTS = 4096
INDEX_ENTRIES = 16384


class FakeClock:
    """A wall clock the test moves by hand (backwards too)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": SEGMENT,
        "mapped_file_size_consume_queue": CQ_FILE,
        "max_hash_slot_num": INDEX_SLOTS,
        "max_index_num": INDEX_ENTRIES,
    }
    values.update(overrides)
    return StoreConfig(**values)


OpenStore = Callable[..., MessageStore]


@pytest.fixture(autouse=True)
def small_spool_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``store verify`` spills what it collects every few rows here, so that the tests'
    small stores cross many chunk boundaries (:mod:`tidemq.store.spool`)."""
    monkeypatch.setattr(spool, "CHUNK", 7)


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def open_store(store_root: Path) -> Iterator[OpenStore]:
    """``open_store(root=None, clock=None, **config)`` starts a store; all are shut down."""
    opened: list[MessageStore] = []

    def _open(root: Path | None = None, *, clock: Callable[[], int] | None = None,
              **overrides: Any) -> MessageStore:
        config = small_config(root or store_root, **overrides)
        store = MessageStore(config, clock=clock) if clock is not None else MessageStore(config)
        store.start()
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.shutdown()


def msg(body: bytes, tags: str | None = None, **props: str) -> MessageInput:
    if tags is not None:
        props = {"TAGS": tags, **props}
    return MessageInput(body=body, properties=encode_properties(props), tags_code=tags_code(tags))


def records(result: GetResult) -> list[Record]:
    """Decode every record in the buffers of a get result."""
    out: list[Record] = []
    for buf in result.buffers:
        pos = 0
        while pos < len(buf):
            rec = decode_record(buf, pos, check_crc=True)
            assert isinstance(rec, Record)
            out.append(rec)
            pos += rec.total_size
    return out


def read_queue(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list[Record]:
    """Every record of a queue from ``start`` to its max offset, pulled 7 at a time."""
    assert store.wait_dispatched()
    out: list[Record] = []
    offset = start
    while offset < store.max_offset(topic, queue_id):
        result = store.get(topic, queue_id, offset, max_count=7)
        assert result.found, result.status
        got = records(result)
        assert [r.queue_offset for r in got] == list(range(offset, offset + len(got)))
        out += got
        offset = result.next_begin_offset
    return out


def crash_copy(store: MessageStore, dest: Path) -> Path:
    """What a ``kill -9`` would leave: the files as they are now (page cache included).

    The caller makes sure no put is in flight. The abort marker is copied, the lock is not.
    """
    shutil.copytree(store.layout.root, dest, ignore=shutil.ignore_patterns("lock"))
    return dest


def checkpoint_head(physic: int, logics: int, index: int, at24: int, at32: int) -> bytes:
    """A checkpoint file with bytes 0-39 only, as RocketMQ writes it (``at24`` is its
    masterFlushedOffset, ``at32`` its confirmPhyOffset) and as an earlier TideMQ wrote it
    (its flushed and dispatched offsets there)."""
    return b"".join([
        struct.pack(">q", physic),  # physicMsgTimestamp
        struct.pack(">q", logics),  # logicsMsgTimestamp
        struct.pack(">q", index),   # indexMsgTimestamp
        struct.pack(">q", at24),
        struct.pack(">q", at32),
    ]) + bytes(4096 - 40)
