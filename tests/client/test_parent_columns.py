"""ParentColumns: the small pull bodies of one batch-protocol parent read as one set of
columns -- each child's batch equal to what the child alone gives, one decode per
parent, nothing decoded for ``poll``, and every case outside the columns' scope read
child by child as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.client.test_batching import create, dispatched
from tests.client.test_message_batch import BORN, STORE

from tidemq.client import (
    AdminClient,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageBatch,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    message_batch,
)
from tidemq.client.batch_rpc import batch_requester
from tidemq.client.message_batch import SMALL_BODY, ParentColumns, read_batch
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.codec.message import decode_messages
from tidemq.errors import CorruptRecord
from tidemq.formats.properties import PropertyKey, encode_properties
from tidemq.formats.record import SYSFLAG_BORNHOST_V6, HostAddr, encode_record
from tidemq.testing import Cluster

from .batch_checks import assert_batch_is

Body = bytes | bytearray | memoryview


def _queue(i: int) -> MessageQueue:
    return MessageQueue("Orders", "broker-a", i)


def _record(offset: int, topic: str = "Orders", props: dict[str, str] | None = None,
            body: bytes | None = None, **kw: Any) -> bytes:
    tags = {"TAGS": "a" if offset % 3 else "b", "UNIQ_KEY": f"U{offset:08d}"}
    args: dict[str, Any] = dict(
        topic=topic.encode(), queue_id=1, body=body or f"body {offset:05d}".encode() * 4,
        properties=encode_properties(tags if props is None else props),
        flag=offset % 4, born_timestamp=1000 + offset, born_host=BORN, store_host=STORE,
        store_timestamp=2000 + offset, queue_offset=offset,
        physical_offset=10_000 + 300 * offset, reconsume_times=offset % 2,
    )
    args.update(kw)
    return bytes(encode_record(**args))


def _child(i: int, n: int = 32, **kw: Any) -> bytes:
    """Child ``i``: ``n`` records of queue ``i``, offsets from ``100 * i``."""
    return b"".join(_record(100 * i + k, **kw) for k in range(n))


def _parent_view(bodies: list[bytes]) -> list[memoryview]:
    """The bodies as views into one buffer, as a parent's children arrive."""
    joined = memoryview(b"|".join(bodies))
    out, at = [], 0
    for body in bodies:
        out.append(joined[at:at + len(body)])
        at += len(body) + 1
    return out


def _alone(body: Body, i: int, offset: int | None, tags: frozenset[str]
           ) -> list[MessageExt]:
    """What ``poll`` keeps of child ``i`` (read_pull_response's code, restated)."""
    msgs = decode_messages(body, queue_id=i, broker_name="broker-a",
                           extra_properties={"MIN_OFFSET": str(i), "MAX_OFFSET": str(999 + i)})
    if offset is not None:
        msgs = [m for m in msgs if m.queue_offset >= offset]
    if tags:
        msgs = [m for m in msgs if m.properties.get(PropertyKey.TAGS) in tags]
    return msgs


def _same(batch: MessageBatch | None, want: list[MessageExt]) -> None:
    if not want:
        assert batch is None
        return
    assert batch is not None
    assert_batch_is(batch, want)


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[ParentColumns]:
    """Every decode of a parent's bodies, by the parent it ran for."""
    decoded: list[ParentColumns] = []
    real: Callable[[ParentColumns, list[Body]], None] = ParentColumns._decode

    def spy(self: ParentColumns, bodies: list[Body]) -> None:
        decoded.append(self)
        real(self, bodies)

    monkeypatch.setattr(ParentColumns, "_decode", spy)
    return decoded


def _read_all(bodies: list[memoryview], offset: dict[int, int] | None = None,
              tags: frozenset[str] = frozenset()) -> list[MessageBatch | None]:
    shared = ParentColumns(list(bodies))
    return [read_batch(body, _queue(i), i, 999 + i, (offset or {}).get(i), tags, (shared, i))
            for i, body in enumerate(bodies)]


# ---------------------------------------------------------------------------- unit


@pytest.mark.parametrize("tags", [frozenset(), frozenset({"a"})])
def test_each_child_gets_its_rows_as_the_child_alone_reads_them(
        monkeypatch: pytest.MonkeyPatch, tags: frozenset[str]) -> None:
    decoded = _count_decodes(monkeypatch)
    bodies = _parent_view([_child(i, n=20 + i) for i in range(12)])
    assert all(len(b) < SMALL_BODY for b in bodies)
    assert ParentColumns.pick(list(bodies)) == list(range(12))
    starts = {3: 300 + 7, 5: 500 + 25, 11: 1100 + 40}  # inside, near and past the end
    batches = _read_all(bodies, starts, tags)
    assert len(decoded) == 1
    for i, (body, batch) in enumerate(zip(bodies, batches, strict=True)):
        want = _alone(body, i, starts.get(i), tags)
        _same(batch, want)
        assert batch is None or (batch.columnar and batch.queue == _queue(i))
    alone = read_batch(bodies[0], _queue(0), 0, 999, None, tags)
    assert alone is not None and not alone.columnar  # small: objects without a parent


def test_nothing_is_decoded_until_a_child_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = _count_decodes(monkeypatch)
    bodies = _parent_view([_child(i) for i in range(4)])
    shared = ParentColumns(list(bodies))
    assert decoded == []
    for i in (2, 0, 3, 1):
        read_batch(bodies[i], _queue(i), 0, 9, None, frozenset(), (shared, i))
    assert decoded == [shared]


@pytest.mark.parametrize("odd", ["topic", "unicode", "compressed", "v6"])
def test_bodies_outside_the_columns_scope_are_read_child_by_child(odd: str) -> None:
    bodies = [_child(i) for i in range(6)]
    if odd == "topic":
        bodies[2] = _child(2, topic="Other")
    elif odd == "unicode":
        bodies[1] = _child(1, props={"TAGS": "a", "NOTE": "caf\u00e9"})
    elif odd == "compressed":  # a compressed single message after a plain one
        zipped = compress(b"zip me " * 20, CompressionType.ZLIB)
        bodies[3] = _child(3, n=5) + _record(305, body=zipped,
                                             sys_flag=sys_flag_for(CompressionType.ZLIB))
    else:  # an IPv6 born host after an IPv4 one
        bodies[0] = _child(0, n=5) + _record(5, born_host=HostAddr(bytes(16), 10911),
                                             sys_flag=SYSFLAG_BORNHOST_V6)
    views = _parent_view(bodies)
    assert ParentColumns.pick(list(views)) == list(range(6))
    shared = ParentColumns(list(views))
    for i, body in enumerate(views):
        batch = read_batch(body, _queue(i), i, 999 + i, None, frozenset(), (shared, i))
        _same(batch, _alone(body, i, None, frozenset()))
        assert batch is not None and not batch.columnar


def test_a_corrupt_child_raises_as_alone_and_the_others_read_fine() -> None:
    bodies = [_child(i) for i in range(4)]
    bad = bytearray(bodies[1])
    bad[4:8] = b"\x00\x00\x00\x01"  # the first record's magic
    bodies[1] = bytes(bad)
    views = _parent_view(bodies)
    shared = ParentColumns(list(views))
    with pytest.raises(CorruptRecord):
        read_batch(bodies[1], _queue(1), 1, 1000, None, frozenset(), (shared, 1))
    for i in (0, 2, 3):
        _same(read_batch(views[i], _queue(i), i, 999 + i, None, frozenset(), (shared, i)),
              _alone(views[i], i, None, frozenset()))


def test_a_child_that_does_not_start_at_a_record_is_not_shared() -> None:
    # child 0's last record runs on into child 1: together they chain, apart they do not
    whole = _child(0, n=40)
    cut = len(whole) - 50
    views = [memoryview(whole)[:cut], memoryview(whole)[cut:]]
    shared = ParentColumns(list(views))
    assert shared.offsets(0) is None and shared.offsets(1) is None


def test_pick() -> None:
    small = _child(0)
    assert len(small) * 4 >= SMALL_BODY > len(small) * 2
    assert ParentColumns.pick([small] * 4) == [0, 1, 2, 3]
    assert ParentColumns.pick([small, None, small, small, b"", small]) == [0, 2, 3, 5]
    assert ParentColumns.pick([small, small]) == []  # together still small
    assert ParentColumns.pick([small * 4]) == []  # one child: nothing to share
    big = _child(0, n=200)
    assert len(big) >= SMALL_BODY
    assert ParentColumns.pick([big, small, small, small, small]) == [1, 2, 3, 4]
    batches = _record(0, sys_flag=0x40 | 0x80, props={"INNER_NUM": "1"})
    assert ParentColumns.pick([batches, small, small, small, small]) == [1, 2, 3, 4]
    zipped = _record(0, body=compress(b"z" * 99, CompressionType.ZLIB),
                     sys_flag=sys_flag_for(CompressionType.ZLIB))
    assert ParentColumns.pick([small, zipped, small, small, small]) == [0, 2, 3, 4]


# ---------------------------------------------------------------------------- cluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
QUEUES, PER_QUEUE = 8, 70


@pytest.fixture
def cfg(cluster: Cluster) -> ClientConfig:
    return ClientConfig(namesrv_addr=(cluster.namesrv_addr,), long_polling_timeout=0.5,
                        pull_error_backoff=0.1, pull_batch_size=32)


@pytest.fixture
async def queues(cluster: Cluster, cfg: ClientConfig) -> list[MessageQueue]:
    async with AdminClient(config=cfg) as admin:
        await create(admin, "Many", queues=QUEUES, brokers=1)
    async with Producer("pg", config=cfg) as producer:
        route = await producer.instance.routes.get("Many")
        mqs = sorted(route.publish_queues)
        for mq in mqs:
            await producer.send_batch(
                [Message("Many", f"{mq.queue_id}:{k:04d}".encode() * 6,
                         {"TAGS": "a" if k % 2 else "b", "KEYS": f"k{k}"})
                 for k in range(PER_QUEUE)], queue=mq)
    await dispatched(cluster)
    return mqs


async def _consume(cfg: ClientConfig, mqs: list[MessageQueue], group: str, *, columns: bool,
                   expression: str = "*") -> tuple[dict[MessageQueue, list[MessageExt]],
                                                   list[MessageBatch], int]:
    """Every queue read to its end: the messages per queue, the batches, the parents."""
    got: dict[MessageQueue, list[MessageExt]] = {mq: [] for mq in mqs}
    batches: list[MessageBatch] = []
    async with PullConsumer(group, config=cfg, consume_from=FIRST) as consumer:
        consumer.assign(mqs, expression)
        for mq in mqs:
            consumer.seek(mq, 0)
        for _ in range(100):
            if all(consumer.position(mq) == PER_QUEUE for mq in mqs):
                break
            if columns:
                found = await consumer.poll_batches(timeout=0.3, max_messages=1000)
                batches += found
                for b in found:
                    got[b.queue] += b.messages()
            else:
                for m in await consumer.poll(timeout=0.3, max_messages=1000):
                    got[MessageQueue(m.topic, m.broker_name, m.queue_id)].append(m)
        parents = batch_requester(consumer.instance).stats.parents
    return got, batches, parents


@pytest.mark.parametrize("expression", ["*", "a"])
async def test_poll_batches_read_each_parent_once_and_equal_poll(
        cfg: ClientConfig, queues: list[MessageQueue], monkeypatch: pytest.MonkeyPatch,
        expression: str) -> None:
    made: list[ParentColumns] = []
    real_init = ParentColumns.__init__

    def init(self: ParentColumns, bodies: list[Body]) -> None:
        made.append(self)
        real_init(self, bodies)

    monkeypatch.setattr(ParentColumns, "__init__", init)
    decoded = _count_decodes(monkeypatch)
    want, _, _ = await _consume(cfg, queues, "cg-poll", columns=False, expression=expression)
    assert made and not decoded  # poll: the parents were shared, never decoded
    assert all(len(msgs) == (PER_QUEUE if expression == "*" else PER_QUEUE // 2)
               for msgs in want.values())
    made.clear()
    got, batches, parents = await _consume(cfg, queues, "cg-cols", columns=True,
                                           expression=expression)
    assert got == want
    assert made and len(made) <= parents
    assert sorted(map(id, decoded)) == sorted(map(id, made))  # each once, each read
    shared = [b for b in batches if b.columnar]
    assert len(shared) >= 2 * len(made)  # (a batch that small alone would be objects)
    for b in batches:
        msgs = b.messages()
        assert b.queue_offsets.tolist() == [m.queue_offset for m in msgs]
        assert b.bodies == [m.body for m in msgs]
        assert [b.properties(i) for i in range(len(b))] == [m.properties for m in msgs]
        assert [b.msg_id(i) for i in range(len(b))] == [m.msg_id for m in msgs]


def test_small_body_is_what_pick_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold is read when picking (tests that patch SMALL_BODY see it)."""
    small = _child(0)
    monkeypatch.setattr(message_batch, "SMALL_BODY", 0)
    assert ParentColumns.pick([small] * 4) == []
