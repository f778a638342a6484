"""Helpers for crash tests: the child-process store, a full consistency check, and a
name server for broker-process tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.store.conftest import records

from tidemq.client.loop_thread import LoopThread
from tidemq.formats.properties import decode_properties
from tidemq.formats.record import Record, decode_record
from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.recovery import RecoveryReport, scan_log

from .store_proc import QUEUES, TOPIC, body_for, body_id, crash_config

HELPER = Path(__file__).with_name("store_proc.py")


@pytest.fixture
def namesrv() -> Iterator[NameServerApp]:
    """An in-process name server on a free loopback port, for broker-process tests. It
    runs on an event loop of its own thread: a broker process stopped by a fixture's
    teardown, while the test's loop is idle, still has its unregistration answered
    instead of waiting out its timeout."""
    thread = LoopThread("test-namesrv")
    app = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
    try:
        thread.run(app.start())
        yield app
        thread.run(app.stop())
    finally:
        thread.close()


def run_helper(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a store_proc command to its end (``fill`` and ``recover`` end with kill -9)."""
    return subprocess.run([sys.executable, str(HELPER), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, check=False)


def fill(root: Path, count: int) -> list[tuple[int, int, int]]:
    """``count`` acknowledged messages in a store whose process then died by kill -9."""
    proc = run_helper("fill", root, count)
    assert proc.returncode == -9, proc.stderr
    return [tuple(x) for x in json.loads(proc.stdout)]  # type: ignore[misc]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory
            ) -> Callable[[Path, int], list[tuple[int, int, int]]]:
    """``crashed(root, count)``: at ``root``, a copy of the files a store left when its
    process died by kill -9 after ``count`` acknowledged messages (:func:`fill`), and
    their ``(queue_offset, phys, size)``. Each count is filled by one child process per
    module; every test gets (and damages) a copy of its own."""
    made: dict[int, tuple[Path, list[tuple[int, int, int]]]] = {}

    def copy(root: Path, count: int) -> list[tuple[int, int, int]]:
        if count not in made:
            template = tmp_path_factory.mktemp(f"crashed{count}") / "store"
            made[count] = (template, fill(template, count))
        template, entries = made[count]
        shutil.copytree(template, root)
        return list(entries)

    return copy


def recover_and_die(root: Path) -> dict[str, Any]:
    """Recovery in a child that is killed right after it, before writing anything."""
    proc = run_helper("recover", root)
    assert proc.returncode == -9, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def queue_records(store: MessageStore, queue_id: int) -> list[Record]:
    out: list[Record] = []
    offset = 0
    while offset < store.max_offset(TOPIC, queue_id):
        result = store.get(TOPIC, queue_id, offset, max_count=64)
        assert result.found, (queue_id, offset, result.status)
        out += records(result)
        offset = result.next_begin_offset
    return out


def check_store(root: Path) -> tuple[RecoveryReport, dict[int, list[int]]]:
    """Open ``root`` in-process and check everything a crash must not break.

    The commit log validates from its first byte to its end, with store timestamps that
    never decrease; every queue is dense from 0;
    every record is the right body for its id; no id appears twice. Returns the report and
    the body ids per queue (list index = queue offset).
    """
    store = MessageStore(crash_config(root))
    report = store.start()
    try:
        cl = store.commitlog
        stamps: list[int] = []
        end, _, reason = scan_log(cl, cl.min_offset, check_crc=True,
                                  on_record=lambda rec, _: stamps.append(rec.store_timestamp))
        assert reason in ("", "end of data"), reason
        assert end == report.end_offset == cl.max_offset
        assert stamps == sorted(stamps), "store timestamps went backwards along the log"
        ids: dict[int, list[int]] = {}
        for queue_id in range(QUEUES):
            assert store.min_offset(TOPIC, queue_id) == 0
            recs = queue_records(store, queue_id)
            assert [r.queue_offset for r in recs] == list(range(len(recs)))
            for r in recs:
                assert (r.topic, r.queue_id) == (TOPIC, queue_id)
                assert bytes(r.body) == body_for(body_id(bytes(r.body)))
            ids[queue_id] = [body_id(bytes(r.body)) for r in recs]
            assert store.next_queue_offset(TOPIC, queue_id) == len(recs)
        every = [i for q in ids.values() for i in q]
        assert len(every) == len(set(every)), "a message is stored twice"
    finally:
        store.shutdown()
    return report, ids


def derived_state(store: MessageStore) -> dict[str, Any]:
    """Everything a store derives from its commit log, as plain data to compare: each
    consume queue's and batch consume queue's entries, the LMQ store's entries and
    queue metadata, and the key index's answer for every UNIQ_KEY in the log."""
    assert store.wait_dispatched(30)
    out: dict[str, Any] = {}
    for q in sorted(store.queues.all(), key=lambda q: (q.topic, q.queue_id)):
        parts, offset = [], q.min_offset
        while offset < q.max_offset:
            entries = q.entries(offset, q.max_offset - offset)
            assert len(entries), (q.topic, q.queue_id, offset)
            parts.append(entries.tobytes())
            if "base" in entries.dtype.names:  # a batch consume queue
                offset = int(entries["base"][-1]) + int(entries["batch"][-1])
            else:
                offset += len(entries)
        out[f"queue {q.topic}/{q.queue_id}"] = (q.min_offset, q.max_offset, b"".join(parts))
    if store.lmq is not None:
        out["lmq"] = list(store.lmq.stored_entries())  # runs expanded
        out["lmq-meta"] = {bytes(k): bytes(v) for k, v in store.lmq.db.items(from_key=b"M")
                            if bytes(k)[:1] == b"M"}
    keys: dict[str, list[int]] = {}

    def query(rec: Record, offset: int) -> None:
        key = decode_properties(rec.properties).get("UNIQ_KEY") if rec.properties else None
        if key:
            keys[key] = [offset for offset, _ in _records(store.query_by_key(rec.topic, key))]

    cl = store.commitlog
    scan_log(cl, cl.min_offset, check_crc=False, on_record=query)
    out["index"] = keys
    return out


def _records(views: list[memoryview]) -> list[tuple[int, Record]]:
    out = []
    for view in views:
        rec = decode_record(view)
        assert isinstance(rec, Record)
        out.append((rec.physical_offset, rec))
    return out
