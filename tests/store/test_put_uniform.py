"""put_batch of a :class:`UniformBatch` (columns over a client batch body) against
put_batch of the same messages as a list: the same records, queue entries and index."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.errors import MessageTooLarge
from tidemq.formats.batch import ENTRY_OVERHEAD, encode_batch
from tidemq.formats.record import HostAddr
from tidemq.store.append import MessageInput, UniformBatch
from tidemq.store.index_keys import KeyColumns
from tidemq.store.message_store import MessageStore

from .conftest import FakeClock, small_config

PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])
CLUSTER = b"CLUSTER\x01DefaultCluster\x02"
V4 = HostAddr(b"\x0a\x01\x02\x03", 40001)
V6 = HostAddr(bytes(range(16)), 40002)


def _uniform(n: int, blen: int, uniq_width: int, extra: tuple[str, ...], cluster: bytes,
             tags: int, seed: int, index: bool = True) -> UniformBatch:
    """A client batch of ``n`` entries of one layout: bodies, flags and UNIQ_KEYs vary."""
    rng = np.random.default_rng(seed)
    entries = []
    for i in range(n):
        uniq = f"{i:0{uniq_width}X}"[-uniq_width:] if uniq_width else ""
        props = (f"UNIQ_KEY\x01{uniq}\x02" if uniq_width else "") + "WAIT\x01true\x02"
        if extra:
            props += "KEYS\x01" + " ".join(extra) + "\x02"
        entries.append((rng.bytes(blen), props.encode(), int(rng.integers(-2**31, 2**31))))
    data = encode_batch(entries)
    size = len(data) // n
    start = ENTRY_OVERHEAD + blen + (9 if uniq_width else 0)
    rows = np.frombuffer(data, np.uint8).reshape(n, size)
    keys = None
    if index and (uniq_width or extra):
        keys = KeyColumns(rows[:, start : start + uniq_width] if uniq_width else None, extra, n)
    return UniformBatch(data, n, size, blen, cluster, tags, keys)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    clock = FakeClock(1_700_000_000_000)
    pair = []
    for name in ("columns", "list"):
        store = MessageStore(small_config(tmp_path / name, mapped_file_size_commit_log=1 << 16,
                                          max_hash_slot_num=7, max_index_num=300),
                             clock=clock)
        store.start()
        pair.append(store)
    yield pair[0], pair[1]
    for store in pair:
        store.shutdown()


def _stored(store: MessageStore, result: Any) -> list[bytes]:
    out = []
    for phys, size in zip(result.phys_offsets, result.sizes, strict=True):
        view = store.read_record(phys)
        assert view is not None and len(view) == size
        out.append(bytes(view))
    return out


@PROPS
@given(n=st.integers(1, 40), blen=st.integers(0, 40), uniq_width=st.sampled_from([0, 1, 7, 32]),
       extra=st.lists(st.text(string.ascii_letters + "é", min_size=1, max_size=4),
                      max_size=2).map(tuple),
       cluster=st.sampled_from([b"", CLUSTER]), tags=st.integers(-2**31, 2**31 - 1),
       seed=st.integers(0, 2**16), host=st.sampled_from([V4, V4, V6]),
       topic=st.sampled_from(["Topic", "T" * 127, "T" * 128]), sys_flag=st.sampled_from([0, 2]),
       puts=st.integers(1, 3))
def test_columns_store_what_the_list_stores(stores: tuple[MessageStore, MessageStore], n: int,
                                            blen: int, uniq_width: int, extra: tuple[str, ...],
                                            cluster: bytes, tags: int, seed: int,
                                            host: HostAddr, topic: str, sys_flag: int,
                                            puts: int) -> None:
    columns, listed = stores
    batch = _uniform(n, blen, uniq_width, extra, cluster, tags, seed)
    messages = list(batch)
    assert [m.properties[-len(cluster):] for m in messages if cluster] == [cluster] * (
        n if cluster else 0)
    for _ in range(puts):
        kwargs: dict[str, Any] = {"sys_flag": sys_flag, "born_timestamp": 42, "born_host": host,
                                  "reconsume_times": 1, "wait_flush": False}
        a = columns.put_batch(topic, 2, batch, **kwargs)
        b = listed.put_batch(topic, 2, messages, **kwargs)
        assert (a.queue_offset, list(a.phys_offsets), list(a.sizes), a.store_timestamp) == (
            b.queue_offset, list(b.phys_offsets), list(b.sizes), b.store_timestamp)
        assert _stored(columns, a) == _stored(listed, b)
        assert a.stored_bytes == b.stored_bytes == sum(a.sizes)
    for store in stores:
        assert store.dispatcher is not None and store.dispatcher.drain()
    got = [store.get(topic, 2, 0, 1000) for store in stores]
    assert [bytes(buf) for buf in got[0].buffers] == [bytes(buf) for buf in got[1].buffers]
    for key in {k for m in messages for k in m.keys}:
        assert columns.index is not None and listed.index is not None
        assert columns.index.query(topic, key, 64) == listed.index.query(topic, key, 64)


def test_the_uniform_batch_is_the_messages_it_stands_for() -> None:
    batch = _uniform(5, 3, 4, ("k1", "k2"), CLUSTER, 77, seed=1)
    messages = list(batch)
    assert len(batch) == 5 and batch[-1] == messages[-1] and batch[1:3] == messages[1:3]
    m = messages[2]
    assert isinstance(m, MessageInput) and len(m.body) == 3 and m.tags_code == 77
    assert m.properties == b"UNIQ_KEY\x010002\x02WAIT\x01true\x02KEYS\x01k1 k2\x02" + CLUSTER
    assert m.keys == ("0002", "k1", "k2")
    assert _uniform(3, 3, 4, ("k",), b"", 0, seed=1, index=False)[0].keys == ()
    with pytest.raises(IndexError):
        batch[5]
    with pytest.raises(ValueError):
        UniformBatch(batch.data[:-1], 5, batch.entry_size, 3, b"", 0, None)
    with pytest.raises(ValueError):
        UniformBatch(batch.data, 5, batch.entry_size, 3, b"", 0, KeyColumns(None, ("k",), 4))


def test_a_uniform_batch_over_the_size_limit_is_refused_alike(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, max_message_size=16, max_hash_slot_num=7))
    store.start()
    try:
        batch = _uniform(10, 17, 4, (), b"", 0, seed=3)
        for msgs in (batch, list(batch)):
            with pytest.raises(MessageTooLarge) as info:
                store.put_batch("T", 0, msgs)  # type: ignore[arg-type]
            assert (info.value.size, info.value.limit) == (17, 16)
    finally:
        store.shutdown()


def test_the_concurrent_dispatcher_indexes_uniform_batches(tmp_path: Path) -> None:
    """The concurrent dispatcher reads the keys record by record: the same lookups."""
    store = MessageStore(small_config(tmp_path, enable_build_consume_queue_concurrently=True,
                                      mapped_file_size_commit_log=1 << 16, max_hash_slot_num=7))
    store.start()
    try:
        batch = _uniform(20, 5, 6, ("shared",), CLUSTER, 0, seed=4)
        result = store.put_batch("T", 1, batch, wait_flush=False)
        assert store.dispatcher is not None and store.dispatcher.drain()
        assert store.index is not None
        assert store.index.query("T", "00000C", 8) == [result.phys_offsets[12]]
        assert sorted(store.index.query("T", "shared", 64)) == list(result.phys_offsets)
    finally:
        store.shutdown()


def test_a_batch_of_many_messages_stores_what_the_list_stores(tmp_path: Path) -> None:
    """Past the entry count whose bodies one cached Struct reads."""
    clock = FakeClock(1_700_000_000_000)
    pair = [MessageStore(small_config(tmp_path / name, mapped_file_size_commit_log=1 << 20),
                         clock=clock) for name in ("columns", "list")]
    for store in pair:
        store.start()
    try:
        batch = _uniform(1500, 3, 4, ("k",), CLUSTER, 5, seed=9)
        kwargs: dict[str, Any] = {"born_timestamp": 1, "born_host": V4, "wait_flush": False}
        a = pair[0].put_batch("T", 0, batch, **kwargs)
        b = pair[1].put_batch("T", 0, list(batch), **kwargs)
        assert _stored(pair[0], a) == _stored(pair[1], b)
    finally:
        for store in pair:
            store.shutdown()
