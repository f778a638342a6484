"""A topic the store refuses (its deletion under way) takes no message from any put, and
the refusal is decided under the append lock: a put that looked at the topic before the
refusal and reached the lock after it is refused too, never stored above the mark."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

import pytest

from tidemq.errors import TopicRefused
from tidemq.formats.batch import encode_batch as encode_entries
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import HostAddr
from tidemq.store.append import MessageInput, UniformBatch
from tidemq.store.message_store import MessageStore, PutResult

from .conftest import OpenStore, msg, read_queue

V6 = HostAddr(bytes(range(16)), 40002)
WHY = "its deletion is under way"
PROPS = encode_properties({"TAGS": "a"})
FAN = PROPS + b"INNER_MULTI_DISPATCH\x01%LMQ%x\x02"
ENTRIES = bytes(encode_entries([(b"e%03d" % i, b"", 0) for i in range(4)]))

Put = Callable[[MessageStore, str], object]

#: Every put the store has, by the path it takes through the append point.
PUTS: dict[str, Put] = {
    "put": lambda s, t: s.put(t, 0, MessageInput(b"one", PROPS)),
    "put, IPv6 born host": lambda s, t: s.put(t, 0, MessageInput(b"one", PROPS), born_host=V6),
    "put_batch": lambda s, t: s.put_batch(t, 0, [MessageInput(b"b", PROPS)] * 3),
    "put_batch, uniform": lambda s, t: s.put_batch(
        t, 0, UniformBatch(ENTRIES, 4, len(ENTRIES) // 4, 4, b"", 0, None)),
    "put_multi_dispatch": lambda s, t: s.put_multi_dispatch(
        t, 0, MessageInput(b"fan", FAN), ["%LMQ%x"]),
    "put_batch_multi_dispatch": lambda s, t: s.put_batch_multi_dispatch(
        t, 0, [MessageInput(b"fan", FAN)], [["%LMQ%x"]]),
    "put_inner_batch": lambda s, t: s.put_inner_batch(t, 0, ENTRIES, PROPS, 4),
    "put_inner_batch, IPv6 born host": lambda s, t: s.put_inner_batch(
        t, 0, ENTRIES, PROPS, 4, born_host=V6),
}


def _open(open_store: OpenStore) -> MessageStore:
    store = open_store(enable_lmq=True, enable_multi_dispatch=True,
                       mapped_file_size_commit_log=1 << 16)
    for topic in ("Gone", "Kept"):
        store.set_batch_topic(topic, True)
    return store


@pytest.mark.parametrize("name", sorted(PUTS))
def test_every_put_into_a_refused_topic_is_refused_and_stores_nothing(
        open_store: OpenStore, name: str) -> None:
    store = _open(open_store)
    put = PUTS[name]
    put(store, "Gone")  # the topic's shape known: the hot paths
    store.refuse_topic("Gone", WHY)
    end = store.commitlog.max_offset
    with pytest.raises(TopicRefused) as info:
        put(store, "Gone")
    assert (info.value.topic, info.value.why) == ("Gone", WHY)
    assert store.commitlog.max_offset == end
    assert isinstance(put(store, "Kept"), PutResult)  # another topic is not held
    store.admit_topic("Gone")
    assert isinstance(put(store, "Gone"), PutResult)


def test_put_many_refuses_each_put_of_a_refused_topic(open_store: OpenStore) -> None:
    store = open_store()
    puts = [(q, msg(b"m%d" % q), 0, 0) for q in range(3)]
    store.put_many("Gone", puts)
    store.refuse_topic("Gone", WHY)
    end = store.commitlog.max_offset
    for wait_flush in (True, False):  # the loop, and the run of one write
        out = store.put_many("Gone", puts, wait_flush=wait_flush)
        assert all(isinstance(o, TopicRefused) and o.why == WHY for o in out), out
    assert store.commitlog.max_offset == end
    store.admit_topic("Gone")
    assert all(isinstance(o, PutResult) for o in store.put_many("Gone", puts))
    assert [r.queue_offset for r in read_queue(store, "Gone", 1)] == [0, 1]


class _Between:
    """The commit-log lock, with one thread's first acquire held up until released: a
    put stopped after its look at the topic and before it takes the lock."""

    def __init__(self, lock: threading.Lock, putter: Callable[[], bool]) -> None:
        self.lock = lock
        self.putter = putter
        self.looked = threading.Event()
        self.go = threading.Event()

    def acquire(self) -> bool:
        if self.putter() and not self.looked.is_set():
            self.looked.set()
            assert self.go.wait(20)
        return self.lock.acquire()

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def test_a_refusal_between_a_puts_look_and_its_write_refuses_it(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store()
    store.put("Gone", 0, msg(b"before"))
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_outcome(
        lambda: store.put("Gone", 0, msg(b"raced")))))
    between = _Between(store.commitlog.lock, lambda: threading.current_thread() is thread)
    monkeypatch.setattr(store.commitlog, "lock", between)
    thread.start()
    assert between.looked.wait(20)
    store.refuse_topic("Gone", WHY)
    store.begin_delete_topic("Gone")
    between.go.set()
    thread.join(20)
    assert len(outcome) == 1 and isinstance(outcome[0], TopicRefused), outcome
    assert [bytes(r.body) for r in read_queue(store, "Gone", 0)] == [b"before"]


def _outcome(put: Callable[[], object]) -> object:
    try:
        return put()
    except TopicRefused as exc:
        return exc
